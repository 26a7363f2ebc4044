"""What the tuning library buys: model B tuned cold and after model A filled a fresh library,
side by side in one run, against vanilla MetaSchedule on B at the same trial count.

    python benchmarks/transfer.py [--pairs resnet,vgg,bert,unrelated,same] [--trials 128]
                                  [--per-iter 16] [--seed 0] [--repeats 20] [--label vm-2core]

Pairs (benchmarks/models.py): resnet (resnetish -> resnet18ish, other depths and widths), vgg
(smallvgg -> widevgg, every width 1.5x), bert (tinybert -> smallbert, other sequence and
widths), unrelated (tinybert -> resnetish: nothing to reuse, the library must not hurt) and
same (resnetish twice: the second run against the first). For each pair, each run a fresh
process: B cold twice (seeds S and S+1, the A/A noise), A into a fresh library, B with that
library, vanilla `tune_relax` on B (`--per-iter` candidates per task and batch). Then every
final database and every checkpoint database (the records committed by each round's end) of
the B runs are compiled with stock `compile_relax` and timed in turn. Printed per pair: the
final latencies, and the time each run took (seconds since its call began) to reach cold B's
final latency and vanilla's, within 2%; the targets: after a related model, vanilla's final in
<= 1/7 of vanilla's time; never worse than cold on the unrelated pair; a second run of the same
model at the first one's final in its first round. Raw figures go to
benchmarks/results/transfer-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
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
    tune_vanilla,
)

PAIRS = {
    "resnet": ("resnetish", "resnet18ish"),
    "vgg": ("smallvgg", "widevgg"),
    "bert": ("tinybert", "smallbert"),
    "unrelated": ("tinybert", "resnetish"),
    "same": ("resnetish", "resnetish"),
}


def child(args: argparse.Namespace) -> None:
    """One tuning run in this fresh process; its figures as the last line of stdout."""
    if args.side == "vanilla":
        figures = tune_vanilla(
            args.model, args.target_json, args.trials, args.seed, args.work, per_iter=args.per_iter
        )
    else:
        figures = tune_ours(
            args.model,
            args.target_json,
            args.trials,
            args.seed,
            args.work,
            library=args.library or False,
        )
    print(json.dumps(figures))


def tune_pair(pair: str, args: argparse.Namespace, target_json: str, base: Path) -> dict:
    from models import write

    a, b = (write(name, ROOT / "benchmarks" / "work") for name in PAIRS[pair])
    library = base / pair / "library"
    plan = [
        ("cold", b, args.seed, scratch()),  # an empty library of its own: a cold run
        ("cold-again", b, args.seed + 1, scratch()),
        ("a", a, args.seed, library),
        ("warm", b, args.seed, library),
        ("vanilla", b, args.seed, None),
    ]
    runs = {}
    for name, model, seed, lib in plan:
        print(f"{pair}: {name} ({model.stem}) ...", flush=True)
        work = base / pair / name
        argv = ["--child", "--side", "vanilla" if name == "vanilla" else "ours"]
        argv += ["--model", str(model), "--trials", str(args.trials), "--seed", str(seed)]
        argv += ["--per-iter", str(args.per_iter), "--target-json", target_json]
        argv += ["--work", str(work)] + (["--library", str(lib)] if lib else [])
        runs[name] = run_child(Path(__file__), argv) | {"work": str(work), "model": model.stem}
    return runs


def checkpoints(run: dict, vanilla: bool) -> dict[str, tuple[float, Path]]:
    """name -> (seconds into the call, a database of the records committed by then), for each
    checkpoint but the last. Our databases begin with one default-schedule record per task."""
    work = Path(run["work"])
    skip = 0
    if not vanilla:
        journal = [json.loads(x) for x in (work / "journal.jsonl").read_text().splitlines()]
        skip = len({e["task"] for e in journal if e["type"] == "baseline" and e["record_key"]})
    return {
        f"@{records}": (seconds, prefix_database(work, skip + records, scratch()))
        for seconds, records in run["checkpoints"][:-1]
    }


def time_to(points: list[tuple[float, float]], goal_s: float) -> float | None:
    return reached(sorted(points), goal_s)


def measure_pair(pair: str, runs: dict, args: argparse.Namespace, target_json: str) -> dict:
    """Every final and checkpoint database of the B runs timed in turn; latencies and times."""
    model = ROOT / "benchmarks" / "work" / f"{PAIRS[pair][1]}.onnx"
    databases, points = {}, {}
    for name in ("cold", "cold-again", "warm", "vanilla"):
        databases[name] = Path(runs[name]["work"])
        marks = checkpoints(runs[name], name == "vanilla")
        databases.update({f"{name}{k}": folder for k, (_, folder) in marks.items()})
        whole = runs[name]["whole_s" if name == "vanilla" else "total_s"]
        points[name] = [(s, f"{name}{k}") for k, (s, _) in marks.items()] + [(whole, name)]
    timed = time_databases(model, target_json, databases, args.repeats, jobs=os.cpu_count() or 1)
    latency = {name: timed[name]["median_s"] for name in points}
    curves = {
        name: [(s, timed[key]["median_s"]) for s, key in marks] for name, marks in points.items()
    }
    goals = {"cold_final": latency["cold"], "vanilla_final": latency["vanilla"]}
    times = {
        goal: {name: time_to(curve, goal_s) for name, curve in curves.items()}
        for goal, goal_s in goals.items()
    }
    first = curves["warm"][0] if curves["warm"] else None
    return {
        "latency": latency,
        "curves": curves,
        "time_to": times,
        "warm_first_round": first,
        "a_final_s": runs["a"]["total_s"],
    }


def verdict(pair: str, m: dict) -> str:
    t, lat = m["time_to"], m["latency"]
    vanilla_own = t["vanilla_final"]["vanilla"]
    warm = t["vanilla_final"]["warm"]
    line = (
        f"  latency: cold {lat['cold'] * 1e3:.3f} ms (again {lat['cold-again'] * 1e3:.3f}), "
        f"warm {lat['warm'] * 1e3:.3f} ms, vanilla {lat['vanilla'] * 1e3:.3f} ms\n"
        f"  to vanilla's final: vanilla {fmt(vanilla_own)}, cold {fmt(t['vanilla_final']['cold'])}"
        f", warm {fmt(warm)}"
    )
    if vanilla_own and warm:
        line += f" (vanilla / warm {vanilla_own / warm:.1f}x, target >= 7x)"
    line += (
        f"\n  to cold's final: cold {fmt(t['cold_final']['cold'])}, warm "
        f"{fmt(t['cold_final']['warm'])}"
    )
    if pair == "same" and m["warm_first_round"]:
        seconds, first = m["warm_first_round"]
        line += (
            f"\n  second run's first round: {first * 1e3:.3f} ms after {seconds:.1f} s, "
            f"{first / lat['cold']:.3f} of the first run's final (target <= "
            f"{1 + QUALITY_TOLERANCE:.2f})"
        )
    return line


def fmt(seconds: float | None) -> str:
    return "not reached" if seconds is None else f"{seconds:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=",".join(PAIRS))
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--per-iter", type=int, default=16, help="vanilla's num_trials_per_iter")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--label", default=platform.node() or "host")
    for hidden in ("--side", "--model", "--target-json", "--work", "--library"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    from tune_orchestrator.model.targets import resolve_target

    resolved = resolve_target("llvm")
    target_json = json.dumps(resolved.to_json())
    base = ROOT / "benchmarks" / "work" / f"transfer-{time.strftime('%Y%m%d-%H%M%S')}"
    out = ROOT / "benchmarks" / "results" / f"transfer-{args.label}-{dt.date.today()}.json"
    results: dict[str, Any] = {}
    for pair in args.pairs.split(","):
        runs = tune_pair(pair, args, target_json, base)
        results[pair] = {"runs": runs, **measure_pair(pair, runs, args, target_json)}
        print(f"\n{pair}: {' -> '.join(PAIRS[pair])}, {args.trials} trials each\n"
              f"{verdict(pair, results[pair])}", flush=True)  # fmt: skip
        out.write_text(json.dumps({
            "machine": f"{platform.processor() or platform.machine()}, {resolved.describe()}",
            "trials": args.trials, "per_iter": args.per_iter, "seed": args.seed,
            "pairs": results,
        }, indent=2))  # fmt: skip
    print(f"raw figures: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
