"""Vanilla MetaSchedule `tune_relax` against `orchestrate`, same model, target, trial cap and seed.

    python benchmarks/vs_vanilla.py [--model examples/smallcnn.onnx] [--trials 128] [--seed 0]
                                    [--filter xgb|none] [--target llvm|cuda]

Each side tunes in a fresh process (each pays its own imports, as a user would). Then both
databases are compiled with stock `compile_relax` and the two models are timed side by side,
interleaved, in this process. Prints wall times, end-to-end latencies and their ratios, and
writes the raw figures to benchmarks/results/vs_vanilla-<model>-<trials>trials-<cpu|cuda>-<host>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import time
from pathlib import Path

from _common import ROOT, run_child, time_databases, tune_ours, tune_vanilla


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "examples" / "smallcnn.onnx")
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--filter", default="xgb", help="orchestrate's --filter")
    parser.add_argument("--target", default="llvm", help="llvm (this host's CPU) or cuda")
    parser.add_argument("--repeats", type=int, default=30, help="latency samples per side")
    parser.add_argument("--side", choices=["vanilla", "ours"], help=argparse.SUPPRESS)
    parser.add_argument("--target-json", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.side == "vanilla":  # a child process: tune one side, print its figures as JSON
        print(
            json.dumps(
                tune_vanilla(str(args.model), args.target_json, args.trials, args.seed, args.work)
            )
        )
        return
    if args.side == "ours":
        figures = tune_ours(
            str(args.model),
            args.target_json,
            args.trials,
            args.seed,
            args.work,
            [f"filter={args.filter}"],
        )
        print(json.dumps(figures))
        return

    from orchestrator.targets import resolve_target

    resolved = resolve_target(args.target)
    target_json = json.dumps(resolved.to_json())
    base = ROOT / "benchmarks" / "work" / time.strftime("%Y%m%d-%H%M%S")
    works = {"vanilla": base / "vanilla", "ours": base / "ours"}
    figures = {}
    for side in ("vanilla", "ours"):
        print(f"tuning with {side} ...", flush=True)
        figures[side] = run_child(
            Path(__file__),
            [
                "--side",
                side,
                "--model",
                str(args.model),
                "--trials",
                str(args.trials),
                "--seed",
                str(args.seed),
                "--filter",
                args.filter,
                "--target-json",
                target_json,
                "--work",
                str(works[side]),
            ],
        )
    latency = time_databases(
        args.model, target_json, works, args.repeats, device_type=resolved.device_type
    )

    v, o = figures["vanilla"], figures["ours"]
    lv, lo = latency["vanilla"]["median_s"], latency["ours"]["median_s"]
    machine = f"{platform.processor() or platform.machine()}, {resolved.describe()}"
    rows = [
        ("", "vanilla tune_relax", f"orchestrate ({args.filter})", "vanilla / ours"),
        (
            "tuning wall time",
            f"{v['tune_s']:.1f} s",
            f"{o['tune_s']:.1f} s",
            f"{v['tune_s'] / o['tune_s']:.2f}x",
        ),
        (
            "whole process",
            f"{v['process_s']:.1f} s",
            f"{o['process_s']:.1f} s",
            f"{v['process_s'] / o['process_s']:.2f}x",
        ),
        ("end-to-end latency", f"{lv * 1e3:.3f} ms", f"{lo * 1e3:.3f} ms", f"{lv / lo:.3f}"),
        ("measured", str(v["checkpoints"][-1][1]), str(o["trials"]), ""),
    ]
    print(f"\n{args.model.name}, {args.trials} trials, seed {args.seed}, {machine}")
    for row in rows:
        print(f"  {row[0]:<20}{row[1]:>20}{row[2]:>22}{row[3]:>16}")
    phases = ", ".join(
        f"{k} {s:.1f}s" for k, s in sorted(o["phases"].items(), key=lambda kv: -kv[1])
    )
    print(
        f"  (orchestrate's whole process also compiles, times and checks the untuned and tuned model;\n   its phases: {phases})"
    )
    out = (
        ROOT
        / "benchmarks"
        / "results"
        / (
            f"vs_vanilla-{args.model.stem}-{args.trials}trials-{resolved.device_type}-{platform.node() or 'host'}-{dt.date.today().isoformat()}.json"
        )
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "model": args.model.name,
                "trials": args.trials,
                "seed": args.seed,
                "filter": args.filter,
                "target": args.target,
                "machine": machine,
                "tuning": figures,
                "latency": latency,
            },
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}; run directories: {base.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
