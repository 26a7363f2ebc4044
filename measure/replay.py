"""A real GPU run's measuring, replayed on the simulated GPU: how the simulator is calibrated from
one real run's report, and how what it predicts is checked against another's.

A replay rebuilds the run's measuring from its report: each task's candidates in the run's
rounds (its trials over its rounds; every task's first round before any task's second, as the
scheduler serves them), latencies drawn above the task's best, no racing in a task's first
round (it has no best yet), the run's timing rules, its DOP ceiling, and the engine the run
came from: until 2026-11-26 every measuring worker started up front and the NaN / Inf check
was a second shared hold after the timing; since then workers start as the DOP needs them and
the check is part of the preparation (read from the report: its `workers_ready_s` says how
many workers started before the first candidate).

`calibration(report)` gives the simulated GPU's costs: the report's mean steps (load; allocate
and warm-up as the preparation; the check's mean as what each worker's first job pays once),
its workers' start, and two figures a report does not give directly, fitted by replaying it:
the timing noise (from its repeats per candidate) and the cost of holding the window once
beyond the kernels' own time (from its timed seconds per candidate). `compare(report, gpu)`
replays another report and compares what emerges, none of which the calibration was given:
the window's busy share and candidates per second over the spans after the first (the first
waits for the first worker), and the wait per candidate.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping
from typing import Any

from ._timing import TimingPlan
from .base import MeasureInput
from .dop import DopConfig, DopController
from .simulated import SimulatedEngine, SimulatedGpu

EMERGENT = ("busy", "candidates_per_s", "wait_s")  # what a check compares
_NOISE_GRID = (0.003, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.03)


def up_front(measurement: Mapping[str, Any]) -> bool:
    """Whether the run's engine started every measuring worker before the first candidate (the
    engine until 2026-11-26, whose reports lack `workers_ready_s` or started the ceiling)."""
    ready = measurement.get("workers_ready_s")
    return ready is None or ready["started"] >= measurement["ceiling"] > 1


def timing_plan(report: Mapping[str, Any]) -> TimingPlan:
    m = report["settings"]["measure"]
    return TimingPlan(
        repeat_ms=m["gpu_repeat_ms"],
        min_repeats=m["min_repeats"],
        max_repeats=m["max_repeats"],
        max_rel_ci=m["max_rel_ci"],
        race=m["race"],
        race_after=m["race_after"],
        race_margin=m["race_margin"],
    )


def rounds(
    report: Mapping[str, Any], seed: int = 0
) -> tuple[list[tuple[list[MeasureInput], float | None]], dict[str, float]]:
    """The run's measure() calls, (candidates, the task's best or None): each task's untuned
    kernel alone, then the rounds in the order a wide-first scheduler makes them; and each
    candidate's latency: log-normal above the task's best (most are slower than the best)."""
    rng, latency = random.Random(seed), {}
    calls: list[tuple[list[MeasureInput], float | None]] = []
    for task in report["tasks"]:
        if task["untuned_s"]:
            latency[name := f"{task['name']}-untuned"] = task["untuned_s"]
            calls.append(([MeasureInput(name, (("float32", (4,)),))], None))
    by_depth: dict[int, list[tuple[list[MeasureInput], float | None]]] = {}
    for task in report["tasks"]:
        if not task["trials"]:
            continue
        best = task["best_s"] or task["untuned_s"]
        size = math.ceil(task["trials"] / max(1, task["rounds"]))
        for depth, start in enumerate(range(0, task["trials"], size)):
            names = [
                f"{task['name']}-{start + i}" for i in range(min(size, task["trials"] - start))
            ]
            for name in names:
                latency[name] = best * math.exp(abs(rng.gauss(0.0, 1.0)))
            inputs = [MeasureInput(n, (("float32", (4,)),)) for n in names]
            by_depth.setdefault(depth, []).append((inputs, best if depth else None))
    for depth in sorted(by_depth):
        rng.shuffle(by_depth[depth])
        calls += by_depth[depth]
    return calls, latency


def replay(report: Mapping[str, Any], gpu: SimulatedGpu, seed: int = 0) -> dict[str, Any]:
    """The simulated engine's stats after measuring what the report's run measured, each span
    at the DOP the real engine chose for it (the controller's choices are not replayed: they
    follow from the first span, whose figures the real run's start sets)."""
    real = report["measurement"]
    calls, latency = rounds(report, seed)
    early = up_front(real)
    engine = SimulatedEngine(
        dataclasses.replace(gpu, check_after_timing=early, seed=seed),
        DopController(DopConfig(max_dop=real["ceiling"]), seed=seed),
        plan=timing_plan(report),
        latency=lambda item: latency[item.artifact],
        warm=real["ceiling"] if early else 1,
        ready_s=gpu.worker_start_s if early else 0.0,
    )
    done, spans = 0, _dops(real)
    for inputs, best in calls:
        engine.fixed_dop = next((dop for upto, dop in spans if done < upto), spans[-1][1])
        engine.measure(inputs, best_s=best)
        done += len(inputs)
    return engine.stats()


def _dops(measurement: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(candidates measured by the span's end, its DOP) for each span of the real run."""
    out, upto = [], 0
    for span in measurement["batches"]:
        upto += span["candidates"]
        out.append((upto, span["dop"]))
    return out


def emergent(measurement: Mapping[str, Any]) -> dict[str, float]:
    """Busy share and candidates per second over the spans after the first (over the whole
    measure phase where a report did not time its spans), and the wait per candidate."""
    later = measurement["batches"][1:]
    wait = measurement["step_s"]["wait"]
    if not later or not all("seconds" in s for s in later):
        return {
            "busy": measurement["busy"],
            "candidates_per_s": measurement["candidates_per_s"],
            "wait_s": wait,
        }
    seconds = sum(s["seconds"] for s in later)
    return {
        "busy": sum(s["busy"] * s["seconds"] for s in later) / seconds,
        "candidates_per_s": sum(s["candidates"] for s in later) / seconds,
        "wait_s": wait,
    }


def calibration(report: Mapping[str, Any]) -> dict[str, float]:
    """The simulated GPU's costs from a real run's report (see the module docstring)."""
    real = report["measurement"]
    steps, ready = real["step_s"], real.get("workers_ready_s")
    workers = max(ready["started"] if ready else 0, *(s["dop"] for s in real["batches"]))
    costs: dict[str, float] = {
        "load_s": steps["load"],
        "prepare_s": steps["allocate"] + steps["warm_up"],
        "prepare_spread": 0.3,
        # A check costs ~1.6 ms once its two kernels are loaded (gpu_engine, one worker, on the
        # H100): its mean in a report is their loading, once in each worker's first job.
        "check_s": 0.0,
        "first_job_s": steps["check"] * real["runs"] / workers,
        "worker_start_s": (ready["first"] + ready["last"]) / 2 if ready else 0.0,
        "shared_contention": 0.0,
    }
    gpu = SimulatedGpu(**costs, window_overhead_s=0.0)
    costs["noise"] = min(_NOISE_GRID, key=lambda sigma: _repeats_off(report, gpu, sigma))
    costs["window_overhead_s"] = _window_overhead(
        report, dataclasses.replace(gpu, noise=costs["noise"])
    )
    return {k: round(v, 6) for k, v in costs.items()}


def _repeats_off(report: Mapping[str, Any], gpu: SimulatedGpu, noise: float) -> float:
    simulated = replay(report, dataclasses.replace(gpu, noise=noise))["repeats"]
    return abs(simulated - report["measurement"]["repeats"])


def _window_overhead(report: Mapping[str, Any], gpu: SimulatedGpu) -> float:
    """The real timed seconds per candidate less what its repeats take, as simulated (a
    repeat's kernels and its overhead) at the real number of repeats."""
    real, simulated = report["measurement"], replay(report, gpu)
    per_repeat = (simulated["step_s"]["timed"] - gpu.window_overhead_s) / simulated["repeats"]
    return max(0.0, real["step_s"]["timed"] - per_repeat * real["repeats"])


def compare(
    report: Mapping[str, Any], gpu: SimulatedGpu, seed: int = 0
) -> dict[str, dict[str, float]]:
    """What emerges from replaying `report` on `gpu` against what the real run reported:
    {figure: {simulated, real, ratio}} for EMERGENT, and the repeats and timed seconds per
    candidate for context."""
    simulated, real = replay(report, gpu, seed), report["measurement"]
    spans = all("seconds" in s for s in real["batches"][1:])
    ours = emergent(simulated if spans else {**simulated, "batches": []})
    theirs = emergent(real)
    rows = {k: (ours[k], theirs[k]) for k in EMERGENT}
    rows["timed_s"] = (simulated["step_s"]["timed"], real["step_s"]["timed"])
    rows["repeats"] = (simulated["repeats"], real["repeats"])
    return {k: {"simulated": s, "real": r, "ratio": s / r} for k, (s, r) in rows.items()}
