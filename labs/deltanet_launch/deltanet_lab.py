"""Launch shapes and split hand-offs of the Gated DeltaNet decode step at the
27B shape (48 value heads, 16 key heads, state [B, 48, 128, 128] fp32). Not part
of the library.

    python labs/deltanet_launch/deltanet_lab.py [B ...]     # writes $OUT/deltanet_lab.json

Variants (deltanet_lab.cu): "vcV_rR_mM_fF" = V value columns per CTA (128 / V
CTAs per head), R state rows per thread, hand-off mode M (1: one acq_rel atomic
after a CTA barrier, the last CTA of a head finishes it; 2: no hand-off, output
left unnormalized, an ablation; 3: the state read and written, nothing else, the
launch shape's floor; 4, 5: each CTA publishes its sum of squares with an epoch
and waits for its head's others; 6: as 1 with the state stored after the
hand-off; see the .cu), F = 1: fast SiLU/sigmoid, S = 1: the state is loaded
before the small inputs, MB: at least MB CTAs per SM (a register cap). Modes 1, 4-6 must match the fp32
reference (output, state, conv state) before anything is timed; all are timed
beside the library's launch shapes, fla's fused recurrent kernel (when
installed), a state-sized copy_ and a one-element kernel, in one process. The
split hand-off's workspace is one per process, as in the library (so it stays
in L2); the inputs rotate past L2.
"""
import ctypes
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gemv_lab"))
from labbuild import load  # noqa: E402

from t4lib.core import timing as bench  # noqa: E402
from t4lib.ops.deltanet import gated_deltanet_decode, reference, state_bytes  # noqa: E402
from t4lib.benchmarks.deltanet import D, H, HK, _fla  # noqa: E402
from t4lib.core.results import lab_record  # noqa: E402

OUT = os.environ.get("OUT", "/tmp/out")
lib = load(str(Path(__file__).with_name("deltanet_lab.cu")))
lib.lab_deltanet.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 15 + [ctypes.c_int] * 4 + [ctypes.c_float,
                                                                                          ctypes.c_void_p]
VARIANTS = {}
while True:
    vc, rpt, mode, fast, sf, mb = (ctypes.c_int() for _ in range(6))
    if lib.lab_variant(len(VARIANTS), *(ctypes.byref(v) for v in (vc, rpt, mode, fast, sf, mb))):
        break
    VARIANTS[len(VARIANTS)] = (f"vc{vc.value}_r{rpt.value}_m{mode.value}_f{fast.value}_s{sf.value}_mb{mb.value}",
                               mode.value)
BS = [int(a) for a in sys.argv[1:]] or [1, 4]
L = reference.random_layer(H, HK, seed=1, device="cuda")
out = {"variants": {n: i for i, (n, _) in VARIANTS.items()}, "check": {}, "time": {}}


WS = {}


def workspace(B, epochs):
    """One per batch size and hand-off protocol (ws_cnt holds a counter or an epoch)."""
    if (B, epochs) not in WS:
        WS[B, epochs] = (torch.zeros(B * H * D, device="cuda"), torch.zeros(B * H * 32, device="cuda"),
                         torch.zeros(B * H, dtype=torch.int32, device="cuda"))
    return WS[B, epochs]


def inputs(B, seed):
    X = reference.random_step(B, H, HK, seed=seed, dtype=torch.float16, device="cuda")
    S = reference.random_state(B, H, HK, seed=seed, dtype=torch.float16, device="cuda")
    return (X["qkv"], X["z"], X["alpha"], X["beta"], S["conv_state"], torch.empty_like(S["conv_state"]),
            S["state"], torch.full((B, H * D), float("nan"), dtype=torch.float16, device="cuda"))


def run(i, qkv, z, a, b, cs, cs_out, st, o):
    B = qkv.shape[0]
    wo, wss, wcnt = workspace(B, VARIANTS[i][1] in (4, 5))
    return lib.lab_deltanet(i, qkv.data_ptr(), z.data_ptr(), a.data_ptr(), b.data_ptr(), cs.data_ptr(),
                            cs_out.data_ptr(), st.data_ptr(), L["conv_w"].data_ptr(), L["ssm_a"].data_ptr(),
                            L["dt_bias"].data_ptr(), L["ssm_norm"].data_ptr(), o.data_ptr(), wo.data_ptr(),
                            wss.data_ptr(), wcnt.data_ptr(), B, H, HK, 1, 1e-6,
                            torch.cuda.current_stream().cuda_stream)


for B in BS:
    args = inputs(B, 3)
    qkv, z, a, b, cs, _, st0 = args[:7]
    ref_out, ref_conv, ref_state = reference.gated_deltanet_decode(
        qkv, z, a, b, cs, st0, L["conv_w"], L["ssm_a"], L["dt_bias"], L["ssm_norm"], num_k_heads=HK,
        head_order="gguf")
    chk = {}
    for i, (name, mode) in VARIANTS.items():
        if mode in (2, 3):  # ablations: wrong output by design
            continue
        for rep in range(2):  # the second launch finds the counters the first one reset
            a2 = list(args)
            a2[6] = st0.clone()
            a2[7] = torch.full_like(args[7], float("nan"))
            rc = run(i, *a2)
            torch.cuda.synchronize()
        e_out = float((a2[7].float() - ref_out.float()).abs().max() / ref_out.float().abs().max())
        e_st = float((a2[6] - ref_state).abs().max() / ref_state.abs().max())
        conv_ok = bool(torch.equal(a2[5], ref_conv))
        chk[name] = {"rc": rc, "out_rel": e_out, "state_rel": e_st, "conv_exact": conv_ok}
        if rc or not (e_out < 2e-3 and e_st < 1e-5 and conv_ok):
            raise SystemExit(f"B={B} {name}: does not match the reference: {chk[name]}")
    out["check"][f"B{B}"] = chk
    print(f"B={B}: every full variant matches the reference", flush=True)

    seeds = iter(range(10_000))

    def make():
        return inputs(B, next(seeds))

    def case(i):
        return (lambda *xs: run(i, *xs), make)

    def lib_case(split):
        def fn(qkv, z, a, b, cs, cs_out, st, o, *_):
            gated_deltanet_decode(qkv, z, a, b, cs, st, L["conv_w"], L["ssm_a"], L["dt_bias"], L["ssm_norm"],
                                  num_k_heads=HK, head_order="gguf", conv_state_out=cs_out, out=o, variant=split,
                                  backend="cuda")
        return (fn, make)

    cases = {n: case(i) for i, (n, _) in VARIANTS.items()}
    cases["lib_split1"], cases["lib_split2"] = lib_case(1), lib_case(2)
    fla_fn, fla_err = _fla()
    if fla_fn is not None:
        def make_fla():
            g = torch.Generator(device="cuda").manual_seed(next(seeds))
            r = lambda *s, dt=torch.float16: torch.randn(*s, device="cuda", dtype=dt, generator=g)  # noqa: E731
            return (r(B, 1, H, D), r(B, 1, H, D), r(B, 1, H, D), -torch.rand(B, 1, H, device="cuda", generator=g),
                    torch.rand(B, 1, H, device="cuda", generator=g).half(), 0.05 * r(B, H, D, D, dt=torch.float32))

        cases["fla_fused_recurrent"] = (
            lambda q, k, v, g, be, s: fla_fn(q=q, k=k, v=v, g=g, beta=be, initial_state=s, output_final_state=True,
                                             use_qk_l2norm_in_kernel=True), make_fla)
    nbytes = state_bytes(B, H, D, D)
    cases["floor_copy_state"] = (lambda d, s: d.copy_(s), lambda: (torch.empty(nbytes // 8, device="cuda"),
                                                                   torch.empty(nbytes // 8, device="cuda")))
    cases["floor_one_element_kernel"] = (lambda t: t.add_(1), lambda: (torch.zeros(1, device="cuda"),))
    res = bench.compare(cases, baseline="lib_split1", bytes_moved=nbytes, rounds=5, iters=30)
    out["time"][f"B{B}"] = {n: {"us": c["median_s"] * 1e6, "p10_us": c["p10_s"] * 1e6, "p90_us": c["p90_s"] * 1e6}
                            for n, c in res["cases"].items()}
    out["fla"] = "measured" if fla_fn else f"skipped ({fla_err})"
    for n, c in sorted(out["time"][f"B{B}"].items(), key=lambda kv: kv[1]["us"]):
        print(f"  B={B} {n:26s} {c['us']:7.2f} us  (p10 {c['p10_us']:.2f}, p90 {c['p90_us']:.2f})", flush=True)
    json.dump({**lab_record(" ".join(["python", *sys.argv])), **out}, open(f"{OUT}/deltanet_lab.json", "w"), indent=1)
