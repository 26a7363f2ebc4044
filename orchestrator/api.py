"""The Python API: `tune()` takes the CLI's options and returns a `Result`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
    retired: str | None  # why the task got no more rounds, if it was retired
    schedule: str  # what the model runs: "tuned" (its best record) or "default" (untuned)


@dataclasses.dataclass(frozen=True)
class Result:
    """What a run produced; every number here is also in `report.json`.

    The latencies are medians of the untuned and the tuned model timed in turn at the end of
    the run; `untuned_latency` / `tuned_latency` hold their spread (median_s, min_s, max_s,
    repeats). `change` is "faster" or "slower" only when every timing of one model beats
    every timing of the other, else "no change" (None: not timed); `speedup` is the speedup
    claimed: the ratio of the medians for "faster" / "slower", exactly 1.0 for "no change"
    (None: not timed). `measured_ratio` is the ratio of the medians as measured, noise
    included: not a claim.

    `shipped` says which build model.so is: "tuned", "untuned", or "none" (no model.so: the
    outputs of both differ from onnxruntime's). `shipped_checked` is True where model.so's
    outputs matched onnxruntime's (`checked_on` says where); False with `unchecked_reason`
    where nothing could run it. A tuned build whose outputs differ (`check_ok` False, exit
    code 4) is kept aside as `mismatch_library`, never shipped.
    """

    run_dir: Path
    model: str
    target: str
    untuned_latency_s: float | None
    tuned_latency_s: float | None
    speedup: float | None
    measured_ratio: float | None
    change: str | None
    shipped: str
    shipped_checked: bool
    checked_on: str | None
    unchecked_reason: str | None
    mismatch_library: Path | None
    untuned_latency: Mapping[str, Any] | None
    tuned_latency: Mapping[str, Any] | None
    kept_default: tuple[str, ...]  # tuned tasks whose default schedule stayed faster
    kernels: Mapping[str, Any] | None  # CUDA kernels compiled by nvcc on a GPU-less host
    trials: int
    rounds: int
    wall_s: float
    device_h: float
    usd: float | None
    energy_j: float | None
    phases: Mapping[str, float]
    stop_reason: str
    interrupted: bool
    budget_too_small: bool
    check_ok: bool | None
    max_rel_error: float | None
    tasks: tuple[TaskResult, ...]
    paths: Mapping[str, Path]
    report: Mapping[str, Any] = dataclasses.field(repr=False)

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> Result:
        summary = report["summary"]
        tuned = report.get("tuned") or {}
        check = tuned.get("check") or {}
        return cls(
            run_dir=Path(report["paths"]["run_dir"]),
            model=report["model"]["name"],
            target=report["target"]["description"],
            untuned_latency_s=summary["untuned_latency_s"],
            tuned_latency_s=summary["tuned_latency_s"],
            speedup=summary["speedup"],
            measured_ratio=summary["measured_ratio"],
            change=summary["change"],
            shipped=summary["shipped"],
            shipped_checked=summary["shipped_checked"],
            checked_on=summary["checked_on"],
            unchecked_reason=summary["unchecked_reason"],
            mismatch_library=_path(summary["mismatch_library"]),
            untuned_latency=(report.get("untuned") or {}).get("latency"),
            tuned_latency=tuned.get("latency"),
            kept_default=tuple(summary.get("kept_default", ())),
            kernels=tuned.get("kernels"),
            trials=summary["trials"],
            rounds=summary["rounds"],
            wall_s=summary["wall_s"],
            device_h=summary["device_h"],
            usd=summary["usd"],
            energy_j=summary["energy_j"],
            phases=dict(report["spend"]["phases"]),
            stop_reason=summary["stop_reason"],
            interrupted=summary["interrupted"],
            budget_too_small=summary["budget_too_small"],
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
                    retired=t["retired"],
                    schedule=t.get("schedule", "tuned" if t["best_s"] else "default"),
                )
                for t in report["tasks"]
            ),
            paths={k: Path(v) for k, v in report["paths"].items()},
            report=report,
        )

    @property
    def exit_code(self) -> int:
        from . import exits

        return exits.for_result(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, as in the `finished` event."""
        out = dataclasses.asdict(self)
        del out["report"]
        out["run_dir"] = str(self.run_dir)
        out["tasks"] = list(out["tasks"])
        out["kept_default"] = list(self.kept_default)
        out["paths"] = {k: str(v) for k, v in self.paths.items()}
        out["mismatch_library"] = _path_text(self.mismatch_library)
        return out


def _path(text: str | None) -> Path | None:
    return None if text is None else Path(text)


def _path_text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def tune(
    model: str | Path,
    *,
    budget: Any = None,
    target: str | None = None,
    out: str | Path | None = None,
    input_shapes: Mapping[str, Sequence[int]] | Iterable[str] | None = None,
    config: str | Path | None = None,
    trials_per_round: int | None = None,
    seed: int | None = None,
    filter: str | None = None,
    warm_start: str | Path | None = None,
    library: str | Path | bool | None = None,
    gpus: Sequence[int] | str | None = None,
    parallelism: int | str = "auto",
    rpc: str | None = None,
    rpc_key: str | None = None,
    price: float | None = None,
    min_gain: float | None = None,
    early_stop: bool | None = None,
    build_only: bool = False,
    simulate: bool = False,
    on_event: Callable[[Event], None] | None = None,
    handle_signals: bool = True,
    mlflow: bool | str = False,
    mlflow_experiment: str = "tune-orchestrator",
    env: Mapping[str, str] | None = None,
    started: float | None = None,
    command: Sequence[str] | None = None,
) -> Result:
    """Tune `model` (an ONNX file) within `budget` and compile it; see `orchestrate --help`.

    `budget` is a string ("2gpu-h,$5") or a `budget.Budget`. `warm_start` is an earlier run
    directory (its records train the learned model the search and the filter share, whatever
    model they came from) or a saved predictor.json. `library` is the root of the tuning
    libraries (None: $XDG_CACHE_HOME/tune-orchestrator/library, else ~/.cache/...; False: leave
    it alone): the target's library under it gives each task it knows its fastest records and
    the learned model its records before the first round, and gets this run's records when the
    tuned model passes its check (a warm start adds its records to the library's).
    `gpus` ("0,1" or [0, 1]; default: every
    visible GPU) and `parallelism` ("auto" or a fixed DOP) set where and how parallel
    candidates are timed (on GPUs and fleets only);
    `rpc` ("HOST:PORT" of a TVM RPC tracker) with `rpc_key` measures on its servers instead.
    Options left as None come from
    ORCHESTRATE_* variables of `env` (default: os.environ), then `config` (a TOML file), over
    `configs/default.toml`. `price` is USD per hour (per GPU on GPU runs, per machine on CPU
    runs). `on_event` receives every event (see orchestrator/events.schema.json). With
    `handle_signals`, SIGINT/SIGTERM stop the run after the current round (main thread only).
    `mlflow` logs to MLflow: True for MLFLOW_TRACKING_URI, or a tracking URI.
    `simulate` tunes for a CUDA target (default nvidia/nvidia-h100) with real search and builds
    and timings from a simulated GPU; everything it writes says SIMULATED.

    The budget counts from the call, or from `started` (a `time.monotonic()` reading; the CLI
    gives its process's start, so that interpreter start and imports count too).
    `command` is the command line the report says started the run (the CLI gives its argv);
    None says the Python API did.

    Raises InputError for bad input; nothing in an existing run directory is touched then.
    Raises BudgetTooSmall, before any work, when the budget cannot cover the untuned baseline
    and compiling and checking the model; its message names the budget that would.
    """
    # Spend counts from here: importing, checking and reading the model are part of it.
    called = time.monotonic() if started is None else started
    from tune_orchestrator.budget import (
        AnyOf,
        BudgetError,
        BudgetLimits,
        check_applicable,
        parse_budget,
    )
    from tune_orchestrator.budget.diminishing import DiminishingReturns
    from tune_orchestrator.budget.limits import primary_limit
    from tune_orchestrator.budget.plateau import TaskPlateau
    from tune_orchestrator.budget.prices import run_price
    from tune_orchestrator.filters import NAMES, Predictor, TrimmerConfig, make_filter
    from tune_orchestrator.measure.telemetry import energy_meter

    from . import exits
    from .config import Settings
    from .events import Emitter
    from .interrupt import Interrupt, on_signals
    from .library import RunLibrary
    from .measuring import target_and_fleet
    from .model import fuse_for_tuning, import_to_relax, load_model
    from .rundir import RunDir
    from .session import Session, fingerprint
    from .targets import host_cores
    from .tasks import extract_tasks

    overrides = {
        "tune.budget": None if budget is None else str(budget),
        "tune.target": target,
        "tune.trials_per_round": trials_per_round,
        "tune.seed": seed,
        "tune.filter": filter,
        "stopping.min_gain": min_gain,
        "stopping.early_stop": early_stop,
    }
    settings = Settings.load(
        config,
        {k: v for k, v in overrides.items() if v is not None},
        env=os.environ if env is None else env,
    )
    # 1. Check everything the user gave before anything is written.
    try:
        budget_obj = parse_budget(settings.tune.budget)
    except BudgetError as exc:
        raise InputError(str(exc)) from None
    if settings.tune.filter not in NAMES:
        raise InputError(
            f"--filter: unknown filter {settings.tune.filter!r}; choose one of: {', '.join(NAMES)}"
        )
    shared = settings.search.cost_model == "shared"
    warm_path = _warm_start_source(warm_start, shared or settings.tune.filter == "xgb")
    onnx_model = load_model(model, _shapes(input_shapes))
    resolved, fleet = target_and_fleet(
        settings.tune.target,
        build_only=build_only,
        gpus=gpus,
        parallelism=parallelism,
        rpc=rpc,
        rpc_key=rpc_key,
        simulate=simulate,
    )
    devices = fleet.devices(resolved.device_type)
    run_library = RunLibrary.open(library, resolved, settings, build_only=build_only)
    if price is not None and not price >= 0:
        raise InputError(
            f"--price must be a non-negative number of US dollars per hour, not {price}"
        )
    run_cost = run_price(
        device_type=resolved.device_type,
        device_name=resolved.device_name,
        devices=devices,
        cores=host_cores(),
        override=price,
    )
    # Energy of the chosen local GPUs; a fleet's GPUs are not metered from here.
    local = resolved.device_present and not fleet.rpc
    energy = energy_meter(resolved.device_type, fleet.gpus) if local else None
    try:
        check_applicable(
            budget_obj,
            devices=devices,
            price_known=run_cost is not None,
            energy_known=energy is not None,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    interrupt = Interrupt()
    s_stop = settings.stopping
    rules = [interrupt, BudgetLimits(budget_obj, round_size=settings.tune.trials_per_round)]
    if s_stop.early_stop:
        rules.append(
            DiminishingReturns(
                primary_limit(budget_obj),
                min_gain=s_stop.min_gain,
                window=s_stop.window,
                min_rounds=s_stop.min_rounds,
                min_share=s_stop.evidence_share,
                min_measured_rounds=s_stop.evidence_rounds,
            )
        )
    plateau = TaskPlateau(patience=s_stop.task_patience, min_gain=s_stop.task_min_gain)
    mlflow_logger = None
    if mlflow:
        from .mlflow_log import MlflowLogger

        mlflow_logger = MlflowLogger(
            tracking_uri=mlflow if isinstance(mlflow, str) else None,
            experiment=mlflow_experiment,
            params={
                "model": onnx_model.name,
                "model_sha256": onnx_model.sha256,
                "target": resolved.describe(),
                **_flat(settings.to_dict()),
            },
        )
    relax_mod = import_to_relax(onnx_model)
    tasks = extract_tasks(fuse_for_tuning(relax_mod, resolved.target), resolved.target)
    import_s = time.monotonic() - called
    out_dir = Path(out) if out is not None else default_out(onnx_model.name)
    # 2. Run on the directory we own.
    emit = Emitter(on_event, mlflow_logger)
    fresh = not out_dir.exists()
    with (
        RunDir.open(
            out_dir,
            fingerprint=fingerprint(onnx_model, resolved),
            simulated=resolved.simulated,
        ) as run,
        on_signals(interrupt, handle_signals),
        _refusal(out_dir, fresh, emit),
    ):
        f = settings.filter
        # Its refits use every core this process may run on.
        predictor = (
            Predictor(seed=settings.tune.seed, min_samples=f.min_samples, threads=host_cores())
            if shared
            else None
        )
        candidate_filter = make_filter(
            settings.tune.filter,
            target=resolved.target,
            config=TrimmerConfig(
                min_samples=f.min_samples,
                recall_target=f.recall_target,
                evidence_rounds=f.evidence_rounds,
                recall_step=f.recall_step,
                min_keep=min(f.min_keep, settings.tune.trials_per_round),
                max_keep=settings.tune.trials_per_round,
                audit_share=f.audit_share,
                min_audit=f.min_audit,
                seed=settings.tune.seed,
                threads=host_cores(),
            ),
            state_dir=run.path,
            predictor=predictor,
        )
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
            interrupt=interrupt,
            candidate_filter=candidate_filter,
            predictor=predictor,
            warm_start=warm_path,
            library=run_library,
            fleet=fleet,
            run=run,
            build_only=build_only,
            emit=emit,
            command=command,
        ).execute()
    result = Result.from_report(report)
    emit("finished", result=result.to_dict(), exit_code=exits.for_result(result))
    return result


@contextlib.contextmanager
def _refusal(path: Path, fresh: bool, emit: Callable[..., None]) -> Iterator[None]:
    """A budget refused up front ends the event stream with a `refused` event (a pipeline
    reading events sees why, and the budget that would do), and the run directory made for it
    is removed again: nothing ran."""
    from . import exits
    from .errors import BudgetTooSmall

    try:
        yield
    except BudgetTooSmall as exc:
        emit("refused", reason=str(exc), minimum=exc.minimum, exit_code=exits.BUDGET_TOO_SMALL)
        if fresh:
            shutil.rmtree(path, ignore_errors=True)
        raise


def _warm_start_source(given: str | Path | None, has_model: bool) -> Path | None:
    """Check --warm-start: a run directory with a database, or a predictor .json file."""
    if given is None:
        return None
    path = Path(given)
    if not has_model:
        raise InputError(
            '--warm-start trains the learned model, which [search] cost_model = "tvm-xgb" '
            "leaves to the xgb filter; use --filter xgb or the shared cost model"
        )
    if path.is_dir() and (path / "database_tuning_record.json").is_file():
        return path
    if path.is_file() and path.suffix == ".json":
        return path
    raise InputError(
        f"--warm-start {path} is neither a run directory (with database_tuning_record.json) "
        "nor a saved predictor (predictor.json)"
    )


def default_out(model_name: str) -> Path:
    """runs/<model>-<timestamp>, made unique if that folder exists already."""
    base = Path("runs") / f"{model_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _flat(nested: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {
        f"{section}.{key}": value
        for section, values in nested.items()
        for key, value in values.items()
    }


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
