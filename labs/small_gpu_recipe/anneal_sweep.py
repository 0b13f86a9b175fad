"""Longer rename anneals after pretraining, on a GPU: which length, rate and mixture, chosen on validation?
``rename_anneal.py`` ran the rename probe's 60-step fine-tune on the CPU, one seed an arm, about twenty minutes
each. On a GPU the same fine-tune (``rename_probe.fine_tune``: its draws, batches and loss) and the same judgement
(``open_eval.evaluate`` on the whole validation and test splits, weights rounded to fp16 and computed in fp32)
take a minute or two, so arms of other lengths, rates and seeds run side by side. ``--arm committed`` judges the
committed model without a fine-tune on the same device, the baseline every arm is compared with.

    python labs/small_gpu_recipe/anneal_sweep.py --arm compositional_mixed_300_decay --seed 5 --out /tmp/a.json   # one arm
    python labs/small_gpu_recipe/anneal_sweep.py --gather DIR        # the arms' files -> anneal_sweep.json

The corpus extra (Faker, english-words: 10 MB of wheels) and the model's weights (54 MiB) do not both fit in the
tree a GPU machine is sent, and the fine-tune needs Faker only for the entity pools: ``--save-pools FILE`` writes
``pools.pools()`` where the extra is installed, and ``--pools FILE`` reads it back in place of building it.

Arms (``ARMS``): the mixture (``rename_probe.fine_tune``'s arm), steps, peak rate, whether the rate decays linearly
to zero, the batch, and the loss weight of prompt tokens. The arm with the best validation score
(``open_eval.score``, the pretraining arms' rule) would be the one a recipe takes; test counts are recorded beside
it, not used to choose.
"""
import argparse
import dataclasses
import gzip
import json
import time
from pathlib import Path

import torch

from t4lib import models
from t4lib.core import results
from t4lib.models import open_eval, pools, procedural

from cpu_eval import KEYS
from rename_probe import BATCH, PROBE_SEED, fine_tune, wordings

HERE = Path(__file__).parent
ARMS = {  # name: (fine_tune arm, steps, peak lr, linear decay, batch, prompt tokens' loss weight)
    "committed": (None, 0, 0.0, False, BATCH, 0.0),
    "compositional_mixed_60": ("compositional_mixed", 60, 1e-4, False, BATCH, 0.0),   # rename_anneal.py's mixed arm
    "compositional_mixed_300_decay": ("compositional_mixed", 300, 1e-4, True, BATCH, 0.0),
    "compositional_mixed_300_decay_lr3e-5": ("compositional_mixed", 300, 3e-5, True, BATCH, 0.0),
    "compositional_mixed_1000_decay": ("compositional_mixed", 1000, 1e-4, True, BATCH, 0.0),
    "library_mixed_300_decay": ("library_mixed", 300, 1e-4, True, BATCH, 0.0),
    # pretraining ends at 1e-4 (a tenth of its peak) on batches of 64 x 1024 tokens, prompts weighed 0.25: do
    # larger batches, or the decay to zero alone on pretraining documents and its loss, help where batches of
    # eight did not?
    "compositional_mixed_300_decay_b64": ("compositional_mixed", 300, 1e-4, True, 64, 0.0),
    "documents_300_decay_b64": ("documents", 300, 1e-4, True, 64, 0.25),
    "documents_1000_decay_b64": ("documents", 1000, 1e-4, True, 64, 0.25),
}


def run_arm(name: str, seed: int, device: str, n: int | None = None) -> dict:
    arm, steps, lr, decay, batch, prompt_weight = ARMS[name]
    torch.manual_seed(seed)
    t = time.time()
    model, tok = models.load("small-gpu", dtype=torch.float32, device=device)
    tf32 = batch > BATCH and device == "cuda"    # the large-batch arms train with TF32 matmuls (judged in fp32)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    losses = fine_tune(model, tok, arm, wordings(), steps=steps, lr=lr, batch=batch, seed=seed, decay=decay,
                       prompt_weight=prompt_weight) \
        if steps else []
    torch.backends.cuda.matmul.allow_tf32 = False
    t_train = time.time() - t
    model.half().float()                  # judged as a training run's saved fp16 checkpoint is
    ev = {split: open_eval.evaluate(model, tok, split, device, n=n) for split in ("validation", "test")}
    return dict(results.lab_record(f"python labs/small_gpu_recipe/anneal_sweep.py --arm {name} --seed {seed}"),
                arm=name, seed=seed,
                settings=dict(mixture=arm, steps=steps, lr=lr, decay=decay, batch=batch, prompt_weight=prompt_weight,
                              training_matmul="tf32" if tf32 else "fp32",
                              dtype="float32, weights rounded to fp16 before judging", decoding="greedy"),
                train_seconds=round(t_train, 1), seconds=round(time.time() - t, 1),
                validation_score=open_eval.score(ev["validation"]),
                counts={f"{s}/{k}": [ev[s][k]["k"], ev[s][k]["n"]] for s in ev for k in KEYS},
                copy_by_kind={s: {k: [v["k"], v["n"]] for k, v in ev[s]["copy_by_kind"].items()} for s in ev},
                losses=losses[::10])


def save_pools(path: Path) -> None:
    doc = {split: dataclasses.asdict(p) for split, p in pools.pools().items()}
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


def load_pools(path: Path) -> None:
    """Serve ``pools.pools()`` from a file ``save_pools`` wrote (both modules that call it look it up by name)."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    loaded = {split: pools.Pool(names=tuple(d["names"]), items=tuple(tuple(i) for i in d["items"]),
                                words=tuple(d["words"]), adjectives=tuple(d["adjectives"]), cities=tuple(d["cities"]))
              for split, d in doc.items()}
    pools.pools = procedural.pools = lambda: loaded


def gather(folder: Path) -> Path:
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    if not runs:
        raise SystemExit(f"no arm files in {folder}")
    for r in runs:
        results.validate_lab(r, str(r.get("arm")))
    out = HERE / "anneal_sweep.json"
    results.write_json(out, dict(arms=ARMS, runs=runs))
    for r in sorted(runs, key=lambda r: (list(ARMS).index(r["arm"]), r["seed"])):
        c = r["counts"]
        print(f"{r['arm']:38s} seed {r['seed']} val score {r['validation_score']:.3f} val copy "
              f"{c['validation/copy_exact_match']} renames {r['copy_by_kind']['validation'].get('rename')} "
              f"test copy {c['test/copy_exact_match']} test 1-step {c['test/math_1step_exact']}")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arm", choices=list(ARMS))
    ap.add_argument("--seed", type=int, default=PROBE_SEED, help="the draws of the fine-tune (and torch's seed)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, help="the arm's record (a JSON file)")
    ap.add_argument("--n", type=int, default=None, help="judge only the first N items of each set (a smoke test)")
    ap.add_argument("--gather", type=Path, help="a folder of arm records to gather into anneal_sweep.json")
    ap.add_argument("--save-pools", type=Path, help="write the entity pools to this file (needs the corpus extra)")
    ap.add_argument("--pools", type=Path, help="read the entity pools from a file --save-pools wrote")
    a = ap.parse_args(argv)
    if a.save_pools:
        save_pools(a.save_pools)
        return
    if a.pools:
        load_pools(a.pools)
    if a.gather:
        print("->", gather(a.gather))
        return
    if not a.arm or not a.out:
        ap.error("--arm and --out are required unless --gather is given")
    rec = run_arm(a.arm, a.seed, a.device, a.n)
    if a.n:
        rec["smoke_test_items_per_set"] = a.n
    results.write_json(a.out, rec)
    print(f"{a.arm} seed {a.seed}: validation score {rec['validation_score']:.4f} in {rec['seconds']} s -> {a.out}")


if __name__ == "__main__":
    main()
