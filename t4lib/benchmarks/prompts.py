"""Held-out prompts for the decoding benchmarks and notebooks: which file holds each kind, how a record becomes a
prompt (the tokenizer's chat template for a chat model, the project's plain text for the project's models), and the
ids that end a model's sequence (its generation config's EOS list)."""
from __future__ import annotations

from t4lib.decoding.tokens import eos_ids, vocab_size
from t4lib.models import corpus, schema
from t4lib.train.data import chat_prompt
from t4lib.train.honesty import uses_chat

PROMPT_FILES = {"copy": "copy_heldout.jsonl", "copy_long": "copy_long_heldout.jsonl", "open": "math_heldout.jsonl",
                # the procedural corpus's test split (held-out wording and vocabulary): copy tasks whose
                # reference outputs have 100+ tokens, and word problems
                "open_copy": "open_copy_test.jsonl", "open_math": "open_math_test.jsonl"}
MIN_OPEN_COPY_TOKENS = 100


def eos_of(model, tokenizer=None) -> list[int]:
    """The ids that end a sequence of ``model``: its generation config's EOS list (Qwen2.5 Instruct:
    ``[151645, 151643]``, ``<|im_end|>`` and ``<|endoftext|>``), else its config's ``eos_token_id``, else the
    tokenizer's. ValueError when none names one (decoding would never stop at end of text), or an id lies
    outside the model's vocabulary."""
    for where, src in (("generation_config", getattr(model, "generation_config", None)),
                       ("config", getattr(model, "config", None)), ("tokenizer", tokenizer)):
        ids = getattr(src, "eos_token_id", None)
        if ids is not None and ids != []:
            return list(eos_ids(ids, vocab_size(model), f"{where}.eos_token_id"))
    raise ValueError("the model names no end-of-sequence id (generation_config, config and tokenizer have no "
                     "eos_token_id): set model.generation_config.eos_token_id")


def reads_chat(tok) -> bool:
    """Whether prompts go through ``tok``'s chat template: it has one and is not the project's own tokenizer
    (the project's models keep the plain text they were trained on; :func:`t4lib.train.honesty.uses_chat`)."""
    return uses_chat(tok, "plain")


def prompt_text(tok, rec: dict, chat: bool | None = None) -> str:
    """The prompt of a held-out record: ``question`` (a word problem) or ``instruction`` and ``input`` (a
    copy/edit task), in ``tok``'s chat template (no system prompt of ours: the template's default) where
    ``chat`` (None: :func:`reads_chat`), else the project's plain text."""
    chat = reads_chat(tok) if chat is None else bool(chat)
    if chat and not getattr(tok, "chat_template", None):
        raise ValueError("chat=True but the tokenizer has no chat template")
    if not chat:
        return schema.math_prompt(rec["question"]) if "question" in rec else schema.copy_prompt(rec["instruction"],
                                                                                                rec["input"])
    content = rec["question"] if "question" in rec else f"{rec['instruction']}\n\n{rec['input']}"
    return chat_prompt(tok, content, system=None)


def load_prompts(tok, kind: str = "copy", n: int = 40, chat: bool | None = None) -> list[list[int]]:
    """Token ids of the first ``n`` held-out prompts of a kind: ``copy`` (data/copy_heldout.jsonl, short
    input-grounded edits), ``copy_long`` (data/copy_long_heldout.jsonl, input-grounded tasks whose outputs of
    100+ tokens mostly copy the input: fix a bug in a module, re-lay out records) or ``open``
    (data/math_heldout.jsonl, word problems: the answer is written, not copied). ``chat``: render them in the
    tokenizer's chat template (None: where :func:`reads_chat`; see :func:`prompt_text`)."""
    if kind not in PROMPT_FILES:
        raise ValueError(f"kind must be one of {sorted(PROMPT_FILES)}, got {kind!r}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if chat is not None and not isinstance(chat, bool):
        raise TypeError(f"chat must be None, True or False, got {chat!r}")
    chat = reads_chat(tok) if chat is None else chat
    recs = corpus.load_jsonl(PROMPT_FILES[kind])
    if kind == "open_copy":
        recs = [r for r in recs if len(tok(r["output"], add_special_tokens=False)["input_ids"]) >= MIN_OPEN_COPY_TOKENS]
    if kind.startswith("open_"):   # these files are ordered by task kind and structure: spread over them
        recs = recs[::max(1, len(recs) // n)]
    recs = recs[:n]
    if chat:   # the template writes its special tokens as text
        return [tok(prompt_text(tok, r, True), add_special_tokens=False)["input_ids"] for r in recs]
    return [tok(prompt_text(tok, r, False))["input_ids"] for r in recs]
