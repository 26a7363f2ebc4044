"""Settings: `configs/default.toml`, then a user file, then explicit overrides, validated."""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tune_orchestrator import configs
from tune_orchestrator.measure.dop import DopConfig

from .errors import InputError

MAX_SEED = 2**32 - 1  # numpy's limit for legacy seeds; ours, with room for a session's offset


def _positive(section: str, name: str, value: float) -> None:
    if not value > 0:  # NaN too
        raise ValueError(f"[{section}] {name} must be positive but got {value}.")
    _finite(section, name, value)


def _non_negative(section: str, name: str, value: float) -> None:
    if not value >= 0:  # NaN too
        raise ValueError(f"[{section}] {name} cannot be negative but got {value}.")
    _finite(section, name, value)


def _finite(section: str, name: str, value: float) -> None:
    """inf would run, but reach the run's JSON files as Infinity, which strict readers refuse."""
    if value == math.inf:
        raise ValueError(f"[{section}] {name} must be a finite number but got inf.")


def _tolerance(section: str, name: str, value: float) -> None:
    """A relative tolerance: within (0, 1), so that inf and NaN, which pass anything, cannot."""
    if not 0 < value < 1:
        raise ValueError(
            f"[{section}] {name} must be a relative tolerance in (0, 1), e.g. 1e-3, but got {value}."
        )


def _probability(section: str, name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"[{section}] {name} must be within [0, 1] but got {value}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneSettings:
    budget: str
    target: str
    trials_per_round: int
    seed: int
    filter: str

    def __post_init__(self) -> None:
        _positive("tune", "trials_per_round", self.trials_per_round)
        _non_negative("tune", "seed", self.seed)
        if self.seed > MAX_SEED:  # TVM's search takes a 64-bit seed: a bigger one failed every task
            raise ValueError(f"[tune] seed must be at most {MAX_SEED} but got {self.seed}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchSettings:
    population: int
    population_per_candidate: int
    min_population: int
    max_population: int
    init_measured_ratio: float
    genetic_num_iters: int
    genetic_mutate_prob: float
    genetic_max_fail_count: int
    eps_greedy: float
    restart_after: int
    sister_share: int
    sister_trail: float
    cost_model: str
    cost_model_warmup: int
    prior: bool
    prior_weight: int
    ahead: int
    gpu_precheck: bool
    late_verify: bool

    def __post_init__(self) -> None:
        _non_negative("search", "ahead", self.ahead)
        if self.cost_model not in ("shared", "tvm-xgb"):
            raise ValueError(
                f"[search] cost_model must be shared or tvm-xgb but got {self.cost_model!r}."
            )
        if self.population == 1 or self.population < 0:
            raise ValueError(
                f"[search] population must be 0 (sized to the round) or at least 2 but got "
                f"{self.population}."
            )
        _positive("search", "population_per_candidate", self.population_per_candidate)
        if not 2 <= self.min_population <= self.max_population:
            raise ValueError(
                f"[search] needs 2 <= min_population <= max_population but got "
                f"{self.min_population}, {self.max_population}."
            )
        for name in ("init_measured_ratio", "genetic_mutate_prob", "eps_greedy", "sister_trail"):
            _probability("search", name, getattr(self, name))
        names = (
            "genetic_num_iters",
            "genetic_max_fail_count",
            "cost_model_warmup",
            "prior_weight",
            "restart_after",
            "sister_share",
        )
        for name in names:
            _non_negative("search", name, getattr(self, name))


@dataclasses.dataclass(frozen=True, kw_only=True)
class FilterSettings:
    proposal_factor: int
    min_samples: int
    recall_target: float
    evidence_rounds: int
    recall_step: float
    min_keep: int
    audit_share: float
    min_audit: int

    def __post_init__(self) -> None:
        _positive("filter", "proposal_factor", self.proposal_factor)
        _non_negative("filter", "min_samples", self.min_samples)
        _positive("filter", "min_keep", self.min_keep)
        _positive("filter", "min_audit", self.min_audit)
        _non_negative("filter", "recall_step", self.recall_step)
        if not 0 < self.recall_target <= 1:
            raise ValueError(
                f"[filter] recall_target must be in (0, 1] but got {self.recall_target}."
            )
        if self.evidence_rounds < 2:
            raise ValueError(
                f"[filter] evidence_rounds must be at least 2 but got {self.evidence_rounds}."
            )
        if not 0 < self.audit_share <= 1:
            raise ValueError(f"[filter] audit_share must be in (0, 1] but got {self.audit_share}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildSettings:
    workers: int
    timeout_s: float
    adaptive_timeout: float
    recycle_after: int
    rpc_key: str  # with --rpc: build on the tracker's build servers under this key

    def __post_init__(self) -> None:
        _non_negative("build", "workers", self.workers)
        _positive("build", "timeout_s", self.timeout_s)
        _non_negative("build", "adaptive_timeout", self.adaptive_timeout)
        _positive("build", "recycle_after", self.recycle_after)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeasureSettings:
    number: int
    repeat: int
    min_repeat_ms: int
    timeout_s: float
    cpu_cache_flush: bool
    gpu_repeat_ms: float
    min_repeats: int
    max_repeats: int
    max_rel_ci: float
    race: bool
    race_after: int
    race_margin: float
    gpu_l2_flush: bool
    pipeline: str

    def __post_init__(self) -> None:
        for name in ("number", "repeat", "timeout_s", "min_repeats", "race_after"):
            _positive("measure", name, getattr(self, name))
        for name in ("min_repeat_ms", "gpu_repeat_ms", "race_margin"):
            _non_negative("measure", name, getattr(self, name))
        if self.max_repeats < self.min_repeats:
            raise ValueError(
                f"[measure] max_repeats must be at least min_repeats but got "
                f"{self.max_repeats} < {self.min_repeats}."
            )
        if not 0 < self.max_rel_ci < 1:
            raise ValueError(f"[measure] max_rel_ci must be in (0, 1) but got {self.max_rel_ci}.")
        if self.pipeline not in ("auto", "on", "off"):
            raise ValueError(
                f"[measure] pipeline must be auto, on or off but got {self.pipeline!r}."
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class DopSettings(DopConfig):
    """[dop]: the DOP controller's settings, which are its DopConfig (checked there), and
    whether timed sections may overlap."""

    overlap_timing: bool = False

    def __post_init__(self) -> None:
        try:
            super().__post_init__()
        except ValueError as exc:
            raise ValueError(f"[dop] {exc}") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class SchedulerSettings:
    window: int
    first_round_gain: float
    min_gain_per_doubling: float
    first_round: int
    least_first_round: int
    first_rounds: int
    coverage_share: float
    peers: bool

    def __post_init__(self) -> None:
        _positive("scheduler", "window", self.window)
        _positive("scheduler", "first_rounds", self.first_rounds)
        _probability("scheduler", "first_round_gain", self.first_round_gain)
        _probability("scheduler", "min_gain_per_doubling", self.min_gain_per_doubling)
        _positive("scheduler", "first_round", self.first_round)
        _positive("scheduler", "least_first_round", self.least_first_round)
        if self.least_first_round > self.first_round:
            raise ValueError(
                f"[scheduler] least_first_round ({self.least_first_round}) must not exceed "
                f"first_round ({self.first_round})."
            )
        _probability("scheduler", "coverage_share", self.coverage_share)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoppingSettings:
    early_stop: bool
    min_gain: float
    window: float
    min_rounds: int
    task_patience: int
    task_min_gain: float
    heavy_share: float
    heavy_trials: int
    evidence_share: float
    evidence_rounds: int

    def __post_init__(self) -> None:
        if not 0 < self.min_gain < 1:
            raise ValueError(f"[stopping] min_gain must be in (0, 1) but got {self.min_gain}.")
        if not 0 < self.window <= 1:
            raise ValueError(f"[stopping] window must be in (0, 1] but got {self.window}.")
        if self.min_rounds < 2:
            raise ValueError(f"[stopping] min_rounds must be at least 2 but got {self.min_rounds}.")
        _positive("stopping", "task_patience", self.task_patience)
        _probability("stopping", "task_min_gain", self.task_min_gain)
        for name in ("heavy_share", "evidence_share"):
            _probability("stopping", name, getattr(self, name))
        for name in ("heavy_trials", "evidence_rounds"):
            _non_negative("stopping", name, getattr(self, name))


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckSettings:
    outputs: bool
    rtol: float
    rtol_half: float
    rtol_quantized: float
    int_min: int
    int_max: int
    latency_repeat: int
    latency_min_repeat: int
    latency_max_s: float
    latency_min_repeat_ms: int

    def __post_init__(self) -> None:
        _tolerance("check", "rtol", self.rtol)
        _tolerance("check", "rtol_half", self.rtol_half)
        _tolerance("check", "rtol_quantized", self.rtol_quantized)
        if self.int_min > self.int_max:
            raise ValueError(
                f"[check] needs int_min <= int_max but got {self.int_min}, {self.int_max}."
            )
        _positive("check", "latency_max_s", self.latency_max_s)
        _non_negative("check", "latency_min_repeat_ms", self.latency_min_repeat_ms)
        if not 1 <= self.latency_min_repeat <= self.latency_repeat:
            raise ValueError(
                "[check] needs 1 <= latency_min_repeat <= latency_repeat but got "
                f"{self.latency_min_repeat}, {self.latency_repeat}."
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LibrarySettings:
    reuse: int
    plateau_trials: int
    plateau_share: float
    train_records: int
    train_share: float
    transfer: int
    transfer_per_workload: int
    keep_per_workload: int

    def __post_init__(self) -> None:
        _non_negative("library", "reuse", self.reuse)
        _positive("library", "keep_per_workload", self.keep_per_workload)
        _non_negative("library", "transfer", self.transfer)
        _positive("library", "transfer_per_workload", self.transfer_per_workload)
        _positive("library", "plateau_trials", self.plateau_trials)
        if not 0 < self.plateau_share < 1:
            raise ValueError(
                f"[library] plateau_share must be in (0, 1) but got {self.plateau_share}."
            )
        _non_negative("library", "train_records", self.train_records)
        if not 0 < self.train_share <= 1:
            raise ValueError(f"[library] train_share must be in (0, 1] but got {self.train_share}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Every tunable knob of a run; `Settings.load()` builds one from the layered sources."""

    tune: TuneSettings
    search: SearchSettings
    filter: FilterSettings
    build: BuildSettings
    measure: MeasureSettings
    dop: DopSettings
    scheduler: SchedulerSettings
    stopping: StoppingSettings
    check: CheckSettings
    library: LibrarySettings

    @classmethod
    def load(
        cls,
        config_file: str | Path | None = None,
        overrides: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Settings:
        """Defaults, then `config_file` (or $ORCHESTRATE_CONFIG), then ORCHESTRATE_<SECTION>_<KEY>
        variables of `env`, then `overrides` ({"tune.budget": "5min", ...}).

        Raises InputError naming the source, the key and the fix for unknown keys, wrong
        types and out-of-range values.
        """
        merged, origin = _merged(config_file, overrides, env or {})
        try:
            sections = {
                f.name: _section_type(f)(**merged.get(f.name, {})) for f in dataclasses.fields(cls)
            }
        except ValueError as exc:  # "[section] key must be ...": named by where it came from
            key = re.match(r"\[(\w+)\] (\w+)", str(exc))
            source = origin.get(".".join(key.groups()), "configuration") if key else "configuration"
            raise InputError(f"{source}: {exc}") from None
        except TypeError as exc:  # a key missing from every layer: the defaults are broken
            raise RuntimeError(f"the packaged default.toml is incomplete: {exc}") from exc
        return cls(**sections)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)

    @staticmethod
    def sources(
        config_file: str | Path | None = None,
        overrides: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Where each setting's value comes from ("tune.budget" -> "defaults", a file's path,
        "environment: ORCHESTRATE_TUNE_BUDGET" or "options"), layered as `load` layers them."""
        return _merged(config_file, overrides, env or {})[1]


def _merged(
    config_file: str | Path | None, overrides: Mapping[str, Any] | None, env: Mapping[str, str]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The layers checked and merged, {section: {key: value}}, and where each "section.key"
    got its value from (`_named`)."""
    merged: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    for source, layer in _layers(config_file, overrides, env):
        _check_layer(source, layer)
        for section, values in layer.items():
            merged.setdefault(section, {}).update(values)
            origin.update({f"{section}.{key}": _named(source, section, key) for key in values})
    return merged, origin


def _layers(
    config_file: str | Path | None, overrides: Mapping[str, Any] | None, env: Mapping[str, str]
) -> list[tuple[str, dict[str, Any]]]:
    """(source, {section: {key: value}}) from the defaults up: the packaged defaults, the
    config file (or $ORCHESTRATE_CONFIG), ORCHESTRATE_* variables, then `overrides`."""
    layers: list[tuple[str, dict[str, Any]]] = [
        ("defaults", tomllib.loads(configs.read_text("default.toml")))
    ]
    given_by = "the --config path"
    if config_file is None and env.get(f"{ENV_PREFIX}CONFIG"):
        config_file, given_by = env[f"{ENV_PREFIX}CONFIG"], f"${ENV_PREFIX}CONFIG"
    if config_file is not None:
        layers.append((str(config_file), _read_toml(Path(config_file), given_by)))
    if env:
        layers.append(("environment", _env_layer(env)))
    if overrides:
        layers.append(("options", _nest(overrides)))
    return layers


def _named(source: str, section: str, key: str) -> str:
    """A layer's name for one setting: a variable's own name, "environment: ORCHESTRATE_..."."""
    if source == "environment":
        return f"environment: {env_name(section, key)}"
    return source


def env_name(section: str, key: str) -> str:
    """The variable that sets [section] key: ("tune", "budget") -> ORCHESTRATE_TUNE_BUDGET."""
    return f"{ENV_PREFIX}{section}_{key}".upper()


def env_text(value: Any) -> str:
    """`value` as its variable would say it (a setting's bool as true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


ENV_PREFIX = "ORCHESTRATE_"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_KINDS = {bool: "true or false (or 1/0, yes/no, on/off)", int: "a whole number", float: "a number"}


def _env_layer(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """ORCHESTRATE_TUNE_BUDGET=5min -> {"tune": {"budget": "5min"}}, typed like the setting."""
    hints = typing.get_type_hints(Settings)
    fields = {
        env_name(section, key): (section, key, kind)
        for section, section_type in hints.items()
        for key, kind in typing.get_type_hints(section_type).items()
    }
    layer: dict[str, dict[str, Any]] = {}
    for name, text in env.items():
        if not name.startswith(ENV_PREFIX) or name == f"{ENV_PREFIX}CONFIG":
            continue
        if name not in fields:
            raise InputError(
                f"environment variable {name} is not a setting; they are named like "
                f"{ENV_PREFIX}TUNE_BUDGET (see 'orchestrate config')"
            )
        section, key, kind = fields[name]
        layer.setdefault(section, {})[key] = _parse_env(name, text, kind)
    return layer


def _parse_env(name: str, text: str, kind: type) -> Any:
    value = text.strip()
    try:
        if kind is bool:
            if value.lower() not in _TRUE + _FALSE:
                raise ValueError
            return value.lower() in _TRUE
        if kind in (int, float):
            return kind(value)
    except ValueError:
        raise InputError(
            f"environment variable {name} must be {_KINDS[kind]} but is {text!r}"
        ) from None
    return value


def _section_type(field: dataclasses.Field) -> type:
    return typing.get_type_hints(Settings)[field.name]


def _read_toml(path: Path, given_by: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8-sig")  # Windows editors begin with a BOM
    except FileNotFoundError:
        fix = f"check {given_by}"
        if str(path).startswith("~") and path.expanduser() != path:  # export X="~/a.toml"
            fix = f"~ is a shell's, not expanded inside quotes: give {path.expanduser()}"
        raise InputError(f"config file {path} does not exist; {fix}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read config file {path}: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"config file {path} is not valid TOML: {exc}") from None


def _nest(flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    nested: dict[str, dict[str, Any]] = {}
    for dotted, value in flat.items():
        section, _, key = dotted.partition(".")
        nested.setdefault(section, {})[key] = value
    return nested


def _check_layer(source: str, layer: Mapping[str, Any]) -> None:
    hints = typing.get_type_hints(Settings)
    for section, values in layer.items():
        if section not in hints:
            known = ", ".join(f"[{name}]" for name in hints)
            raise InputError(f"{source}: unknown section [{section}]; known sections: {known}")
        if not isinstance(values, Mapping):
            raise InputError(f"{source}: [{section}] must be a table of settings")
        field_types = typing.get_type_hints(hints[section])
        for key, value in values.items():
            if key not in field_types:
                known = ", ".join(field_types)
                raise InputError(f"{source}: unknown key [{section}] {key}; known keys: {known}")
            expected = field_types[key]
            if not _has_type(value, expected):
                raise InputError(
                    f"{source}: [{section}] {key} must be {expected.__name__} "
                    f"but got {type(value).__name__} {value!r}; {_type_fix(key, value, expected)}"
                )


def _type_fix(key: str, value: Any, expected: type) -> str:
    """How to write `key` as the `expected` type in TOML."""
    if expected is str and key == "budget":  # a bare number is no budget, quoted or not
        return f'write it in quotes, with its unit: {key} = "{value}min" (or s, h, trials, $)'
    if expected is str:
        return f'write it in quotes: {key} = "{value}"'
    if expected is bool:
        return f"write {key} = true or {key} = false, without quotes"
    return f"write {key} as a number, without quotes"


def _has_type(value: Any, expected: type) -> bool:
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)
