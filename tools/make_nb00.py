"""Writes notebooks/00_environment.ipynb (cells only; execute with papermill)."""
import nbformat as nbf

INSTALL = '''# Colab / Kaggle: fetch and install t4lib (kernels are built from source on first use). Elsewhere: nothing.
import os, subprocess, sys
if ("google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ) and not os.path.isdir("t4lib"):
    subprocess.run(["git", "clone", "--depth", "1", os.environ.get("T4LIB_GIT", "https://github.com/t4lib/t4lib"), "t4lib"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "t4lib[notebooks]"], check=True)
    sys.path.insert(0, os.path.abspath("t4lib"))'''

cells = [
    nbf.v4.new_markdown_cell("""# 00 · Environment

What this machine is, measured against the budget every t4lib kernel is written for: the NVIDIA Tesla T4
(Turing, sm_75). The kernels are compiled for `compute_75` only, so on a newer GPU the driver JIT-compiles the
same Turing code: nothing newer than Turing can slip in, and a result measured on another GPU says so beside a
T4 projection tagged **ESTIMATED**.

This notebook shows the device, driver and library versions, the T4 feature matrix, builds the kernel
libraries, measures the copy bandwidth every memory-bound figure is compared with, and takes an NVML telemetry
reading."""),
    nbf.v4.new_code_cell(INSTALL),
    nbf.v4.new_code_cell('PROFILE = "auto"  # auto | cpu | gpu | t4 | kaggle-2xt4', metadata={"tags": ["parameters"]}),
    nbf.v4.new_code_cell('''from t4lib import _build, hw, telemetry
from t4lib.notebook import resolve_profile, device_results_dir
PROFILE = resolve_profile(PROFILE)
print("profile:", PROFILE)'''),
    nbf.v4.new_markdown_cell("## The device\n\nName, compute capability, SM count, memory, L2, driver, torch and CUDA runtime."),
    nbf.v4.new_code_cell('''# NBVAL_IGNORE_OUTPUT
info = hw.device_info()
for k, v in info.items():
    print(f"{k:>15}: {v}")'''),
    nbf.v4.new_markdown_cell("""## The T4 budget

The numbers every kernel is designed against (NVIDIA T4 datasheet and Turing tuning guide). The sustained
bandwidth is what streaming copies reach on its GDDR6; projections use it."""),
    nbf.v4.new_code_cell('''T4 = hw.budget_dict()
for k, v in T4.items():
    print(f"{k:>18}: {v:g}" if isinstance(v, float) else f"{k:>18}: {v}")'''),
    nbf.v4.new_markdown_cell("""## What sm_75 has and lacks

Later architectures added asynchronous copies, bf16, FP8 and Hopper's tensor-memory engine. t4lib code uses
none of them; the right column says what the device at hand has."""),
    nbf.v4.new_code_cell('''# NBVAL_IGNORE_OUTPUT
cap = info.get("capability")
print(f"{'feature':<48} {'min sm':>6} {'T4':>4}  this device")
for r in hw.feature_matrix(cap):
    print(f"{r['feature']:<48} {r['min_sm']:>6} {r['T4 (sm_75)']:>4}  {r['this device']}")'''),
    nbf.v4.new_markdown_cell("""## Building the kernels

Each family in `kernels/` is compiled by plain nvcc into its own shared library (no PyTorch headers, so it
takes seconds) and cached by the hash of its sources. The table is ptxas's view of every kernel: registers,
spills, stack and shared memory; hot kernels (`*`) must not spill and no kernel may use more than 64 KB of
shared memory. This needs only nvcc, not a GPU."""),
    nbf.v4.new_code_cell('''# NBVAL_IGNORE_OUTPUT
rows = []
try:
    for fam in _build.families():
        _build.build(fam)
        rows += _build.resource_report(fam)
    print(_build.format_report(rows))
except _build.BuildError as e:
    print("kernels not built here:", str(e).splitlines()[0])'''),
    nbf.v4.new_code_cell('''bad = [r["kernel"] for r in rows if (r["hot"] and r["spill_stores"] + r["spill_loads"]) or r["smem"] > 64 * 1024]
print("resource check:", "no spills in hot kernels, <= 64 KB shared memory" if rows and not bad else
      ("FAILED: " + ", ".join(bad) if bad else "skipped (no nvcc)"))'''),
    nbf.v4.new_markdown_cell("""## A first kernel, checked

Signed INT4 dequantization with one `lop3.b32` per pair of values: every nibble value in every lane position,
on the CUDA kernel when a GPU is present and on the pure-PyTorch reference otherwise. The verdict line is the
same on both."""),
    nbf.v4.new_code_cell('''import torch
from t4lib.ops.int4 import int4_dequant, pack_int4
dev = "cuda" if PROFILE != "cpu" else "cpu"
values = torch.arange(-8, 8, dtype=torch.int8)
vec = torch.stack([values.roll(s) for s in range(8)]).reshape(-1)   # every value in every lane of a word
out = int4_dequant(pack_int4(vec).to(dev)).cpu()
print(f"INT4 LOP3 dequant: {vec.numel()} values, all 16 nibbles x 8 lane positions:",
      "PASS" if torch.equal(out, vec.to(torch.float16)) else "FAIL")'''),
    nbf.v4.new_markdown_cell("""## Copy bandwidth

Memory-bound kernels are judged as a fraction of what a plain device-to-device copy reaches on the same GPU in
the same process, so figures compare fairly across GPUs. Bytes read plus bytes written, over the median of ten
1 GiB copies."""),
    nbf.v4.new_code_cell('''# NBVAL_IGNORE_OUTPUT
from t4lib import bench, results
if PROFILE != "cpu":
    figs = [bench.copy_bandwidth_figure("notebooks/00_environment.ipynb")]
    print(f"copy bandwidth: {figs[0]['value']:.0f} GB/s (MEASURED on {figs[0]['device']})")
    print(f"T4 for comparison: {hw.T4.sustained_bw/1e9:.0f} GB/s sustained, {hw.T4.peak_bw/1e9:.0f} GB/s peak (datasheet, ESTIMATED projection basis)")
    results.write(device_results_dir() / "00_environment.json", figs)
else:
    print("no GPU: copy bandwidth not measured")'''),
    nbf.v4.new_markdown_cell("""## Telemetry

A short NVML sample (power, SM and memory clocks, temperature, clock-event reasons) from the sampler that the
pacing notebook uses for sustained runs. Without a GPU it reports why it is empty."""),
    nbf.v4.new_code_cell('''# NBVAL_IGNORE_OUTPUT
import time
with telemetry.Sampler(0.02) as s:
    if PROFILE != "cpu":
        x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
        for _ in range(20):
            x @ x
        torch.cuda.synchronize()
    else:
        time.sleep(0.1)
print(s.summary())'''),
]
nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                                                  "language_info": {"name": "python"}})
nbf.write(nb, "notebooks/00_environment.ipynb")
