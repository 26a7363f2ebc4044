"""tune-orchestrator: cost-aware auto-tuning of ONNX models on TVM MetaSchedule.

    from tune_orchestrator import tune
    result = tune("model.onnx", "5min")
    print(result.speedup, result.stop, result.paths["library"])

`tune()` tunes, compiles and checks a model within a budget; `estimate()` measures the untuned
model and forecasts what budgets would buy; `Options` holds the rest of a run's settings. The
exceptions a caller handles: InputError (bad input, nothing touched), BudgetTooSmall (refused
before any work; `.minimum` is the budget that would do).
"""

from __future__ import annotations

import time
from importlib import metadata
from typing import TYPE_CHECKING, Any

from .errors import BudgetTooSmall, InputError
from .options import Options

# When this package was first imported (time.monotonic()): the CLI's budget starts here or,
# when the process itself started shortly before, there (cli.commands.process_started).
IMPORTED = time.monotonic()

try:
    __version__ = metadata.version("tune-orchestrator")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

if TYPE_CHECKING:
    from .api import Result, TaskResult, tune
    from .forecast.estimate import estimate

__all__ = [
    "BudgetTooSmall",
    "InputError",
    "Options",
    "Result",
    "TaskResult",
    "__version__",
    "estimate",
    "tune",
]


def __getattr__(name: str) -> Any:
    # TVM is imported by the API, not by `import tune_orchestrator` (keeps `--help` fast).
    if name in ("tune", "Result", "TaskResult"):
        from . import api

        return getattr(api, name)
    if name == "estimate":
        from ._tvm import check_home

        check_home()  # its module imports TVM, which fails without a home (InputError instead)
        from .forecast.estimate import estimate

        return estimate
    raise AttributeError(f"module 'tune_orchestrator' has no attribute {name!r}")
