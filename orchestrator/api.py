"""The Python API: `tune()` takes the CLI's options and returns a `Result`."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import InputError

Event = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class TaskResult:
    name: str
    weight: int
    flops: float
    trials: int
    untuned_s: float | None
    best_s: float | None
    speedup: float | None
    done: str | None


@dataclasses.dataclass(frozen=True)
class Result:
    """What a run produced; every number here is also in `report.json`."""

    run_dir: Path
    model: str
    target: str
    untuned_latency_s: float | None
    tuned_latency_s: float | None
    speedup: float | None
    trials: int
    rounds: int
    wall_s: float
    phases: Mapping[str, float]
    stop_reason: str
    check_ok: bool | None
    max_rel_error: float | None
    tasks: tuple[TaskResult, ...]
    paths: Mapping[str, Path]
    report: Mapping[str, Any] = dataclasses.field(repr=False)

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> Result:
        summary, spend = report["summary"], report["spend"]
        check = (report.get("tuned") or {}).get("check") or {}
        return cls(
            run_dir=Path(report["paths"]["run_dir"]),
            model=report["model"]["name"],
            target=report["target"]["description"],
            untuned_latency_s=summary["untuned_latency_s"],
            tuned_latency_s=summary["tuned_latency_s"],
            speedup=summary["speedup"],
            trials=summary["trials"],
            rounds=summary["rounds"],
            wall_s=summary["wall_s"],
            phases=dict(spend["phases"]),
            stop_reason=summary["stop_reason"],
            check_ok=check.get("ok"),
            max_rel_error=check.get("max_rel_error"),
            tasks=tuple(
                TaskResult(
                    name=t["name"],
                    weight=t["weight"],
                    flops=t["flops"],
                    trials=t["trials"],
                    untuned_s=t["untuned_s"],
                    best_s=t["best_s"],
                    speedup=t["speedup"],
                    done=t["done"],
                )
                for t in report["tasks"]
            ),
            paths={k: Path(v) for k, v in report["paths"].items()},
            report=report,
        )


def tune(
    model: str | Path,
    *,
    budget: str | None = None,
    target: str | None = None,
    out: str | Path | None = None,
    input_shapes: Mapping[str, Sequence[int]] | Iterable[str] | None = None,
    config: str | Path | None = None,
    trials_per_round: int | None = None,
    seed: int | None = None,
    filter: str | None = None,
    price: float | None = None,
    min_gain: float | None = None,
    early_stop: bool | None = None,
    build_only: bool = False,
    on_event: Callable[[Event], None] | None = None,
) -> Result:
    """Tune `model` (an ONNX file) within `budget` and compile it; see `orchestrate --help`.

    Options left as None come from `config` (a TOML file) over `configs/default.toml`.
    `price` is USD per hour (per GPU on GPU runs, per machine on CPU runs) and replaces the
    price table. Raises InputError for bad input; nothing in an existing run directory is
    touched then.
    """
    from budget import AnyOf, BudgetError, BudgetLimits, check_applicable, parse_budget
    from budget.diminishing import DiminishingReturns
    from budget.limits import primary_limit
    from budget.plateau import TaskPlateau
    from budget.prices import run_price
    from filters import make_filter
    from measure.telemetry import energy_meter

    from .config import Settings
    from .model import fuse_for_tuning, import_to_relax, load_model
    from .rundir import RunDir
    from .session import Session, fingerprint
    from .targets import host_cores, resolve_target
    from .tasks import extract_tasks

    overrides = {
        "tune.budget": budget,
        "tune.target": target,
        "tune.trials_per_round": trials_per_round,
        "tune.seed": seed,
        "tune.filter": filter,
        "stopping.min_gain": min_gain,
        "stopping.early_stop": early_stop,
    }
    settings = Settings.load(config, {k: v for k, v in overrides.items() if v is not None})
    # 1. Check everything the user gave before anything is written.
    try:
        budget_obj = parse_budget(settings.tune.budget)
    except BudgetError as exc:
        raise InputError(str(exc)) from None
    try:
        candidate_filter = make_filter(settings.tune.filter)
    except ValueError as exc:
        raise InputError(f"--filter: {exc}") from None
    onnx_model = load_model(model, _shapes(input_shapes))
    resolved = resolve_target(settings.tune.target, build_only=build_only)
    if price is not None and not price >= 0:
        raise InputError(
            f"--price must be a non-negative number of US dollars per hour, not {price}"
        )
    run_cost = run_price(
        device_type=resolved.device_type,
        device_name=resolved.device_name,
        devices=resolved.devices,
        cores=host_cores(),
        override=price,
    )
    energy = energy_meter(resolved.device_type) if resolved.device_present else None
    try:
        check_applicable(
            budget_obj,
            devices=resolved.devices,
            price_known=run_cost is not None,
            energy_known=energy is not None,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    s_stop = settings.stopping
    rules = [BudgetLimits(budget_obj, round_size=settings.tune.trials_per_round)]
    if s_stop.early_stop:
        rules.append(
            DiminishingReturns(
                primary_limit(budget_obj),
                min_gain=s_stop.min_gain,
                window=s_stop.window,
                min_rounds=s_stop.min_rounds,
            )
        )
    plateau = TaskPlateau(patience=s_stop.task_patience, min_gain=s_stop.task_min_gain)
    started = time.monotonic()
    relax_mod = import_to_relax(onnx_model)
    tasks = extract_tasks(fuse_for_tuning(relax_mod, resolved.target), resolved.target)
    import_s = time.monotonic() - started
    out_dir = Path(out) if out is not None else default_out(onnx_model.name)
    # 2. Run on the directory we own.
    emit = _emitter(on_event)
    with RunDir.open(out_dir, fingerprint=fingerprint(onnx_model, resolved)) as run:
        report = Session(
            model=onnx_model,
            relax_mod=relax_mod,
            tasks=tasks,
            import_s=import_s,
            target=resolved,
            settings=settings,
            budget=budget_obj,
            stopping=AnyOf(rules),
            plateau=plateau,
            price=run_cost,
            energy=energy,
            candidate_filter=candidate_filter,
            run=run,
            build_only=build_only,
            emit=emit,
        ).execute()
    return Result.from_report(report)


def default_out(model_name: str) -> Path:
    """runs/<model>-<timestamp>, made unique if that folder exists already."""
    base = Path("runs") / f"{model_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _shapes(
    given: Mapping[str, Sequence[int]] | Iterable[str] | None,
) -> dict[str, tuple[int, ...]]:
    from .model import parse_input_shape

    if given is None:
        return {}
    if isinstance(given, Mapping):
        return {str(k): tuple(int(d) for d in v) for k, v in given.items()}
    shapes: dict[str, tuple[int, ...]] = {}
    for text in given:
        name, shape = parse_input_shape(text)
        if name in shapes:
            raise InputError(f"--input-shape gives {name!r} twice; give each input once")
        shapes[name] = shape
    return shapes


def _emitter(on_event: Callable[[Event], None] | None) -> Callable[..., None]:
    def emit(event: str, **fields: Any) -> None:
        if on_event is not None:
            on_event({"event": event, "time": time.time(), **fields})

    return emit
