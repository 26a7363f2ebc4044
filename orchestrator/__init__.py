"""tune-orchestrator: cost-aware auto-tuning of ONNX models on TVM MetaSchedule.

from tune_orchestrator import tune
result = tune("model.onnx", budget="5min")
print(result.speedup, result.paths["library"])
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .errors import InputError

# When this package was first imported (time.monotonic()): the CLI's budget starts here or,
# when the process itself started shortly before, there (tune_orchestrator.cli.process_started).
IMPORTED = time.monotonic()

if TYPE_CHECKING:
    from .api import Result, TaskResult, tune

__all__ = ["InputError", "Result", "TaskResult", "tune"]


def __getattr__(name: str) -> Any:
    # TVM is imported by the API, not by `import tune_orchestrator` (keeps `--help` fast).
    if name in ("tune", "Result", "TaskResult"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'tune_orchestrator' has no attribute {name!r}")
