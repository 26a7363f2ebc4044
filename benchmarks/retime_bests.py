"""Do two runs end apart because their searches found different kernels, or because of the
timing? Re-time each run's fastest kernels, interleaved across runs.

    python benchmarks/retime_bests.py RESULT... [--top 2] [--passes 3] [--label vm-2core]

RESULT: filter_benchmark.py raw-figures files whose run directories are still on this machine.
For each side of each pair and each task it tuned (at least `--min-records` measured records),
the `--top` fastest records by the run's own timing are built again and timed with the run's
timer ([measure] repeats, racing off), all in one measuring process, `--passes` times in
alternating order. Prints the spread between passes (what one timing of a kernel is worth on
this host now), the re-timed median against the in-run timing, per task how well the runs'
in-run bests order their re-timed ones (Pearson over runs: near 1, the runs' bests differ as
timed; near 0, their spread was the timing's), and per pair and task whether the side tuned
first holds the faster best, by the in-run timing and re-timed. Raw figures go to
benchmarks/results/retime_bests-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import platform
import statistics
from pathlib import Path
from typing import Any

from _common import ROOT, args_info, committed_records, measured_secs, record_schedule


@dataclasses.dataclass
class Kernel:
    run: str  # "seed<S>/<side>"
    task: str  # "task<k>", numbered by workload in the order first seen
    rank: int  # 0: the run's fastest record of the task
    recorded_s: float  # the run's own timing (mean of its repeats)
    schedule: Any = dataclasses.field(repr=False)
    retimed_s: list[float] = dataclasses.field(default_factory=list)


def fastest(run_dir: Path, top: int, min_records: int, names: dict[Any, str]) -> list[Kernel]:
    """A run's `top` fastest measured records of each task it tuned, as kernels to re-time."""
    from tune_orchestrator.tasks import structural_key

    by_workload: dict[Any, list[tuple[float, Any]]] = {}
    for _, record in committed_records(run_dir):
        if secs := measured_secs(record.run_secs):
            key = structural_key(record.workload.mod)
            by_workload.setdefault(key, []).append((statistics.fmean(secs), record))
    kernels = []
    for key, records in by_workload.items():
        if len(records) < min_records:  # a default schedule only: not tuned
            continue
        name = names.setdefault(key, f"task{len(names)}")
        records.sort(key=lambda r: r[0])
        for rank, (seconds, record) in enumerate(records[:top]):
            kernels.append(Kernel("", name, rank, seconds, record_schedule(record)))
    return kernels


def retime(kernels: list[Kernel], target: Any, settings: Any, passes: int) -> None:
    """Build every kernel and time them all `passes` times, alternating the order."""
    from tune_orchestrator.measure import BuildInput, BuildPool, LocalEngine, MeasureInput
    from tune_orchestrator.measuring import timer_config
    from tune_orchestrator.tasks import arg_specs

    timer = dataclasses.replace(timer_config(settings), race=False)
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(BuildPool(workers=os.cpu_count() or 1, timeout_s=120))
        engine = stack.enter_context(LocalEngine(timer=timer, timeout_s=60))
        builds = pool.build([BuildInput(k.schedule.mod, target) for k in kernels])
        if failed := [k for k, b in zip(kernels, builds, strict=True) if not b.ok]:
            raise RuntimeError(f"{len(failed)} kernels did not build again, first {failed[0]}")
        inputs = [
            MeasureInput(b.artifact, arg_specs(args_info(k.schedule)))
            for k, b in zip(kernels, builds, strict=True)
        ]
        engine.measure(inputs[:1])  # the measuring process started before anything is timed
        for turn in range(passes):
            order = list(range(len(kernels)))[:: 1 if turn % 2 == 0 else -1]
            for i, result in zip(order, engine.measure([inputs[i] for i in order]), strict=True):
                kernels[i].retimed_s.append(result.mean_s)
        pool.release(builds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="filter_benchmark.py JSON files")
    parser.add_argument("--top", type=int, default=2, help="fastest records per task and run")
    parser.add_argument("--passes", type=int, default=3, help="timings of each kernel")
    parser.add_argument("--min-records", type=int, default=20, help="a tuned task's fewest")
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    args = parser.parse_args()
    if args.passes < 2:
        parser.error("--passes must be 2 or more: the spread between passes needs two timings")

    import tvm

    from tune_orchestrator import _tvm
    from tune_orchestrator.config import Settings

    _tvm.load_tensor_intrinsics()
    names: dict[Any, str] = {}
    kernels: list[Kernel] = []
    pairs: list[tuple[str, str]] = []  # (first side's run, second side's run)
    target = None
    for path in args.results:
        data = json.loads(path.read_text())
        for model in data["rows"]:
            runs = [f"{model}/seed{data['seed']}/{side}" for side in data["order"]]
            pairs.append((runs[0], runs[1]))
            for side, run in zip(data["order"], runs, strict=True):
                run_dir = ROOT / data["work"] / model / side
                config = json.loads((run_dir / "config.json").read_text())
                target = tvm.target.Target(config["target"]["tvm"])
                for k in fastest(run_dir, args.top, args.min_records, names):
                    k.run = run
                    kernels.append(k)
    print(f"re-timing {len(kernels)} kernels of {len(pairs) * 2} runs, {args.passes} passes")
    retime(kernels, target, Settings.load(), args.passes)

    spread = [statistics.stdev(k.retimed_s) / statistics.fmean(k.retimed_s) for k in kernels]
    ratio = [statistics.median(k.retimed_s) / k.recorded_s for k in kernels]
    print(
        f"between passes: coefficient of variation median {statistics.median(spread):.1%}, "
        f"largest {max(spread):.1%}; re-timed median / in-run: median {statistics.median(ratio):.2f}x"
    )
    best = {(k.run, k.task): k for k in kernels if k.rank == 0}
    summary: dict[str, Any] = {}
    for task in sorted(set(names.values())):
        tops = [k for (_, t), k in best.items() if t == task]
        recorded = [k.recorded_s for k in tops]
        retimed = [statistics.median(k.retimed_s) for k in tops]
        pearson = statistics.correlation(recorded, retimed) if len(tops) > 2 else None
        firsts = {"in-run": 0, "re-timed": 0, "pairs": 0}
        for first, second in pairs:
            a, b = best.get((first, task)), best.get((second, task))
            if a and b:
                firsts["pairs"] += 1
                firsts["in-run"] += a.recorded_s < b.recorded_s
                firsts["re-timed"] += statistics.median(a.retimed_s) < statistics.median(
                    b.retimed_s
                )
        summary[task] = {"pearson": pearson, "first_faster": firsts}
        print(
            f"{task}: the runs' bests {min(recorded) * 1e6:.0f}-{max(recorded) * 1e6:.0f} us in-run, "
            f"{min(retimed) * 1e6:.0f}-{max(retimed) * 1e6:.0f} us re-timed (Pearson "
            f"{'-' if pearson is None else f'{pearson:.2f}'}); the side tuned first holds the "
            f"faster best in {firsts['in-run']} of {firsts['pairs']} pairs in-run, "
            f"{firsts['re-timed']} re-timed"
        )
    out = ROOT / "benchmarks" / "results" / f"retime_bests-{args.label}-{dt.date.today()}.json"
    out.write_text(
        json.dumps(
            {
                "results": [str(p) for p in args.results],
                "machine": f"{platform.processor() or platform.machine()}, {args.label}",
                "passes": args.passes,
                "summary": summary,
                "kernels": [
                    {k: v for k, v in vars(kernel).items() if k != "schedule"} for kernel in kernels
                ],
            },
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
