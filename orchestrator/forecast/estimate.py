"""`orchestrate estimate`: tasks, untuned latency, and what tuning would likely cost."""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tune_orchestrator.budget.forecast import BUILTIN_PRIOR, TuningPrior, fit_prior, plan
from tune_orchestrator.budget.grammar import Budget, parse_budget
from tune_orchestrator.budget.ledger import Spend
from tune_orchestrator.measure import Measurement

from ..deploy.timing import Timing, time_models
from ..errors import InputError
from ..rundir import RunDir
from ..scheduler import heavy_floors
from . import overheads
from .run import (
    EarlyStop,
    FixedPhases,
    RoundCosts,
    default_split,
    forecast_run,
    observed_split,
)

DEFAULT_BUDGETS = ("5min", "15min", "1h")
# Before any run here has tuned: the share of a task's untuned latency tuning removes. CPU:
# untuned kernels are naive loops (12.9x on the example model in 5 min on 2 cores). GPU: untuned
# kernels use dlight's default schedules; tuning beats them by less.
BUILTIN_ATTAINABLE = {"cpu": 0.9, "cuda": 0.4}
_MOST_ATTAINABLE = 0.98


def _task_rounds(
    entries: Sequence[Mapping[str, Any]],
) -> tuple[dict[int, float | None], dict[int, list[tuple[int, float]]]]:
    """Each task's untuned latency, and its (trials so far, best latency) after each round."""
    baselines = {e["task"]: e.get("latency_s") for e in entries if e.get("type") == "baseline"}
    rounds: dict[int, list[tuple[int, float]]] = {}
    for e in entries:
        if e.get("type") == "round" and e.get("best_s") is not None:
            done = rounds.setdefault(e["task"], [])
            trials = (
                (done[-1][0] if done else 0) + int(e.get("measured", 0)) + int(e.get("failed", 0))
            )
            done.append((trials, float(e["best_s"])))
    return baselines, rounds


def journal_observations(entries: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """(trials, fraction of the task's final gain) after each round but the last of each task
    with 2+ rounds (the last is 1 by construction and tells nothing)."""
    baselines, rounds = _task_rounds(entries)
    observations = []
    for task, done in rounds.items():
        untuned = baselines.get(task)
        final = done[-1][1]
        if untuned is None or len(done) < 2 or not final < untuned:
            continue
        observations += [(t, (untuned - best) / (untuned - final)) for t, best in done[:-1]]
    return observations


def attainable_share(
    journals: Sequence[Sequence[Mapping[str, Any]]], prior: TuningPrior
) -> float | None:
    """The median share of a task's untuned latency that tuning removes in the end, from
    earlier runs: each task's final cut, divided by the share of its gain the tuning curve
    says its trials had bought."""
    shares = []
    for entries in journals:
        baselines, rounds = _task_rounds(entries)
        for task, done in rounds.items():
            untuned = baselines.get(task)
            trials, best = done[-1]
            if untuned and untuned > 0 and prior.fraction(trials) > 0:
                cut = max(0.0, (untuned - best) / untuned) / prior.fraction(trials)
                shares.append(min(cut, _MOST_ATTAINABLE))
    return statistics.median(shares) if shares else None


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
) -> tuple[TuningPrior, tuple[float, float] | None, dict[str, float] | None]:
    """The tuning curve (fitted on earlier runs, else built in), the (fixed, per candidate)
    seconds of a round seen in earlier runs, and how their tuning time split into phases."""
    observations = [o for j in journals for o in journal_observations(j)]
    fitted = fit_prior(observations, f"fitted on {len(journals)} earlier run(s) in {runs_dir}")
    costs, phases = [], []
    for journal in journals:
        last = next((e["spend"] for e in reversed(journal) if "spend" in e), None)
        if last:
            spend = Spend.from_dict(last)
            costs += spend.round_costs
            phases.append(spend.phases)
    cost = None
    if costs:
        cost = (
            statistics.median(c.fixed_s for c in costs),
            statistics.median(c.per_candidate_s for c in costs),
        )
    return fitted or BUILTIN_PRIOR, cost, observed_split(phases)


def estimate(
    model: str | Path,
    *,
    target: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | Iterable[str] | None = None,
    config: str | Path | None = None,
    runs_dir: str | Path = "runs",
    price: float | None = None,
    budgets: Sequence[str | Budget] = DEFAULT_BUDGETS,
    started: float | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Import, measure untuned, forecast. Returns a JSON-able dict (see `orchestrate estimate`).

    `started` (time.monotonic()) is when the command started, to forecast a run's import
    phase; the call, if not given. `budgets` are budget strings to forecast a run under.
    """
    started = time.monotonic() if started is None else started
    parsed = [parse_budget(b) if isinstance(b, str) else b for b in budgets]

    from tvm.s_tir import meta_schedule as ms

    from tune_orchestrator.budget import check_applicable
    from tune_orchestrator.budget.prices import run_price

    from .. import deploy
    from ..config import Settings
    from ..measuring import make_builder, make_engine, measure_untuned_tasks
    from ..model import fuse_for_tuning, import_to_relax, load_model
    from ..prepare import shapes as _shapes
    from ..targets import host_cores, resolve_target
    from ..tasks import extract_tasks

    settings = Settings.load(config, {"tune.target": target} if target else None, env=os.environ)
    onnx_model = load_model(model, _shapes(input_shapes))
    resolved = resolve_target(settings.tune.target, build_only=True)
    cost = run_price(
        device_type=resolved.device_type,
        device_name=resolved.device_name,
        devices=resolved.devices,
        cores=host_cores(),
        override=price,
    )
    for budget in parsed:  # a budget the run would refuse as bad input, refused here too
        try:
            check_applicable(
                budget,
                devices=resolved.devices,
                price_known=cost is not None,
                energy_known=resolved.device_type == "cuda",  # NVML, where the GPU is
            )
        except ValueError as exc:
            raise InputError(str(exc)) from None
    relax_mod = import_to_relax(onnx_model)
    tasks = extract_tasks(fuse_for_tuning(relax_mod, resolved.target), resolved.target)
    import_s = time.monotonic() - started
    emit = on_event or (lambda event: None)
    emit({"event": "tasks", "tasks": [t.describe() for t in tasks]})

    timing = Timing.from_settings(settings.check)
    # Forecast for a run where the device is, which pays the baseline and times the model
    # (on a host without the GPU, estimate sizes a run on one that has it).
    guess = overheads.forecast_fixed(
        tasks, device_type=resolved.device_type, device_present=True, timing=timing
    )
    fixed = FixedPhases(
        import_s, guess.untuned_s, guess.compile_s, guess.check_s, guess.timing_s, None
    )
    untuned = [Measurement(None, "no device here to measure on")] * len(tasks)
    model_untuned: dict[str, Any] | None = None
    if resolved.device_present:
        with (
            make_builder(settings, None) as builder,
            make_engine(settings, resolved, None) as engine,
        ):
            clock = time.monotonic()
            untuned = measure_untuned_tasks(tasks, resolved, builder, engine)
            untuned_s = time.monotonic() - clock
        with tempfile.TemporaryDirectory(prefix="orchestrate-estimate-") as tmp:
            clock = time.monotonic()
            library = deploy.export_library(
                deploy.compile_model(relax_mod, resolved.target, ms.database.MemoryDatabase()),
                Path(tmp) / "untuned.so",
            )
            compile_s = time.monotonic() - clock
            vm, dev = deploy.load_vm(library, resolved.device_type)
            checker = deploy.Checker(onnx_model, seed=settings.tune.seed, rtol=settings.check.rtol)
            clock = time.monotonic()
            check = checker.check(vm, dev)
            check_s = time.monotonic() - clock
            (latency,) = time_models([(vm, dev)], checker.inputs, timing)
            timing_s = time.monotonic() - clock - check_s
        model_untuned = {"latency": latency.to_dict(), "check": check.to_dict()}
        fixed = FixedPhases(import_s, untuned_s, compile_s, check_s, timing_s, latency.median_s)

    runs_path = Path(runs_dir)
    journals = earlier_runs(runs_path)
    prior, seen_cost, seen_split = prior_and_round_cost(journals, runs_path)
    from ..loop import round_sizes  # the loop imports TVM's search: only here
    from ..measuring import build_workers

    sizes = round_sizes(settings, build_workers(settings), resolved.devices)
    round_size = sizes.largest
    if seen_cost is not None:
        fixed_s, per_s = seen_cost
        cost_source = f"round costs from {len(journals)} earlier run(s)"
    else:  # typical rounds on this many cores, before any was timed here (overheads.py)
        fixed_s = overheads.ROUND_S_ON_2_CORES * 2 / host_cores()
        ratio = overheads.CANDIDATE_VS_BASELINE
        per_s = ratio.get(resolved.device_type, ratio["cpu"]) * overheads.baseline_task_s(
            fixed.untuned_s, len(tasks)
        )
        cost_source = (
            "scaled from the baseline timed now; no earlier run here to time a round by"
            if resolved.device_present
            else "a guess: no device here to time a baseline on, no earlier run to time a round by"
        )
    costs = RoundCosts(
        fixed_s, per_s, round_size, seen_split or default_split(fixed_s, per_s, round_size)
    )
    round_s = costs.seconds(round_size)
    latencies = [m.mean_s if m.ok else None for m in untuned]
    weights = [
        None if lat is None else t.weight * lat for t, lat in zip(tasks, latencies, strict=True)
    ]
    by_flops = all(w is None for w in weights)
    if by_flops:  # nothing measured (no device here): each task's share of the FLOPs instead
        weights = [t.weight * t.flops for t in tasks]
    total = sum(w or 0.0 for w in weights)
    shares = [w or 0.0 for w in weights]
    s_stop = settings.stopping
    floors = heavy_floors(weights, share=s_stop.heavy_share, trials=s_stop.heavy_trials)
    forecast = []
    coverage = settings.scheduler.coverage_share
    for row in plan(shares, prior, round_size=round_size, round_s=round_s, coverage=coverage):
        hours = row["seconds"] / 3600.0
        forecast.append(
            {
                **row,
                "device_h": hours * resolved.devices,
                "usd": hours * cost.usd_per_hour if cost else None,
            }
        )
    seen_attainable = attainable_share(journals, prior)
    attainable = (
        seen_attainable
        if seen_attainable is not None
        else BUILTIN_ATTAINABLE.get(resolved.device_type, BUILTIN_ATTAINABLE["cpu"])
    )
    # As a run refuses a budget up front (a new run directory has timed no round yet).
    first = overheads.upfront_first_round_s(
        settings,
        gpus=resolved.devices,
        filtered=settings.tune.filter != "none",
        device_type=resolved.device_type,
    )
    upfront_s, _ = overheads.upfront_minimum_s(
        guess, baseline=True, untuned_model=True, first_round=first
    )
    minimum_s = import_s + upfront_s
    runs = [
        forecast_run(
            b,
            fixed=fixed,
            minimum_s=minimum_s,
            rounds=costs,
            task_shares=shares,
            floors=floors,
            sizes=sizes.options(),
            coverage=coverage,
            prior=prior,
            attainable=attainable,
            timing=timing,
            early_stop=EarlyStop.from_settings(s_stop),
            devices=resolved.devices,
            usd_per_hour=cost.usd_per_hour if cost else None,
        )
        for b in parsed
    ]
    return {
        "model": onnx_model.describe(),
        "target": {
            "spec": resolved.spec,
            "description": resolved.describe(),
            "device": resolved.device_name,
        },
        "tasks": [
            {
                **t.describe(),
                "untuned_s": lat,
                "error": err,
                "share": (w or 0.0) / total if total else 0.0,
            }
            for t, lat, err, w in zip(
                tasks, latencies, [m.error for m in untuned], weights, strict=True
            )
        ],
        "shares_from": "FLOPs" if by_flops else "untuned latency",
        "untuned": model_untuned,
        "fixed": {**dataclasses.asdict(fixed), "measured": resolved.device_present},
        "round": {
            "candidates": round_size,
            "first_candidates": sizes.smallest,
            "seconds": round_s,
            "fixed_s": fixed_s,
            "per_candidate_s": per_s,
            "split": dict(costs.split),
            "source": cost_source,
        },
        "prior": {
            "scale": prior.scale,
            "power": prior.power,
            "source": prior.source,
            "points": prior.points,
        },
        "attainable": {
            "share": attainable,
            "source": f"earlier runs in {runs_path}"
            if seen_attainable is not None
            else f"built-in guess for {resolved.device_type}",
        },
        "price": None
        if cost is None
        else {"usd_per_hour": cost.usd_per_hour, "source": cost.source},
        "forecast": forecast,
        "runs": runs,
        "trust": _trust(
            prior,
            seen_cost is not None,
            "all" if by_flops else "some" if any(lat is None for lat in latencies) else "none",
            seen_attainable is not None,
        ),
    }


def _trust(prior: TuningPrior, costs_seen: bool, unmeasured: str, cut_seen: bool) -> str:
    """How far to trust the estimate; `unmeasured`: how many tasks have no untuned latency
    ("none", "some" or "all": no device here)."""
    parts = ["rough: it assumes every task can be sped up by the same factor"]
    if not cut_seen:
        parts.append("that factor is a guess until a run here has tuned")
    parts.append(
        f"the tuning curve is the {prior.source}"
        + (f" ({prior.points} points)" if prior.points else "")
    )
    if unmeasured == "all":
        parts.append(
            "no device here: the tasks' shares are their FLOPs', the fixed phases "
            + ("are guesses" if costs_seen else "and a round's cost are guesses")
            + ", and the latency reached is not forecast"
        )
    elif not costs_seen:
        parts.append("no earlier run here to time a round by: its cost is scaled from the baseline")
    if unmeasured == "some":
        parts.append("tasks without an untuned latency are left out")
    parts.append("expect a factor of 2 either way")
    return "; ".join(parts)
