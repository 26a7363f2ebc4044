"""What one slow build costs a round, with a fixed build timeout and with the adaptive one.

    python benchmarks/build_stragglers.py [--model examples/smallcnn.onnx] [--tasks 2]
                                          [--seeds 1,2,3,4] [--round 64] [--label vm-2core]

A round waits for its slowest build. The rounds here are what a run's first rounds of a task
are: the candidates MetaSchedule's search proposes before its cost model has learned anything
(random scores), `--round` per task and seed, for the model's heaviest tasks. Each round is
built twice, one pool after the other, each pool with as many workers as the host has cores:
with the fixed timeout (`[build] timeout_s`, 30 s) and with the adaptive one (`[build]
adaptive_timeout`, 20x the median of the run's builds so far, at least 5 s; its pool first
times one round of its own so that it has a median). Then every candidate the fixed pool built
is timed (one at a time, as tuning does), so the candidates the adaptive timeout cut can be
placed in their round's ranking. Prints per round the wall time of both builds, the builds
cut, and where the cut ones ranked; raw figures go to
benchmarks/results/build_stragglers-<model>-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from _common import ROOT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "examples" / "smallcnn.onnx")
    parser.add_argument("--tasks", type=int, default=2, help="the heaviest tasks")
    parser.add_argument("--seeds", default="1,2,3,4", help="one round per task and seed")
    parser.add_argument("--round", type=int, default=64, help="candidates per round")
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    args = parser.parse_args()

    from tvm.s_tir import meta_schedule as ms

    from tune_orchestrator.config import Settings
    from tune_orchestrator.measure import BuildInput, BuildPool, LocalEngine, MeasureInput
    from tune_orchestrator.model import fuse_for_tuning, import_to_relax, load_model
    from tune_orchestrator.search import TaskSearch
    from tune_orchestrator.targets import resolve_target
    from tune_orchestrator.tasks import arg_specs, extract_tasks

    settings = Settings.load(None)
    b = settings.build
    target = resolve_target("llvm").target
    tasks = extract_tasks(fuse_for_tuning(import_to_relax(load_model(args.model)), target), target)
    tasks = sorted(tasks, key=lambda t: -t.flops * t.weight)[: args.tasks]
    rounds = []
    for task in tasks:
        for seed in (int(s) for s in args.seeds.split(",")):
            search = TaskSearch(
                task,
                target=target,
                settings=settings,
                database=ms.database.MemoryDatabase(),
                cost_model=ms.cost_model.RandomModel(seed=seed),
                rand_state=seed,
                threads=os.cpu_count() or 1,
                proposals=args.round,
            )
            rounds.append((task, seed, search.propose()))

    workers = os.cpu_count() or 1
    fixed = BuildPool(workers=workers, timeout_s=b.timeout_s)
    adaptive = BuildPool(
        workers=workers, timeout_s=b.timeout_s, adaptive_timeout=b.adaptive_timeout
    )
    engine = LocalEngine()
    first = rounds[0][2]
    adaptive.release(adaptive.build([BuildInput(mc.sch.mod, target) for mc in first]))
    rows = []
    for task, seed, candidates in rounds:
        inputs = [BuildInput(mc.sch.mod, target) for mc in candidates]
        limit = adaptive.timeout_s
        start = time.perf_counter()
        by_fixed = fixed.build(inputs)
        fixed_s = time.perf_counter() - start
        start = time.perf_counter()
        by_adaptive = adaptive.build(inputs)
        adaptive_s = time.perf_counter() - start
        adaptive.release(by_adaptive)
        timed = engine.measure(
            [
                MeasureInput(bd.artifact, arg_specs(mc.args_info))
                for bd, mc in _built(by_fixed, candidates)
            ]
        )
        latency = iter(_seconds(m) for m in timed)
        latencies = [next(latency) if bd.ok else math.inf for bd in by_fixed]
        fixed.release(by_fixed)
        order = sorted(range(len(latencies)), key=lambda i: latencies[i])
        rank = {i: r / len(order) for r, i in enumerate(order)}
        cut = [
            {
                "build_s": by_fixed[i].seconds if by_fixed[i].ok else None,
                "fixed_error": by_fixed[i].error,
                "latency_s": latencies[i] if math.isfinite(latencies[i]) else None,
                "rank": rank[i] if math.isfinite(latencies[i]) else None,
            }
            for i, bd in enumerate(by_adaptive)
            if not bd.ok and "timed out" in (bd.error or "")
        ]
        seconds = [bd.seconds for bd in by_fixed if bd.ok]
        row = {
            "task": task.name,
            "seed": seed,
            "candidates": len(inputs),
            "fixed_s": fixed_s,
            "adaptive_s": adaptive_s,
            "adaptive_timeout_s": limit,
            "fixed_failed": sum(1 for bd in by_fixed if not bd.ok),
            "build_s_median": statistics.median(seconds) if seconds else None,
            "build_s_max": max(seconds) if seconds else None,
            "best_s": min(latencies),
            "cut": cut,
        }
        rows.append(row)
        shown = ", ".join(
            f"{c['build_s']:.1f} s build, rank {c['rank']:.2f}"
            if c["build_s"] is not None and c["rank"] is not None
            else f"{c['fixed_error']}"
            for c in cut
        )
        print(
            f"{task.name[:40]:<40} seed {seed}: fixed {fixed_s:5.1f} s ({row['fixed_failed']} "
            f"failed), adaptive {adaptive_s:5.1f} s (timeout {limit:.1f} s, cut {len(cut)}"
            f"{': ' + shown if cut else ''})",
            flush=True,
        )
    fixed.close()
    adaptive.close()
    engine.close()
    total_fixed = sum(r["fixed_s"] for r in rows)
    total_adaptive = sum(r["adaptive_s"] for r in rows)
    cut = [c for r in rows for c in r["cut"]]
    print(
        f"\n{len(rows)} rounds of {args.round}: built in {total_fixed:.1f} s with the fixed "
        f"timeout, {total_adaptive:.1f} s with the adaptive one "
        f"({total_adaptive / total_fixed:.2f}x); {len(cut)} builds cut, best rank among them "
        f"{min((c['rank'] for c in cut if c['rank'] is not None), default=float('nan')):.2f}"
    )
    out = (
        ROOT
        / "benchmarks"
        / "results"
        / (f"build_stragglers-{args.model.stem}-{args.label}-{dt.date.today()}.json")
    )
    out.write_text(
        json.dumps(
            {
                "model": args.model.name,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                "label": args.label,
                "args": {k: str(v) for k, v in vars(args).items()},
                "timeout_s": b.timeout_s,
                "adaptive_timeout": b.adaptive_timeout,
                "rounds": rows,
                "fixed_s": total_fixed,
                "adaptive_s": total_adaptive,
            },
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}")


def _built(builds: list[Any], candidates: list[Any]) -> list[tuple[Any, Any]]:
    return [(bd, mc) for bd, mc in zip(builds, candidates, strict=True) if bd.ok]


def _seconds(measurement: Any) -> float:
    if measurement.error is None and measurement.run_secs:
        return statistics.median(measurement.run_secs)
    return math.inf


if __name__ == "__main__":
    main()
