"""Command line: ``t4lib info | build | verify | bench | report | rehearse`` (or ``python -m t4lib``)."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from pathlib import Path
from t4lib.core import build, hw, results, telemetry
from t4lib.evidence import rehearse, report, verify

# Benchmark modules, each with run(out_dir) -> its figures (or the path of the results file it wrote).
BENCHES = {
    "int4": "t4lib.benchmarks.int4_dequant",
    "bitlevel": "t4lib.benchmarks.bitlevel",
    "w4a16": "t4lib.benchmarks.w4a16",
    "w4a16-ws": "t4lib.benchmarks.w4a16_ws",
    "fused-adamw": "t4lib.benchmarks.fused_adamw",
    "serving": "t4lib.benchmarks.serving",
    "speculative": "t4lib.benchmarks.speculative",
    "deltanet": "t4lib.benchmarks.qwen35_components",
    "qwen35": "t4lib.benchmarks.qwen35",
    "qwen35-mtp": "t4lib.benchmarks.qwen35_mtp",
    "lora": "t4lib.benchmarks.lora",
    "quant-quality": "t4lib.benchmarks.quant_quality",
    "contract": "t4lib.benchmarks.contract",
    "swizzle-ncu": "t4lib.benchmarks.swizzle_ncu",
    "t4model": "t4lib.evidence.t4model",
}
# `t4lib bench` with no name: the kernel and serving benchmarks (minutes); the others by name
DEFAULT_BENCHES = ("int4", "bitlevel", "w4a16", "serving", "deltanet", "contract")


def _info(args) -> int:
    info = dict(hw.device_info())
    try:
        info["nvcc"] = build.find_nvcc()
    except build.BuildError as e:
        info["nvcc"] = str(e)
    info["kernel_families"] = build.families()
    info["telemetry"] = telemetry.snapshot()
    print(json.dumps(info, indent=1, default=str))
    return 0


def _build_cmd(args) -> int:
    fams = args.families or build.families()
    rows, failed = [], []
    for fam, built in build.build_many(fams, force=args.force).items():
        try:
            if isinstance(built, build.BuildError):
                raise built  # reported below, like a failure of the resource report
            print(f"{fam}: {built}")
            if args.report:
                rows += build.resource_report(fam)
        except build.BuildError as e:
            print(f"{fam}: FAILED\n{e}", file=sys.stderr)
            failed.append(fam)
    if rows:
        print(build.format_report(rows))
    return 1 if failed else 0


def _verify(args) -> int:
    entry = verify.run(sanitize=args.sanitize, bench=not args.no_bench, sanitizer_timeout=args.sanitize_timeout,
                       shards=args.sanitize_shards, resume=args.resume, stale_only=args.stale,
                       sanitize_families=args.sanitize_families, jobs=args.jobs)
    if args.stale:
        print(f"re-ran {len(entry.get('ran', []))} stale GPU test files: {entry.get('ran', [])}")
    print(verify.verdict(entry))
    ok, why = verify.check_ledger()
    print(f"check_ledger: {'accepts' if ok else 'REJECTS'}: {why}")
    failed = [f for f in entry.get("ran", []) if any(v in ("failed", "error", "not run")
                                                     for v in entry["files"][f]["tests"].values())]
    if failed:
        print(f"failed or not run in: {failed}\n{(entry.get('last_run') or {}).get('tail', '')}", file=sys.stderr)
    return 0 if ok and not failed else 1


def _bench(args) -> int:
    names = args.names or list(DEFAULT_BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:  # before any benchmark runs
        print(f"unknown benchmark {unknown[0]!r}; known: {list(BENCHES)}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else results.results_dir() / hw.device_slug()
    try:  # before any benchmark runs, not after them
        results.check_writable(out, "--out", directory=True)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    status = 0
    for name in names:
        try:
            figs = importlib.import_module(BENCHES[name]).run(out)
            if isinstance(figs, (str, Path)):   # a benchmark that returns the file it wrote
                figs = json.loads(Path(figs).read_text())["figures"]
            elif isinstance(figs, dict):         # or the document it wrote
                figs = figs.get("figures")
            if not figs:  # a benchmark that measured nothing failed, whatever it returned
                raise RuntimeError(f"{name} measured no figure")
            print(f"== {name}: {len(figs)} figures -> {out}")
            for f in figs:
                v = f["value"]
                print(f"  {f['name']:<60} {v:>12.4g} {f['unit']:<9} {f['tag']}" if isinstance(v, float)
                      else f"  {f['name']:<60} {v!s:>12} {f['unit']:<9} {f['tag']}")
        except Exception:
            status = 1
            print(f"== {name}: FAILED", file=sys.stderr)
            traceback.print_exc()
    return status


def _report(args) -> int:
    if args.readme:
        changed = report.update(args.readme)
        print(f"{args.readme}: results table {'regenerated' if changed else 'already current'}")
        return 0

    if args.out:
        try:
            results.check_writable(args.out, "--out")
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
    text = results.report()
    if args.out:
        results.atomic_write_text(args.out, "# Results\n\n" + results.LAYOUT_MD + "\n" + report.records()
                                  + "\n" + report.executed_notebooks() + "\n## Figures\n\nEvery figure under "
                                  "`results/`, with its tag, device and provenance (whether the kernel sources "
                                  "changed since it was measured; `python -m t4lib report --out results/README.md` "
                                  "writes this file).\n\n" + text)
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="t4lib", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="device, driver, versions, kernel families, a telemetry reading")
    b = sub.add_parser("build", help="build kernel libraries ahead of use")
    b.add_argument("families", nargs="*")
    b.add_argument("--force", action="store_true")
    b.add_argument("--report", action="store_true", help="print the -Xptxas -v resource table")
    v = sub.add_parser("verify", help="GPU tests, KATs, short bench -> results/verification/<device>.json")
    v.add_argument("--sanitize", action="store_true", help="also run the GPU tests under compute-sanitizer")
    v.add_argument("--sanitize-timeout", type=int, default=240, help="seconds per sanitizer run (one tool over one test file)")
    v.add_argument("--sanitize-shards", type=int, default=1,
                   help="split each test file into this many sanitizer processes (by test id)")
    v.add_argument("--resume", action="store_true",
                   help="keep this device's ledger entry for the current sources; re-run only the sanitizer "
                        "runs that did not finish clean")
    v.add_argument("--sanitize-families", nargs="+", metavar="FAMILY",
                   help="with --sanitize: only these kernel families' test files, or named test files of a family "
                        "(tests/test_w4a16_ws.py); the entry records which")
    v.add_argument("--stale", action="store_true",
                   help="run only the GPU test files no ledger entry verifies at their current closure (and the "
                        "KATs only if theirs changed); keep this device's records of the others")
    v.add_argument("--no-bench", action="store_true")
    v.add_argument("--jobs", type=int, default=1,
                   help="run the GPU tests in this many pytest-xdist processes (whole files each) on the one GPU")
    be = sub.add_parser("bench", help=f"run benchmarks ({', '.join(BENCHES)})")
    be.add_argument("names", nargs="*")
    be.add_argument("--out")
    r = sub.add_parser("report", help="Markdown table of every figure under results/")
    r.add_argument("--out")
    r.add_argument("--readme", help="regenerate the results table of this README (README.md) from results/")
    rehearse.add_arguments(sub.add_parser(
        "rehearse", help="dress rehearsal: every notebook's t4 profile by papermill under a T4's memory, with "
                         "random-weight stand-ins of hub models -> results/<device>/rehearsal.json"))
    args = p.parse_args(argv)
    return {"info": _info, "build": _build_cmd, "verify": _verify, "bench": _bench, "report": _report,
            "rehearse": rehearse.main}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
