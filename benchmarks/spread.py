"""The same command, several times, cold: how far apart do the shipped models end?

    python benchmarks/spread.py [--models smallcnn:3min,smallcnn:5min] [--runs 3]
                                [--rev REV] [--repeats 30] [--label vm-2core]

Each MODEL:BUDGET is tuned `--runs` times in turn, each in a fresh process with its own run
directory and an empty tuning library, by this checkout or, with `--rev`, by an earlier commit
(taken from git as ab.py takes it). Then every shipped model.so is timed interleaved with the
others (stock TVM, `--repeats` timings each), and the spread is the slowest median over the
fastest. Raw figures go to benchmarks/results/spread-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import time
from pathlib import Path

from _common import ROOT, head_rev, time_databases
from ab import RunFailed, model_file, run, unpack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smallcnn:3min")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rev", help="an earlier commit to run instead of this checkout")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--label", default=platform.node() or "host")
    args = parser.parse_args()

    from tune_orchestrator.model.targets import resolve_target

    path, module = unpack(args.rev) if args.rev else (None, "tune_orchestrator")
    target_json = json.dumps(resolve_target("llvm").to_json())
    base = ROOT / "benchmarks" / "work" / f"spread-{time.strftime('%Y%m%d-%H%M%S')}"
    out = ROOT / "benchmarks" / "results" / f"spread-{args.label}-{dt.date.today()}.json"
    rev = args.rev or head_rev()
    results = {}
    for item in args.models.split(","):
        name, budget = item.split(":")
        model = model_file(name)
        runs = []
        try:
            for k in range(args.runs):
                print(f"{name} {budget}: run {k + 1}/{args.runs} ...", flush=True)
                runs.append(run(path, module, model, budget, base / f"{name}-{budget}-{k}"))
        except RunFailed as failed:  # a budget refused up front: the other models go on
            print(f"{name} {budget}: {failed}", flush=True)
            continue
        libraries = {f"run-{k}": Path(r["library"]) for k, r in enumerate(runs)}
        timed = time_databases(model, target_json, {}, args.repeats, libraries=libraries)
        medians = [timed[f"run-{k}"]["median_s"] for k in range(args.runs)]
        spread = max(medians) / min(medians)
        results[item] = {"runs": runs, "timed": timed, "medians_s": medians, "spread": spread}
        shown = ", ".join(
            f"{m * 1e3:.3f} ms ({r['trials']} trials)" for m, r in zip(medians, runs, strict=True)
        )
        print(f"{name} {budget}: {shown}; slowest / fastest {spread:.2f}x", flush=True)
        # after each model, so that a later one's failure keeps what was measured
        out.write_text(json.dumps({"rev": rev, "models": results}, indent=2) + "\n")
    print(f"raw figures: {out.relative_to(ROOT)}" if results else "nothing measured")


if __name__ == "__main__":
    main()
