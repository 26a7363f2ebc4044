"""What racing saves when candidates are timed on this host's CPU, and what it changes.

    python benchmarks/cpu_racing.py RUN_DIR [--candidates 256] [--label vm-2core]

Takes the candidates a finished CPU run measured (its database, in the order it committed
them, default schedules left out), builds them again, and times each task's candidates in that
order with the local engine three times: with the run's timer (`[measure]` repeats) and racing
off, with racing on (a candidate clearly slower than the best so far after `race_after`
repeats is cut short), and with racing off again, which says how much two timings of the same
candidates differ anyway. The passes take turns task by task, in a rotating order. Prints the
seconds each pass spent measuring, how many candidates were cut short, and per task whether
each pass finds the same fastest candidate as the first and how much of its top tenth it
shares. Raw figures go to
benchmarks/results/cpu_racing-<model>-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import datetime as dt
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from _common import ROOT, args_info, committed_records, measured_secs, record_schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a finished run's directory (a CPU target)")
    parser.add_argument("--candidates", type=int, default=256, help="the first N measured")
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    args = parser.parse_args()

    import tvm

    from tune_orchestrator import _tvm
    from tune_orchestrator.config import Settings
    from tune_orchestrator.measure import BuildInput, BuildPool, LocalEngine, MeasureInput
    from tune_orchestrator.measuring import timer_config
    from tune_orchestrator.tasks import arg_specs

    _tvm.load_tensor_intrinsics()
    config = json.loads((args.run_dir / "config.json").read_text())
    settings = Settings.load(overrides=flat(config.get("settings", {})))
    target = tvm.target.Target(config["target"]["tvm"])
    by_task = replayed(args.run_dir, args.candidates)
    timer = timer_config(settings)
    off_timer = dataclasses.replace(timer, race=False)
    timers = {
        "racing off": off_timer,
        "racing on": dataclasses.replace(timer, race=True),
        "off, again": off_timer,  # how much two timings of the same candidates differ anyway
    }
    passes: dict[str, dict[str, Any]] = {name: {"seconds": 0.0, "tasks": {}} for name in timers}
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(BuildPool(workers=os.cpu_count() or 1, timeout_s=60))
        engines = {
            name: stack.enter_context(LocalEngine(timer=timer, timeout_s=30))
            for name, timer in timers.items()
        }
        warmed = False
        for turn, (task, schedules) in enumerate(sorted(by_task.items())):
            builds = pool.build([BuildInput(sch.mod, target) for sch in schedules])
            inputs = [
                MeasureInput(b.artifact, arg_specs(args_info(sch)))
                for b, sch in zip(builds, schedules, strict=True)
                if b.ok
            ]
            if not warmed:  # each engine's worker process started before anything is timed
                for engine in engines.values():
                    engine.measure(inputs[:1])
                warmed = True
            names = list(timers)
            order = names[turn % 3 :] + names[: turn % 3]
            for name in order:
                start = time.perf_counter()
                results = engines[name].measure(inputs)
                seconds = time.perf_counter() - start
                passes[name]["seconds"] += seconds
                passes[name]["tasks"][task] = {
                    "seconds": seconds,
                    "latencies": [m.mean_s for m in results],
                    "repeats": [len(m.run_secs) if m.ok else 0 for m in results],
                    "raced": sum(m.raced for m in results),
                }
            pool.release(builds)
    off, on, again = passes["racing off"], passes["racing on"], passes["off, again"]
    agreement = {
        task: {
            "racing on": agree(off["tasks"][task], on["tasks"][task]),
            "off, again": agree(off["tasks"][task], again["tasks"][task]),
        }
        for task in off["tasks"]
    }
    model = config["model"]["name"]
    print(f"\n{model}: {sum(len(s) for s in by_task.values())} candidates of {len(by_task)} tasks")
    for name, figures in passes.items():
        raced = sum(t["raced"] for t in figures["tasks"].values())
        print(f"  {name:<11} measured in {figures['seconds']:6.1f} s, {raced} cut short")
    print(f"  racing on / off: {on['seconds'] / off['seconds']:.2f}x the measuring time")
    print(f"  off again / off: {again['seconds'] / off['seconds']:.2f}x")
    for task, both in agreement.items():
        for name, a in both.items():
            print(
                f"  task {task}, racing off vs {name:<10}: same fastest {a['same_best']!s:<5}, "
                f"best {a['best_off'] * 1e6:.1f} / {a['best_on'] * 1e6:.1f} us, top tenth "
                f"shared {a['top_shared']:.0%} of {a['candidates'] // 10 or 1}"
            )
    out = (
        ROOT / "benchmarks" / "results" / f"cpu_racing-{model}-{args.label}-{dt.date.today()}.json"
    )
    out.write_text(
        json.dumps(
            {
                "run_dir": str(args.run_dir),
                "machine": f"{platform.processor() or platform.machine()}, {args.label}",
                "timer": {name: vars(t) for name, t in timers.items()},
                "passes": passes,
                "agreement": agreement,
            },
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}")


def flat(settings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """{"measure": {"repeat": 3}} -> {"measure.repeat": 3}, for the [measure] section only."""
    return {f"measure.{k}": v for k, v in settings.get("measure", {}).items()}


def replayed(run_dir: Path, limit: int) -> dict[int, list[Any]]:
    """Per task (workload index), the schedules of the first `limit` measured candidates, in
    the order the run committed them; each task's first record (its default schedule) is
    left out, and so are failed candidates."""
    seen: set[int] = set()
    by_task: dict[int, list[Any]] = collections.defaultdict(list)
    count = 0
    for index, tuned in committed_records(run_dir):
        if count >= limit:
            break
        if index not in seen:  # the default schedule's record comes first
            seen.add(index)
            continue
        if not measured_secs(tuned.run_secs):
            continue
        by_task[index].append(record_schedule(tuned))
        count += 1
    return dict(by_task)


def agree(off: dict[str, Any], on: dict[str, Any]) -> dict[str, Any]:
    """Whether both passes rank the same candidate fastest, and the share of the top tenth
    by the racing-off timings that the racing-on pass also puts in its top tenth."""
    lat_off, lat_on = off["latencies"], on["latencies"]
    n = len(lat_off)
    k = max(1, n // 10)
    top_off = set(sorted(range(n), key=lambda i: lat_off[i])[:k])
    top_on = set(sorted(range(n), key=lambda i: lat_on[i])[:k])
    best_off = min(range(n), key=lambda i: lat_off[i])
    best_on = min(range(n), key=lambda i: lat_on[i])
    return {
        "candidates": n,
        "same_best": best_off == best_on,
        "best_off": lat_off[best_off],  # the first pass's
        "best_on": lat_on[best_on],  # the other's
        "top_shared": len(top_off & top_on) / k,
    }


if __name__ == "__main__":
    main()
