"""Loading TVM: once per process, quietly, and without its 18-second import of tensor intrinsics.

`TuneContext()` imports `tvm.s_tir.tensor_intrin`, whose ~500 TVMScript functions each call
`inspect.stack()`. That call resolves every frame's source through `inspect.getmodule`, which
scans all of `sys.modules` each time: ~16 of the ~18 s. TVMScript reads only `frame` from all
stack entries and `code_context` from the third, so a stack built from `linecache` yields the
same intrinsics (tests/test_tvm_import.py compares all of them against the plain import).
"""

from __future__ import annotations

import inspect
import linecache
import logging
import sys
import threading
from types import FrameType

_lock = threading.Lock()
_intrinsics_loaded = False


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


def load_tensor_intrinsics() -> None:
    """Import `tvm.s_tir.tensor_intrin` (needed by TuneContext) the fast way, once."""
    global _intrinsics_loaded
    with _lock:
        if _intrinsics_loaded or "tvm.s_tir.tensor_intrin" in sys.modules:
            _intrinsics_loaded = True
            return
        original = inspect.stack
        inspect.stack = _light_stack
        try:
            import tvm.s_tir.tensor_intrin  # noqa: F401
        finally:
            inspect.stack = original
        _intrinsics_loaded = True


def quiet_logger(name: str = "orchestrator.metaschedule") -> logging.Logger:
    """A logger for MetaSchedule that drops its per-iteration INFO chatter."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.WARNING)
    return logger
