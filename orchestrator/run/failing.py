"""Tuning that runs nothing: every candidate fails to build or to run (a broken toolchain, a
device in a bad state), or every task's search fails. Going on would spend the whole budget
on failures and ship the untuned build as if tuning had simply found nothing better; the run
stops instead, once every task has shown it, and ends with exit code 1 (Result.exit_code).
"""

from __future__ import annotations

from collections.abc import Sequence

from tune_orchestrator.budget import Decision
from tune_orchestrator.budget.base import NOTHING_RAN
from tune_orchestrator.measure import Measurement

from .scheduler import TaskState

# How the loop words a task retired because its search kept failing.
SEARCH_FAILED = "search failed"

# Candidates that must have failed, none running, before the run stops: two rounds of 16, so
# that a model of one or two tasks whose first round failed for its schedules alone is not
# stopped by one round.
LEAST_FAILED = 32


def search_failed(reason: str | None) -> bool:
    """Whether a task retired for `reason` (None: not retired) was so because its search kept
    failing: such a task is searched again on resume (rundir/restore.py)."""
    return (reason or "").startswith(SEARCH_FAILED)


class FailureWatch:
    """What this session's rounds ran: how many candidates ran, which tasks had a round of
    which none did, and the first error seen."""

    def __init__(self) -> None:
        self.ran = 0
        self.failed: dict[int, int] = {}  # by task index: candidates that failed
        self.first_error: str | None = None

    def record(self, task: int, measurements: Sequence[Measurement]) -> None:
        """One round's results for the task of index `task`."""
        ran = sum(m.ok for m in measurements)
        self.ran += ran
        if measurements and not ran:
            self.failed[task] = self.failed.get(task, 0) + len(measurements)
            if self.first_error is None:
                self.first_error = next((m.error for m in measurements if m.error), None)

    def decide(self, states: Sequence[TaskState]) -> Decision | None:
        """Stop where no candidate has run in this session, every task still searched has
        had a round of which none ran, and LEAST_FAILED candidates have failed; else None."""
        live = [s.task.index for s in states if not s.retired]
        if self.ran or not live or any(i not in self.failed for i in live):
            return None
        failed = sum(self.failed.values())
        if failed < LEAST_FAILED:
            return None
        error = self.first_error or "no error was given"
        return Decision(
            True,
            f"none of the {failed} candidates measured on {len(live)} task(s) built and ran; "
            f"the first failure: {error}",
            NOTHING_RAN,
        )

    @staticmethod
    def all_retired(states: Sequence[TaskState]) -> Decision | None:
        """Where every task is retired, none ever ran a candidate and a search kept failing:
        the run's stop; else None (the tasks were done)."""
        if any(s.best_s is not None for s in states):
            return None
        failed = sorted({s.retired for s in states if search_failed(s.retired)})
        if not failed:
            return None
        return Decision(
            True, f"no candidate ran, every task is retired: {'; '.join(failed)}", NOTHING_RAN
        )
