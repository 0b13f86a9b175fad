"""Assemble results/nvidia-h200/lora_bench.json and sft_lora_curves.json from the device run's outputs.

The device run (logs/sft_gpu_call1.sh) reached its time limit after the LoRA SFT runs and the 4x512
rows of the LoRA benchmark: lora_bench.py printed each row (logs/lora_bench.log) but did not reach
its own results.write. This script turns those printed rows and the per-run SFT records
(logs/sft_runs/*.json) into figures. NVML clocks and the driver were not captured in that run.
"""
import ast
import json
from pathlib import Path

from t4lib import results
from t4lib.train import lora_bench
from t4lib.train.sft import compare_curves

D = Path(__file__).resolve().parent.parent
ENV = {"device": "NVIDIA H200", "driver": "n/a (not captured)", "torch": "2.11.0+cu130", "clocks": {},
       "throttle": []}
rows = [ast.literal_eval(line.rsplit("}", 1)[0] + "}") for line in (D / "logs/lora_bench.log").read_text().splitlines()
        if line.startswith("{'base'")]
shapes = [(4, 512), (1, 512)]
figs = lora_bench.figures(rows, shapes, env=ENV)
missing = [f"{b} {bs}x{sq}" for bs, sq in shapes for b in lora_bench.BASES
           if not any(r["base"] == b and (r["batch"], r["seq"]) == (bs, sq) for r in rows)]
results.write(D / "lora_bench.json", figs, rows=rows, config=lora_bench.QWEN25_15B,
              not_measured=missing, note="rows of one process (python -m t4lib.train.lora_bench), measured in "
              "turn; the run hit its device-time limit before the rows listed in not_measured")

runs = {b: [json.loads((D / f"logs/sft_runs/sft_lora_{b}_s{s}.json").read_text()) for s in range(3)]
        for b in ("fp16", "w4a16")}
cmp_all = compare_curves([r["losses"] for r in runs["fp16"]], [r["losses"] for r in runs["w4a16"]])
cmp_late = compare_curves([r["losses"] for r in runs["fp16"]], [r["losses"] for r in runs["w4a16"]], skip=10)
src = "t4lib.train.sft"
F = []
F.append(results.figure("sft/tiny-gpu/lora_w4a16_vs_fp16/frac_mean_in_fp16_band", cmp_all["frac_candidate_mean_in_band"],
                        "fraction", "ARITHMETIC", src, note="logged steps (every 5) where the 3-seed mean loss of LoRA "
                        "on the W4A16 base lies within [min, max] of the 3 fp16-base seeds"))
F.append(results.figure("sft/tiny-gpu/lora_w4a16_vs_fp16/frac_mean_in_fp16_band_after_step50",
                        cmp_late["frac_candidate_mean_in_band"], "fraction", "ARITHMETIC", src,
                        note="same, steps 55-200 (after warm-up and the fast initial drop)"))
for b in ("fp16", "w4a16"):
    for s, r in enumerate(runs[b]):
        F.append(results.figure(f"sft/tiny-gpu/lora_{b}_base/seed{s}/final_loss", r["losses"][-1][1], "nats/token",
                                "MEASURED", src, env=ENV, note="training loss (completion tokens) at the last logged "
                                "step (200), TRL SFTTrainer"))
        for name in ("heldout_1_2", "honesty_answerable"):
            o = r["after"][name]["overall"]
            for key, fig in (("schema_valid", "schema_valid"), ("grounded", "grounded_pass")):
                F.append(results.figure(f"sft/tiny-gpu/lora_{b}_base/seed{s}/{name}/{fig}", o[key]["rate"],
                                        "fraction", "MEASURED", src, env=ENV, n=o["n"], k=o[key]["k"],
                                        ci95=o[key]["ci95"], note="greedy generation through StaticEngine"))
        F.append(results.figure(f"sft/tiny-gpu/lora_{b}_base/seed{s}/heldout_1_2/grounded_pass_two_step",
                                r["after"]["heldout_1_2"]["two_step"]["grounded"]["rate"], "fraction", "MEASURED",
                                src, env=ENV, n=r["after"]["heldout_1_2"]["two_step"]["n"]))
curves = {b: [r["losses"] for r in runs[b]] for b in runs}
examples = {b: runs[b][0]["after"]["heldout_1_2"]["examples"] for b in runs}
results.write(D / "sft_lora_curves.json", F, curves=curves, compare=dict(all=cmp_all, after_step50=cmp_late),
              settings=runs["fp16"][0]["settings"], data=runs["fp16"][0]["data"], examples=examples,
              command="python -m t4lib.train.sft --base {fp16,w4a16} --method lora --lr 2e-3 --epochs 8 --seed {0,1,2}")
print(len(figs), len(F), missing)
