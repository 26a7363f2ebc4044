"""Does the Trimmer filter pay? `--filter none` against `--filter xgb` on the bundled model and
a larger one, in one run of this script.

    python benchmarks/filter_benchmark.py [--trials 320,384] [--seed 0] [--repeats 10]
                                          [--label vm-2core]

Same target, trial cap and seed for both configurations of a model; each tunes in a fresh
process, one after the other. Afterwards the database each had at every round is compiled with
stock compile_relax and all of a model's are timed interleaved. For each configuration it
prints the final end-to-end latency, the wall time (from the start of its tuning call) at
which it first came within 2% of `none`'s final latency, the filter's audited recall of each
round's top 10%, and the filter's own time as a share of the wall time. Raw figures go to
benchmarks/results/filter-<models>-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import time
from pathlib import Path
from typing import Any

from _common import (
    QUALITY_TOLERANCE,
    ROOT,
    prefix_database,
    reached,
    run_child,
    scratch,
    time_databases,
    tune_ours,
)

CONFIGS = ("none", "xgb")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="320,384", help="trial caps for smallcnn,resnetish")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=10, help="latency samples per database")
    parser.add_argument("--only", help="comma-separated models to run (smallcnn, resnetish)")
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    parser.add_argument("--side", choices=CONFIGS, help=argparse.SUPPRESS)
    for hidden in ("--model", "--target-json", "--work"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # a child process: tune one configuration, print its figures as JSON
        figures = tune_ours(
            args.model, args.target_json, int(args.trials), args.seed, args.work,
            [f"filter={args.side}"],
        )  # fmt: skip
        print(json.dumps(figures))
        return

    import onnx
    from models import resnetish

    from orchestrator.targets import resolve_target

    resolved = resolve_target("llvm")
    target_json = json.dumps(resolved.to_json())
    base = ROOT / "benchmarks" / "work" / f"filter-{time.strftime('%Y%m%d-%H%M%S')}"
    base.mkdir(parents=True)
    onnx.save(resnetish(), base / "resnetish.onnx")
    models = {"smallcnn": ROOT / "examples" / "smallcnn.onnx", "resnetish": base / "resnetish.onnx"}
    caps = dict(zip(models, (int(t) for t in args.trials.split(",")), strict=True))
    if args.only:
        models = {k: v for k, v in models.items() if k in args.only.split(",")}
    figures: dict[str, dict[str, Any]] = {m: {} for m in models}
    for model in models:
        for config in CONFIGS:
            print(f"{model}: tuning with --filter {config} ...", flush=True)
            figures[model][config] = run_child(
                Path(__file__),
                ["--side", config, "--model", str(models[model]), "--trials", str(caps[model]),
                 "--seed", str(args.seed), "--target-json", target_json,
                 "--work", str(base / model / config)],
            )  # fmt: skip

    rows = {}
    for model in models:
        print(f"{model}: compiling and timing every round's database ...", flush=True)
        databases = {
            f"{config}/{k}": prefix_database(base / model / config, records, scratch())
            for config in CONFIGS
            for k, (_, records) in enumerate(figures[model][config]["checkpoints"])
        }
        latency = time_databases(models[model], target_json, databases, args.repeats)
        rows[model] = summarize(figures[model], latency)
    machine = f"{platform.processor() or platform.machine()}, {resolved.describe()}"
    print_table(rows, caps, args.seed, machine)
    out = ROOT / "benchmarks" / "results" / (
        f"filter-{'-'.join(models)}-{args.label}-{dt.date.today().isoformat()}.json"
    )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": machine,
                "seed": args.seed,
                "caps": caps,
                "repeats": args.repeats,
                "tolerance": QUALITY_TOLERANCE,
                "rows": rows,
                "figures": figures,
            },
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}; run directories: {base.relative_to(ROOT)}")


def summarize(figures: dict[str, Any], latency: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Per configuration: its curve (wall s, end-to-end latency s), when it reached none's
    final latency, its filter's recall and own time."""
    curves = {
        config: [
            (s, latency[f"{config}/{k}"]["median_s"])
            for k, (s, _) in enumerate(figures[config]["checkpoints"])
        ]
        for config in CONFIGS
    }
    rows = {}
    for config in CONFIGS:
        f = figures[config]
        stats = f.get("filter", {})
        total = stats.get("total", {})
        wall = f["total_s"]
        rows[config] = {
            "reached_none_final_s": reached(curves[config], curves["none"][-1][1]),
            "final_latency_s": curves[config][-1][1],
            "wall_s": wall,
            "measured": f["trials"],
            "rounds": len(f["checkpoints"]),
            "recall": total.get("recall"),
            "audited": total.get("audited"),
            "kept": total.get("kept"),
            "rejected": total.get("rejected"),
            "false_negatives": total.get("false_negatives"),
            "filter_s": stats.get("seconds"),
            "filter_share": stats["seconds"] / wall if "seconds" in stats else None,
            "phases": f["phases"],
            "curve": curves[config],
        }
    return rows


def print_table(rows: dict[str, Any], caps: dict[str, int], seed: int, machine: str) -> None:
    print(f"\n{machine}, seed {seed}")
    for model, by_config in rows.items():
        goal = by_config["none"]["final_latency_s"]
        print(
            f"\n{model}, {caps[model]} trials; goal: within {QUALITY_TOLERANCE:.0%} of none's "
            f"final {goal * 1e3:.3f} ms"
        )
        print(
            f"  {'':<6}{'final':>11}{'reached goal':>14}{'wall':>9}{'rounds':>8}"
            f"{'recall':>8}{'kept':>10}{'filter':>9}"
        )
        for config, r in by_config.items():
            goal_s = r["reached_none_final_s"]
            recall = "-" if r["recall"] is None else f"{r['recall']:.0%}"
            kept = "-" if r["kept"] is None else f"{r['kept']}/{r['kept'] + r['rejected']}"
            share = "-" if r["filter_share"] is None else f"{r['filter_share']:.2%}"
            print(
                f"  {config:<6}{r['final_latency_s'] * 1e3:>8.3f} ms"
                f"{'never' if goal_s is None else f'{goal_s:.0f} s':>14}{r['wall_s']:>7.0f} s"
                f"{r['rounds']:>8}{recall:>8}{kept:>10}{share:>9}"
            )


if __name__ == "__main__":
    main()
