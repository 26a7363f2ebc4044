"""Vanilla MetaSchedule `tune_relax` against `orchestrate`, same model, target, trial cap and seed.

    python benchmarks/vs_vanilla.py [--model examples/smallcnn.onnx] [--trials 128] [--seed 0]

Each side tunes in a fresh process (each pays its own imports, as a user would). Then both
databases are compiled with stock `compile_relax` and the two models are timed side by side,
interleaved, in this process. Prints wall times, end-to-end latencies and their ratios, and
writes the raw figures to benchmarks/results/vs_vanilla-<host>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tune_vanilla(model_path: str, target_json: str, trials: int, seed: int, work: str) -> dict:
    """What a user writes by hand: import, prepare, `tune_relax` with its defaults."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from orchestrator.model import fuse_for_tuning, import_to_relax, load_model

    target = tvm.target.Target(json.loads(target_json))
    fused = fuse_for_tuning(import_to_relax(load_model(model_path)), target)
    start = time.perf_counter()
    ms.relax_integration.tune_relax(
        mod=fused, params={}, target=target, work_dir=work, max_trials_global=trials, seed=seed
    )
    return {"tune_s": time.perf_counter() - start}


def tune_ours(model_path: str, target_json: str, trials: int, seed: int, work: str) -> dict:
    from orchestrator import tune

    start = time.perf_counter()
    result = tune(model_path, budget=f"{trials}trials", target=target_json, out=work, seed=seed)
    total = time.perf_counter() - start
    phases = dict(result.phases)
    tuning = sum(phases.get(p, 0.0) for p in ("search", "filter", "build", "measure", "learn"))
    return {"total_s": total, "tune_s": tuning, "phases": phases, "trials": result.trials}


def run_side(side: str, args: argparse.Namespace, target_json: str, work: Path) -> dict:
    """Run one side in a fresh Python process; returns what it printed as JSON."""
    cmd = [
        sys.executable,
        __file__,
        "--side",
        side,
        "--model",
        str(args.model),
        "--trials",
        str(args.trials),
        "--seed",
        str(args.seed),
        "--target-json",
        target_json,
        "--work",
        str(work),
    ]
    start = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_s"] = time.perf_counter() - start
    return figures


def compare_latency(
    model_path: Path, target_json: str, works: dict[str, Path], repeats: int
) -> dict:
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from orchestrator.model import import_to_relax, load_model

    model = load_model(model_path)
    target = tvm.target.Target(json.loads(target_json))
    mod = import_to_relax(model)
    inputs = [
        tvm.runtime.tensor(np.random.default_rng(0).standard_normal(i.shape).astype(i.dtype))
        for i in model.inputs
    ]
    timers, tuned_tasks = {}, {}
    for side, work in works.items():
        database = ms.database.JSONDatabase(work_dir=str(work))
        tuned_tasks[side] = len({str(r.workload.mod) for r in database.get_all_tuning_records()})
        ex = ms.relax_integration.compile_relax(database, mod, target, params=None)
        vm = relax.VirtualMachine(ex, tvm.cpu())
        timers[side] = vm.time_evaluator("main", tvm.cpu(), number=1, repeat=1, min_repeat_ms=100)
    samples: dict[str, list[float]] = {side: [] for side in works}
    for _ in range(repeats):  # interleaved, so drift on the machine hits both sides alike
        for side, timer in timers.items():
            samples[side].append(timer(*inputs).mean)
    return {
        side: {
            "median_s": statistics.median(s),
            "min_s": min(s),
            "max_s": max(s),
            "samples": s,
            "tasks_tuned": tuned_tasks[side],
        }
        for side, s in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "examples" / "smallcnn.onnx")
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=30, help="latency samples per side")
    parser.add_argument("--side", choices=["vanilla", "ours"], help=argparse.SUPPRESS)
    parser.add_argument("--target-json", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.side:  # a child process: tune one side, print its figures as JSON
        tune_fn = tune_vanilla if args.side == "vanilla" else tune_ours
        print(
            json.dumps(
                tune_fn(str(args.model), args.target_json, args.trials, args.seed, args.work)
            )
        )
        return

    from orchestrator.targets import resolve_target

    resolved = resolve_target("llvm")
    target_json = json.dumps(resolved.to_json())
    base = ROOT / "benchmarks" / "work" / time.strftime("%Y%m%d-%H%M%S")
    works = {"vanilla": base / "vanilla", "ours": base / "ours"}
    figures = {}
    for side in ("vanilla", "ours"):
        print(f"tuning with {side} ...", flush=True)
        figures[side] = run_side(side, args, target_json, works[side])
    latency = compare_latency(args.model, target_json, works, args.repeats)

    v, o = figures["vanilla"], figures["ours"]
    lv, lo = latency["vanilla"]["median_s"], latency["ours"]["median_s"]
    machine = f"{platform.processor() or platform.machine()}, {resolved.describe()}"
    rows = [
        ("", "vanilla tune_relax", "orchestrate", "vanilla / ours"),
        (
            "tuning wall time",
            f"{v['tune_s']:.1f} s",
            f"{o['tune_s']:.1f} s",
            f"{v['tune_s'] / o['tune_s']:.2f}x",
        ),
        (
            "whole process",
            f"{v['process_s']:.1f} s",
            f"{o['process_s']:.1f} s",
            f"{v['process_s'] / o['process_s']:.2f}x",
        ),
        ("end-to-end latency", f"{lv * 1e3:.3f} ms", f"{lo * 1e3:.3f} ms", f"{lv / lo:.3f}"),
        (
            "tasks with records",
            str(latency["vanilla"]["tasks_tuned"]),
            str(latency["ours"]["tasks_tuned"]),
            "",
        ),
    ]
    print(f"\n{args.model.name}, {args.trials} trials, seed {args.seed}, {machine}")
    for row in rows:
        print(f"  {row[0]:<20}{row[1]:>20}{row[2]:>16}{row[3]:>16}")
    print(
        "  (orchestrate's whole process also compiles, times and checks the untuned and tuned model;\n"
        f"   its phases: {', '.join(f'{k} {s:.1f}s' for k, s in sorted(o['phases'].items(), key=lambda kv: -kv[1]))})"
    )
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    out = (
        results
        / f"vs_vanilla-{args.model.stem}-{args.trials}trials-{platform.node() or 'host'}-{dt.date.today().isoformat()}.json"
    )
    out.write_text(
        json.dumps(
            {
                "model": args.model.name,
                "trials": args.trials,
                "seed": args.seed,
                "machine": machine,
                "tuning": figures,
                "latency": latency,
            },
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}; run directories: {base.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
