"""`orchestrate estimate`: tasks, untuned latency, and what tuning would likely cost."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tune_orchestrator.budget.forecast import TuningPrior, plan, to_cover
from tune_orchestrator.budget.grammar import Budget, parse_budget
from tune_orchestrator.measure import Measurement

from ..deploy.timing import Timing, time_models
from ..errors import InputError
from ..run.scheduler import RoundSizes, heavy_floors
from . import overheads
from .earlier import Attainable, earlier_runs, prior_and_round_cost
from .run import (
    EarlyStop,
    FixedPhases,
    RoundCosts,
    RunCosts,
    TuningOutlook,
    default_split,
    forecast_run,
)

if TYPE_CHECKING:
    from tune_orchestrator.budget.prices import Price

    from ..config import Settings
    from ..model.loading import OnnxModel
    from ..model.targets import ResolvedTarget
    from ..model.tasks import Task

DEFAULT_BUDGETS = ("5min", "15min", "1h")


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """The model imported for the target, with the settings and the price it is estimated
    under."""

    settings: Settings
    onnx_model: OnnxModel
    relax_mod: Any
    resolved: ResolvedTarget
    cost: Price | None
    tasks: list[Task]
    import_s: float  # the command's start to the tasks extracted


@dataclasses.dataclass(frozen=True)
class _Untuned:
    """The phases every run pays, and the untuned tasks and model where they were measured."""

    timing: Timing
    guess: overheads.FixedCosts  # the fixed phases as a run forecasts them up front
    fixed: FixedPhases  # as measured here (device here), else the guess
    tasks: list[Measurement]  # each task's untuned latency, or why there is none
    model: dict[str, Any] | None  # the untuned model's latency and check, if it ran here


@dataclasses.dataclass(frozen=True)
class _Rounds:
    """The sizes a round may have, what one costs, and where the costs come from."""

    sizes: RoundSizes
    costs: RoundCosts
    source: str
    seen: bool  # timed in earlier runs


@dataclasses.dataclass(frozen=True)
class _Shares:
    """Each task's part of the model's time: by untuned latency, or by FLOPs when nothing was
    measured."""

    latencies: list[float | None]  # untuned seconds per call (None: not measured)
    weights: list[float | None]  # call sites x untuned latency, or x FLOPs if by_flops
    by_flops: bool
    shares: list[float]  # the weights, 0 for a task without one
    total: float
    floors: list[int]  # each task's floor of trials (scheduler.heavy_floors)


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
    from ..host import limit_tvm_threads
    from ..run.alone import alone

    with alone():  # one run at a time in a process (TVM's importer is not thread-safe)
        started = time.monotonic() if started is None else started
        limit_tvm_threads()  # it measures the untuned model too
        parsed = [parse_budget(b) if isinstance(b, str) else b for b in budgets]
        inputs = _read_inputs(
            model,
            target=target,
            input_shapes=input_shapes,
            config=config,
            price=price,
            budgets=parsed,
            started=started,
        )
        if on_event:
            on_event({"event": "tasks", "tasks": [t.describe() for t in inputs.tasks]})
        untuned = _fixed_phases(inputs)
        runs_path = Path(runs_dir)
        journals = earlier_runs(runs_path)
        prior, seen_cost, seen_split = prior_and_round_cost(journals, runs_path)
        rounds = _rounds(inputs, untuned.fixed, seen_cost, seen_split, len(journals))
        shares = _task_shares(inputs, untuned.tasks)
        forecast = _gain_forecast(inputs, shares, prior, rounds)
        reach = Attainable.from_runs(journals, prior, inputs.resolved.device_type, runs_path)
        minimum_s = _minimum_s(inputs, untuned.guess)
        runs = [
            _forecast_run(b, inputs, untuned, rounds, shares, prior, reach.share, minimum_s)
            for b in parsed
        ]
        return _result(inputs, untuned, rounds, shares, prior, reach, forecast, runs)


def _read_inputs(
    model: str | Path,
    *,
    target: str | None,
    input_shapes: Mapping[str, Sequence[int]] | Iterable[str] | None,
    config: str | Path | None,
    price: float | None,
    budgets: Sequence[Budget],
    started: float,
) -> _Inputs:
    """Load the settings and the model, resolve the target and its price, refuse a budget the
    run would refuse as bad input, and extract the tasks."""
    from tune_orchestrator.budget import check_applicable
    from tune_orchestrator.budget.prices import run_price

    from ..config import Settings
    from ..host import check_memory_room, check_temp_room, host_cores
    from ..model.importer import fuse_for_tuning, import_to_relax
    from ..model.loading import load_model
    from ..model.targets import resolve_target
    from ..model.tasks import extract_tasks
    from ..run.prepare import check_price
    from ..run.prepare import shapes as _shapes

    check_price(price)  # run_price's ValueError was an internal error
    settings = Settings.load(config, {"tune.target": target} if target else None, env=os.environ)
    onnx_model = load_model(model, _shapes(input_shapes))
    check_temp_room(onnx_model.weight_bytes())  # it compiles the model
    check_memory_room(onnx_model, 1)  # and runs it once
    resolved = resolve_target(settings.tune.target, build_only=True)
    cost = run_price(
        device_type=resolved.device_type,
        device_name=resolved.device_name,
        devices=resolved.devices,
        cores=host_cores(),
        override=price,
    )
    for budget in budgets:  # a budget the run would refuse as bad input, refused here too
        try:
            check_applicable(
                budget,
                devices=resolved.devices,
                price_known=cost is not None,
                free=cost is not None and cost.usd_per_hour == 0,
                energy_known=resolved.device_type == "cuda",  # NVML, where the GPU is
            )
        except ValueError as exc:
            raise InputError(str(exc)) from None
    relax_mod = import_to_relax(onnx_model)
    tasks = extract_tasks(fuse_for_tuning(relax_mod, resolved.target), resolved.target)
    import_s = time.monotonic() - started
    return _Inputs(settings, onnx_model, relax_mod, resolved, cost, tasks, import_s)


def _fixed_phases(inputs: _Inputs) -> _Untuned:
    """The fixed phases: measured where the device is (every task's untuned latency, the
    untuned model compiled, checked and timed), else forecast."""
    timing = Timing.from_settings(inputs.settings.check)
    # Forecast for a run where the device is, which pays the baseline and times the model
    # (on a host without the GPU, estimate sizes a run on one that has it).
    guess = overheads.forecast_fixed(
        inputs.tasks,
        device_type=inputs.resolved.device_type,
        device_present=True,
        timing=timing,
        graph_ops=inputs.onnx_model.op_counts(),
    )
    fixed = FixedPhases(
        inputs.import_s,
        guess.untuned_s,
        guess.compile_s,
        guess.check_s,
        guess.timing_s,
        None,
        guess.report_s,
    )
    if not inputs.resolved.device_present:
        untuned = [Measurement(None, "no device here to measure on")] * len(inputs.tasks)
        return _Untuned(timing, guess, fixed, untuned, None)
    return _measure_fixed_phases(inputs, timing, guess)


def _measure_fixed_phases(inputs: _Inputs, timing: Timing, guess: overheads.FixedCosts) -> _Untuned:
    """Time every task's default schedule, then compile, check and time the untuned model."""
    from tvm.s_tir import meta_schedule as ms

    from .. import deploy
    from ..run.measuring import make_builder, make_engine, measure_untuned_tasks

    settings, resolved = inputs.settings, inputs.resolved
    with (
        make_builder(settings, None) as builder,
        make_engine(settings, resolved, None) as engine,
    ):
        clock = time.monotonic()
        untuned = measure_untuned_tasks(inputs.tasks, resolved, builder, engine)
        untuned_s = time.monotonic() - clock
    with tempfile.TemporaryDirectory(prefix="orchestrate-estimate-") as tmp:
        clock = time.monotonic()
        library = deploy.export_library(
            deploy.compile_model(inputs.relax_mod, resolved.target, ms.database.MemoryDatabase()),
            Path(tmp) / "untuned.so",
        )
        compile_s = time.monotonic() - clock
        vm, dev = deploy.load_vm(library, resolved.device_type)
        checker = deploy.Checker.for_model(
            inputs.onnx_model,
            samples=deploy.samples.for_run(inputs.onnx_model, settings),
            settings=settings.check,
        )
        clock = time.monotonic()
        check = checker.check(vm, dev)
        check_s = time.monotonic() - clock
        (latency,) = time_models([(vm, dev)], checker.inputs, timing)
        timing_s = time.monotonic() - clock - check_s
    model_untuned = {"latency": latency.to_dict(), "check": check.to_dict()}
    fixed = FixedPhases(
        inputs.import_s, untuned_s, compile_s, check_s, timing_s, latency.median_s, guess.report_s
    )
    return _Untuned(timing, guess, fixed, untuned, model_untuned)


def _rounds(
    inputs: _Inputs,
    fixed: FixedPhases,
    seen_cost: tuple[float, float] | None,
    seen_split: dict[str, float] | None,
    earlier: int,
) -> _Rounds:
    """The round sizes the run would use and a round's cost: as timed in `earlier` runs,
    else scaled from the baseline (a guess, with no device here)."""
    from ..host import host_cores
    from ..run.loop import round_sizes  # the loop imports TVM's search: only here
    from ..run.measuring import build_workers

    resolved = inputs.resolved
    sizes = round_sizes(inputs.settings, build_workers(inputs.settings), resolved.devices)
    round_size = sizes.largest
    if seen_cost is not None:
        fixed_s, per_s = seen_cost
        source = f"round costs from {earlier} earlier run(s)"
        costs = RoundCosts(
            fixed_s, per_s, round_size, seen_split or default_split(fixed_s, per_s, round_size)
        )
    else:  # typical rounds on this many cores, before any was timed here (overheads.py)
        costs = RoundCosts.guessed(
            untuned_s=fixed.untuned_s,
            tasks=len(inputs.tasks),
            device_type=resolved.device_type,
            cores=host_cores(),
            size=round_size,
        )
        costs = dataclasses.replace(costs, split=seen_split or costs.split)
        source = (
            "scaled from the baseline timed now; no earlier run here to time a round by"
            if resolved.device_present
            else "a guess: no device here to time a baseline on, no earlier run to time a round by"
        )
    return _Rounds(sizes, costs, source, seen_cost is not None)


def _task_shares(inputs: _Inputs, untuned: Sequence[Measurement]) -> _Shares:
    """Each task's share of the model's time, by its untuned latency (by its FLOPs when
    nothing was measured), and its floor of trials."""
    tasks = inputs.tasks
    latencies = [m.mean_s if m.ok else None for m in untuned]
    weights = [
        None if lat is None else t.weight * lat for t, lat in zip(tasks, latencies, strict=True)
    ]
    by_flops = bool(weights) and all(w is None for w in weights)
    if by_flops:  # nothing measured (no device here): each task's share of the FLOPs instead
        weights = [t.weight * t.flops for t in tasks]
    total = sum(w or 0.0 for w in weights)
    shares = [w or 0.0 for w in weights]
    s_stop = inputs.settings.stopping
    floors = heavy_floors(weights, share=s_stop.heavy_share, trials=s_stop.heavy_trials)
    return _Shares(latencies, weights, by_flops, shares, total, floors)


def _gain_forecast(
    inputs: _Inputs, shares: _Shares, prior: TuningPrior, rounds: _Rounds
) -> list[dict[str, Any]]:
    """The spend likely needed to reach each share of the attainable gain (budget.plan), in
    device-hours and dollars too, in rounds of the sizes a run gives."""
    devices, cost = inputs.resolved.devices, inputs.cost
    scheduler = inputs.settings.scheduler
    covered = len(to_cover(shares.shares, scheduler.coverage_share))
    forecast = []
    for row in plan(
        shares.shares,
        prior,
        sizes=rounds.sizes.options(),
        seconds=rounds.costs.seconds,
        coverage=scheduler.coverage_share,
        first=rounds.sizes.for_tasks(covered, scheduler.first_rounds).first_touch,
    ):
        hours = row["seconds"] / 3600.0
        forecast.append(
            {
                **row,
                "device_h": hours * devices,
                "usd": hours * cost.usd_per_hour if cost else None,
            }
        )
    return forecast


def _minimum_s(inputs: _Inputs, guess: overheads.FixedCosts) -> float:
    """The least a run's budget must cover, as a run refuses a budget up front (a new run
    directory has timed no round yet; a model with nothing to tune has no first round)."""
    settings, resolved = inputs.settings, inputs.resolved
    first = overheads.upfront_first_round_s(
        settings,
        tasks=len(inputs.tasks),
        untuned_s=guess.untuned_s,
        gpus=resolved.devices,
        filtered=settings.tune.filter != "none",
        device_type=resolved.device_type,
    )
    upfront_s = overheads.upfront_minimum_s(
        guess, baseline=True, untuned_model=True, first_round=first
    )
    return inputs.import_s + upfront_s


def _forecast_run(
    budget: Budget,
    inputs: _Inputs,
    untuned: _Untuned,
    rounds: _Rounds,
    shares: _Shares,
    prior: TuningPrior,
    attainable: float,
    minimum_s: float,
) -> dict[str, Any]:
    """What a run under `budget` would spend, phase by phase, and reach (run.forecast_run)."""
    settings, cost = inputs.settings, inputs.cost
    costs = RunCosts(
        fixed=untuned.fixed,
        minimum_s=minimum_s,
        rounds=rounds.costs,
        timing=untuned.timing,
        devices=inputs.resolved.devices,
        usd_per_hour=cost.usd_per_hour if cost else None,
    )
    outlook = TuningOutlook(
        task_shares=shares.shares,
        floors=shares.floors,
        sizes=rounds.sizes,
        first_rounds=settings.scheduler.first_rounds,
        coverage=settings.scheduler.coverage_share,
        prior=prior,
        attainable=attainable,
        early_stop=EarlyStop.from_settings(settings.stopping),
    )
    return forecast_run(budget, costs=costs, outlook=outlook)


def _result(
    inputs: _Inputs,
    untuned: _Untuned,
    rounds: _Rounds,
    shares: _Shares,
    prior: TuningPrior,
    attainable: Attainable,
    forecast: list[dict[str, Any]],
    runs: list[dict[str, Any]],
) -> dict[str, Any]:
    """The estimate as `orchestrate estimate --json` prints it."""
    resolved, cost, costs = inputs.resolved, inputs.cost, rounds.costs
    latencies, total = shares.latencies, shares.total
    errors = [m.error for m in untuned.tasks]
    unmeasured = (
        "all" if shares.by_flops else "some" if any(lat is None for lat in latencies) else "none"
    )
    return {
        "model": inputs.onnx_model.describe(),
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
            for t, lat, err, w in zip(inputs.tasks, latencies, errors, shares.weights, strict=True)
        ],
        "shares_from": "FLOPs" if shares.by_flops else "untuned latency",
        "untuned": untuned.model,
        "fixed": {**dataclasses.asdict(untuned.fixed), "measured": resolved.device_present},
        "round": {
            "candidates": costs.size,
            "first_candidates": rounds.sizes.smallest,
            "seconds": costs.seconds(costs.size),
            "first_seconds": costs.seconds(rounds.sizes.smallest),
            "fixed_s": costs.fixed_s,
            "per_candidate_s": costs.per_candidate_s,
            "split": dict(costs.split),
            "source": rounds.source,
        },
        "prior": {
            "scale": prior.scale,
            "power": prior.power,
            "source": prior.source,
            "points": prior.points,
        },
        "attainable": {"share": attainable.share, "source": attainable.source},
        "price": None
        if cost is None
        else {"usd_per_hour": cost.usd_per_hour, "source": cost.source},
        "forecast": forecast,
        "runs": runs,
        "trust": _trust(prior, rounds.seen, unmeasured, attainable.seen),
    }


def _trust(prior: TuningPrior, costs_seen: bool, unmeasured: str, cut_seen: bool) -> str:
    """How far to trust the estimate; `unmeasured`: how many tasks have no untuned latency
    ("none", "some" or "all": no device here)."""
    parts = ["rough: it assumes every task can be sped up by the same factor"]
    if not cut_seen:
        parts.append("that factor is a guess until a run here has tuned")
    parts.append(
        f"the tuning curve: {prior.source}" + (f" ({prior.points} points)" if prior.points else "")
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
