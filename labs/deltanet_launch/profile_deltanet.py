"""Launch the DeltaNet decode step once per launch shape (B = 1, 27B shape) and
fla's fused recurrent kernel once, for Nsight Compute (not part of the library):

    ncu --clock-control none -k regex:"deltanet|fused_recurrent" --section SpeedOfLight \\
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \\
        python labs/deltanet_launch/profile_deltanet.py

Order of launches: split 1 (one CTA per head), 2, 4, then fla (when installed).
"""
import torch

from t4lib.ops.deltanet import gated_deltanet_decode, reference
from t4lib.benchmarks.deltanet import D, H, HK, _fla

B = 1
L = reference.random_layer(H, HK, seed=1, device="cuda")
X = reference.random_step(B, H, HK, seed=2, dtype=torch.float16, device="cuda")
S = reference.random_state(B, H, HK, seed=2, dtype=torch.float16, device="cuda")
for split in (1, 2, 4):
    print(f"launch: split {split}", flush=True)
    gated_deltanet_decode(X["qkv"], X["z"], X["alpha"], X["beta"], S["conv_state"], S["state"], L["conv_w"],
                          L["ssm_a"], L["dt_bias"], L["ssm_norm"], num_k_heads=HK, head_order="gguf",
                          conv_state_out=torch.empty_like(S["conv_state"]), variant=split, backend="cuda")
fla, err = _fla()
if fla is None:
    print(f"fla not profiled: {err}")
else:
    print("launch: fla fused_recurrent_gated_delta_rule", flush=True)
    q, k, v = (torch.randn(B, 1, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    fla(q=q, k=k, v=v, g=-torch.rand(B, 1, H, device="cuda"), beta=torch.rand(B, 1, H, device="cuda").half(),
        initial_state=0.05 * torch.randn(B, H, D, D, device="cuda"), output_final_state=True,
        use_qk_l2norm_in_kernel=True)
torch.cuda.synchronize()
