"""The timed window of one GPU, shared by every process measuring on it.

One candidate at a time holds the window (exclusive) while its CUDA events run; device work
that must not land inside someone else's timing (uploading inputs, warm-up launches, result
checks) holds it shared, so it runs beside other such work but never during a timing. A
waiting timer closes a turnstile, so a stream of shared holders cannot starve it. File locks
(flock): a process that dies, or is killed for hanging, releases what it held. They are opened
as measure/lockfiles.py opens them: no links followed, another user's file read-only.
"""

from __future__ import annotations

import contextlib
import fcntl
import signal
import threading
import time
from collections.abc import Callable, Iterator

from .lockfiles import open_lock


class WindowBusy(Exception):
    """The window stayed held longer than the wait limit (another candidate may hang): not
    this candidate's failure, so the engine measures it again."""


class DeviceWindow:
    """The window of one GPU: lock file `path` (and `path`.gate, the turnstile); `clock`
    times the waits and the holds."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.gate = path + ".gate"
        self.clock = clock
        self.waited_s = 0.0  # time spent blocked on this window, all waits together
        self.held: tuple[float, float] | None = None  # (acquired, released) on the clock

    @contextlib.contextmanager
    def timed(self, wait_s: float | None = None) -> Iterator[None]:
        """Hold the window alone; WindowBusy if that takes longer than `wait_s`."""
        with open_lock(self.gate) as gate, open_lock(self.path) as window:
            asked = self.clock()
            try:
                with _deadline(wait_s):
                    fcntl.flock(gate.fd, fcntl.LOCK_EX)
                    try:
                        fcntl.flock(window.fd, fcntl.LOCK_EX)
                    finally:
                        fcntl.flock(gate.fd, fcntl.LOCK_UN)
            finally:
                acquired = self.clock()
                self.waited_s += acquired - asked
            try:
                yield
            finally:
                self.held = (acquired, self.clock())
                fcntl.flock(window.fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def shared(self, wait_s: float | None = None) -> Iterator[None]:
        """Device work that may run beside other such work, never inside a timing."""
        with open_lock(self.gate) as gate, open_lock(self.path) as window:
            asked = self.clock()
            try:
                with _deadline(wait_s):
                    fcntl.flock(gate.fd, fcntl.LOCK_EX)  # the turnstile: no timer is waiting
                    fcntl.flock(gate.fd, fcntl.LOCK_UN)
                    fcntl.flock(window.fd, fcntl.LOCK_SH)
            finally:
                self.waited_s += self.clock() - asked
            try:
                yield
            finally:
                fcntl.flock(window.fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Interrupt a blocked flock after `seconds` with WindowBusy (main thread only: signals)."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    if seconds <= 0:
        raise WindowBusy("no time was left to wait for the GPU's timed window")

    def expired(signum: int, frame: object) -> None:
        raise WindowBusy(f"the GPU's timed window stayed held for more than {seconds:.3g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
