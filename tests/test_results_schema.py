"""Every results JSON under results/ follows the schema; the ledger matches the kernel sources."""
import json
from pathlib import Path

import pytest

from t4lib.core import results
from t4lib.evidence import verify

ROOT = Path(__file__).resolve().parent.parent / "results"
FILES = [p for p in sorted(ROOT.rglob("*.json")) if "verification" not in p.parts
         and isinstance(json.loads(p.read_text()), dict) and "figures" in json.loads(p.read_text())]


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_results_file_schema(path):
    results.validate_file(path)


PROV = {"schema": 2, "commit": "0123abc", "dirty": False, "producer": "t4lib/benchmarks/speculative.py",
        "closure": {"t4lib/benchmarks/speculative.py": "0123456789abcdef"}}


def test_figure_builder_rules():
    f = results.figure("x", 1.5, "us", "ESTIMATED", "test", note="model")
    results.validate({"schema": 1, "provenance": PROV, "figures": [f]})
    with pytest.raises(ValueError, match="needs a note"):
        results.figure("x", 1.0, "us", "ARITHMETIC", "test")
    with pytest.raises(ValueError, match="tag must be one of"):
        results.figure("x", 1.0, "us", "GUESSED", "test", note="n")
    bad = dict(f, tag="MEASURED", device="n/a")
    with pytest.raises(ValueError, match="MEASURED figure without a device"):
        results.validate({"schema": 1, "provenance": PROV, "figures": [bad]})
    with pytest.raises(ValueError, match="missing"):
        results.validate({"schema": 1, "provenance": PROV, "figures": [{"name": "y"}]})
    with pytest.raises(ValueError, match="not finite"):
        results.validate({"schema": 1, "provenance": PROV, "figures": [dict(f, value=float("nan"))]})


def test_write_validates(tmp_path):
    with pytest.raises(ValueError):
        results.write(tmp_path / "r.json", [{"name": "bad"}])
    assert not (tmp_path / "r.json").exists()


def test_report_lists_figures(tmp_path):
    results.write(tmp_path / "dev" / "a.json", [results.figure("k/t4", 2.0, "us", "ESTIMATED", "s", note="m")])
    text = results.report(tmp_path)
    assert "| k/t4 | 2 | us | ESTIMATED |" in text


def test_written_files_record_commit_producer_and_closure(tmp_path):
    """A file records the commit, whether the tree was dirty (true or false), its producer (by default the module
    that called write) and the producer's closure; a producer that does not exist is an error before anything is
    written."""
    from t4lib.core import provenance

    fig = results.figure("x", 1.0, "us", "ESTIMATED", "s", note="m")
    prov = json.loads(results.write(tmp_path / "a.json", [fig]).read_text())["provenance"]
    assert prov["schema"] == provenance.SCHEMA and prov["producer"] == "tests/test_results_schema.py"
    assert prov["closure"] == provenance.closure("tests/test_results_schema.py")
    assert len(prov["commit"]) == 40 and isinstance(prov["dirty"], bool)
    prov = json.loads(results.write(tmp_path / "b.json", [fig], producer="t4lib.benchmarks.speculative")
                      .read_text())["provenance"]
    assert prov["producer"] == "t4lib/benchmarks/speculative.py"
    assert prov["closure"] == provenance.closure("t4lib/benchmarks/speculative.py")
    assert "t4lib/benchmarks/speculative.py" in prov["closure"]
    assert not set(prov["closure"]) & set(provenance.INFRASTRUCTURE)
    for gone in ("t4lib/benchmarks/nope.py", "t4lib.benchmarks.nope", "/etc/hostname"):
        with pytest.raises(ValueError, match="producer"):
            results.write(tmp_path / "c.json", [fig], producer=gone)
    assert not (tmp_path / "c.json").exists()


def test_report_marks_figures_whose_sources_changed(tmp_path):
    """Staleness is per file and names the files of its closure that changed; a file without a closure (or with
    unrecorded fingerprints) is 'not recorded'; one whose producer is gone says so."""
    fig = results.figure("x", 1.0, "us", "ESTIMATED", "s", note="m")
    producer = "t4lib/benchmarks/speculative.py"
    results.write(tmp_path / "now.json", [dict(fig, name="fresh")], producer=producer)
    old = results.write(tmp_path / "old.json", [dict(fig, name="stale")], producer=producer)
    doc = json.loads(old.read_text())
    doc["provenance"]["closure"]["t4lib/benchmarks/speculative.py"] = "0" * 16
    old.write_text(json.dumps(doc))
    gone = dict(doc, provenance=dict(doc["provenance"], producer="t4lib/benchmarks/gone.py"),
                figures=[dict(fig, name="gone")])
    (tmp_path / "gone.json").write_text(json.dumps(gone))
    (tmp_path / "legacy.json").write_text(json.dumps({"schema": 1, "figures": [dict(fig, name="legacy")]}))
    unrecorded = dict(doc["provenance"], closure={k: "unrecorded" for k in doc["provenance"]["closure"]})
    (tmp_path / "unrecorded.json").write_text(json.dumps({"schema": 1, "provenance": unrecorded,
                                                          "figures": [dict(fig, name="unrecorded")]}))
    rows = {ln.split(" | ")[0].strip("| "): ln.rsplit(" | ", 1)[1].strip(" |") for ln in
            results.report(tmp_path).splitlines()[2:]}
    assert rows["fresh"] == "current"
    assert rows["stale"] == "changed since: t4lib/benchmarks/speculative.py"
    assert rows["gone"] == "changed since: t4lib/benchmarks/gone.py (gone)"
    assert rows["legacy"] == "not recorded" and rows["unrecorded"] == "not recorded"
    assert results.provenance_status(doc) == "changed since: t4lib/benchmarks/speculative.py"


def test_provenance_schema():
    fig = results.figure("x", 1.0, "us", "ESTIMATED", "s", note="m")
    results.validate({"schema": 1, "provenance": PROV, "figures": [fig]})
    without = lambda key: {k: v for k, v in PROV.items() if k != key}  # noqa: E731
    for bad, match in ((dict(PROV, schema=1), "schema must be 2"), (dict(PROV, dirty=None), "dirty"),
                       (dict(PROV, dirty="no"), "dirty"), (without("producer"), "producer"),
                       (dict(PROV, producer=""), "producer"), (without("closure"), "closure"),
                       (dict(PROV, closure={}), "closure"), (dict(PROV, closure={"a.py": "short"}), "closure"),
                       (dict(PROV, closure={"/abs/a.py": "0123456789abcdef"}), "closure"),
                       (dict(PROV, closure="a" * 64), "closure"), (without("commit"), "commit")):
        with pytest.raises(ValueError, match=match):
            results.validate({"schema": 1, "provenance": bad, "figures": [fig]})


def test_validation_rejects_a_file_without_provenance():
    """Every results file records the commit, the producer and its closure; one written before closures existed,
    whose sources cannot be established, says 'unrecorded' for each fingerprint explicitly, never nothing."""
    fig = results.figure("x", 1.0, "us", "ESTIMATED", "s", note="m")
    with pytest.raises(ValueError, match="provenance missing"):
        results.validate({"schema": 1, "figures": [fig]})
    unrecorded = dict(PROV, commit="unrecorded", dirty=True, closure={"t4lib/benchmarks/speculative.py": "unrecorded"})
    results.validate({"schema": 1, "provenance": unrecorded, "figures": [fig]})
    assert results.provenance_status({"provenance": unrecorded, "figures": [fig]}) == "not recorded"


def test_every_results_file_records_commit_producer_and_closure():
    from t4lib.core import provenance

    missing = []
    for p in FILES:
        prov = json.loads(p.read_text()).get("provenance") or {}
        if not (prov.get("commit") and prov.get("schema") == provenance.SCHEMA and prov.get("producer")
                and isinstance(prov.get("dirty"), bool) and provenance.valid_closure(prov.get("closure"))):
            missing.append(str(p.relative_to(ROOT)))
    assert not missing, f"results files without commit, producer and closure: {missing}"


def test_gpu_verification_ledger_matches_kernel_sources():
    """A committed entry verifies the current sources (rules: t4lib.evidence.verify.entry_problems; tests of
    the rules themselves: tests/test_verify.py). When it fails, the message names what is missing
    and the command that refreshes the ledger on a GPU."""
    ok, why = verify.check_ledger()
    assert ok, why


def test_sanitizer_summary_counts_every_file(monkeypatch):
    """One file that timed out, or that ran no test, keeps its tool from being clean."""
    from t4lib.evidence import verify

    def fake(args, junit, prefix=None, timeout=0):
        tool, target = prefix[2], args[-1]
        if tool == "racecheck" and target == "b":
            return {"returncode": None, "seconds": timeout, "tail": "TIMED OUT", "tests": {}}
        if tool == "synccheck" and target == "a":
            return {"returncode": 0, "seconds": 1, "tail": "ERROR SUMMARY: 0 errors", "tests": {}}
        return {"returncode": 0, "seconds": 1, "tail": "ERROR SUMMARY: 0 errors",
                "tests": {"t::x": "passed", "t::y": "skipped"}}

    monkeypatch.setattr(verify, "_pytest", fake)
    out = verify._summarize(verify._sanitize(["a", "b"], timeout=5, workers=2))
    assert out["memcheck"]["clean"] and out["memcheck"]["errors"] == 0 and out["memcheck"]["tests_passed"] == 2
    assert not out["racecheck"]["clean"] and out["racecheck"]["errors"] is None
    assert not out["synccheck"]["clean"] and out["synccheck"]["files"]["a"]["tests_passed"] == 0


def test_sanitizer_resume_reruns_only_unfinished(monkeypatch, tmp_path):
    from t4lib.evidence import verify

    clean = {"clean": True, "errors": 0, "tests_passed": 3, "returncode": 0, "seconds": 1, "tail": ""}
    late = {"clean": False, "errors": None, "tests_passed": 0, "returncode": None, "seconds": 9, "tail": "TIMED OUT"}
    ledger = tmp_path / "dev.json"
    entry = {"schema": verify.LEDGER_SCHEMA, "sanitizer_targets": ["a", "b"],
             "sanitizers": verify._summarize({tool: {"a": clean, "b": late if tool == "memcheck" else clean}
                                              for tool in verify.SANITIZER_TOOLS})}
    ledger.write_text(json.dumps(entry))
    asked = []

    def fake(targets, timeout, shards=1, only=None, on_pair=None, **kw):
        asked.append(only)
        for tool, t in only:
            on_pair(tool, t, clean)
        return {tool: {t: clean for _, t in [p for p in only if p[0] == tool]} for tool in {p[0] for p in only}}

    monkeypatch.setattr(verify, "_sanitize", fake)
    monkeypatch.setattr(verify, "test_file_closure", lambda f: {f: "0123456789abcdef"})
    out = verify._resume_sanitizers(json.loads(ledger.read_text()), ledger, timeout=5, shards=2)
    assert asked == [{("memcheck", "b")}] and out["sanitizers_clean"]
    # the pair that ran again records the closure it ran at
    assert json.loads(ledger.read_text())["sanitizers"]["memcheck"]["files"]["b"]["closure"] == {"b": "0123456789abcdef"}


def test_sanitizer_resume_adds_named_families_only(monkeypatch, tmp_path):
    """--resume with families on an entry that ran no sanitizer: those families' files alone run, and the entry
    then covers exactly them."""
    from t4lib.evidence import verify

    clean = {"clean": True, "errors": 0, "tests_passed": 3, "returncode": 0, "seconds": 1, "tail": ""}
    ledger = tmp_path / "dev.json"
    ledger.write_text(json.dumps({"schema": verify.LEDGER_SCHEMA}))
    asked = []

    def fake(targets, timeout, shards=1, only=None, on_pair=None, **kw):
        asked.append(only)
        for tool, t in only:
            on_pair(tool, t, clean)
        return {tool: {t: clean for _, t in [p for p in only if p[0] == tool]} for tool in {p[0] for p in only}}

    monkeypatch.setattr(verify, "_sanitize", fake)
    files = verify._sanitizer_targets(["fused_adamw"])
    out = verify._resume_sanitizers({"schema": 2}, ledger, timeout=5, shards=1, families=["fused_adamw"])
    assert files and asked == [{(tool, f) for tool in verify.SANITIZER_TOOLS for f in files}]
    assert out["sanitizer_targets"] == files and out["sanitizers_clean"]
    with pytest.raises(ValueError, match="neither kernel families"):
        verify._resume_sanitizers({"schema": 2}, ledger, timeout=5, shards=1, families=["nope"])


def test_sanitizer_resume_keeps_each_finished_pair_when_cut_short(monkeypatch, tmp_path):
    """A sanitizer pass killed part way (a session's time limit) leaves the pairs that finished in the ledger,
    the entry not clean, and its targets whole, so a later --resume runs only the rest."""
    from t4lib.evidence import verify

    clean = {"clean": True, "errors": 0, "tests_passed": 3, "returncode": 0, "seconds": 1, "tail": ""}
    ledger = tmp_path / "dev.json"
    ledger.write_text(json.dumps({"schema": verify.LEDGER_SCHEMA}))

    def cut(targets, timeout, shards=1, only=None, on_pair=None, **kw):
        on_pair("memcheck", targets[0], clean)
        raise KeyboardInterrupt  # what a timeout's kill looks like from here: nothing returned

    monkeypatch.setattr(verify, "_sanitize", cut)
    files = verify._sanitizer_targets(["fused_adamw"])
    with pytest.raises(KeyboardInterrupt):
        verify._resume_sanitizers({"schema": 2}, ledger, timeout=5, shards=1, families=["fused_adamw"])
    entry = json.loads(ledger.read_text())
    assert entry["sanitizer_targets"] == files and entry["sanitizers_clean"] is False
    assert entry["sanitizers"]["memcheck"]["files"][files[0]]["clean"]
    asked = []

    def rest(targets, timeout, shards=1, only=None, on_pair=None, **kw):
        asked.append(only)
        for tool, t in sorted(only):
            on_pair(tool, t, clean)
        return {}

    monkeypatch.setattr(verify, "_sanitize", rest)
    out = verify._resume_sanitizers(entry, ledger, timeout=5, shards=1)
    assert asked == [{(tool, f) for tool in ("racecheck", "synccheck") for f in files}] and out["sanitizers_clean"]


def test_sanitize_reports_each_pair_as_its_last_shard_finishes(monkeypatch):
    from t4lib.evidence import verify

    def fake(args, junit, prefix=None, timeout=None):
        return {"returncode": 0, "seconds": 1, "tail": "ERROR SUMMARY: 0 errors", "tests": {"t::x": "passed"}}

    monkeypatch.setattr(verify, "_pytest", fake)
    monkeypatch.setattr(verify, "_collect", lambda t, marker: ["t::a", "t::b", "t::c"])
    seen = []
    out = verify._sanitize(["f"], timeout=5, workers=2, shards=3, tools=("memcheck",),
                           on_pair=lambda tool, t, r: seen.append((tool, t, r["shards"], r["tests_passed"])))
    assert seen == [("memcheck", "f", 3, 3)] and out["memcheck"]["f"]["clean"]


def test_sanitizer_runs_leave_out_speed_assertions(monkeypatch):
    """Instrumented, many at once on one GPU, a test that asserts on measured speed fails for no
    memory or race reason: the sanitizer runs' marker must deselect it but keep its kernel's test."""
    import subprocess
    import sys

    from t4lib.evidence import verify

    markers = []

    def fake(args, junit, prefix=None, timeout=0):
        markers.append(args[args.index("-m") + 1])
        return {"returncode": 0, "seconds": 1, "tail": "ERROR SUMMARY: 0 errors", "tests": {"t::x": "passed"}}

    monkeypatch.setattr(verify, "_pytest", fake)
    verify._sanitize(["tests/test_swizzle.py"], timeout=5, workers=1, tools=("memcheck",))
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", markers[0], "tests/test_swizzle.py"], cwd=verify.REPO, capture_output=True, text=True)
    assert "test_swizzle_bench_runs" in proc.stdout
    assert "test_swizzle_bench_orders_layouts" not in proc.stdout


def test_lab_schema_rejects_incomplete_records():
    good = {"device": "NVIDIA H200", "commit": "0123abc", "command": "python lab.py", "date": "2026-12-01",
            "provenance": PROV}
    results.validate_lab(good)
    for key in results.LAB_KEYS:
        with pytest.raises(ValueError, match=key):
            results.validate_lab({k: v for k, v in good.items() if k != key})
    with pytest.raises(ValueError, match="commit"):
        results.validate_lab(dict(good, commit="HEAD"))
    with pytest.raises(ValueError, match="date"):
        results.validate_lab(dict(good, date="yesterday"))
    for bad in (dict(PROV, closure={}), dict(PROV, dirty=None), {k: v for k, v in PROV.items() if k != "producer"}):
        with pytest.raises(ValueError, match="provenance"):
            results.validate_lab(dict(good, provenance=bad))


def test_no_lab_record_among_the_results():
    """results/ holds figures; a lab record (a command without figures) stays with its lab, outside the package."""
    for path in ROOT.glob("*/*.json"):
        doc = json.loads(path.read_text())
        assert not (isinstance(doc, dict) and "command" in doc and "figures" not in doc
                    and path.name != "contract_plan.json"), f"{path}: a lab record among the results"


def test_racecheck_reports_are_counted_by_kernel(monkeypatch):
    """Which kernel each racecheck report is in, summed over shards and files; unknown where a run kept none."""
    from t4lib.evidence import verify

    text = ("========= Error: Race reported between Read access at nvjet_sm90_hsh_64x16+0xb00\n"
            "=========     and Write access at nvjet_sm90_hsh_64x16+0x28c0 [384 hazards]\n"
            "========= Error: Race reported between Write access at fused_adamw_ws_kernel+0x10\n"
            "=========     and Read access at fused_adamw_ws_kernel+0x20 [3 hazards]\n")
    assert verify.race_kernels(text) == {"nvjet_sm90_hsh_64x16": 1, "fused_adamw_ws_kernel": 1}
    # racecheck names the function of the access with its signature, often a device function
    text2 = ("========= Error: Race reported between Read access at void <unnamed>::tile_epilogue<(bool)1, (int)192>("
             "const float (*)[68], const <unnamed>::Out &)+0x11660 in fused_adamw.cu:209\n"
             "========= Error: Race reported between Read access at <unnamed>::w4a16_gemm_ws_kernel(const __half *, "
             "int)+0x3dd0 in w4a16.cu:413\n"
             "========= Error: Race reported between Write access at nvcuda::wmma::store_matrix_sync(float *, const "
             "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, (int)16, float, void> &)+0x3490 in mma.hpp:474\n")
    assert verify.race_kernels(text2) == {"tile_epilogue": 1, "w4a16_gemm_ws_kernel": 1,
                                          "nvcuda::wmma::store_matrix_sync": 1}
    assert verify.race_kernels("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)") == {}

    def fake(args, junit, prefix=None, timeout=None):
        return {"returncode": 86, "seconds": 1, "tail": "hazards displayed (2 errors, 0 warnings)",
                "race_kernels": verify.race_kernels(text), "tests": {"t::x": "passed"}}

    monkeypatch.setattr(verify, "_pytest", fake)
    monkeypatch.setattr(verify, "_collect", lambda t, marker: ["t::a", "t::b"])
    out = verify._summarize(verify._sanitize(["f", "g"], timeout=5, workers=2, shards=2, tools=("racecheck",)))
    assert out["racecheck"]["files"]["f"]["race_kernels"] == {"nvjet_sm90_hsh_64x16": 2, "fused_adamw_ws_kernel": 2}
    assert out["racecheck"]["race_kernels"] == {"nvjet_sm90_hsh_64x16": 4, "fused_adamw_ws_kernel": 4}
    older = {"f": {"clean": True, "errors": 0, "tests_passed": 1, "seconds": 1}}   # an entry from before the count
    assert verify._summarize({"racecheck": older})["racecheck"]["race_kernels"] is None


def test_provenance_names_the_calling_module_by_default():
    """A module's own record (tiny's training record, say) names that module as its producer."""
    prov = results.provenance()
    assert prov["producer"] == "tests/test_results_schema.py" and prov["closure"]["tests/test_results_schema.py"]
    with pytest.raises(ValueError, match="producer"):
        results.provenance("no/such/unit.py")
