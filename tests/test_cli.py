"""The command line on a machine without a GPU."""
import json
import subprocess
import sys

import pytest
import torch


def t4lib(*args, **kw):
    return subprocess.run([sys.executable, "-m", "t4lib", *args], capture_output=True, text=True, **kw)


def test_info_reports_device_and_families():
    r = t4lib("info")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert "int4" in info["kernel_families"] and info["torch"] == torch.__version__


def test_report_prints_a_table():
    r = t4lib("report")
    assert r.returncode == 0 and r.stdout.startswith("| figure | value | unit | tag | device | source |")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_verify_refuses_without_gpu():
    r = t4lib("verify")
    assert r.returncode != 0 and "needs a CUDA GPU" in r.stderr


def test_unknown_benchmark_is_named():
    r = t4lib("bench", "nonesuch")
    assert r.returncode == 2 and "unknown benchmark 'nonesuch'" in r.stderr


@pytest.mark.gpu
def test_int4_op_under_torch_compile():
    from t4lib.ops.int4 import int4_dequant, pack_int4

    v = torch.randint(-8, 8, (1024,), dtype=torch.int8)
    p, s = pack_int4(v).cuda(), torch.rand(8, dtype=torch.float16, device="cuda")
    f = torch.compile(lambda p, s: int4_dequant(p, s, 128, backend="cuda") * 2, fullgraph=True)
    assert torch.equal(f(p, s), int4_dequant(p, s, 128, backend="cuda") * 2)
