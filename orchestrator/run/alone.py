"""One run at a time in a process. TVM's ONNX importer, its operator lowering (TE's tag scope)
and its passes keep state in globals: two `tune()` calls in threads of one process failed with
errors that read as bad input ("TVM cannot import tiny.onnx: AssertionError", "nested op_tag is
not allowed"), 3 of 4 times. A call made while another runs waits for it; tuning in parallel
takes processes (each its own TVM)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

# Reentrant: an on_event callback of one run that starts another must not hang its thread.
_RUNNING = threading.RLock()


@contextlib.contextmanager
def alone(on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the process's run: at once where none runs, else after `on_wait()` is told."""
    if not _RUNNING.acquire(blocking=False):
        if on_wait is not None:
            on_wait()
        _RUNNING.acquire()
    try:
        yield
    finally:
        _RUNNING.release()
