"""Loading onnxruntime, the reference every output check compares with: without its telemetry.

onnxruntime 1.29 and later collect usage events on Linux too: importing it (1.32) writes a
device id and an event store, on some hosts, under the user's cache folder
(`~/.cache/Microsoft/DeveloperTools/.onnxruntime/`) for upload to Microsoft, unless
ORT_DISABLE_TELEMETRY is 1. A run uses onnxruntime only to compute reference outputs on this
host, so it sets the variable first where the user has not set it (0 leaves it on).
"""

from __future__ import annotations

import os
from typing import Any


def onnxruntime() -> Any:
    """The onnxruntime module, its telemetry off unless the user asked for it."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime as ort

    return ort
