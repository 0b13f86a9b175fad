"""A base model judged on the procedural corpus's held-out sets (plain format, greedy).

* ``math_1step_exact`` / ``math_2step_exact``: answerable problems of one or two steps
  (``data/open_math_<split>.jsonl``), exact when ``The answer is X`` equals the answer;
  ``math_lookup_exact``: reading one stated count; ``math_by_structure``;
* ``math_abstained``: answerable problems wrongly answered with the abstention tag (over-abstention);
* ``trap_abstention``: the vague, missing and contradicted twins answered with the tag;
* ``copy_exact_match``: copy/edit tasks whose reference output has at least ``min_copy_tokens``
  tokens, whole output generated and compared exactly; ``copy_by_kind``.

Every rate comes with its count ``k`` and ``n``. Generation is Hugging Face ``generate`` with
left padding and the attention mask, rows grouped by prompt length.
"""

from __future__ import annotations

from t4lib.models import corpus, schema


def _generate(model, tok, prompts: list[str], max_new: list[int] | int, batch_size: int, device) -> list[str]:
    import torch  # torch-free import path
    if isinstance(max_new, int):
        max_new = [max_new] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), max_new[i]))
    outs = [None] * len(prompts)
    tok.padding_side = "left"
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        enc = tok([prompts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=max(max_new[i] for i in idx), do_sample=False,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        texts = tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=False)
        for i, t in zip(idx, texts):
            outs[i] = t.split(schema.EOS)[0].replace(schema.PAD, "")
    return outs


def _rate(flags: list[bool]) -> dict:
    return dict(rate=sum(flags) / max(1, len(flags)), k=sum(flags), n=len(flags))


def eval_math(model, tok, split: str, device, batch_size: int = 128, n: int | None = None) -> dict:
    recs = corpus.load_jsonl(f"open_math_{split}.jsonl")[:n]
    outs = _generate(model, tok, [schema.math_prompt(r["question"]) for r in recs], 80, batch_size, device)
    ok = [schema.extract_answer(o) == r["answer"] for o, r in zip(outs, recs)]
    by = {}
    for r, k in zip(recs, ok):
        by.setdefault(r["structure"], []).append(k)
    pick = lambda cond: [k for r, k in zip(recs, ok) if cond(r)]  # noqa: E731
    return dict(math_1step_exact=_rate(pick(lambda r: r["n_steps"] == 1)),
                math_2step_exact=_rate(pick(lambda r: r["n_steps"] == 2)),
                math_3_4step_exact=_rate(pick(lambda r: r["n_steps"] >= 3)),
                math_lookup_exact=_rate(pick(lambda r: r["structure"] == "lookup")),
                math_by_structure={s: _rate(v) for s, v in sorted(by.items())},
                math_abstained=_rate([schema.extract_answer(o) == "abstain" for o in outs]),
                math_examples=[dict(question=r["question"], output=o, answer=r["answer"])
                               for r, o in list(zip(recs, outs))[:4]])


def eval_traps(model, tok, split: str, device, batch_size: int = 128, n: int | None = None) -> dict:
    recs = corpus.load_jsonl(f"open_traps_{split}.jsonl")[:n]
    outs = _generate(model, tok, [schema.math_prompt(r["question"]) for r in recs], 80, batch_size, device)
    ab = [schema.extract_answer(o) == "abstain" for o in outs]
    by = {}
    for r, k in zip(recs, ab):
        by.setdefault(r["trap"], []).append(k)
    return dict(trap_abstention=_rate(ab), trap_by_kind={k: _rate(v) for k, v in sorted(by.items())})


def eval_copy(model, tok, split: str, device, batch_size: int = 32, min_copy_tokens: int = 100,
              n: int | None = None) -> dict:
    recs = corpus.load_jsonl(f"open_copy_{split}.jsonl")
    lens = [len(tok(r["output"], add_special_tokens=False)["input_ids"]) for r in recs]
    keep = [(r, L) for r, L in zip(recs, lens) if L >= min_copy_tokens][:n]
    prompts = [corpus.copy_doc(r)[0] for r, _ in keep]
    outs = _generate(model, tok, prompts, [L + 16 for _, L in keep], batch_size, device)
    ok = [o.strip() == r["output"].strip() for o, (r, _) in zip(outs, keep)]
    by = {}
    for (r, _), k in zip(keep, ok):
        by.setdefault(r["kind"], []).append(k)
    return dict(copy_exact_match=_rate(ok), copy_by_kind={k: _rate(v) for k, v in sorted(by.items())},
                copy_min_output_tokens=min_copy_tokens,
                copy_output_tokens=dict(min=min((L for _, L in keep), default=0), max=max((L for _, L in keep), default=0)))


def evaluate(model, tok, split: str, device, n: int | None = None) -> dict:
    """All three on ``split`` (``validation`` or ``test``)."""
    if split not in ("validation", "test"):
        raise ValueError(f"split must be 'validation' or 'test', got {split!r}")
    model.eval()
    out = {}
    out.update(eval_math(model, tok, split, device, n=n))
    out.update(eval_traps(model, tok, split, device, n=n))
    out.update(eval_copy(model, tok, split, device, n=n))
    return out


def score(ev: dict) -> float:
    """The one number recipes are chosen by on validation: the mean of 1-step, 2-step and copy exact."""
    return (ev["math_1step_exact"]["rate"] + ev["math_2step_exact"]["rate"] + ev["copy_exact_match"]["rate"]) / 3
