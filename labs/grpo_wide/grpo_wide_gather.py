"""Gather the per-run records of labs/grpo_wide/grpo_wide_lab.sh into one lab record.

    python labs/grpo_wide/grpo_wide_gather.py DIR OUT.json [--commit HASH] [--device NAME] [--note TEXT]
"""
import argparse
import datetime
import json
import subprocess
from pathlib import Path

from t4lib.core import hw

RATES = ("abstention", "false_abstention", "answerable_accuracy", "math_heldout_accuracy")
CURVES = ("honesty/trap_abstention", "honesty/false_abstention", "honesty/answerable_correct", "reward", "entropy",
          "frac_reward_zero_std")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument("--commit", default=None, help="the commit the runs ran at (default: HEAD)")
    ap.add_argument("--note", default="")
    ap.add_argument("--device", default=None, help="where the runs ran (default: this machine's GPU)")
    a = ap.parse_args()
    runs = []
    for p in sorted(Path(a.dir).glob("grpo_*_s[0-9].json")):
        r = json.loads(p.read_text())
        runs.append(dict(arm=r["arm"], seed=r["seed"], steps=r["steps"], config=r["config"],
                         train_seconds=r["train_seconds"],
                         before={k: r["before"][k] for k in RATES}, after={k: r["after"][k] for k in RATES},
                         curves={k: [h.get(k) for h in r["curves"]] for k in CURVES}))
    commit = a.commit or subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    rec = {"device": a.device or hw.device_info()["name"], "commit": commit, "command": "bash labs/grpo_wide/grpo_wide_lab.sh",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "what": "GRPO of tiny-gpu on honesty_rl.jsonl + honesty_rl_wide.jsonl (36 RL templates instead of 8) and "
                   "300 math problems, 100 steps, lr 5e-5, 8 prompts x 8 completions per step; greedy evaluation "
                   "on the quarantined honesty_eval.jsonl (75 traps, 75 answerable) and 200 held-out math problems",
           "note": a.note, "runs": runs}
    Path(a.out).write_text(json.dumps(rec, indent=1) + "\n")
    print(json.dumps([(r["arm"], r["seed"], {k: round(r["after"][k]["rate"], 3) for k in RATES}) for r in runs]))


if __name__ == "__main__":
    main()
