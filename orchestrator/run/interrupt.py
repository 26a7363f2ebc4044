"""Graceful stops: SIGINT, SIGTERM or SIGHUP end the run after the current round, with its
report."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from types import FrameType

from tune_orchestrator.budget import GO, Decision, Ledger, StoppingRule, TaskProgress
from tune_orchestrator.budget.base import INTERRUPTED

from ..errors import Aborted

# A second signal this soon after the first is the same request delivered twice: coreutils'
# `timeout` (as `timeout 1h orchestrate ...` in a pipeline) signals the command and then its
# process group, and one run in three took the pair for "again" and aborted without its report.
SAME_REQUEST_S = 1.0


class Interrupt(StoppingRule):
    """Stops before the next round once `request()` was called (by a signal or by code)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.tuned = False  # tuning is over: the run compiles, checks and ships the model

    def request(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def decide(self, ledger: Ledger, tasks: Sequence[TaskProgress] = ()) -> Decision:
        return Decision(True, self.reason, INTERRUPTED) if self.reason else GO


@contextlib.contextmanager
def on_signals(interrupt: Interrupt, enabled: bool = True) -> Iterator[None]:
    """While inside, the first SIGINT, SIGTERM or SIGHUP (the terminal closed: what was
    printed to it goes nowhere from then on) asks `interrupt` to stop after the current
    round; a second one aborts at once, unless it came within `SAME_REQUEST_S` of the first
    (one request delivered twice, as `timeout` does). SIGHUP ignored when the run starts
    (nohup) stays ignored; SIGINT ignored (a background job of a script) is caught, as
    `kill -INT` asks.
    Outside the main thread (where Python cannot set signal handlers) this does nothing. The
    previous handlers are restored on exit."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    # Asked now: a terminal that hung up no longer answers that it is one.
    terminals = [fd for fd in (1, 2) if _is_terminal(fd)]
    first: list[float] = []  # when the first signal was handled

    def handle(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if interrupt.requested:
            if first and now - first[0] < SAME_REQUEST_S:
                return
            raise Aborted(f"second {name}: aborting")
        first.append(now)
        if signum == signal.SIGHUP:
            _off_the_terminal(terminals)
        interrupt.request(f"interrupted by {name}")
        doing = (
            "tuning is over: the model is compiled, checked and shipped, and the report written"
            if interrupt.tuned
            else "stopping after the current round (the report will be written)"
        )
        print(f"{name}: {doing}; send it again to abort at once", file=sys.stderr, flush=True)

    caught = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:  # not under nohup
        caught.append(signal.SIGHUP)
    previous = {sig: signal.signal(sig, handle) for sig in caught}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:  # closed
        return False


def _off_the_terminal(terminals: Sequence[int]) -> None:
    """Point the `terminals` (of stdout's and stderr's descriptors) at /dev/null: the terminal
    hung up, and a write to it fails (a file or a pipe they were redirected to keeps what it
    is given)."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in terminals:
            os.dup2(null, fd)
    finally:
        os.close(null)
