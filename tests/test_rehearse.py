"""The dress rehearsal (``python -m t4lib rehearse``) on a machine without a GPU: the hub stand-ins load through
the library's loading path offline, every hub id the notebooks name has a committed configuration, the plan
covers every notebook, a failed notebook is recorded as failed, and bad arguments are named."""
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from t4lib import cli
from t4lib.core import notebook, results
from t4lib.evidence import hub_standins, rehearse
from t4lib.models import shapes

TINY = {"id": "Org/Tiny-0.1B", "source": "test", "tokenizer_size": 151665,
        "config": {"model_type": "qwen2", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 151936,
                   "max_position_embeddings": 256, "tie_word_embeddings": True, "torch_dtype": "float32"}}


def test_standin_loads_offline_through_the_library(tmp_path):
    hub_standins.write_standin(tmp_path, TINY["id"], TINY)
    assert (tmp_path / "models--Org--Tiny-0.1B" / "refs" / "main").read_text() == hub_standins.revision(TINY)
    code = ("from t4lib import models; from transformers import AutoConfig\n"
            "m, t = models.load('Org/Tiny-0.1B')\n"
            "c = AutoConfig.from_pretrained('Org/Tiny-0.1B')\n"
            "print(type(m).__name__, c.hidden_size, m.config.vocab_size, len(t), t.eos_token_id == m.config.eos_token_id)")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=results.REPO_ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["Qwen2ForCausalLM", "32", "151936", "151665", "True"]


def test_every_hub_id_the_notebooks_name_has_a_committed_config():
    specs = hub_standins.configs()
    named = {i for nb in rehearse.notebooks() for i in hub_standins.hub_ids(nb)}
    assert "Qwen/Qwen2.5-Math-1.5B" in named  # notebook 06's t4 profile
    assert named <= set(specs), f"no committed configuration for {sorted(named - set(specs))}"
    for i, spec in specs.items():
        c = spec["config"]
        assert spec["tokenizer_size"] <= c["vocab_size"] and c["hidden_size"] % c["num_attention_heads"] == 0, i
    # the same public configuration the benchmarks build their Qwen2.5-0.5B shape from
    half = specs["Qwen/Qwen2.5-0.5B-Instruct"]["config"]
    assert {k: half[k] for k in shapes.QWEN25_05B} == shapes.QWEN25_05B


def test_hub_ids_are_model_ids_only(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('M = "Qwen/Qwen2.5-7B-Instruct"  # or "openai/gsm8k", "GB/s", "w/M1"')]
    nbformat.write(nb, tmp_path / "x.ipynb")
    assert hub_standins.hub_ids(tmp_path / "x.ipynb") == ["Qwen/Qwen2.5-7B-Instruct"]


def test_dry_run_plans_every_notebook(capsys):
    assert cli.main(["rehearse", "--dry-run"]) == 0
    out = capsys.readouterr().out
    names = [p.name for p in rehearse.notebooks()]
    assert len(names) == 9 and all(f"{n:34s} t4 " in out for n in names)
    assert "05_grpo_cp_hybrid.ipynb            kaggle-2xt4" in out
    assert "Qwen/Qwen2.5-Math-1.5B -> " in out and "T4LIB_REHEARSE_MEM_GIB=15" in out and "HF_HUB_OFFLINE=1" in out
    assert all(f"  {n[:2]}: " in out for n in names)  # a generation-length line per notebook
    assert "PYTHONPATH=<rehearsal>/site" in out and "rehearsal_sitecustomize.py" in out


def _fake_papermill(fail: set[str]):
    """A papermill stand-in: writes the executed copy (cell 2 failed for notebooks in ``fail``) and the
    kernel's peak file, as the real run and the startup file do."""
    def run(r, dest, env, timeout, log):
        nb = nbformat.read(r.notebook, as_version=4)
        bad = r.notebook.name[:2] in fail
        for i, c in enumerate(nb.cells):
            c.metadata["papermill"] = {"status": "failed" if bad and i == 2 else "completed", "exception": bad and i == 2}
            if bad and i == 2:
                c.outputs = [nbformat.v4.new_output("error", ename="OutOfMemoryError", evalue="CUDA out of memory",
                                                    traceback=[])]
        nbformat.write(nb, dest)
        Path(env["T4LIB_REHEARSE_PEAK_FILE"]).write_text(json.dumps(
            {"max_allocated": 2**30, "max_reserved": 3 * 2**30, "budget": 15 * 2**30}))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("papermill log\n")
        return {"rc": 1 if bad else 0, "timed_out": False}
    return run


def test_a_failed_notebook_is_recorded_and_the_exit_code_says_so(tmp_path):
    runs = rehearse.plan(["00", "01"], ["t4"])
    rc = rehearse.rehearse(runs, tmp_path, tmp_path / "hub", 60, 2.6e12, runner=_fake_papermill({"01"}))
    assert rc == 1
    doc = json.loads((tmp_path / "rehearsal.json").read_text())
    results.validate(doc)
    assert doc["provenance"]["commit"]
    ok, bad = doc["runs"]["00_environment/t4"], doc["runs"]["01_kernel_kats/t4"]
    assert ok["status"] == "completed" and bad["status"] == "failed"
    assert bad["failed_cell"]["cell"] == 2 and "OutOfMemoryError" in bad["failed_cell"]["error"]
    assert (tmp_path / "rehearsal" / "00_environment.ipynb").is_file()
    stamp = json.loads((tmp_path / "rehearsal" / "00_environment.ipynb").read_text())["metadata"]["t4lib"]
    assert stamp["profile"] == "t4" and stamp["commit"] and stamp["producer"] == "notebooks/00_environment.ipynb"
    assert "notebooks/00_environment.ipynb" in stamp["closure"] and notebook.stamp_status(stamp) == "current"
    assert (tmp_path / "rehearsal" / "01_kernel_kats.failed.ipynb").is_file()
    assert any("01_kernel_kats/t4: failed at cell 2" in e for e in doc["errors"])
    figs = {f["name"]: f for f in doc["figures"]}
    for nb in ("00_environment", "01_kernel_kats"):
        assert figs[f"rehearsal/{nb}/peak_gib"]["value"] == 3.0
        assert figs[f"rehearsal/{nb}/gpu_seconds"]["tag"] == "MEASURED"
        assert figs[f"rehearsal/{nb}/t4_projected_minutes"]["tag"] == "ESTIMATED"
    assert figs["rehearsal/01_kernel_kats/gpu_seconds"]["status"] == "failed"
    for name in ("gpu_seconds", "t4_projected_minutes"):   # a run that stopped early gives no full length
        assert "the run failed before its end" in figs[f"rehearsal/01_kernel_kats/{name}"]["note"]
        assert "before its end" not in figs[f"rehearsal/00_environment/{name}"]["note"]

    # a later rehearsal of one notebook keeps the other's records
    assert rehearse.rehearse(rehearse.plan(["01"], ["t4"]), tmp_path, tmp_path / "hub", 60, 2.6e12,
                             runner=_fake_papermill(set())) == 0
    doc = json.loads((tmp_path / "rehearsal.json").read_text())
    assert doc["runs"]["01_kernel_kats/t4"]["status"] == "completed" and "00_environment/t4" in doc["runs"]
    assert {f["name"] for f in doc["figures"]} >= set(figs)


def test_t4_projection_scales_only_the_busy_time():
    assert rehearse.t4_projection_s(100, 0.5, 2.6e12) == pytest.approx(50 + 50 * 10)
    assert rehearse.t4_projection_s(100, None, 2.6e11) == pytest.approx(100)  # no reading: all busy


@pytest.mark.parametrize("argv, named", [
    (["rehearse", "42", "--dry-run"], "argument NN[:PROFILE]: no notebook numbered '42'"),
    (["rehearse", "--timeout", "0", "--dry-run"], "argument --timeout: must be a positive"),
    (["rehearse", "05:colab", "--dry-run"], "argument NN[:PROFILE]: profile of '05:colab' must be one of"),
    (["rehearse", "--concurrent", "0", "--dry-run"], "argument --concurrent: must be a positive whole number"),
    (["rehearse", "--profiles", "colab", "--dry-run"], "argument --profiles: invalid choice: 'colab'"),
    (["rehearse", "--param", "05:STEPS", "--dry-run"], "argument --param: must read NN:NAME=VALUE"),
    (["rehearse", "--param", "42:STEPS=1", "--dry-run"], "argument --param: no notebook numbered '42'"),
])
def test_argument_errors_name_the_argument(argv, named, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2 and named in capsys.readouterr().err


def test_a_parameter_reaches_its_notebook_only():
    runs = rehearse.plan(["04", "05"], ["t4"], [rehearse.parameter("05:STEPS=10"), rehearse.parameter("05:X=a b")])
    assert [r.parameters for r in runs] == [{"PROFILE": "t4"}, {"PROFILE": "t4", "STEPS": 10, "X": "a b"}]


def test_runs_go_in_the_order_named():
    assert [r.notebook.name[:2] for r in rehearse.plan(["08", "03", "08"], ["t4"])] == ["08", "03"]
    runs = rehearse.plan([rehearse.notebook_run(v) for v in ("8", "05:kaggle-2xt4", "05", "01")], ["t4"])
    assert [(r.notebook.name[:2], r.profile) for r in runs] == [("08", "t4"), ("05", "kaggle-2xt4"), ("05", "t4"),
                                                                ("01", "t4")]


def test_notebook_numbers_read_as_two_digits():
    assert rehearse.notebook_number("6") == "06"
    assert [r.notebook.name[:2] for r in rehearse.plan(["06"], rehearse.PROFILES)] == ["06"]  # 06 has no kaggle profile


def test_startup_file_caps_memory_and_lets_kaggle_run_on_one_gpu(tmp_path, monkeypatch):
    """The kernel's startup file, run as IPython runs it, against a pretend one-GPU torch of 141 GiB."""
    import torch
    from types import SimpleNamespace
    from t4lib.core import notebook

    fractions, hooks = [], []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(total_memory=141 * 2**30))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: fractions.append((f, d)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d: 2 * 2**30)
    monkeypatch.setattr(notebook, "resolve_profile", notebook.resolve_profile)  # restored after the test
    env = rehearse.environment(tmp_path, tmp_path, tmp_path / "peak.json", "kaggle-2xt4")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ip = SimpleNamespace(events=SimpleNamespace(register=lambda event, fn: hooks.append((event, fn))))
    ns = {"get_ipython": lambda: ip}
    exec(compile(rehearse.STARTUP_FILE.read_text(), "startup", "exec"), ns)

    assert fractions == [(pytest.approx(15 / 141), 0)]
    assert notebook.resolve_profile("kaggle-2xt4") == "kaggle-2xt4"
    [(event, write_peak)] = hooks
    write_peak(None)
    assert event == "post_run_cell" and json.loads((tmp_path / "peak.json").read_text())["max_reserved"] == 2 * 2**30
    assert not {"_os", "_notebook", "_memory", "_t4lib_rehearsal"} & set(ns)  # none of its names left in the kernel's namespace


def test_the_records_a_notebook_writes_are_put_back_and_kept_apart(tmp_path, monkeypatch):
    """A t4 profile measures and writes the results of the device it runs on: on the rehearsal's GPU those are
    committed records that later cells read, so the rehearsal puts them back and keeps the run's files apart."""
    root = tmp_path / "results"
    monkeypatch.setenv("T4LIB_RESULTS", str(root))
    out = root / "dev"
    (out / "logs").mkdir(parents=True)
    (out / "bench.json").write_text("committed")
    fake = _fake_papermill(set())

    def writes_records(run, dest, env, timeout, log):
        (out / "bench.json").write_text("re-measured")
        (out / "new.json").write_text("new")
        return fake(run, dest, env, timeout, log)

    assert rehearse.rehearse(rehearse.plan(["00"], ["t4"]), out, tmp_path / "hub", 60, 2.6e12,
                             runner=writes_records) == 0
    assert (out / "bench.json").read_text() == "committed" and not (out / "new.json").exists()
    kept = out / "rehearsal" / "00_environment.results" / "dev"
    assert (kept / "bench.json").read_text() == "re-measured" and (kept / "new.json").read_text() == "new"
    doc = json.loads((out / "rehearsal.json").read_text())
    assert doc["runs"]["00_environment/t4"]["results_written"] == "rehearsal/00_environment.results"


def test_concurrent_runs_keep_their_own_memory_and_mark_times_as_upper_bounds(tmp_path, monkeypatch):
    """Runs sharing the GPU: each kernel gets its own IPython profile and peak file, the results files they
    write are put back once for the batch, and the seconds and the projection say they bound a solo run."""
    import threading
    root = tmp_path / "results"
    monkeypatch.setenv("T4LIB_RESULTS", str(root))
    out = root / "dev"
    (out / "logs").mkdir(parents=True)
    (out / "bench.json").write_text("committed")
    fake, seen, both = _fake_papermill({"01"}), [], threading.Barrier(2, timeout=30)

    def overlapping(run, dest, env, timeout, log):
        seen.append((env["IPYTHONDIR"], env["T4LIB_REHEARSE_PEAK_FILE"]))
        both.wait()  # both runs are in flight together, or this times out
        (out / "bench.json").write_text(f"re-measured by {run.notebook.name[:2]}")
        return fake(run, dest, env, timeout, log)

    rc = rehearse.rehearse(rehearse.plan(["00", "01"], ["t4"]), out, tmp_path / "hub", 60, 2.6e12,
                           runner=overlapping, concurrent=2)
    assert rc == 1  # 01 failed; 00 completed beside it
    assert len({d for d, _ in seen}) == 2 and len({f for _, f in seen}) == 2
    assert (out / "bench.json").read_text() == "committed"
    assert (out / "rehearsal" / "concurrent.results" / "dev" / "bench.json").read_text().startswith("re-measured")
    doc = json.loads((out / "rehearsal.json").read_text())
    assert {r["status"] for r in doc["runs"].values()} == {"completed", "failed"}
    assert all(r["concurrent"] == 2 and r["results_written"] == "rehearsal/concurrent.results"
               for r in doc["runs"].values())
    figs = {f["name"]: f for f in doc["figures"]}
    assert "upper bound of a solo run" in figs["rehearsal/00_environment/gpu_seconds"]["note"]
    assert "upper bound of a solo run" in figs["rehearsal/00_environment/t4_projected_minutes"]["note"]
    assert figs["rehearsal/00_environment/peak_gib"]["value"] == 3.0
    with pytest.raises(ValueError, match="concurrent"):
        rehearse.rehearse([], out, tmp_path / "hub", 60, None, concurrent=0)


def _rec(torch_peak, **kw):
    return {"notebook": "08_x.ipynb", "profile": "t4", "status": "completed", "parameters": {"PROFILE": "t4"},
            "seconds": 10.0, "gpu_busy_fraction": 0.5, "device_peak_bytes": 2**30, "torch_peak": torch_peak, **kw}


def _peak(rec):
    [peak] = [f for f in rehearse.figures(rec, "rehearsal/08_x", None) if f["name"].endswith("peak_gib")]
    return peak


NOTHING = {"max_allocated": 0, "max_reserved": 0, "budget": 15 * 2**30}


def test_a_record_that_did_not_follow_subprocesses_says_so():
    peak = _peak(_rec(NOTHING))   # made before subprocesses were followed: no process_peaks
    assert peak["value"] == 0
    assert "subprocesses were not followed" in peak["note"] and "not counted" in peak["note"]


def test_the_peak_is_the_largest_of_the_kernel_and_its_cuda_subprocesses():
    procs = [{"pid": 7, "argv": ["timing.py", "t4lib.contract.model:run", "in.json"], "max_allocated": 3 * 2**30,
              "max_reserved": 4 * 2**30, "budget": 15 * 2**30},
             {"pid": 9, "argv": ["timing.py", "x:y"], "max_allocated": 2**30, "max_reserved": 2**31, "budget": 1}]
    peak = _peak(_rec(NOTHING, process_peaks=procs))
    assert peak["value"] == 4.0
    assert "2 CUDA subprocesses" in peak["note"] and "t4lib.contract.model:run" in peak["note"]
    assert "peak allocated 3.00 GiB" in peak["note"] and "NVML device peak 1.00 GiB" in peak["note"]
    kernel_larger = _peak(_rec({"max_allocated": 5 * 2**30, "max_reserved": 6 * 2**30, "budget": 1},
                               process_peaks=procs))
    assert kernel_larger["value"] == 6.0 and "peak allocated 5.00 GiB" in kernel_larger["note"]
    assert "not counted" not in kernel_larger["note"]


def _site(tmp_path):
    site = tmp_path / "site"
    rehearse.install_sitecustomize(site)
    env = rehearse.environment(tmp_path / "hub", tmp_path / "ipython", tmp_path / "run.peak.json", "t4", site)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(site)
    return site, env


def test_subprocesses_queue_the_cap_for_cudas_first_use_and_report_their_peak(tmp_path):
    """In a Python process started under the rehearsal's environment, importing torch queues the cap for
    CUDA's initialisation (and nothing without the variables); the peak file a process writes is read back."""
    site, env = _site(tmp_path)
    code = ("import torch, torch.cuda\n"
            "print(sum(getattr(f, '__name__', '') == '_apply_cap' for f, _ in torch.cuda._queued_calls))")
    run = lambda e: subprocess.run([sys.executable, "-c", code], env={**os.environ, **e}, capture_output=True,
                                   text=True, cwd=results.REPO_ROOT, timeout=300)
    hooked = run(env)
    assert hooked.returncode == 0, hooked.stderr[-2000:]
    assert hooked.stdout.split() == ["1"]
    plain = run({"PYTHONPATH": env["PYTHONPATH"]})   # the hook's file on the path, the rehearsal's variables not
    assert plain.returncode == 0 and plain.stdout.split() == ["0"]
    (tmp_path / "ipykernel_stand_in.py").write_text(code)   # a kernel: capped by the startup file, not here
    kernel = subprocess.run([sys.executable, "-m", "ipykernel_stand_in"], env={**os.environ, **env},
                            capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert kernel.returncode == 0 and kernel.stdout.split() == ["0"], kernel.stderr[-2000:]
    peak_file = Path(env["T4LIB_REHEARSE_PEAK_FILE"])
    (tmp_path / "run.peak.json.proc-12.json").write_text(json.dumps({"pid": 12, "max_reserved": 1}))
    (tmp_path / "run.peak.json.proc-3.json").write_text(json.dumps({"pid": 3, "max_reserved": 2}))
    assert [p["pid"] for p in rehearse.process_peaks(peak_file)] == [3, 12]


def test_a_subprocess_that_starts_cuda_is_capped_and_writes_its_peak_at_exit(tmp_path):
    """The queued hook run as CUDA's initialisation runs it, against a pretend one-GPU torch of 141 GiB: the
    process is capped at 15 GiB and, at exit, its peak lands in ``<peak file>.proc-<pid>.json``."""
    site, env = _site(tmp_path)
    code = ("import os, types, torch, torch.cuda as c\n"
            "c.device_count = lambda: 1\n"
            "c.get_device_properties = lambda d: types.SimpleNamespace(total_memory=141 * 2**30)\n"
            "c.set_per_process_memory_fraction = lambda f, d: print('fraction', round(f * 141, 3), d)\n"
            "c.max_memory_allocated, c.max_memory_reserved = (lambda d: 2**30), (lambda d: 2**31)\n"
            "[f() for f, _ in c._queued_calls if getattr(f, '__name__', '') == '_apply_cap']\n"
            "print('pid', os.getpid())\n")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                       cwd=results.REPO_ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert out["fraction"] == "15.0 0"
    [peak] = rehearse.process_peaks(Path(env["T4LIB_REHEARSE_PEAK_FILE"]))
    assert peak["pid"] == int(out["pid"]) and peak["max_reserved"] == 2**31 and peak["budget"] == 15 * 2**30
    assert peak["argv"] == ["-c"]


def test_the_sitecustomize_it_shadows_still_runs(tmp_path):
    site, env = _site(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['SHADOWED_RAN'] = '1'\n")
    env["PYTHONPATH"] += os.pathsep + str(other)
    code = "import os, sys; print(os.environ.get('SHADOWED_RAN'), sys.modules['sitecustomize'].__file__)"
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["1", str(site / "sitecustomize.py")]   # the rehearsal's ran first, then handed over
