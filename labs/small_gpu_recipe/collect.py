"""Pick the arm with the higher validation score, print both arms' figures, and copy the chosen
checkpoint to DEST (default data/models/small-gpu). Usage: python collect.py ARMS_DIR [DEST]"""
import json
import shutil
import sys
from pathlib import Path

from t4lib.models import open_eval

arms = Path(sys.argv[1])
dest = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("data/models/small-gpu")
recs = {d.name: json.loads((d / "training_record.json").read_text())
        for d in sorted(arms.iterdir()) if (d / "training_record.json").is_file()}
for name, r in recs.items():
    v, t = r["eval"]["validation"], r["eval"]["test"]
    print(name, f"val score {open_eval.score(v):.4f}", {k: (v[k]["rate"], t[k]["rate"]) for k in
          ("math_1step_exact", "math_2step_exact", "copy_exact_match", "trap_abstention")},
          f"train {r['train_seconds']} s, trainer {r['trainer_tokens_per_s']} tok/s, generator "
          f"{r['generator_tokens_per_s']} tok/s, data wait {r['data_wait_seconds']} s, compiled {r['compiled']}")
best = max(recs, key=lambda n: open_eval.score(recs[n]["eval"]["validation"]))
print("chosen on validation:", best)
if dest.exists():
    shutil.rmtree(dest)
shutil.copytree(arms / best, dest)
(arms / "chosen.txt").write_text(best + "\n")
