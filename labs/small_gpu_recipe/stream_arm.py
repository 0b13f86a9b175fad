"""Pretrain small-gpu on a variant of its corpus stream, without editing the library: the variant is applied to
``t4lib.models.grammar`` and ``t4lib.models.procedural`` in this process before training starts, and the data
workers (forked) inherit it. The evaluation sets are the committed files, so every arm is judged on the same
problems and tasks; a variant only ever adds to what the *train* split draws.

Variants (``--arm``, comma-separated; ``committed`` for none), aimed at the copy failures left on test
(``copy_failures.json``, ``stream_seeds.json``):

* ``rename_forms``: many more training-only ways to ask for a rename. Renames fail by instruction: the held-out
  construction with no verb of renaming is copied unchanged, and five more training constructions (the widened
  stream) did not change that. With many, the cue has to be the two names, not the verb. A frame too close to a
  held-out one (word overlap 0.6 or more) is an error, not a silent leak.
* ``compositional_renames``: rename requests that name the old name in one clause and give the new one through a
  pronoun in the next ("The code uses {old}; call it {new}."), as many as the library's own rename requests. The
  model renames only when "rename {old} to {new}" stand together (``rename_wording.json``); a short fine-tune on
  these wordings took the held-out construction from 0 to 9 of 24 (``rename_probe.json``). The wordings are
  ``rename_probe.wordings()``: none uses a held-out word, and the same overlap guard applies.
* ``long_lists``: one numbered, bulleted or plain copy task in seven has 21-28 short lines (2-5 words, 550-860
  tokens at 28 lines), so the model writes past line 20 (the evaluation runs to 22; numbered lines break at "21.").

Usage (on the GPU machine; ``--steps`` for a short trial, any further options go to ``tiny train``):
    python labs/small_gpu_recipe/stream_arm.py --arm rename_forms,long_lists --seed 1 --out /tmp/job/arm
    python labs/small_gpu_recipe/stream_arm.py --arm compositional_renames,long_lists --seed 0 --out /tmp/job/arm
    python labs/small_gpu_recipe/stream_arm.py --arm rename_forms --show 12    # print train-split renames, no training
"""
import argparse
import json
import random
import re
import sys
from pathlib import Path

from t4lib.core import results
from t4lib.models import grammar, procedural, tiny

#: training-only rename requests: other verbs, conditionals, arrows and plain statements of the new name
RENAME_FORMS = [
    "(Swap|Exchange) {old} for {new}[ (in every line|throughout)].",
    "Every {old} (becomes|turns into|should become) {new}.",
    "Use {new} (in place of|where the text has) {old}.",
    "(Each|Any) time (you see|the text has) {old}, (put|use) {new}.",
    "{old} is (now called|renamed to|now named) {new}; (update|fix) the (code|text).",
    "The new name (of|for) {old} is {new}.",
    "Where the (code|text) (says|has) {old}, it should (say|have) {new}.",
    "(Substitute|Put) {new} for (each|every) {old}.",
    "{old} -> {new}",
    "(Rename|Change): {old} to {new}.",
    "Call {old} {new} from now on[ and write the (code|text) again].",
    "(Turn|Make) (each|every) {old} (into|a) {new}[, nothing else].",
]
LONG_LIST_SHARE, LONG_LIST_LINES = 1 / 7, (21, 28)


def _words(frame: str) -> set[str]:
    return set(re.findall(r"[a-z]+", frame.lower())) - {"old", "new"}


def _add_rename_frames(frames: list[str], weight: float) -> None:
    """Add frames to the train split's rename productions, their total weight ``weight`` times the library's rename
    patterns' train weight, spread evenly. A frame too close to a held-out one (word overlap 0.6 or more) is an
    error, not a silent leak."""
    base = grammar.productions
    held = base("copy:rename").heldout
    for f in frames:
        for h in held:
            a, b = _words(f), _words(h)
            if f == h or len(a & b) / max(1, len(a | b)) >= 0.6:
                raise ValueError(f"training rename frame {f!r} is too close to the held-out {h!r}")

    def productions(slot: str) -> grammar.Productions:
        p = base(slot)
        if slot != "copy:rename":
            return p
        share = p.train_cum[-1] * weight / len(frames)
        cum = list(p.train_cum)
        for _ in frames:
            cum.append(cum[-1] + share)
        return grammar.Productions(p.train + tuple(frames), p.heldout, tuple(cum), p.heldout_cum)

    grammar.productions = productions


def rename_forms():
    """Add RENAME_FORMS to the train split's rename productions, each form as often as one of the library's patterns."""
    frames = sorted({grammar._tidy(t) for form in RENAME_FORMS
                     for t, _, _ in grammar._expand(grammar._parse(form)[0])})
    _add_rename_frames(frames, len(RENAME_FORMS) / len(grammar.COPY_INSTRUCTIONS["rename"]))


def compositional_renames():
    """Add rename_probe's clause-separated wordings, together as often as the library's own rename requests."""
    from rename_probe import wordings       # beside this file; imported only for this arm
    _add_rename_frames(wordings(), 1.0)


def long_lists():
    """Lists of 21-28 lines, one in LONG_LIST_SHARE, of 2-5 words a line: at the library's 3-8 words a 28-line task
    runs to 900-1400 tokens, longer than a 1024-token training row, so it would never be seen whole."""
    base_size, base_lines = procedural.copy_size, procedural._lines

    def copy_size(r: random.Random, kind: str) -> int:
        if kind in ("copy", "bullets", "number") and r.random() < LONG_LIST_SHARE:
            return r.randint(*LONG_LIST_LINES)
        return base_size(r, kind)

    def lines(r: random.Random, word, n_lines: int) -> list[str]:
        if n_lines < LONG_LIST_LINES[0]:
            return base_lines(r, word, n_lines)
        return [" ".join(word() for _ in range(r.randint(2, 5))) for _ in range(n_lines)]

    procedural.copy_size, procedural._lines = copy_size, lines


ARMS = {"committed": lambda: None, "rename_forms": rename_forms, "compositional_renames": compositional_renames,
        "long_lists": long_lists}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arm", required=True, help=f"comma-separated, of {sorted(ARMS)}")
    ap.add_argument("--seed", type=int, default=0, help="the preset's seed (initialisation and stream)")
    ap.add_argument("--out", help="the model's directory (never data/models/small-gpu)")
    ap.add_argument("--show", type=int, default=0, help="print this many train-split renames and exit")
    a, rest = ap.parse_known_args(argv)
    arms = a.arm.split(",")
    for arm in arms:
        if arm not in ARMS:
            ap.error(f"--arm: {arm!r} is not one of {sorted(ARMS)}")
        ARMS[arm]()
    if a.show:
        r = random.Random(a.seed)
        for _ in range(a.show):
            print(procedural.render_copy(r, "train", "rename").instruction)
        return 0
    if not a.out:
        ap.error("--out is required to train")
    rc = tiny.main(["train", "--preset", "small-gpu", "--out", a.out, "--set", f"seed={a.seed}", *rest])
    record = Path(a.out) / "training_record.json"     # the stream it saw, beside what tiny wrote
    rec = json.loads(record.read_text())
    results.write_json(record, {**rec, "stream_arm": arms,
                                "command": "python labs/small_gpu_recipe/stream_arm.py " + " ".join(argv or sys.argv[1:])})
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
