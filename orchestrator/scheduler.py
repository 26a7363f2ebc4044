"""Task scheduling: which task gets the next round."""

from __future__ import annotations

import abc
import dataclasses
import statistics
from collections.abc import Collection, Sequence

from .tasks import Task


@dataclasses.dataclass
class TaskState:
    """What the loop knows about one task; `history` is the best latency after each round."""

    task: Task
    baseline_s: float | None = None  # untuned latency of one call
    untuned_finite: bool | None = None  # the untuned kernel's outputs held no NaN / Inf
    best_s: float | None = None  # best measured latency of one call
    history: list[float] = dataclasses.field(default_factory=list)
    round_s: list[float] = dataclasses.field(default_factory=list)  # wall time of each round
    trials: int = 0  # measured, failures included
    failures: int = 0
    proposed: int = 0  # by the search
    filtered: int = 0  # set aside by the filter at least once (audited ones included)
    built: int = 0
    audited: int = 0  # rejected but measured anyway, to check the filter
    waiting: int = 0  # proposed, not measured yet: waiting in the pool for a later round
    measured_rounds: int = 0  # rounds that measured at least one candidate successfully
    empty_searches: int = 0  # searches in a row that found nothing new
    search_errors: int = 0  # searches in a row that TVM failed with an error
    wasted_s: float = 0.0  # seconds of searches that found nothing new
    share: float | None = None  # of the untuned model's latency (weight x untuned latency)
    floor: int = 0  # trials this task gets before a stopping rule may end the run
    retired: str | None = None  # why the task gets no more rounds

    @property
    def rounds(self) -> int:
        return len(self.history)

    @property
    def latency_s(self) -> float | None:
        """The latency the model runs this task at now: the faster of the default schedule
        and the best tuned record, which is what gets deployed."""
        known = [x for x in (self.best_s, self.baseline_s) if x is not None]
        return min(known) if known else None

    def record_round(self, best_s: float | None) -> None:
        if best_s is not None:
            self.measured_rounds += 1
            if self.best_s is None or best_s < self.best_s:
                self.best_s = best_s
        self.history.append(self.best_s if self.best_s is not None else float("inf"))


def model_latency_s(states: Sequence[TaskState]) -> float | None:
    """Sum of weight x latency over tasks: the model's time in its kernels (an estimate)."""
    total = 0.0
    for state in states:
        if state.latency_s is None:
            return None
        total += state.task.weight * state.latency_s
    return total


def heavy_floors(weights: Sequence[float | None], *, share: float, trials: int) -> list[int]:
    """Each task's floor of trials: `trials` for the tasks that together hold `share` of the
    untuned latency (heaviest first; `weights` are weight x untuned seconds, None when
    unknown), 0 for the rest. The run and its forecast (forecast/run.py) both read it."""
    known = [i for i, w in enumerate(weights) if w is not None]
    total = sum(weights[i] for i in known)
    floors = [0] * len(weights)
    if total <= 0:
        return floors
    held = 0.0
    for i in sorted(known, key=lambda i: -weights[i]):
        floors[i] = trials if held < share else 0
        held += weights[i] / total
    return floors


def assign_floors(states: Sequence[TaskState], *, share: float, trials: int) -> None:
    """Set each task's share of the untuned latency and its floor of trials before a stopping
    rule may end the run (`heavy_floors`)."""
    weights = [None if s.baseline_s is None else s.task.weight * s.baseline_s for s in states]
    total = sum(w for w in weights if w is not None)
    if total <= 0:
        return
    floors = heavy_floors(weights, share=share, trials=trials)
    for state, weight, floor in zip(states, weights, floors, strict=True):
        if weight is not None:
            state.share = weight / total
            state.floor = floor


class Scheduler(abc.ABC):
    """Picks the task for the next round, or None when no task should get one."""

    @abc.abstractmethod
    def pick(
        self, states: Sequence[TaskState], exclude: Collection[int] = ()
    ) -> TaskState | None: ...


class GainScheduler(Scheduler):
    """The task whose next round is expected to cut the most model latency per second spent.

    Expected gain = weight x current latency x expected relative improvement, where the
    improvement is the task's mean gain per round over its last `window` rounds (from the
    untuned latency for young tasks), never below `min_gain`, and `first_round_gain` for a
    task not yet tuned; it halves with each search in a row that found nothing new. Expected
    cost = the task's recent round time (tasks differ in build and measurement cost), or the
    typical round time before its first round. Tasks with no latency yet (untuned measurement
    failed) go first, then tasks still short of their floor of trials (the heavy ones).
    """

    def __init__(self, *, window: int = 3, first_round_gain: float = 0.5, min_gain: float = 0.01):
        if window < 1:
            raise ValueError(f"window must be at least 1 but got {window}.")
        if not 0 < first_round_gain <= 1:
            raise ValueError(f"first_round_gain must be in (0, 1] but got {first_round_gain}.")
        if not 0 <= min_gain <= 1:
            raise ValueError(f"min_gain must be in [0, 1] but got {min_gain}.")
        self.window = window
        self.first_round_gain = first_round_gain
        self.min_gain = min_gain

    def expected_gain(self, state: TaskState) -> float:
        """Expected cut of model latency (seconds) from one more round of this task."""
        latency = state.latency_s
        if latency is None:
            return float("inf")
        damp = 0.5**state.empty_searches
        return state.task.weight * latency * self.expected_improvement(state) * damp

    def expected_improvement(self, state: TaskState) -> float:
        # points[i]: latency after i rounds (points[0] is untuned); compare now with `window`
        # rounds ago, or with the oldest point known.
        points = [state.baseline_s, *state.history]
        k = len(state.history)
        start = max(0, k - self.window)
        if points[start] is None:
            start = 1
        if start >= k:
            return self.first_round_gain
        before, now = points[start], points[k]
        if before == float("inf"):
            return 1.0 if now < before else self.first_round_gain
        gain_per_round = max(0.0, (before - now) / before) / (k - start)
        return max(self.min_gain, min(1.0, gain_per_round))

    @staticmethod
    def expected_cost(state: TaskState, typical_s: float) -> float:
        """Seconds the task's next round is expected to take."""
        recent = state.round_s[-3:]
        return statistics.median(recent) if recent else typical_s

    def pick(self, states: Sequence[TaskState], exclude: Collection[int] = ()) -> TaskState | None:
        active = [s for s in states if s.retired is None and s.task.index not in exclude]
        if not active:
            return None
        seen = [t for s in states for t in s.round_s[-3:]]
        typical = statistics.median(seen) if seen else 1.0

        def value(s: TaskState) -> tuple[bool, bool, float, int, int]:
            per_second = self.expected_gain(s) / max(self.expected_cost(s, typical), 1e-9)
            # Ties go to the task with fewer rounds, then the lower index.
            first = (s.latency_s is None, s.trials < s.floor)
            return (*first, per_second, -s.rounds, -s.task.index)

        return max(active, key=value)
