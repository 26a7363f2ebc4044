"""Loading TVM: once per process, quietly, and without its 18-second import of tensor intrinsics.

`TuneContext()` imports `tvm.s_tir.tensor_intrin`, whose ~500 TVMScript functions each call
`inspect.stack()`. That call resolves every frame's source through `inspect.getmodule`, which
scans all of `sys.modules` each time: ~16 of the ~18 s. TVMScript reads only `frame` from all
stack entries and `code_context` from the third, so a stack built from `linecache` yields the
same intrinsics (tests/test_tvm_import.py compares all of them against the plain import).
Of the ~4 s left, CUDA's intrinsics take ~3.3 s (2-core VM), and only CUDA schedules use them:
for a CPU target the package is set up without running its `__init__`, which imports them
all, and its CPU modules are imported alone; CUDA's follow when a CUDA target needs them.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import linecache
import logging
import os
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from .errors import InputError

_lock = threading.Lock()
_PACKAGE = "tvm.s_tir.tensor_intrin"
# What the package's __init__ imports: cuda always, these where TVM has LLVM.
_CPU_MODULES = ("arm_cpu", "x86", "rocm", "hexagon", "riscv_cpu")


def check_home() -> None:
    """InputError where importing TVM would fail on this user's environment: it looks for its
    cache folder in $XDG_CACHE_HOME, else under the home directory, which Python cannot tell
    where HOME is unset and the user id has no entry in the password database (`env -i` in a
    container run as an arbitrary user). The tuning library's default place needs it too."""
    if os.path.isabs(os.environ.get("XDG_CACHE_HOME", "")):
        return
    try:
        Path.home()
    except RuntimeError:
        raise InputError(
            f"cannot tell this user's home directory: HOME is not set and user id {os.getuid()} "
            "has no entry in the password database; set HOME (or XDG_CACHE_HOME) to a folder "
            "this user can write"
        ) from None


def _light_stack(context: int = 1) -> list[inspect.FrameInfo]:
    frames: list[inspect.FrameInfo] = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        line = linecache.getline(filename, lineno, frame.f_globals) if context > 0 else ""
        code_context = [line] if line else None
        frames.append(
            inspect.FrameInfo(
                frame,
                filename,
                lineno,
                frame.f_code.co_name,
                code_context,
                0 if code_context else None,
                positions=None,
            )
        )
        frame = frame.f_back
    return frames


def load_tensor_intrinsics(target: Any = None) -> None:
    """Register the tensor intrinsics TuneContext needs for `target` (a tvm Target; None: all
    of them, as `import tvm.s_tir.tensor_intrin` does), the fast way, each module once."""
    from tvm.runtime import enabled

    cpu = getattr(getattr(target, "kind", None), "name", None) in ("llvm", "c")
    wanted = ([] if cpu else ["cuda"]) + (list(_CPU_MODULES) if enabled("llvm") else [])
    with _lock:
        missing = [name for name in wanted if f"{_PACKAGE}.{name}" not in sys.modules]
        if not missing:
            return
        if _PACKAGE not in sys.modules:  # the package alone: its __init__ would import cuda
            spec = importlib.util.find_spec(_PACKAGE)
            if spec is None:
                raise ImportError(f"this TVM has no {_PACKAGE}")
            package = importlib.util.module_from_spec(spec)
            sys.modules[_PACKAGE] = package
            parent, _, child = _PACKAGE.rpartition(".")
            setattr(importlib.import_module(parent), child, package)
        original = inspect.stack
        inspect.stack = _light_stack
        try:
            for name in missing:
                importlib.import_module(f"{_PACKAGE}.{name}")
        finally:
            inspect.stack = original


def quiet_logger(name: str = "tune_orchestrator.metaschedule") -> logging.Logger:
    """A logger for MetaSchedule that drops its per-iteration INFO chatter."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.WARNING)
    return logger
