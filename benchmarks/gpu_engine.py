"""DOPpler on a GPU: the same built candidates timed by MetaSchedule's LocalRunner (serial) and
by our CUDA engine at auto DOP; then a whole tuning run against vanilla `tune_relax`.

    python benchmarks/gpu_engine.py [--model resnetish|smallcnn] [--candidates 256]
                                    [--whole-run-trials 512] [--gpus 0]

Part 1 proposes candidates for the model's heaviest tasks (MetaSchedule's own search, CUDA
target), builds them once, and times the same artifacts three ways:
  - `LocalRunner` (stock, serial, TVM's time_evaluator), the baseline for candidates/s;
  - our engine at DOP 1 (isolated, CUDA events), the reference for fidelity;
  - our engine at auto DOP, as tuning uses it (its isolation checks included in its time).
Printed: candidates/s of each and the ratio; Kendall tau and median relative error of auto DOP
against isolated measurement (all candidates, and only those whose timing stayed parallel).
Part 2 runs benchmarks/vs_vanilla.py with the CUDA target (`--whole-run-trials 0` skips it).
`--build-only` stops after part 1's builds (the part that runs without a GPU; nothing saved).
Raw figures go to benchmarks/results/gpu_engine-<device>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
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

    from orchestrator.config import Settings
    from orchestrator.loop import TaskSearch
    from orchestrator.model import fuse_for_tuning, import_to_relax, load_model
    from orchestrator.tasks import arg_specs, extract_tasks

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
            threads=1,
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


def local_runner(inputs: list[Any], timer: Any) -> tuple[list[float], float]:
    """Stock MetaSchedule LocalRunner on the same artifacts: mean seconds (inf: failed)."""
    from tvm.s_tir import meta_schedule as ms

    from measure.rpc import evaluator_config, runner_inputs

    runner = ms.runner.LocalRunner(timeout_sec=30, evaluator_config=evaluator_config(timer))
    start = time.perf_counter()
    results = [future.result() for future in runner.run(runner_inputs(inputs, "cuda"))]
    seconds = time.perf_counter() - start
    means = [
        math.inf if r.error_msg else statistics.fmean(float(s) for s in r.run_secs) for r in results
    ]
    return means, seconds


def engine_run(engine: Any, inputs: list[Any]) -> tuple[list[Any], float]:
    start = time.perf_counter()
    measured = engine.measure(inputs)
    return measured, time.perf_counter() - start


def means(measured: list[Any]) -> list[float]:
    return [m.mean_s if m.ok else math.inf for m in measured]


def part_one(args: argparse.Namespace, model_path: Path) -> dict[str, Any]:
    import dataclasses

    from measure import BuildInput, MeasureInput
    from orchestrator.config import Settings
    from orchestrator.measuring import Fleet, make_builder, make_engine, timer_config
    from orchestrator.targets import resolve_target

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
        inputs = [
            MeasureInput(b.artifact, specs)
            for b, (_, _, specs) in zip(builds, proposed, strict=True)
            if b.ok
        ]
        print(f"built {len(inputs)} of {len(builds)} in {build_s:.1f} s", flush=True)
        figures: dict[str, Any] = {
            "device": resolved.device_name,
            "target": resolved.describe(),
            "candidates": len(inputs),
            "build_failures": len(builds) - len(inputs),
            "build_s": build_s,
        }
        if args.build_only:
            return figures

        gpus = tuple(int(g) for g in args.gpus.split(","))
        timer = timer_config(settings)
        print("LocalRunner (serial) ...", flush=True)
        stock, stock_s = local_runner(inputs, timer)
        print(f"  {stock_s:.1f} s", flush=True)

        print("our engine at DOP 1 (isolated reference) ...", flush=True)
        engine = make_engine(settings, resolved, None, Fleet(gpus=gpus[:1], parallelism=1))
        try:
            isolated, isolated_s = engine_run(engine, inputs)
        finally:
            engine.close()
        print(f"  {isolated_s:.1f} s", flush=True)

        print("our engine at auto DOP ...", flush=True)
        engine = make_engine(settings, resolved, None, Fleet(gpus=gpus, parallelism=None))
        try:
            parallel, parallel_s = engine_run(engine, inputs)
            stats = engine.stats()
        finally:
            engine.close()
        print(f"  {parallel_s:.1f} s, DOP ended at {stats['dop']}", flush=True)
    finally:
        builder.close()

    ref = means(isolated)
    still_parallel = [i for i, m in enumerate(parallel) if m.ok and m.dop > 1]
    figures.update(
        {
            "gpus": list(gpus),
            "timer": dataclasses.asdict(timer),
            "seconds": {"local_runner": stock_s, "dop1": isolated_s, "auto": parallel_s},
            "candidates_per_s": {
                "local_runner": len(inputs) / stock_s,
                "dop1": len(inputs) / isolated_s,
                "auto": len(inputs) / parallel_s,
            },
            "speedup_vs_local_runner": stock_s / parallel_s,
            "fidelity": {
                "auto_vs_dop1": fidelity(means(parallel), ref),
                "auto_vs_dop1_parallel_only": fidelity(
                    [means(parallel)[i] for i in still_parallel], [ref[i] for i in still_parallel]
                ),
                "auto_vs_local_runner": fidelity(means(parallel), stock),
                "dop1_vs_local_runner": fidelity(ref, stock),
            },
            "failures": {
                "local_runner": sum(1 for v in stock if not math.isfinite(v)),
                "dop1": sum(1 for m in isolated if not m.ok),
                "auto": sum(1 for m in parallel if not m.ok),
            },
            "engine": stats,
        }
    )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnetish", help="resnetish, smallcnn, or a path")
    parser.add_argument("--candidates", type=int, default=256)
    parser.add_argument("--whole-run-trials", type=int, default=512)
    parser.add_argument("--target", default="cuda")
    parser.add_argument("--gpus", default="0", help="comma-separated GPU indices")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--build-only", action="store_true")
    args = parser.parse_args()

    work = ROOT / "benchmarks" / "work" / f"gpu-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True)
    if args.model in ("resnetish", "smallcnn"):
        if args.model == "smallcnn":
            model_path = ROOT / "examples" / "smallcnn.onnx"
        else:
            import onnx
            from models import resnetish

            model_path = work / "resnetish.onnx"
            onnx.save(resnetish(), model_path)
    else:
        model_path = Path(args.model).resolve()

    figures: dict[str, Any] = {"model": model_path.name, "seed": args.seed}
    figures["engine"] = one = part_one(args, model_path)
    if not args.build_only and args.whole_run_trials > 0:
        figures["whole_run"] = part_two(args, model_path)

    if "candidates_per_s" in one:
        c, f = one["candidates_per_s"], one["fidelity"]
        print(f"\n{model_path.name}, {one['candidates']} candidates, {one['device']}")
        print(
            f"  candidates/s  LocalRunner {c['local_runner']:.2f}  ours DOP 1 {c['dop1']:.2f}"
            f"  ours auto {c['auto']:.2f}  (auto / LocalRunner {one['speedup_vs_local_runner']:.2f}x)"
        )
        for name, row in f.items():
            print(
                f"  {name:<28} tau {row['kendall_tau']:.3f}  median rel. error "
                f"{row['median_rel_error'] * 100:.2f}%  ({row['pairs']} pairs)"
            )
    if "whole_run" in figures:
        w = figures["whole_run"]
        v, o = w["tuning"]["vanilla"], w["tuning"]["ours"]
        lv, lo = w["latency"]["vanilla"]["median_s"], w["latency"]["ours"]["median_s"]
        print(
            f"  whole run, {w['trials']} trials: tuning {v['tune_s']:.1f} s vs {o['tune_s']:.1f} s"
            f" ({v['tune_s'] / o['tune_s']:.2f}x); latency {lv * 1e6:.1f} vs {lo * 1e6:.1f} us"
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
