"""How a run goes, beyond what to tune, for what and with how much: the `tune()` options."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """Everything `tune()` may be told besides the model, budget, target and run directory.
    None means "as the configuration says" (configs/default.toml, then `config`, then
    ORCHESTRATE_* variables); `orchestrate tune --help` explains each as an option.

    - input_shapes: shapes of dynamic inputs, {"x": [1, 3, 224, 224]}, ["x:1,3,224,224"] or
      one such string
    - check_inputs: an .npz file of real samples for the output check, one array per model
      input named after it (its shape, or N samples of it); default: three random samples
    - config: a TOML file layered over the defaults
    - trials_per_round, seed, candidate_filter ("xgb" or "none"), min_gain, early_stop
    - output_check: False to run and time the builds without comparing their outputs with
      onnxruntime's (model.so then ships unchecked), for a model onnxruntime cannot run
    - warm_start: an earlier run directory, or a saved predictor.json, to train the learned
      model on first
    - library: the tuning libraries' root (None: under $XDG_CACHE_HOME or ~/.cache; False: the
      run neither reads nor adds to it)
    - gpus ("0,1" or [0, 1]; default: every visible GPU), parallelism ("auto" or a fixed DOP),
      rpc ("HOST:PORT" of a TVM RPC tracker) with rpc_key: where candidates are measured
    - price: US dollars per hour (per GPU on GPU runs, per machine on CPU runs)
    - fresh: start over where `out` holds a run (it is moved aside to <out>.<time>)
    - build_only: compile with what the database holds, tune nothing
    - simulate: search and build for a CUDA target with timings from a simulated GPU
    - handle_signals: SIGINT / SIGTERM / SIGHUP stop the run after the current round (main
      thread only)
    - mlflow (True for MLFLOW_TRACKING_URI, or a tracking URI), mlflow_experiment
    """

    input_shapes: Mapping[str, Sequence[int]] | Iterable[str] | None = None
    check_inputs: str | Path | None = None
    config: str | Path | None = None
    trials_per_round: int | None = None
    seed: int | None = None
    candidate_filter: str | None = None
    min_gain: float | None = None
    early_stop: bool | None = None
    output_check: bool | None = None
    warm_start: str | Path | None = None
    library: str | Path | bool | None = None
    gpus: Sequence[int] | str | None = None
    parallelism: int | str = "auto"
    rpc: str | None = None
    rpc_key: str | None = None
    price: float | None = None
    fresh: bool = False
    build_only: bool = False
    simulate: bool = False
    handle_signals: bool = True
    mlflow: bool | str = False
    mlflow_experiment: str = "tune-orchestrator"

    def __post_init__(self) -> None:
        """TypeError (InputError for an empty path), naming the option, where a pipeline hands
        a value of a kind the option never takes: price="0.5", library=3, config=""."""
        from .model.loading import as_path

        for name in ("check_inputs", "config", "warm_start", "library"):
            value = getattr(self, name)
            if value is not None and not (name == "library" and isinstance(value, bool)):
                as_path(name, value)  # library=True/False: the default root, or none
        price = self.price
        if price is not None and (isinstance(price, bool) or not isinstance(price, numbers.Real)):
            raise TypeError(
                f"price must be a number of US dollars per hour, not {type(price).__name__} "
                f"{price!r}"
            )

    @classmethod
    def of(cls, options: Options | None, **changes: object) -> Options:
        """`options` (default: all defaults) with `changes` (keyword arguments of tune())."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError(
                f"tune() got unexpected option(s) {', '.join(unknown)}; options are: "
                f"{', '.join(sorted(names))}"
            )
        return dataclasses.replace(options or cls(), **changes)  # type: ignore[arg-type]

    def overrides(self) -> dict[str, object]:
        """The settings these options set (the rest comes from the configuration)."""
        given = {
            "tune.trials_per_round": self.trials_per_round,
            "tune.seed": self.seed,
            "tune.filter": self.candidate_filter,
            "stopping.min_gain": self.min_gain,
            "stopping.early_stop": self.early_stop,
            "check.outputs": self.output_check,
        }
        return {k: v for k, v in given.items() if v is not None}
