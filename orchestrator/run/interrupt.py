"""Graceful stops: SIGINT or SIGTERM end the run after the current round, with its report."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType

from tune_orchestrator.budget import GO, Decision, Ledger, StoppingRule, TaskProgress
from tune_orchestrator.budget.base import INTERRUPTED


class Interrupt(StoppingRule):
    """Stops before the next round once `request()` was called (by a signal or by code)."""

    def __init__(self) -> None:
        self.reason: str | None = None

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
    """While inside, the first SIGINT/SIGTERM asks `interrupt` to stop after the current round;
    a second one aborts at once. Outside the main thread (where Python cannot set signal
    handlers) this does nothing. The previous handlers are restored on exit."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if interrupt.requested:
            raise KeyboardInterrupt(f"second {name}: aborting")
        interrupt.request(f"interrupted by {name}")
        print(
            f"{name}: stopping after the current round (the report will be written); "
            "send it again to abort at once",
            file=sys.stderr,
            flush=True,
        )

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
