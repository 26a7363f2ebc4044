"""Trimmer against vanilla: tune_relax, orchestrate --filter none, --filter xgb, and xgb
warm-started from the other model's run (when both models run), on the bundled model and a
larger one.

    python benchmarks/filter_benchmark.py [--trials 512,768] [--seed 0] [--repeats 15]

Same target, trial cap and seed for every configuration of a model; each tunes in a fresh
process. Afterwards the database each had at every checkpoint (vanilla: every batch; ours:
every round) is compiled with stock compile_relax and all of them are timed interleaved. Time
to quality = the first checkpoint whose model is within 2% of vanilla's final latency.
Raw figures go to benchmarks/results/filter-<models>-<host>-<date>.json.
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
    ROOT,
    prefix_database,
    run_child,
    scratch,
    time_databases,
    tune_ours,
    tune_vanilla,
)


def child(args: argparse.Namespace) -> None:
    if args.side == "vanilla":
        figures = tune_vanilla(args.model, args.target_json, args.trials, args.seed, args.work)
    else:
        figures = tune_ours(
            args.model, args.target_json, args.trials, args.seed, args.work, args.extra or ()
        )
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="512,768", help="trial caps for smallcnn,resnetish")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=15, help="latency samples per database")
    parser.add_argument("--only", help="comma-separated models to run (smallcnn, resnetish)")
    parser.add_argument("--side", choices=["vanilla", "ours"], help=argparse.SUPPRESS)
    for hidden in ("--model", "--target-json", "--work"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--extra", action="append", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        args.trials = int(args.trials)
        child(args)
        return

    from models import resnetish

    from orchestrator.targets import resolve_target

    resolved = resolve_target("llvm")
    target_json = json.dumps(resolved.to_json())
    base = ROOT / "benchmarks" / "work" / f"filter-{time.strftime('%Y%m%d-%H%M%S')}"
    base.mkdir(parents=True)
    larger = base / "resnetish.onnx"
    import onnx

    onnx.save(resnetish(), larger)
    models = {"smallcnn": ROOT / "examples" / "smallcnn.onnx", "resnetish": larger}
    caps = dict(zip(models, (int(t) for t in args.trials.split(",")), strict=True))
    if args.only:
        models = {k: v for k, v in models.items() if k in args.only.split(",")}
    figures: dict[str, dict[str, Any]] = {m: {} for m in models}

    def tune(model: str, config: str, extra: list[str]) -> None:
        side = "vanilla" if config == "vanilla" else "ours"
        print(f"{model}: tuning with {config} ...", flush=True)
        cmd = [
            "--side",
            side,
            "--model",
            str(models[model]),
            "--trials",
            str(caps[model]),
            "--seed",
            str(args.seed),
            "--target-json",
            target_json,
            "--work",
            str(base / model / config),
        ]
        figures[model][config] = run_child(Path(__file__), cmd + [f"--extra={e}" for e in extra])

    for model in models:
        for config, extra in (("vanilla", []), ("none", ["filter=none"]), ("xgb", ["filter=xgb"])):
            tune(model, config, extra)
    names = list(models)
    for i, model in enumerate(names):  # warm start from the other model's filtered run
        if len(names) > 1:
            teacher = names[(i + 1) % len(names)]
            tune(model, "warm", ["filter=xgb", f"warm_start={base / teacher / 'xgb'}"])

    rows = {}
    for model in models:
        print(f"{model}: compiling and timing every checkpoint ...", flush=True)
        databases = {}
        for config in figures[model]:
            for k, (_, records) in enumerate(figures[model][config]["checkpoints"]):
                databases[f"{config}/{k}"] = prefix_database(
                    base / model / config, records, scratch()
                )
        latency = time_databases(models[model], target_json, databases, args.repeats)
        rows[model] = summarize(figures[model], latency)
    machine = f"{platform.processor() or platform.machine()}, {resolved.describe()}"
    print_table(rows, caps, args.seed, machine)
    out = (
        ROOT
        / "benchmarks"
        / "results"
        / f"filter-{'-'.join(models)}-{platform.node() or 'host'}-{dt.date.today().isoformat()}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"machine": machine, "seed": args.seed, "caps": caps, "rows": rows, "figures": figures},
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}; run directories: {base.relative_to(ROOT)}")


def summarize(figures: dict[str, Any], latency: dict[str, dict[str, float]]) -> dict[str, Any]:
    curves = {
        config: [
            (s, latency[f"{config}/{k}"]["median_s"])
            for k, (s, _) in enumerate(figures[config]["checkpoints"])
        ]
        for config in figures
    }
    goal = curves["vanilla"][-1][1] * 1.02
    rows = {}
    for config in figures:
        reached = next((s for s, lat in curves[config] if lat <= goal), None)
        f = figures[config]
        total = f.get("filter", {}).get("total", {})
        rows[config] = {
            "time_to_quality_s": reached,
            "final_latency_s": curves[config][-1][1],
            "tune_s": f["tune_s"],
            "measured": f.get("trials", f["checkpoints"][-1][1]),
            "built": f.get("built"),
            "recall": total.get("recall"),
            "audited": total.get("audited"),
            "false_negatives": total.get("false_negatives"),
            "curve": curves[config],
        }
    return rows


def print_table(rows: dict[str, Any], caps: dict[str, int], seed: int, machine: str) -> None:
    print(f"\n{machine}, seed {seed}")
    for model, by_config in rows.items():
        vanilla = by_config["vanilla"]
        print(
            f"\n{model}, {caps[model]} trials; quality goal: within 2% of vanilla's final "
            f"{vanilla['final_latency_s'] * 1e3:.3f} ms"
        )
        print(
            f"  {'':<9}{'time to goal':>14}{'vs vanilla':>12}{'final':>11}{'vs vanilla':>12}"
            f"{'built':>7}{'measured':>10}{'recall':>8}"
        )
        for config, r in by_config.items():
            ttq = r["time_to_quality_s"]
            goal = f"{ttq:.0f} s" if ttq else "never"
            speed = (
                f"{vanilla['time_to_quality_s'] / ttq:.2f}x"
                if ttq and vanilla["time_to_quality_s"]
                else "n/a"
            )
            final = f"{r['final_latency_s'] * 1e3:.3f} ms"
            ratio = f"{r['final_latency_s'] / vanilla['final_latency_s']:.3f}"
            built = "-" if r["built"] is None else str(r["built"])
            recall = "-" if r["recall"] is None else f"{r['recall']:.0%}"
            print(
                f"  {config:<9}{goal:>14}{speed:>12}{final:>11}{ratio:>12}{built:>7}{r['measured']:>10}{recall:>8}"
            )


if __name__ == "__main__":
    main()
