"""A run's parts, checked and made before any work: its settings and inputs (every mistake is
an InputError here, before anything is written), the rules that stop it, its candidate filter
and its MLflow logger."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import math
import operator
import os
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..options import Options
from ..rundir.atomic import link_to_nothing, on_read_only_disk
from ..rundir.directory import cannot_write


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stopping:
    """What ends the run and retires its tasks: signals, the budget and early stopping (all in
    `rule`), and a task's plateau."""

    interrupt: Any  # run.interrupt.Interrupt
    rule: Any  # budget.StoppingRule
    plateau: Any  # budget.plateau.TaskPlateau | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cost:
    """What a second of the run costs: its price (None: not known) and the energy meter of the
    local GPUs (None: not metered)."""

    price: Any  # budget.prices.Price | None
    energy: Any  # budget.ledger.EnergyMeter | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Invocation:
    """How this invocation runs: its run directory (`fresh`: an earlier run there is moved
    aside first; `claim`: none was given, and the default one is made by `claim`), whether it
    only compiles, the command line (None: the Python API), and the MLflow logger (None: not
    asked for)."""

    out: Path
    fresh: bool
    build_only: bool
    command: Sequence[str] | None
    logger: Any
    claim: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Given:
    """A run as described and checked before any work: what to tune (model), for what (target),
    with which settings, within what (budget, stopping), where it measures (fleet), with which
    library and cost, from which warm start, checked how, and how it was invoked."""

    model: Any  # model.loading.OnnxModel
    target: Any  # model.targets.ResolvedTarget
    settings: Any  # config.Settings
    budget: Any  # budget.Budget
    stopping: Stopping
    fleet: Any  # run.measuring.Fleet
    library: Any  # library.RunLibrary
    cost: Cost
    warm_start: Path | None
    checker: Any  # deploy.Checker: the output check, on its samples
    invocation: Invocation


def describe(
    model: str | Path,
    budget: Any,
    target: str | None,
    out: str | Path | None,
    options: Options,
    *,
    env: Mapping[str, str],
    command: Sequence[str] | None,
) -> Given:
    """Read the settings and every input; InputError for the first that does not hold, before
    anything is written."""
    from ..deploy import samples
    from ..deploy.devices import runs_model
    from ..host import check_temp_room
    from ..library import RunLibrary
    from ..model.loading import load_model
    from .measuring import target_and_fleet

    check_out(out)
    settings = _settings(budget, target, options, env)
    sources = _sources(budget, target, options, env)
    budget_obj = checked_budget(settings, sources)
    shared = settings.search.cost_model == "shared"
    warm = _warm_start_source(options.warm_start, shared or settings.tune.filter == "xgb")
    _not_a_run(model)
    onnx_model = load_model(model, shapes(options.input_shapes))
    check_temp_room(onnx_model.weight_bytes())
    with _named_by(sources.get("tune.target", "options"), "target"):
        resolved, fleet = target_and_fleet(
            settings.tune.target,
            build_only=options.build_only,
            gpus=options.gpus,
            parallelism=options.parallelism,
            rpc=options.rpc,
            rpc_key=options.rpc_key,
            simulate=options.simulate,
        )
    _check_memory(onnx_model, options, resolved, fleet)
    check_samples = samples.for_run(onnx_model, settings, options.check_inputs)
    checker = output_checker(onnx_model, check_samples, settings, runs_model(resolved, fleet))
    library = RunLibrary.open(options.library, resolved, settings, build_only=options.build_only)
    cost = _cost(budget_obj, resolved, fleet, options.price)
    invocation = Invocation(
        out=Path(out) if out is not None else default_out(onnx_model.name),
        claim=out is None,
        fresh=options.fresh,
        build_only=options.build_only,
        command=command,
        logger=mlflow_logger(options, onnx_model, resolved, settings),
    )
    return Given(
        model=onnx_model, target=resolved, settings=settings, budget=budget_obj,
        stopping=stopping_rules(settings, budget_obj), fleet=fleet, library=library, cost=cost,
        warm_start=warm, checker=checker, invocation=invocation,
    )  # fmt: skip


def _not_a_run(model: str | Path) -> None:
    """InputError where MODEL is a run directory (`orchestrate runs/m`, to go on with a run),
    with the command that does: the model it tuned, its budget and settings, as --out."""
    from ..model.loading import as_path
    from ..rundir import RunDir
    from .reporting import resume_command

    path = as_path("model", model)
    if path.is_dir() and (path / RunDir.CONFIG).is_file():
        raise InputError(
            f"{path} is a run directory, not a model; to go on with that run, give its model "
            f"and the directory as --out: {resume_command(RunDir(path))}"
        )


def _check_memory(model: Any, options: Options, target: Any, fleet: Any) -> None:
    """InputError where running the model on the output check's samples cannot fit this host's
    memory, or one sample that of the smallest local GPU it measures on (the check runs the
    samples there one at a time); before the samples are drawn."""
    from ..deploy.samples import SEEDS
    from ..host import check_memory_room

    check_memory_room(model, 1 if options.check_inputs else SEEDS)
    if target.device_type == "cuda" and target.device_present and not fleet.rpc:
        gpu, memory = fleet.smallest_memory()
        check_memory_room(model, 1, memory=memory, where=f"on GPU {gpu}")


def resumed_with(given: Given) -> dict[str, Any]:
    """Where the run measures and what it reads, as config.json keeps them for the command
    that resumes it (run/reporting): the library's root (False: --no-library; None: left alone
    for another reason), the GPUs and parallelism, the RPC fleet, the warm start, and MLflow
    where the run logs to it (the tracking URI given, None for MLFLOW_TRACKING_URI's)."""
    fleet, library, logger = given.fleet, given.library, given.invocation.logger
    if library.library is not None:
        root: str | bool | None = str(library.path.parent.absolute())
    else:
        root = False if library.off == "--no-library" else None
    local_gpus = given.target.device_type == "cuda" and not fleet.rpc
    return {
        "library": root,
        "gpus": list(fleet.gpus) if local_gpus else None,
        "parallelism": fleet.parallelism,
        "rpc": fleet.rpc,
        "rpc_key": fleet.rpc_key,
        "warm_start": None if given.warm_start is None else str(given.warm_start.absolute()),
        "mlflow": None
        if logger is None
        else {"uri": logger.tracking_uri, "experiment": logger.experiment},
    }


def output_checker(model: Any, samples: Any, settings: Any, runs: bool) -> Any:
    """The check of the run's builds (`runs`: something runs them); InputError, before any
    work, where it could not check one: onnxruntime cannot run the model on its samples, or
    gives an output as NaN everywhere on them."""
    from ..deploy import Checker

    checker = Checker.for_model(model, samples=samples, settings=settings.check)
    problem = checker.reference_problem() if runs else None
    if problem is not None:
        raise InputError(
            f"the output check cannot run on {model.path.name}: {problem}; or give --no-check "
            "to tune it and ship model.so unchecked"
        )
    return checker


def check_price(override: float | None) -> None:
    """InputError for a --price that is not a finite, non-negative number of dollars an hour."""
    if override is not None and not 0 <= override < math.inf:
        raise InputError(
            f"--price must be a finite, non-negative number of US dollars per hour, not {override}"
        )


def _cost(budget: Any, resolved: Any, fleet: Any, override: float | None) -> Cost:
    """The run's price and energy meter; InputError for a limit they cannot meter."""
    from tune_orchestrator.budget.prices import run_price
    from tune_orchestrator.measure.telemetry import energy_meter

    from ..host import host_cores

    check_price(override)
    devices = fleet.devices(resolved.device_type)
    price = run_price(
        device_type=resolved.device_type,
        device_name=resolved.device_name,
        devices=devices,
        cores=host_cores(),
        override=override,
    )
    # Energy of the chosen local GPUs; a fleet's GPUs are not metered from here.
    local = resolved.device_present and not fleet.rpc
    energy = energy_meter(resolved.device_type, fleet.gpus) if local else None
    _check_applicable(budget, devices, price, energy is not None)
    return Cost(price=price, energy=energy)


def stopping_rules(settings: Any, budget: Any) -> Stopping:
    """The rule that stops the run (signals, budget, early stop) and the one that retires a
    task on its plateau."""
    from tune_orchestrator.budget import AnyOf, BudgetLimits
    from tune_orchestrator.budget.diminishing import DiminishingReturns
    from tune_orchestrator.budget.limits import primary_limit
    from tune_orchestrator.budget.plateau import TaskPlateau

    from .interrupt import Interrupt

    s = settings.stopping
    interrupt = Interrupt()
    rules = [interrupt, BudgetLimits(budget, round_size=settings.tune.trials_per_round)]
    if s.early_stop:
        rules.append(
            DiminishingReturns(
                primary_limit(budget),
                min_gain=s.min_gain,
                window=s.window,
                min_rounds=s.min_rounds,
                min_share=s.evidence_share,
                min_measured_rounds=s.evidence_rounds,
            )
        )
    plateau = TaskPlateau(patience=s.task_patience, min_gain=s.task_min_gain)
    return Stopping(interrupt=interrupt, rule=AnyOf(rules), plateau=plateau)


def candidate_filter(
    settings: Any, target: Any, state_dir: Path, *, skipped: Any = None
) -> tuple[Any, Any]:
    """(the candidate filter, the learned model the search and the filter share, or None
    when the search keeps TVM's own). `skipped`: the run's tally (Skipped), counting saved
    filter state in `state_dir` that cannot be read."""
    from tune_orchestrator.filters import Predictor, TrimmerConfig, make_filter

    from ..host import host_cores

    f, seed = settings.filter, settings.tune.seed
    shared = settings.search.cost_model == "shared"
    # Its refits use every core this process may run on.
    predictor = (
        Predictor(seed=seed, min_samples=f.min_samples, threads=host_cores()) if shared else None
    )
    config = TrimmerConfig(
        min_samples=f.min_samples,
        recall_target=f.recall_target,
        evidence_rounds=f.evidence_rounds,
        recall_step=f.recall_step,
        min_keep=min(f.min_keep, settings.tune.trials_per_round),
        max_keep=settings.tune.trials_per_round,
        audit_share=f.audit_share,
        min_audit=f.min_audit,
        seed=seed,
        threads=host_cores(),
    )
    made = make_filter(
        settings.tune.filter,
        target=target.target,
        config=config,
        state_dir=state_dir,
        predictor=predictor,
        skipped=skipped,
    )
    return made, predictor


def mlflow_logger(options: Options, model: Any, target: Any, settings: Any) -> Any:
    """An MLflow logger of the run, or None when not asked for."""
    if not options.mlflow:
        return None
    from ..mlflow_log import MlflowLogger

    return MlflowLogger(
        tracking_uri=options.mlflow if isinstance(options.mlflow, str) else None,
        experiment=options.mlflow_experiment,
        params={
            "model": model.name,
            "model_sha256": model.sha256,
            "target": target.describe(),
            **_flat(settings.to_dict()),
        },
    )


def check_out(given: str | Path | None) -> None:
    """An --out that exists must be a folder this user may list, enter and write; InputError
    otherwise, before any work (the run directory would meet it with a traceback). Without
    --out, ./runs must be such a folder, or one that can be made here."""
    if given is None:  # the default, runs/<model>-<time>, is new
        _check_cwd(f"{DEFAULT_ROOT}/<model>-<time>")
        _check_default_root(Path(DEFAULT_ROOT))
        return
    from ..model.loading import as_path

    out = as_path("out", given)
    if not out.is_absolute():
        _check_cwd(f"--out {out}")
    try:
        usable = not out.is_dir() or os.access(out, os.R_OK | os.W_OK | os.X_OK)
        _refuse_dangling_links(out, "or give another --out")
    except OSError as exc:  # a folder above it that this user may not enter
        raise InputError(
            f"cannot reach --out {out}: {exc.strerror}; choose a directory you can read and write"
        ) from None
    if not usable and on_read_only_disk(out):
        raise InputError(cannot_write(out, os.strerror(errno.EROFS)))
    if not usable:
        raise InputError(
            f"--out {out} is not readable, writable and searchable by you (mode "
            f"{stat.S_IMODE(out.stat().st_mode):o}); choose another directory or chmod u+rwx it"
        )


DEFAULT_ROOT = "runs"  # where a run goes without --out, under the current directory


def _check_cwd(out: str) -> None:
    """InputError where the current directory was deleted (by another shell, a cleanup job):
    `out`, relative to it, cannot be made."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise InputError(
            f"the current directory was deleted, so {out} cannot be made in it; cd to a folder "
            "that exists, or give --out as an absolute path"
        ) from None


def _refuse_dangling_links(path: Path, fix: str) -> None:
    """InputError where a link on the way to `path` points to nothing (making the folder
    would fail with ENOENT); links inside a run directory are RunDir's to refuse."""
    if why := link_to_nothing(path):
        raise InputError(f"{why}; make it, {fix}")


def _check_default_root(root: Path) -> None:
    where = f"{root}/<model>-<time>, where a run goes without --out"
    _refuse_dangling_links(root, "or give --out DIR")
    if root.exists() and not root.is_dir():
        raise InputError(f"{root} here is a file, so {where}, cannot be made; give --out DIR")
    folder = root if root.exists() else Path.cwd()
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(
            f"{folder} is not writable by you, so {where}, cannot be made; give --out DIR"
        )


def default_out(model_name: str) -> Path:
    """runs/<model>-<timestamp>: the run directory `claim` makes when none is given."""
    return Path(DEFAULT_ROOT) / f"{model_name}-{time.strftime('%Y%m%d-%H%M%S')}"


def claim(path: Path) -> Path:
    """`path`, or `path`-2, -3, ... where that exists, made here and now: two runs started in
    the same second (two seeds of one model, in parallel) each get a directory of their own.
    Looking first and making it later, the second took the first's: "in use by another
    orchestrate process", or, once the first had finished, a resume of it."""
    candidate, n = path, 1
    while True:
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            if not candidate.parent.is_dir():  # not a name taken: it would be taken for ever
                raise
            n += 1
            candidate = path.with_name(f"{path.name}-{n}")


def shapes(given: Mapping[str, Sequence[int]] | Iterable[str] | None) -> dict[str, tuple[int, ...]]:
    """Input shapes given as {"x": [1, 3, 8, 8]} or as "x:1,3,8,8" strings (one string alone,
    too); InputError, with the form, for any other."""
    from ..model.loading import parse_input_shape

    if given is None:
        return {}
    if isinstance(given, Mapping):
        return {str(k): _dims(k, v) for k, v in given.items()}
    if isinstance(given, str):
        given = [given]
    if not isinstance(given, Iterable) or not all(isinstance(t, str) for t in given):
        raise InputError(
            f"input_shapes {given!r} is neither {{name: [dims]}} nor a list of 'name:dims' "
            'strings; give it like {"input": [1, 3, 224, 224]}'
        )
    out: dict[str, tuple[int, ...]] = {}
    for text in given:
        name, shape = parse_input_shape(text)
        if name in out:
            raise InputError(f"--input-shape gives {name!r} twice; give each input once")
        out[name] = shape
    return out


def _dims(name: Any, dims: Any) -> tuple[int, ...]:
    """The dimensions given for input `name` in input_shapes' {name: [dims]} form."""
    try:
        if isinstance(dims, str | bytes):
            raise TypeError(dims)
        return tuple(operator.index(d) for d in dims)
    except TypeError:
        raise InputError(
            f"input_shapes[{name!r}] = {dims!r} is not a list of integers; give it like "
            "[1, 3, 224, 224]"
        ) from None


def _settings(budget: Any, target: str | None, options: Options, env: Mapping[str, str]) -> Any:
    from ..config import Settings

    return Settings.load(options.config, _overrides(budget, target, options), env=env)


def _sources(
    budget: Any, target: str | None, options: Options, env: Mapping[str, str]
) -> dict[str, str]:
    """Where each setting came from, as `_settings` layers them (Settings.sources)."""
    from ..config import Settings

    return Settings.sources(options.config, _overrides(budget, target, options), env=env)


def _overrides(budget: Any, target: str | None, options: Options) -> dict[str, Any]:
    """The settings the caller gave: the budget, the target and the options."""
    given = {"tune.budget": None if budget is None else str(budget), "tune.target": target}
    return {k: v for k, v in given.items() if v is not None} | options.overrides()


@contextlib.contextmanager
def _named_by(source: str, key: str) -> Iterator[None]:
    """An InputError about [tune] `key` says where the value came from (a config file or an
    ORCHESTRATE_* variable the user may not think of) unless the caller gave it."""
    try:
        yield
    except InputError as exc:
        if source in ("options", "defaults"):
            raise
        raise InputError(f"{source}: [tune] {key}: {exc}") from None


def checked_budget(settings: Any, sources: Mapping[str, str]) -> Any:
    """The budget and the filter, checked; a bad one is named by where it came from (a config
    file or an ORCHESTRATE_* variable the user may not think of) unless the caller gave it."""
    from tune_orchestrator.budget import BudgetError, parse_budget
    from tune_orchestrator.filters import NAMES

    try:
        budget = parse_budget(settings.tune.budget)
    except BudgetError as exc:
        source = sources.get("tune.budget", "options")
        raise InputError(str(exc) if source == "options" else f"{source}: [tune] {exc}") from None
    if settings.tune.filter not in NAMES:
        source = sources.get("tune.filter", "options")
        name = "--filter" if source == "options" else f"{source}: [tune] filter"
        raise InputError(
            f"{name}: unknown filter {settings.tune.filter!r}; choose one of: {', '.join(NAMES)}"
        )
    return budget


def _check_applicable(budget: Any, devices: int, price: Any, energy_known: bool) -> None:
    from tune_orchestrator.budget import check_applicable

    try:
        check_applicable(
            budget,
            devices=devices,
            price_known=price is not None,
            energy_known=energy_known,
            free=price is not None and price.usd_per_hour == 0,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _warm_start_source(given: str | Path | None, has_model: bool) -> Path | None:
    """Check --warm-start: a run directory whose database holds tuning records, or a saved
    predictor (an XGBoost model of this TVM's features). Records that turn out unusable
    later are skipped and counted; a source with nothing to use is refused here."""
    if given is None:
        return None
    path = Path(given)
    if not has_model:
        raise InputError(
            '--warm-start trains the learned model, which [search] cost_model = "tvm-xgb" '
            "leaves to the xgb filter; use --filter xgb or the shared cost model"
        )
    try:
        if path.is_dir() and (path / "database_tuning_record.json").is_file():
            return _warm_start_run(path)
        if path.is_dir() and (path / "SIMULATED_database_tuning_record.json").is_file():
            raise InputError(
                f"--warm-start {path} is a --simulate run: its timings came from a simulated "
                "GPU, not a device; give a run that measured on one"
            )
        if path.is_file() and path.name.endswith(("_tuning_record.json", "_workload.json")):
            raise InputError(
                f"--warm-start {path} is a file of a run's database; give the run directory "
                f"that holds it: --warm-start {path.parent}"
            )
        if path.is_file() and path.suffix == ".json":
            return _warm_start_predictor(path)
    except OSError as exc:
        raise InputError(
            f"cannot read --warm-start {path}: {exc.strerror or exc}; check its permissions"
        ) from None
    raise InputError(
        f"--warm-start {path} is neither a run directory (with database_tuning_record.json) "
        "nor a saved predictor (predictor.json)"
    )


def _warm_start_run(path: Path) -> Path:
    """A run directory whose database has at least one record line (OSError if unreadable)."""
    from ..library.files import RECORDS, WORKLOADS, Contents

    workloads = path / WORKLOADS
    if not workloads.is_file():
        raise InputError(
            f"--warm-start {path} has {RECORDS} but no {WORKLOADS}; give a whole run directory"
        )
    if not Contents.parse(workloads.read_bytes(), (path / RECORDS).read_bytes()).records:
        raise InputError(
            f"--warm-start {path} holds no readable tuning record (its database is empty or "
            "corrupt); give a run directory that measured candidates"
        )
    return path


def _warm_start_predictor(path: Path) -> Path:
    """A predictor.json this TVM's candidates can be ranked with."""
    from tune_orchestrator.predictor import saved_problem

    problem = saved_problem(path)
    if problem is not None:
        raise InputError(
            f"--warm-start {path} is not a saved predictor this run can use ({problem}); "
            "give the predictor.json of a run made with this version, or its run directory"
        )
    return path


def _flat(nested: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {
        f"{section}.{key}": value
        for section, values in nested.items()
        for key, value in values.items()
    }
