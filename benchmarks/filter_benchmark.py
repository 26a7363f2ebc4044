"""Does the Trimmer filter pay? `--filter none` against `--filter xgb` on the bundled model, a
larger CNN, an MLP and (given caps) a MobileNet-like CNN, a small VGG, a ResNet-18 layout and a
two-layer transformer encoder, in one run of this script.

    python benchmarks/filter_benchmark.py [--trials 320,384,512] [--only smallcnn,mlpish]
                                          [--seed 0] [--repeats 40] [--shared-rounds 2]
                                          [--control] [--label vm-2core]

Same target, trial cap and seed for both configurations of a model; each tunes in a fresh
process, one after the other: `none` first on even seeds, `xgb` first on odd ones, so that
whatever drifts on the machine during a run does not always fall on the same side. The first
`--shared-rounds` rounds are tuned once and both configurations resume that run directory: the
filter cannot act before it has judged rounds of its own, and two searches of one seed are not
the same search (TVM samples on several threads), so separate first rounds would compare the
search's luck in them, which anchors a task's later rounds, rather than the filter. The shared
rounds are tuned with `--filter xgb`, which measures what `none` would (all of a round while it
has no evidence) and leaves its calibration the evidence of the second round. 0: two
independent runs.

Afterwards the database each had at every round is compiled with stock compile_relax and all
of a model's are timed interleaved (the shared rounds' once). For each configuration it prints
the final end-to-end latency, the wall time (from the start of the first tuning call) at which
it first came within 2% of `none`'s final latency, the filter's audited recall of each round's
top 10%, and the filter's own time as a share of the wall time (the shared rounds' calls
included). Raw figures go to benchmarks/results/filter-<models>-<label>-<date>.json.

`--control` is an A/A run: the second side, `again`, is `--filter none` too. What its two sides
differ by is the benchmark's own noise (the search's luck after the shared rounds, the
machine's drift), and over several seeds, whether the side tuned first has an edge.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
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
CONTROL = ("none", "again")  # --control: the second side is `none` again
FILTER = {"none": "none", "xgb": "xgb", "again": "none"}  # each side's --filter
# --trials: caps in this order
MODELS = ("smallcnn", "resnetish", "mlpish", "mobilenetish", "smallvgg", "resnet18ish", "tinybert")
SHARED = "shared"  # the run directory of the rounds both configurations start from


def checkpoint_keys(figures: dict[str, Any], config: str) -> list[str]:
    """A name for the database after each of a configuration's rounds: the shared rounds'
    are the same databases for both configurations."""
    shared = len(figures.get(SHARED, {}).get("checkpoints", []))
    rounds = len(figures[config]["checkpoints"])
    return [f"{SHARED}/{k}" if k < shared else f"{config}/{k}" for k in range(rounds)]


def model_file(name: str, base: Path) -> Path:
    """Where a run of this script keeps a model's ONNX file: the bundled one for smallcnn,
    the others made under the run's folder `base` (once)."""
    from models import write

    return ROOT / "examples" / "smallcnn.onnx" if name == "smallcnn" else write(name, base)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials",
        default="320,384,512",
        help="trial caps, in this order: smallcnn,resnetish,mlpish,mobilenetish,smallvgg,"
        "resnet18ish,tinybert",
    )
    parser.add_argument("--seed", type=int, default=0)
    # 10 was too few: on mlpish (~140 us) medians of 10 moved by 3-11% from round to round and
    # put xgb's final 0.895x none's where 80 timings put it at 0.999x (retime_rounds.py).
    parser.add_argument("--repeats", type=int, default=40, help="latency samples per database")
    parser.add_argument(
        "--shared-rounds", type=int, default=2, help="rounds both configurations start from"
    )
    parser.add_argument(
        "--only",
        help="comma-separated models to run (smallcnn, resnetish, mlpish, mobilenetish, smallvgg, "
        "resnet18ish, tinybert)",
    )
    parser.add_argument(
        "--control", action="store_true", help="A/A: the second side is --filter none too"
    )
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    parser.add_argument("--side", choices=sorted(set(FILTER.values())), help=argparse.SUPPRESS)
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

    # The models given a cap (in MODELS' order), or those of them --only names.
    caps = dict(zip(MODELS, (int(t) for t in args.trials.split(",")), strict=False))
    only = args.only.split(",") if args.only else list(caps)
    if missing := [m for m in only if m not in caps]:
        parser.error(f"--trials gives no cap for {', '.join(missing)}: one per model, in order")
    chosen = [m for m in caps if m in only]

    from tune_orchestrator.config import Settings
    from tune_orchestrator.targets import resolve_target

    resolved = resolve_target("llvm")
    target_json = json.dumps(resolved.to_json())
    base = ROOT / "benchmarks" / "work" / f"filter-{time.strftime('%Y%m%d-%H%M%S')}"
    base.mkdir(parents=True)
    models = {m: model_file(m, base) for m in chosen}
    figures: dict[str, dict[str, Any]] = {m: {} for m in models}

    def tune(model: str, config: str, trials: int, work: Path) -> dict[str, Any]:
        return run_child(
            Path(__file__),
            ["--side", FILTER[config], "--model", str(models[model]), "--trials", str(trials),
             "--seed", str(args.seed), "--target-json", target_json, "--work", str(work)],
        )  # fmt: skip

    shared_trials = args.shared_rounds * Settings.load().tune.trials_per_round
    sides = CONTROL if args.control else CONFIGS
    order = sides if args.seed % 2 == 0 else sides[::-1]
    for model in models:
        if shared_trials:
            print(f"{model}: tuning the {args.shared_rounds} shared rounds ...", flush=True)
            figures[model][SHARED] = tune(model, "xgb", shared_trials, base / model / SHARED)
        for config in order:
            print(f"{model}: tuning {config} (--filter {FILTER[config]}) ...", flush=True)
            if shared_trials:
                shutil.copytree(base / model / SHARED, base / model / config)
            figures[model][config] = tune(model, config, caps[model], base / model / config)

    rows = {}
    for model in models:
        print(f"{model}: compiling and timing every round's database ...", flush=True)
        databases = {
            key: prefix_database(base / model / key.split("/")[0], records, scratch())
            for config in sides
            for key, (_, records) in zip(
                checkpoint_keys(figures[model], config),
                figures[model][config]["checkpoints"],
                strict=True,
            )
        }
        latency = time_databases(models[model], target_json, databases, args.repeats)
        rows[model] = summarize(figures[model], latency, sides)
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
                "shared_rounds": args.shared_rounds,
                "sides": list(sides),
                "order": list(order),
                "tolerance": QUALITY_TOLERANCE,
                "work": str(base.relative_to(ROOT)),  # the run directories, for filter_seeds.py
                "rows": rows,
                "figures": figures,
            },
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}; run directories: {base.relative_to(ROOT)}")


def summarize(
    figures: dict[str, Any], latency: dict[str, dict[str, float]], sides: tuple[str, ...] = CONFIGS
) -> dict[str, Any]:
    """Per side (configuration): its curve (wall s, end-to-end latency s), when it reached
    none's final latency, its filter's recall and own time."""
    curves = {
        config: [
            (s, latency[key]["median_s"])
            for key, (s, _) in zip(
                checkpoint_keys(figures, config), figures[config]["checkpoints"], strict=True
            )
        ]
        for config in sides
    }
    # The shared rounds' calls are part of each configuration's wall time.
    shared_s = figures.get(SHARED, {}).get("total_s", 0.0)
    rows = {}
    for config in sides:
        f = figures[config]
        stats = f.get("filter", {})
        total = stats.get("total", {})
        wall = shared_s + f["total_s"]
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
