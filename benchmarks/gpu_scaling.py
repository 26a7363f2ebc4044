"""Candidates per second against the number of GPUs: the exclusive-window engine (the default)
at auto DOP on 1, 2, 4 and 8 GPUs, its ratio to linear scaling and the GPUs' busy share.

    python benchmarks/gpu_scaling.py --simulate [--gpus 1,2,4,8] [--candidates-per-gpu 2048]
    python benchmarks/gpu_scaling.py [--gpus 1,2] [--candidates 256] [--model resnetish]

--simulate needs no GPU: the simulated GPU runs the CUDA engine's own scheduling on a virtual
clock (a few seconds of wall time), with its default candidate: prepared for ~10 ms (load,
allocate, warm up; overlapping freely), timed for ~1-2 ms. Two workloads per GPU count:
  - stream: one long list of candidates (weak scaling: candidates-per-gpu x GPUs), the steady
    state;
  - rounds: rounds of --round candidates (64), the best so far carried over for racing; each
    round fills and drains the pipeline, so more GPUs idle longer per round;
  - rounds per GPU: rounds of --round candidates per GPU, what the tuning loop measures per
    call (orchestrator/loop.py round_size).
Without --simulate it builds --candidates real candidates once (benchmarks/gpu_engine.py's
proposals) and times the same ones on 1, 2, ... of the visible GPUs (strong scaling).
Ratio to linear: candidates/s on k GPUs / (k x candidates/s on one). Raw figures go to
benchmarks/results/gpu_scaling-<simulated|device>-<machine>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import re
import sys
import time
from typing import Any

from _common import ROOT


def figures(engine: Any, wall_s: float) -> dict[str, Any]:
    s = engine.stats()
    if "busy" not in s:
        raise SystemExit(f"{s['engine']} measured, not the parallel engine: is cupy installed?")
    return {
        "candidates": s["candidates"],
        "measure_s": s["measure_s"],
        "wall_s": wall_s,
        "candidates_per_s": s["candidates_per_s"],
        "busy": s["busy"],
        "busy_per_gpu": s["busy_per_gpu"],
        "dop": s["dop"],
        "dop_path": [b["dop"] for b in s["batches"]],
        "repeats": s["repeats"],
        "raced": s["raced"],
        "step_s": s["step_s"],
    }


def simulated(gpus: int, args: argparse.Namespace, round_size: int | None) -> dict[str, Any]:
    from tune_orchestrator.measure import (
        DopConfig,
        DopController,
        MeasureInput,
        SimulatedEngine,
        SimulatedGpu,
    )

    engine = SimulatedEngine(
        SimulatedGpu(seed=args.seed),
        DopController(DopConfig(max_dop=args.max_dop), seed=args.seed),
        gpus=gpus,
    )
    total = args.candidates_per_gpu * gpus
    items = [MeasureInput(f"g{gpus}-c{i}.so", (("float32", (16,)),)) for i in range(total)]
    start = time.perf_counter()
    if round_size:
        best = None
        for first in range(0, total, round_size):
            results = engine.measure(items[first : first + round_size], best_s=best)
            best = min([m.mean_s for m in results if m.ok] + ([best] if best else []))
    else:
        engine.measure(items)
    out = figures(engine, time.perf_counter() - start)
    out["virtual_s"] = engine.virtual_s
    return out


def on_gpus(count: int, inputs: list[Any], settings: Any, resolved: Any) -> dict[str, Any]:
    from tune_orchestrator.measuring import Fleet, make_engine

    engine = make_engine(settings, resolved, None, Fleet(gpus=tuple(range(count))))
    try:
        start = time.perf_counter()
        engine.measure(inputs)
        return figures(engine, time.perf_counter() - start)
    finally:
        engine.close()


def real(args: argparse.Namespace, counts: list[int]) -> tuple[str, dict[str, Any]]:
    """Build candidates once, time them on 1..k GPUs."""
    import gpu_engine

    from tune_orchestrator.config import Settings
    from tune_orchestrator.measure import BuildInput, MeasureInput
    from tune_orchestrator.measuring import make_builder
    from tune_orchestrator.targets import resolve_target, visible_gpus

    visible = len(visible_gpus())
    if not visible or max(counts) > visible:
        raise SystemExit(f"needs {max(counts)} visible GPUs (found {visible}); or --simulate")
    resolved = resolve_target("cuda")
    settings = Settings.load()
    model_path = gpu_engine.model_file(args.model, ROOT / "benchmarks" / "work")
    proposed = gpu_engine.propose(model_path, resolved.target, args.candidates, args.seed)
    with make_builder(settings, None) as builder:
        builds = builder.build([BuildInput(mod, resolved.target) for _, mod, _ in proposed])
        inputs = [
            MeasureInput(b.artifact, specs)
            for b, (_, _, specs) in zip(builds, proposed, strict=True)
            if b.ok
        ]
        rows = {str(k): on_gpus(k, inputs, settings, resolved) for k in counts}
    return resolved.device_name, {"strong": rows}


def with_ratios(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    one = rows[min(rows, key=int)]
    for k, row in rows.items():
        row["ratio_to_linear"] = row["candidates_per_s"] / (int(k) * one["candidates_per_s"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", action="store_true", help="the simulated GPU, no GPU")
    parser.add_argument("--gpus", default="1,2,4,8", help="GPU counts to compare")
    parser.add_argument("--candidates-per-gpu", type=int, default=2048, help="--simulate")
    parser.add_argument("--round", type=int, default=64, help="--simulate: round size")
    parser.add_argument("--candidates", type=int, default=256, help="real GPUs")
    parser.add_argument("--model", default="resnetish", help="real GPUs: resnetish, smallcnn")
    parser.add_argument("--max-dop", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--machine", default=platform.node() or "host", help="for the file name")
    args = parser.parse_args()
    counts = sorted({int(g) for g in args.gpus.split(",")})

    if args.simulate:
        device = "simulated"
        workloads = {
            "stream": {str(k): simulated(k, args, None) for k in counts},
            f"rounds_of_{args.round}": {str(k): simulated(k, args, args.round) for k in counts},
            f"rounds_of_{args.round}_per_gpu": {
                str(k): simulated(k, args, args.round * k) for k in counts
            },
        }
    else:
        device, workloads = real(args, counts)
    for name, rows in workloads.items():
        with_ratios(rows)
        print(f"\n{name} ({device}):")
        print(
            f"  {'GPUs':>4}  {'cand/s':>9}  {'vs linear':>9}  {'busy':>5}  {'DOP':>3}  per GPU busy"
        )
        for k, row in rows.items():
            per = " ".join(f"{b:.0%}" for b in row["busy_per_gpu"])
            print(
                f"  {k:>4}  {row['candidates_per_s']:9.1f}  {row['ratio_to_linear']:9.3f}"
                f"  {row['busy']:5.0%}  {row['dop']:>3}  {per}"
            )
    name = re.sub(r"[^A-Za-z0-9]+", "-", f"{device}-{args.machine}").strip("-").lower()
    out = ROOT / "benchmarks" / "results" / f"gpu_scaling-{name}-{dt.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "device": device,
                "machine": f"{args.machine}: {platform.processor() or platform.machine()}",
                "command": "python benchmarks/gpu_scaling.py " + " ".join(sys.argv[1:]),
                "settings": {k: v for k, v in vars(args).items() if k not in ("machine",)},
                "workloads": workloads,
            },
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
