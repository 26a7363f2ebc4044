"""Is a step in a filter benchmark's curve real? Re-time some rounds' databases of one pair,
many more times than the benchmark did and in both orders, and say which task's deployed
record each round changed.

    python benchmarks/retime_rounds.py RESULT --model mlpish --sides none --rounds 7,8,9,10
                                       [--repeats 40] [--label vm-2core]
    python benchmarks/retime_rounds.py RESULT --model mlpish --sides none,xgb --rounds last
    python benchmarks/retime_rounds.py RESULT --model mlpish --sides none,xgb --rounds all
    python benchmarks/retime_rounds.py AA-RESULT --model smallcnn --sides none,again --rounds last

RESULT is a filter_benchmark.py raw-figures file whose run directories (its `work`) are still
on this machine. A round's database is a side's records up to that round's end, compiled with
stock compile_relax. All are timed interleaved, as the benchmark does, but `--repeats` times
(the benchmark: 10), in the order given and then as many times in the reverse order: the
benchmark always times `none`'s databases before `xgb`'s, so a place in the order that runs
faster would favour one side. If a step is still there with many repeats in both orders, the
round's new "best" schedule is slower (or faster) inside the model; if not, it was the timing.
With both sides and all rounds it also says when each side first came within 2% of `none`'s
re-timed final, as the benchmark does with its own timings. Raw figures go to
benchmarks/results/retime-<model>-<sides>-<rounds>-seed<S>-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
from pathlib import Path

from _common import ROOT, prefix_database, reached, scratch, time_databases
from filter_benchmark import CONFIGS, model_file


def changed_tasks(run_dir: Path) -> dict[int, list[str]]:
    """Per round of the run directory's journal, the tasks whose best record it improved
    ("task i: old -> new", in microseconds)."""
    from tune_orchestrator.rundir import RunDir

    best: dict[int, float] = {}
    changes: dict[int, list[str]] = {}
    for event in RunDir(run_dir).journal():
        if event.get("type") != "round" or event.get("best_s") is None:
            continue
        task, new = event["task"], event["best_s"]
        old = best.get(task)
        if old is None or new < old:
            was = "untuned" if old is None else f"{old * 1e6:.1f}"
            changes.setdefault(event["round"], []).append(f"task {task}: {was} -> {new * 1e6:.1f}")
            best[task] = new
    return changes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", type=Path, help="a filter_benchmark.py raw-figures file")
    parser.add_argument("--model", required=True)
    parser.add_argument("--sides", required=True, help="none, xgb or both (none,xgb)")
    parser.add_argument(
        "--rounds", required=True, help="comma-separated rounds from 1, last or all"
    )
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    args = parser.parse_args()

    saved = json.loads(args.result.read_text())
    if "work" not in saved or args.model not in saved["figures"]:
        parser.error(f"{args.result} names no run directories for {args.model}")
    work = ROOT / saved["work"]
    sides = args.sides.split(",")
    known = saved.get("sides", CONFIGS)  # an A/A run's (--control): none and again
    if bad := [side for side in sides if side not in known]:
        parser.error(f"unknown sides {bad}: {', '.join(known)}")
    if gone := [side for side in sides if not (work / args.model / side).is_dir()]:
        parser.error(f"{work / args.model} has no {gone}: re-timing needs the pair's run dirs")
    model_path = model_file(args.model, work)
    picked: list[tuple[str, int]] = []
    for side in sides:
        count = len(saved["figures"][args.model][side]["checkpoints"])
        named = {"last": [count], "all": list(range(1, count + 1))}
        rounds = named.get(args.rounds) or [int(r) for r in args.rounds.split(",")]
        if bad := [r for r in rounds if not 1 <= r <= count]:
            parser.error(f"{side}: rounds {bad} out of 1-{count}")
        picked += [(side, r) for r in rounds]
    databases = {
        f"{side}/{r}": prefix_database(
            work / args.model / side,
            saved["figures"][args.model][side]["checkpoints"][r - 1][1],
            scratch(),
        )
        for side, r in picked
    }

    from tune_orchestrator.targets import resolve_target

    target_json = json.dumps(resolve_target("llvm").to_json())
    forward = time_databases(model_path, target_json, databases, args.repeats, samples=True)
    backward = time_databases(
        model_path, target_json, dict(reversed(databases.items())), args.repeats, samples=True
    )
    changed = {side: changed_tasks(work / args.model / side) for side in sides}
    rows = []
    for side, r in picked:
        key = f"{side}/{r}"
        changes = changed[side].get(r, [])
        both = forward[key]["samples_s"] + backward[key]["samples_s"]
        q1, median, q3 = statistics.quantiles(both, n=4)
        benchmark = saved["rows"][args.model][side]["curve"][r - 1][1]
        rows.append(
            {
                "side": side,
                "round": r,
                "benchmark_median_s": benchmark,
                "median_s": median,
                "quartiles_s": [q1, q3],
                "forward_median_s": forward[key]["median_s"],
                "backward_median_s": backward[key]["median_s"],
                "changed": changes,
            }
        )
        print(
            f"{side:4} round {r:2d}: {median * 1e6:7.1f} us (quartiles {q1 * 1e6:.1f}-"
            f"{q3 * 1e6:.1f}; in order {forward[key]['median_s'] * 1e6:.1f}, reversed "
            f"{backward[key]['median_s'] * 1e6:.1f}; the benchmark's {benchmark * 1e6:.1f})  "
            f"{'; '.join(changes) or '-'}"
        )
    which = (
        args.rounds if args.rounds in ("last", "all") else "rounds" + args.rounds.replace(",", "-")
    )
    reach = None
    if args.rounds == "all" and set(sides) == set(known):
        curves = {
            side: [
                (saved["rows"][args.model][side]["curve"][row["round"] - 1][0], row["median_s"])
                for row in rows
                if row["side"] == side
            ]
            for side in sides
        }
        goal = curves["none"][-1][1]
        reach = {side: reached(curves[side], goal) for side in sides}
        print(
            f"within 2% of none's final ({goal * 1e6:.1f} us): "
            + ", ".join(
                f"{side} {'never' if at is None else f'at {at:.0f} s'}"
                for side, at in reach.items()
            )
        )
    out = ROOT / "benchmarks" / "results" / (
        f"retime-{args.model}-{'-'.join(sides)}-{which}-seed{saved['seed']}-{args.label}-"
        f"{dt.date.today().isoformat()}.json"
    )  # fmt: skip
    out.write_text(
        json.dumps(
            {
                "source": str(args.result),
                "model": args.model,
                "sides": sides,
                "repeats": args.repeats,
                "machine": platform.processor() or platform.machine(),
                "rows": rows,
                "reached_none_final_s": reach,
            },
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
