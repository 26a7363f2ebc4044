"""The stopping seam: a rule looks at the ledger and decides whether the run goes on."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence

from .ledger import Ledger

# Why a run stopped, from a fixed set a program can branch on; the reason says it in words.
BUDGET = "budget"  # a time, money or energy limit: not enough left for another round
TRIALS = "trials"  # the trial limit was reached
STOPPED_PAYING = "stopped-paying"  # the early stop: more spending would buy almost nothing
TASKS_DONE = "tasks-done"  # every task retired (plateau, search space exhausted)
INTERRUPTED = "interrupted"  # SIGINT / SIGTERM, or a caller's request
BUILD_ONLY = "build-only"  # --build-only: nothing was tuned by design
NOTHING_TO_TUNE = "nothing-to-tune"  # the model has no operator to tune
NOTHING_RAN = "nothing-ran"  # no candidate built and ran: every one failed, or every search did
# the untuned build's outputs differ from onnxruntime's: no tuned one would match (exit code 4)
UNTUNED_DIFFERS = "untuned-differs"
STOP_CODES = (
    BUDGET,
    TRIALS,
    STOPPED_PAYING,
    TASKS_DONE,
    INTERRUPTED,
    BUILD_ONLY,
    NOTHING_TO_TUNE,
    NOTHING_RAN,
    UNTUNED_DIFFERS,
)


@dataclasses.dataclass(frozen=True)
class Decision:
    """`stop` with a reason a person can read, e.g. "trial budget reached: 500 of 500", and
    its `code`, one of STOP_CODES. A rule that would stop but for tasks that have not had
    their chance yet goes on `waiting_on` them (positions in the tasks it was shown)."""

    stop: bool
    reason: str = ""
    code: str = ""
    waiting_on: tuple[int, ...] = ()


GO = Decision(stop=False)


@dataclasses.dataclass(frozen=True)
class TaskProgress:
    """What a stopping rule may know of one task, to stop on evidence rather than on luck."""

    name: str
    share: float | None  # of the untuned model's latency (None: not known)
    trials: int
    measured_rounds: int  # rounds that measured at least one candidate successfully
    floor: int = 0  # trials it gets before a stopping rule may end the run
    done: bool = False  # retired: it gets no more rounds
    # Of the model's current latency, what its next round is expected to cut by closing on
    # the best throughput a task of its kind has reached (0: nothing known)
    catch_up: float = 0.0
    # Of the model's current latency, what the task holds now (None: not known)
    share_now: float | None = None


class StoppingRule(abc.ABC):
    """Decides, before each round, whether the run stops."""

    @abc.abstractmethod
    def decide(self, ledger: Ledger, tasks: Sequence[TaskProgress] = ()) -> Decision: ...

    def allowance(self, ledger: Ledger, wanted: int) -> int:
        """How many of `wanted` candidates the next round may measure."""
        return wanted

    def progress(self, ledger: Ledger) -> float | None:
        """The share of the budget used (the largest over its limits); None if not a budget."""
        return None

    def seconds_left(self, ledger: Ledger) -> float | None:
        """Seconds of tuning left under the limits the clock meters (wall, GPU-hours,
        dollars, energy), the final phase's reserve and committed work taken off; None when
        this rule sets no such limit."""
        return None


class AnyOf(StoppingRule):
    """Stops when any of its rules stops; a round gets the fewest candidates any allows."""

    def __init__(self, rules: list[StoppingRule]) -> None:
        self.rules = list(rules)

    def decide(self, ledger: Ledger, tasks: Sequence[TaskProgress] = ()) -> Decision:
        waiting: set[int] = set()
        for rule in self.rules:
            decision = rule.decide(ledger, tasks)
            if decision.stop:
                return decision
            waiting.update(decision.waiting_on)
        return Decision(False, waiting_on=tuple(sorted(waiting))) if waiting else GO

    def allowance(self, ledger: Ledger, wanted: int) -> int:
        return min([wanted] + [rule.allowance(ledger, wanted) for rule in self.rules])

    def progress(self, ledger: Ledger) -> float | None:
        shares = [p for p in (rule.progress(ledger) for rule in self.rules) if p is not None]
        return max(shares) if shares else None

    def seconds_left(self, ledger: Ledger) -> float | None:
        lefts = [s for s in (rule.seconds_left(ledger) for rule in self.rules) if s is not None]
        return min(lefts) if lefts else None
