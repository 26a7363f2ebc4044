"""Runs that start from a tuning library kept to `[library] keep_per_workload` against runs that
start from the same runs' records unbounded: does the bound cost a warm run anything?

    python benchmarks/library_bound_ab.py --runs RUN_DIR [RUN_DIR ...] [--model smallcnn]
        [--budget 1min] [--pairs 3] [--label vm-2core]

Both libraries take the records of the RUN_DIRs (run directories of the model) in turn, one
with each workload kept to the bound and one without; no features file, so both read what
they train on. Each pair runs the same command once on a fresh copy of each library (the
side that goes first alternates), and the shipped models of every run are timed together,
interleaved, at the end. Prints each side's latencies and trials and the ratio of the
medians; writes results/library_bound_ab-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from _common import ROOT, head_rev, time_databases, write_result


def libraries(runs: list[Path], keep: int, root: Path) -> dict[str, Path]:
    """The two libraries' roots, each holding this host's target folder."""
    from tune_orchestrator.library import Library
    from tune_orchestrator.library.files import RECORDS, WORKLOADS
    from tune_orchestrator.model.targets import resolve_target

    key = Library.for_target(resolve_target("llvm")).path.name
    roots = {}
    for side, bound in (("unbounded", 0), ("kept", keep)):
        library = Library(root / side / key)
        for run in runs:
            library.add_files(run / WORKLOADS, run / RECORDS, keep=bound)
        print(f"{side}: {len(library.read().records)} records", flush=True)
        roots[side] = root / side
    return roots


def run_once(model: Path, budget: str, library: Path, out: Path) -> dict[str, float]:
    done = subprocess.run(
        ["orchestrate", "--budget", budget, "--library", str(library), "--out", str(out), model],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"run failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads((out / "report.json").read_text())["summary"]
    return {"trials": summary["trials"], "wall_s": summary["wall_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    parser.add_argument("--model", default="smallcnn")
    parser.add_argument("--budget", default="1min")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--label", default="vm-2core")
    args = parser.parse_args()

    from tune_orchestrator.config import Settings

    model = ROOT / "examples" / f"{args.model}.onnx"
    keep = Settings.load(None).library.keep_per_workload
    work = Path(tempfile.mkdtemp(prefix="library-bound-ab-"))
    try:
        roots = libraries(args.runs, keep, work / "libraries")
        runs: dict[str, list[dict]] = {side: [] for side in roots}
        for pair in range(args.pairs):
            order = list(roots) if pair % 2 == 0 else list(reversed(roots))
            for side in order:
                copy = work / f"copy-{side}-{pair}"
                shutil.copytree(roots[side], copy)
                out = work / f"run-{side}-{pair}"
                result = run_once(model, args.budget, copy, out)
                result["model"] = str(out / "model.so")
                runs[side].append(result)
                print(f"pair {pair + 1} {side}: {result['trials']} trials", flush=True)
        target = json.loads((work / "run-kept-0" / "config.json").read_text())["target"]["tvm"]
        shipped = {
            f"{side}-{i}": Path(r["model"]) for side, rs in runs.items() for i, r in enumerate(rs)
        }
        timed = time_databases(model, json.dumps(target), {}, args.repeats, libraries=shipped)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {}
    for side, rs in runs.items():
        for i, r in enumerate(rs):
            r["latency_s"] = timed[f"{side}-{i}"]["median_s"]
            del r["model"]
        medians[side] = statistics.median(r["latency_s"] for r in rs)
        shown = ", ".join(f"{r['latency_s'] * 1e6:.0f} us ({r['trials']})" for r in rs)
        print(f"{side:>9}: {shown}; median {medians[side] * 1e6:.0f} us")
    print(f"kept / unbounded (medians): {medians['kept'] / medians['unbounded']:.2f}")
    payload = {
        "code": head_rev(),
        "keep_per_workload": keep,
        "model": args.model,
        "budget": args.budget,
        "runs": [str(r) for r in args.runs],
        "sides": runs,
        "medians_s": medians,
    }
    write_result("library_bound_ab", args.label, payload)


if __name__ == "__main__":
    main()
