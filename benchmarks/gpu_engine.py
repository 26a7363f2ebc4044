"""DOPpler on a GPU: the same built candidates timed by MetaSchedule's LocalRunner (serial) and
by our CUDA engine in its default mode (one timed window per GPU, preparing workers at auto
DOP); then a whole tuning run against vanilla `tune_relax`.

    python benchmarks/gpu_engine.py [--model resnetish|smallcnn] [--candidates 256]
                                    [--whole-run-trials 512] [--gpus 0] [--overlap]

Part 1 proposes candidates for the model's heaviest tasks (MetaSchedule's own search, CUDA
target), builds them once, and times the same artifacts, task by task as tuning does:
  - `LocalRunner` (stock, serial, TVM's time_evaluator), the baseline for candidates/s;
  - our engine with one worker and no racing (every candidate timed alone, 5+ repeats), the
    isolated reference for fidelity;
  - our engine as tuning uses it: exclusive timed window, auto DOP, adaptive repeats, racing;
  - with --overlap, also the opt-in overlapping mode (DOPpler's fidelity guard included).
Each side's first pass counts its start (the runner's worker, the engine's workers) and a
second pass over the same candidates times it warm. Printed: candidates/s of each and the
ratio to LocalRunner, both passes; Kendall tau (pooled and mean per task) and median relative
error against the isolated reference (all, and without the raced candidates); the GPU busy
share of the measure phase; time per candidate by step; against the targets (>= 3x
LocalRunner, tau >= 0.95, median error <= 3%, busy >= 80%).
Part 2 runs benchmarks/vs_vanilla.py with the CUDA target (`--whole-run-trials 0` skips it).
`--build-only` stops after part 1's builds (the part that runs without a GPU; nothing saved).
Raw figures go to benchmarks/results/gpu_engine-<device>-<date>.json.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import ROOT


def propose(model_path: Path, target: Any, count: int, seed: int) -> list[tuple[str, Any, Any]]:
    """(task name, scheduled module, argument specs) for `count` candidates, shared across the
    heaviest tasks in proportion to their weight x FLOPs, from MetaSchedule's search."""
    from tvm.s_tir import meta_schedule as ms

    from tune_orchestrator.config import Settings
    from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
    from tune_orchestrator.model.loading import load_model
    from tune_orchestrator.model.tasks import arg_specs, extract_tasks
    from tune_orchestrator.search import TaskSearch

    fused = fuse_for_tuning(import_to_relax(load_model(model_path)), target)
    tasks = extract_tasks(fused, target)[:4]
    total = sum(t.weight * t.flops for t in tasks)
    # Diverse valid candidates are all this needs: a small population, one genetic pass.
    settings = Settings.load(None, {"search.population": 256, "search.genetic_num_iters": 1})
    out = []
    for i, task in enumerate(tasks):
        want = max(8, round(count * task.weight * task.flops / total))
        search = TaskSearch(
            task,
            target=target,
            settings=settings,
            database=ms.database.MemoryDatabase(),
            cost_model=ms.cost_model.RandomModel(),
            rand_state=seed + i,
            threads=os.cpu_count() or 1,
            proposals=want,
        )
        for candidate in search.propose() or []:
            out.append((task.name, candidate.sch.mod, arg_specs(candidate.args_info)))
    return out[:count]


def kendall_tau(a: list[float], b: list[float]) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(a, b).statistic)


def fidelity(test: list[float], reference: list[float]) -> dict[str, float]:
    pairs = [
        (t, r)
        for t, r in zip(test, reference, strict=True)
        if math.isfinite(t) and math.isfinite(r) and r > 0
    ]
    if len(pairs) < 2:
        return {"pairs": len(pairs), "kendall_tau": math.nan, "median_rel_error": math.nan}
    return {
        "pairs": len(pairs),
        "kendall_tau": kendall_tau([t for t, _ in pairs], [r for _, r in pairs]),
        "median_rel_error": statistics.median(abs(t - r) / r for t, r in pairs),
    }


def local_runner(inputs: list[Any], timer: Any) -> tuple[list[float], float, float]:
    """Stock MetaSchedule LocalRunner on the same artifacts: mean seconds (inf: failed), the
    seconds of a first pass with its start (making the runner starts its worker and waits for
    it), and of a second pass over the same artifacts with its worker warm."""
    from tvm.s_tir import meta_schedule as ms

    from tune_orchestrator.measure.rpc import evaluator_config, runner_inputs

    start = time.perf_counter()
    runner = ms.runner.LocalRunner(timeout_sec=30, evaluator_config=evaluator_config(timer))
    results = [future.result() for future in runner.run(runner_inputs(inputs, "cuda"))]
    cold_s = time.perf_counter() - start
    start = time.perf_counter()
    for future in runner.run(runner_inputs(inputs, "cuda")):
        future.result()
    warm_s = time.perf_counter() - start
    means = [
        math.inf if r.error_msg else statistics.fmean(float(s) for s in r.run_secs) for r in results
    ]
    return means, cold_s, warm_s


def engine_run(engine: Any, inputs: list[Any], tasks: list[str]) -> tuple[list[Any], float]:
    """Task by task, as tuning measures (racing compares within a task); all Measurements in
    the order of `inputs`, and the seconds measuring took."""
    measured: list[Any] = [None] * len(inputs)
    start = time.perf_counter()
    for task in dict.fromkeys(tasks):
        index = [i for i, t in enumerate(tasks) if t == task]
        for i, m in zip(index, engine.measure([inputs[i] for i in index]), strict=True):
            measured[i] = m
    return measured, time.perf_counter() - start


def means(measured: list[Any]) -> list[float]:
    return [m.mean_s if m.ok else math.inf for m in measured]


def per_task_tau(test: list[float], reference: list[float], tasks: list[str]) -> float:
    taus = []
    for task in dict.fromkeys(tasks):
        index = [i for i, t in enumerate(tasks) if t == task]
        row = fidelity([test[i] for i in index], [reference[i] for i in index])
        if row["pairs"] >= 3 and math.isfinite(row["kendall_tau"]):
            taus.append(row["kendall_tau"])
    return statistics.fmean(taus) if taus else math.nan


def timed_with(
    label: str, overrides: dict[str, Any], fleet: Any, resolved: Any, inputs: list, tasks: list
) -> tuple[list[Any], float, float, dict[str, Any]]:
    """Our engine on the candidates: its measurements and stats from a first pass, the seconds
    of that pass with the engine's start (as LocalRunner's first pass has its own), and of a
    second pass over the same candidates with its workers started."""
    from tune_orchestrator.config import Settings
    from tune_orchestrator.run.measuring import make_engine

    print(f"{label} ...", flush=True)
    start = time.perf_counter()
    engine = make_engine(Settings.load(overrides=overrides), resolved, None, fleet)
    try:
        measured, _ = engine_run(engine, inputs, tasks)
        cold_s = time.perf_counter() - start
        stats = engine.stats()
        _, warm_s = engine_run(engine, inputs, tasks)
    finally:
        engine.close()
    print(f"  {cold_s:.1f} s, again {warm_s:.1f} s, DOP ended at {stats.get('dop')}", flush=True)
    return measured, cold_s, warm_s, stats


def part_one(args: argparse.Namespace, model_path: Path) -> dict[str, Any]:
    import dataclasses

    from tune_orchestrator.config import Settings
    from tune_orchestrator.measure import BuildInput, MeasureInput
    from tune_orchestrator.model.targets import resolve_target
    from tune_orchestrator.run.measuring import Fleet, make_builder, timer_config

    resolved = resolve_target(args.target, build_only=args.build_only)
    print(f"target: {resolved.describe()}", flush=True)
    settings = Settings.load()
    start = time.perf_counter()
    proposed = propose(model_path, resolved.target, args.candidates, args.seed)
    print(f"proposed {len(proposed)} candidates in {time.perf_counter() - start:.1f} s", flush=True)
    builder = make_builder(settings, None)
    try:
        start = time.perf_counter()
        builds = builder.build([BuildInput(mod, resolved.target) for _, mod, _ in proposed])
        build_s = time.perf_counter() - start
        kept = [(b, p) for b, p in zip(builds, proposed, strict=True) if b.ok]
        inputs = [MeasureInput(b.artifact, specs) for b, (_, _, specs) in kept]
        tasks = [task for _, (task, _, _) in kept]
        print(f"built {len(inputs)} of {len(builds)} in {build_s:.1f} s", flush=True)
        figures: dict[str, Any] = {
            "device": resolved.device_name,
            "target": resolved.describe(),
            "candidates": len(inputs),
            "tasks": dict(collections.Counter(tasks)),
            "build_failures": len(builds) - len(inputs),
            "build_s": build_s,
        }
        if args.build_only:
            return figures

        gpus = tuple(int(g) for g in args.gpus.split(","))
        timer = timer_config(settings)
        print("LocalRunner (serial) ...", flush=True)
        stock, stock_s, stock_warm_s = local_runner(inputs, timer)
        print(f"  {stock_s:.1f} s, again {stock_warm_s:.1f} s", flush=True)
        reference_settings = {"measure.race": False, "measure.min_repeats": 5}
        isolated, isolated_s, _, isolated_stats = timed_with(
            "our engine, one worker, no racing (isolated reference)",
            reference_settings,
            Fleet(gpus=gpus[:1], parallelism=1),
            resolved,
            inputs,
            tasks,
        )
        runs = {
            "auto": timed_with(
                "our engine as tuning uses it (exclusive window, auto DOP, racing)",
                {},
                Fleet(gpus=gpus),
                resolved,
                inputs,
                tasks,
            )
        }
        if args.overlap:
            runs["overlap"] = timed_with(
                "our engine with overlapping timings (opt-in)",
                {"dop.overlap_timing": True},
                Fleet(gpus=gpus),
                resolved,
                inputs,
                tasks,
            )
    finally:
        builder.close()

    ref = means(isolated)
    figures.update(
        {
            "gpus": list(gpus),
            "timer": dataclasses.asdict(timer),
            "seconds": {"local_runner": stock_s, "isolated": isolated_s}
            | {name: r[1] for name, r in runs.items()},
            "candidates_per_s": {
                "local_runner": len(inputs) / stock_s,
                "isolated": len(inputs) / isolated_s,
            }
            | {name: len(inputs) / r[1] for name, r in runs.items()},
            "speedup_vs_local_runner": {name: stock_s / r[1] for name, r in runs.items()},
            # A second pass over the same candidates, every worker started on both sides.
            "warm_seconds": {"local_runner": stock_warm_s} | {n: r[2] for n, r in runs.items()},
            "warm_speedup_vs_local_runner": {n: stock_warm_s / r[2] for n, r in runs.items()},
            "fidelity": {"isolated_vs_local_runner": fidelity(ref, stock)},
            # Per candidate, for calibrate_simulator.py: what the timing itself costs beyond
            # the kernel (the H100 run of 2026-11-26 timed 4x what its kernels explain).
            "isolated_mean_s": ref,
            "failures": {
                "local_runner": sum(1 for v in stock if not math.isfinite(v)),
                "isolated": sum(1 for m in isolated if not m.ok),
            },
            "engines": {"isolated": isolated_stats},
        }
    )
    for name, (measured, _, _, stats) in runs.items():
        unraced = [i for i, m in enumerate(measured) if m.ok and not m.raced]
        figures["fidelity"][f"{name}_vs_isolated"] = fidelity(means(measured), ref) | {
            "kendall_tau_per_task": per_task_tau(means(measured), ref, tasks)
        }
        figures["fidelity"][f"{name}_vs_isolated_unraced"] = fidelity(
            [means(measured)[i] for i in unraced], [ref[i] for i in unraced]
        )
        figures["failures"][name] = sum(1 for m in measured if not m.ok)
        figures["engines"][name] = stats
    return figures


def part_two(args: argparse.Namespace, model_path: Path) -> dict[str, Any]:
    """benchmarks/vs_vanilla.py with the CUDA target; its raw figures file is read back."""
    started = time.time()
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "vs_vanilla.py"),
        "--model",
        str(model_path),
        "--trials",
        str(args.whole_run_trials),
        "--seed",
        str(args.seed),
        "--target",
        args.target,
    ]
    subprocess.run(command, check=True, cwd=ROOT)
    results = (ROOT / "benchmarks" / "results").glob("vs_vanilla-*.json")
    written = [p for p in results if p.stat().st_mtime >= started]
    if not written:
        raise RuntimeError("vs_vanilla.py wrote no results file")
    newest = max(written, key=lambda p: p.stat().st_mtime)
    return json.loads(newest.read_text()) | {"file": newest.name}


def model_file(model: str, work_root: Path) -> Path:
    """resnetish (written to a fresh work folder), smallcnn, or a path to an ONNX file."""
    if model == "smallcnn":
        return ROOT / "examples" / "smallcnn.onnx"
    if model != "resnetish":
        return Path(model).resolve()
    import onnx
    from models import resnetish

    work = work_root / f"gpu-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True)
    onnx.save(resnetish(), work / "resnetish.onnx")
    return work / "resnetish.onnx"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnetish", help="resnetish, smallcnn, or a path")
    parser.add_argument("--candidates", type=int, default=256)
    parser.add_argument("--whole-run-trials", type=int, default=512)
    parser.add_argument("--target", default="cuda")
    parser.add_argument("--gpus", default="0", help="comma-separated GPU indices")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--overlap", action="store_true", help="also time with overlapping timings")
    args = parser.parse_args()

    model_path = model_file(args.model, ROOT / "benchmarks" / "work")

    figures: dict[str, Any] = {"model": model_path.name, "seed": args.seed}
    figures["engine"] = one = part_one(args, model_path)
    if not args.build_only and args.whole_run_trials > 0:
        figures["whole_run"] = part_two(args, model_path)

    if "candidates_per_s" in one:
        c, f = one["candidates_per_s"], one["fidelity"]
        auto = one["engines"]["auto"]
        print(f"\n{model_path.name}, {one['candidates']} candidates, {one['device']}")
        print(
            "  candidates/s  "
            + "  ".join(f"{name} {value:.2f}" for name, value in c.items())
            + f"  (auto / LocalRunner {one['speedup_vs_local_runner']['auto']:.2f}x, target >= 3x)"
        )
        print(
            "  again, every worker started: "
            + "  ".join(f"{name} {s:.1f} s" for name, s in one["warm_seconds"].items())
            + f"  (auto / LocalRunner {one['warm_speedup_vs_local_runner']['auto']:.2f}x)"
        )
        for name, row in f.items():
            per_task = row.get("kendall_tau_per_task")
            extra = f", per task {per_task:.3f}" if per_task is not None else ""
            print(
                f"  {name:<32} tau {row['kendall_tau']:.3f}{extra}  median rel. error "
                f"{row['median_rel_error'] * 100:.2f}%  ({row['pairs']} pairs)"
            )
        print(
            f"  GPU busy {auto['busy']:.0%} of the measure phase (target >= 80%); per candidate "
            + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in auto["step_s"].items())
            + f"; {auto['raced']} raced; {auto['repeats']:.1f} repeats on average"
        )
    if "whole_run" in figures:
        w = figures["whole_run"]
        v, o = w["tuning"]["vanilla"], w["tuning"]["ours"]
        lv, lo = w["latency"]["vanilla"]["median_s"], w["latency"]["ours"]["median_s"]
        print(
            f"  whole run, {w['trials']} trials: whole calls {v['whole_s']:.1f} s vs "
            f"{o['total_s']:.1f} s ({v['whole_s'] / o['total_s']:.2f}x); "
            f"latency {lv * 1e6:.1f} vs {lo * 1e6:.1f} us"
            f" (ours / vanilla {lo / lv:.3f})"
        )
    if args.build_only:
        return
    device = re.sub(r"[^A-Za-z0-9]+", "-", one.get("device") or "no-device").strip("-").lower()
    out = (
        ROOT / "benchmarks" / "results" / f"gpu_engine-{device}-{dt.date.today().isoformat()}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2, default=str))
    print(f"raw figures: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
