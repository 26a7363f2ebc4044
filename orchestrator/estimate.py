"""`orchestrate estimate`: tasks, untuned latency, and what tuning would likely cost."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from budget.forecast import BUILTIN_PRIOR, TuningPrior, fit_prior, plan
from budget.ledger import Spend
from measure import Measurement

from .errors import InputError
from .rundir import RunDir

# Before any earlier run on this machine: search seconds per round on 2 cores (population
# 512, as measured here), scaled by the host's cores.
_SEARCH_S_ON_2_CORES = 40.0


def journal_observations(entries: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """(trials, fraction of the task's final gain) after each round but the last of each task
    with 2+ rounds (the last is 1 by construction and tells nothing)."""
    baselines = {e["task"]: e.get("latency_s") for e in entries if e.get("type") == "baseline"}
    rounds: dict[int, list[tuple[int, float]]] = {}
    for e in entries:
        if e.get("type") == "round" and e.get("best_s") is not None:
            done = rounds.setdefault(e["task"], [])
            trials = (
                (done[-1][0] if done else 0) + int(e.get("measured", 0)) + int(e.get("failed", 0))
            )
            done.append((trials, float(e["best_s"])))
    observations = []
    for task, done in rounds.items():
        untuned = baselines.get(task)
        final = done[-1][1]
        if untuned is None or len(done) < 2 or not final < untuned:
            continue
        observations += [(t, (untuned - best) / (untuned - final)) for t, best in done[:-1]]
    return observations


def earlier_runs(runs_dir: Path) -> list[list[dict[str, Any]]]:
    """The journals of earlier runs under `runs_dir` (unreadable ones are skipped)."""
    journals = []
    if not runs_dir.is_dir():
        return journals
    for path in sorted(runs_dir.iterdir()):
        if (path / RunDir.JOURNAL).is_file():
            run = RunDir(path)
            try:
                if run.recorded_simulated():
                    continue  # a simulated GPU's timings say nothing about a real one
                journals.append(run.journal())
            except InputError:
                continue
    return journals


def prior_and_round_cost(
    journals: Sequence[Sequence[Mapping[str, Any]]], runs_dir: Path
) -> tuple[TuningPrior, tuple[float, float] | None]:
    """The tuning curve (fitted on earlier runs, else built in) and the (fixed, per candidate)
    seconds of a round seen in earlier runs, if any."""
    observations = [o for j in journals for o in journal_observations(j)]
    fitted = fit_prior(observations, f"fitted on {len(journals)} earlier run(s) in {runs_dir}")
    costs = []
    for journal in journals:
        last = next((e["spend"] for e in reversed(journal) if "spend" in e), None)
        if last:
            costs += Spend.from_dict(last).round_costs
    cost = None
    if costs:
        cost = (
            statistics.median(c.fixed_s for c in costs),
            statistics.median(c.per_candidate_s for c in costs),
        )
    return fitted or BUILTIN_PRIOR, cost


def estimate(
    model: str | Path,
    *,
    target: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | Iterable[str] | None = None,
    config: str | Path | None = None,
    runs_dir: str | Path = "runs",
    price: float | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Import, measure untuned, forecast. Returns a JSON-able dict (see `orchestrate estimate`)."""
    from tvm.s_tir import meta_schedule as ms

    from budget.prices import run_price

    from . import deploy
    from .api import _shapes
    from .config import Settings
    from .measuring import make_builder, make_engine, measure_untuned_tasks
    from .model import fuse_for_tuning, import_to_relax, load_model
    from .targets import host_cores, resolve_target
    from .tasks import extract_tasks

    settings = Settings.load(config, {"tune.target": target} if target else None, env=os.environ)
    onnx_model = load_model(model, _shapes(input_shapes))
    resolved = resolve_target(settings.tune.target, build_only=True)
    relax_mod = import_to_relax(onnx_model)
    tasks = extract_tasks(fuse_for_tuning(relax_mod, resolved.target), resolved.target)
    emit = on_event or (lambda event: None)
    emit({"event": "tasks", "tasks": [t.describe() for t in tasks]})

    untuned = [Measurement(None, "no device here to measure on")] * len(tasks)
    per_candidate_now = None
    model_untuned: dict[str, Any] | None = None
    if resolved.device_present:
        with (
            make_builder(settings, None) as builder,
            make_engine(settings, resolved, None) as engine,
        ):
            started = time.monotonic()
            untuned = measure_untuned_tasks(tasks, resolved, builder, engine)
            per_candidate_now = (time.monotonic() - started) / max(1, len(tasks))
        with tempfile.TemporaryDirectory(prefix="orchestrate-estimate-") as tmp:
            library = deploy.export_library(
                deploy.compile_model(relax_mod, resolved.target, ms.database.MemoryDatabase()),
                Path(tmp) / "untuned.so",
            )
            vm, dev = deploy.load_vm(library, resolved.device_type)
            checker = deploy.Checker(onnx_model, seed=settings.tune.seed, rtol=settings.check.rtol)
            c = settings.check
            model_untuned = {
                "latency": deploy.time_model(
                    vm,
                    dev,
                    checker.inputs,
                    repeat=c.latency_repeat,
                    min_repeat_ms=c.latency_min_repeat_ms,
                ).to_dict(),
                "check": checker.check(vm, dev).to_dict(),
            }

    runs_path = Path(runs_dir)
    journals = earlier_runs(runs_path)
    prior, seen_cost = prior_and_round_cost(journals, runs_path)
    round_size = settings.tune.trials_per_round
    if seen_cost is not None:
        fixed_s, per_s = seen_cost
        cost_source = f"round costs from {len(journals)} earlier run(s)"
    else:
        fixed_s = _SEARCH_S_ON_2_CORES * 2 / host_cores()
        per_s = per_candidate_now or 1.0
        cost_source = "build and measurement timed now; search time a guess for this core count"
    round_s = fixed_s + per_s * round_size
    latencies = [m.mean_s if m.ok else None for m in untuned]
    shares = [t.weight * (lat or 0.0) for t, lat in zip(tasks, latencies, strict=True)]
    cost = run_price(
        device_type=resolved.device_type,
        device_name=resolved.device_name,
        devices=resolved.devices,
        cores=host_cores(),
        override=price,
    )
    forecast = []
    for row in plan(shares, prior, round_size=round_size, round_s=round_s):
        hours = row["seconds"] / 3600.0
        forecast.append(
            {
                **row,
                "device_h": hours * resolved.devices,
                "usd": hours * cost.usd_per_hour if cost else None,
            }
        )
    return {
        "model": onnx_model.describe(),
        "target": {
            "spec": resolved.spec,
            "description": resolved.describe(),
            "device": resolved.device_name,
        },
        "tasks": [
            {**t.describe(), "untuned_s": lat, "error": err}
            for t, lat, err in zip(tasks, latencies, [m.error for m in untuned], strict=True)
        ],
        "untuned": model_untuned,
        "round": {
            "candidates": round_size,
            "seconds": round_s,
            "fixed_s": fixed_s,
            "per_candidate_s": per_s,
            "source": cost_source,
        },
        "prior": {
            "scale": prior.scale,
            "power": prior.power,
            "source": prior.source,
            "points": prior.points,
        },
        "price": None
        if cost is None
        else {"usd_per_hour": cost.usd_per_hour, "source": cost.source},
        "forecast": forecast,
        "trust": _trust(prior, seen_cost is not None, any(lat is None for lat in latencies)),
    }


def _trust(prior: TuningPrior, costs_seen: bool, missing: bool) -> str:
    parts = ["rough: it assumes every task can be sped up by the same factor"]
    parts.append(
        f"the tuning curve is the {prior.source}"
        + (f" ({prior.points} points)" if prior.points else "")
    )
    if not costs_seen:
        parts.append("no earlier run here to time a round by, so the search time is a guess")
    if missing:
        parts.append("tasks without an untuned latency are left out")
    parts.append("expect a factor of 2 either way")
    return "; ".join(parts)
