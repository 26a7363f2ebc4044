"""Task scheduling: which task gets the next round."""

from __future__ import annotations

import abc
import dataclasses
import itertools
import math
import statistics
from collections.abc import Collection, Sequence
from typing import Any

from ..model.tasks import Task
from ..search.transfer import blocks


@dataclasses.dataclass
class TaskState:
    """What the loop knows about one task; `history` is the best latency after each round."""

    task: Task
    baseline_s: float | None = None  # untuned latency of one call
    untuned_finite: bool | None = None  # the untuned kernel's outputs held no NaN / Inf
    best_s: float | None = None  # best measured latency of one call
    history: list[float] = dataclasses.field(default_factory=list)
    round_s: list[float] = dataclasses.field(default_factory=list)  # wall time of each round
    round_trials: list[int] = dataclasses.field(default_factory=list)  # candidates of each round
    round_fixed_s: list[float] = dataclasses.field(default_factory=list)  # its search, filter...
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
    # Trials of its workload the tuning library held before this run: its curve starts there.
    library_trials: int = 0
    plateau: bool = False  # the library's trials of it reached a plateau (library/records.py)

    @property
    def rounds(self) -> int:
        return len(self.history)

    @property
    def trials_after(self) -> list[int]:
        """Trials the task had had after each of its rounds, the library's counted."""
        return list(itertools.accumulate(self.round_trials, initial=self.library_trials))[1:]

    @property
    def depth(self) -> int:
        """Trials the task has had: here and, before this run, in the tuning library."""
        return self.trials + self.library_trials

    @property
    def latency_s(self) -> float | None:
        """The latency the model runs this task at now: the faster of the default schedule
        and the best tuned record, which is what gets deployed."""
        known = [x for x in (self.best_s, self.baseline_s) if x is not None]
        return min(known) if known else None

    def record_round(
        self, best_s: float | None, *, trials: int, seconds: float, fixed_s: float = 0.0
    ) -> None:
        """A round of `trials` candidates whose best was `best_s` (None: none ran) took
        `seconds`, `fixed_s` of them whatever its size (search, filter)."""
        if best_s is not None:
            self.measured_rounds += 1
            if self.best_s is None or best_s < self.best_s:
                self.best_s = best_s
        self.history.append(self.best_s if self.best_s is not None else float("inf"))
        self.round_trials.append(trials)
        self.round_s.append(seconds)
        self.round_fixed_s.append(min(fixed_s, seconds))


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


@dataclasses.dataclass(frozen=True)
class RoundSizes:
    """The sizes a task's round may have: whole waves of the build pool, doubling from
    `smallest` up to `largest`; a task's first round has `first` (default `smallest`), and
    may shrink to `least` where a budget cannot give every task one of the smallest."""

    smallest: int
    largest: int
    first: int | None = None
    least: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.smallest <= self.largest:
            raise ValueError(
                f"round sizes need 1 <= smallest <= largest but got {self.smallest}, "
                f"{self.largest}."
            )
        if self.least is not None and not 1 <= self.least <= self.smallest:
            raise ValueError(
                f"first rounds need 1 <= least <= smallest but got {self.least}, {self.smallest}."
            )
        fewest = self.smallest if self.least is None else self.least
        if self.first is not None and not fewest <= self.first <= self.largest:
            raise ValueError(
                f"a first round needs {fewest} <= first <= largest but got {self.first}."
            )

    @property
    def first_touch(self) -> int:
        return self.first if self.first is not None else self.smallest

    def for_tasks(self, tasks: int, shared: int) -> RoundSizes:
        """These sizes with first rounds of `shared` candidates over `tasks`: the largest
        size of the doubling steps that fits `shared / tasks`, at least the smallest."""
        first = self.smallest
        for size in self.options()[1:]:
            if size * max(1, tasks) <= shared:
                first = size
        return dataclasses.replace(self, first=first)

    def for_budget(self, tasks: int, most: int, affordable: int | None) -> RoundSizes:
        """These sizes with first rounds sharing `most` candidates over `tasks` (for_tasks),
        and no more than half of the `affordable` ones (None: no limit), so that first rounds
        over a many-task model leave room for the rounds that follow: at 480 trials, first
        rounds of 32 over squeezenetish's 21 tasks used to leave some tasks untuned."""
        shared = most if affordable is None else min(most, affordable // 2)
        return self.for_tasks(tasks, max(1, shared))

    def covering(self, tasks: int, affordable: int) -> RoundSizes:
        """These sizes, with first rounds of `least` where `affordable` candidates cannot give
        each of `tasks` one of the smallest but hold two or more of them, so that more tasks
        get one: a task left untuned ran ~30x slower than its first round of 16's best, and
        the best of 8 of a round's candidates ~1.14x its best (median over 44 first rounds).
        Where they hold one, it is measured whole (the round a budget was accepted for);
        first rounds above the smallest (a few-task model's) are left as they are."""
        if self.least is None or self.first_touch != self.smallest:
            return self
        if 2 * self.smallest <= affordable < self.smallest * tasks:
            return dataclasses.replace(self, first=self.least)
        return self

    @classmethod
    def for_run(cls, first: int, most: int, wave: int, least: int | None = None) -> RoundSizes:
        """`first` and `most` candidates (and `least` for a shrunk first round), each rounded
        up to whole waves of `wave` builds."""
        wave = max(1, wave)

        def waves(n: int) -> int:
            return -(-max(1, n) // wave) * wave

        largest = waves(most)
        smallest = min(largest, waves(first))
        return cls(smallest, largest, least=None if least is None else min(smallest, waves(least)))

    def options(self) -> list[int]:
        sizes, size = [], self.smallest
        while size < self.largest:
            sizes.append(size)
            size *= 2
        return [*sizes, self.largest]


@dataclasses.dataclass(frozen=True)
class RoundPlan:
    """The next round: which task, how many candidates, and what it is expected to buy."""

    state: TaskState
    size: int
    gain_s: float  # expected cut of the model's kernel time (seconds per inference)
    cost_s: float  # expected seconds the round takes
    waited: bool = False  # given to a task the early stop waits for (TuningLoop._pick)

    @property
    def per_second(self) -> float:
        return self.gain_s / max(self.cost_s, 1e-9)


def current_shares(states: Sequence[TaskState]) -> list[float | None]:
    """Each task's share of the model's current kernel time (weight x the latency it runs at
    now, over the sum of those); None for a task whose latency is unknown."""
    weights = [None if s.latency_s is None else s.task.weight * s.latency_s for s in states]
    total = sum(w for w in weights if w is not None)
    return [None if w is None or total <= 0 else w / total for w in weights]


class Scheduler(abc.ABC):
    """Plans the next round, of one of `sizes`, or None when no task should get one."""

    @abc.abstractmethod
    def pick(
        self, states: Sequence[TaskState], sizes: RoundSizes, exclude: Collection[int] = ()
    ) -> RoundPlan | None: ...

    def peer_latencies(self, states: Sequence[TaskState]) -> dict[int, float]:
        """Each task's latency at the best throughput a task of its kind has reached (task
        index -> seconds), where the scheduler knows it."""
        return {}


class GainScheduler(Scheduler):
    """Wide before deep, then the round that buys the most model latency per second.

    First every task whose latency is unknown (its untuned measurement failed), then every
    task never tuned that holds `coverage_share` or more of the model's *current* kernel time
    gets a first round (of `sizes.first_touch`), heaviest first, before any task gets another.
    From then on each task's next round is valued at every size it may have: its expected cut
    of model latency over its expected cost, and the best task and size win.

    Expected cut: a task's best latency follows its own curve, latency ~ trials ** -alpha,
    alpha measured over its last `window` rounds (its untuned latency counts as one trial);
    `min_gain` is the least it expects from doubling its trials, and a task never tuned
    expects `first_round_gain` of its latency from its first round. The cut halves with each
    search in a row that found nothing new. A task the tuning library knows has had its
    library round (the library's fastest records, re-measured here): its curve starts at the
    library's trials of it, and a task the library tuned to a plateau is valued on a flat curve
    (`min_gain` per doubling), so it gets a round only when no other task promises more.
    With `peers`, a task that runs slower than the best throughput (FLOPs a second) a task of
    its kind (the same blocks, other shapes) has reached expects at least the share
    size / (trials + size) of that gap: a search stuck near its first round's best on one
    convolution is not left there while its sister convolution takes every round (Ansor's
    similar-task estimate).
    Expected cost: the task's own recent rounds,
    split into a fixed part (search and filter) and a part per candidate, or the run's
    typical round before it has any.

    Floors of trials (assign_floors) gate the stopping rules, not this order; the loop turns
    to the tasks short of theirs only when the early stop would end the run but for them.
    """

    def __init__(
        self,
        *,
        window: int = 3,
        first_round_gain: float = 0.5,
        min_gain: float = 0.01,
        coverage_share: float = 0.01,
        peers: bool = True,
    ):
        if window < 1:
            raise ValueError(f"window must be at least 1 but got {window}.")
        if not 0 < first_round_gain <= 1:
            raise ValueError(f"first_round_gain must be in (0, 1] but got {first_round_gain}.")
        if not 0 <= min_gain < 1:
            raise ValueError(f"min_gain must be in [0, 1) but got {min_gain}.")
        if not 0 <= coverage_share <= 1:
            raise ValueError(f"coverage_share must be in [0, 1] but got {coverage_share}.")
        self.window = window
        self.first_round_gain = first_round_gain
        self.min_alpha = -math.log2(1.0 - min_gain)  # min_gain per doubling of trials
        self.coverage_share = coverage_share
        self.peers = peers
        self._kinds: dict[str, tuple | None] = {}  # task key -> its blocks (None: unknown)

    @classmethod
    def from_settings(cls, scheduler: Any) -> GainScheduler:
        """The scheduler the [scheduler] settings describe."""
        return cls(
            window=scheduler.window,
            first_round_gain=scheduler.first_round_gain,
            min_gain=scheduler.min_gain_per_doubling,
            coverage_share=scheduler.coverage_share,
            peers=scheduler.peers,
        )

    def pick(
        self, states: Sequence[TaskState], sizes: RoundSizes, exclude: Collection[int] = ()
    ) -> RoundPlan | None:
        active = [s for s in states if s.retired is None and s.task.index not in exclude]
        if not active:
            return None
        costs = RoundCosts.typical(states)
        unknown = [s for s in active if s.latency_s is None]
        if unknown:
            first = min(unknown, key=lambda s: (s.rounds, s.task.index))
            size = sizes.first_touch
            return RoundPlan(first, size, math.inf, costs.seconds(size))
        shares = dict(zip((s.task.index for s in states), current_shares(states), strict=True))
        uncovered = [
            s
            for s in active
            if s.rounds == 0 and (shares[s.task.index] or 0.0) >= self.coverage_share
        ]
        peers = self.peer_latencies(states)
        plans = [
            self.plan(s, sizes, costs, first=bool(uncovered), peer_s=peers.get(s.task.index))
            for s in uncovered or active
        ]
        # Ties go to the task with fewer rounds, then the lower index.
        return max(plans, key=lambda p: (p.per_second, -p.state.rounds, -p.state.task.index))

    def plan(
        self,
        state: TaskState,
        sizes: RoundSizes,
        typical: RoundCosts,
        *,
        first: bool = False,
        peer_s: float | None = None,
    ) -> RoundPlan:
        """The task's best round: the size whose expected gain per second is highest (the
        first-round size when `first` or for a first touch)."""
        costs = RoundCosts.of(state) or typical
        options = [sizes.first_touch] if first or state.rounds == 0 else sizes.options()
        plans = [
            RoundPlan(state, k, self.expected_gain(state, k, peer_s), costs.seconds(k))
            for k in options
        ]
        return max(plans, key=lambda p: (p.per_second, -p.size))

    def peer_latencies(self, states: Sequence[TaskState]) -> dict[int, float]:
        """Each task's latency at the best throughput a tuned task of its kind has reached
        (task index -> seconds); none without `peers`."""
        if not self.peers:
            return {}
        best: dict[tuple, float] = {}  # kind -> FLOPs a second
        for s in states:
            kind = self.kind(s.task)
            if kind is not None and s.best_s:
                best[kind] = max(best.get(kind, 0.0), s.task.flops / s.best_s)
        return {
            s.task.index: s.task.flops / best[kind]
            for s in states
            if (kind := self.kind(s.task)) is not None and kind in best
        }

    def kind(self, task: Task) -> tuple | None:
        """The task's blocks and their iterators (search/transfer.py), once per task."""
        if task.key not in self._kinds:
            self._kinds[task.key] = None if task.workload is None else blocks(task.workload)
        return self._kinds[task.key]

    def expected_gain(self, state: TaskState, size: int, peer_s: float | None = None) -> float:
        """Expected cut of model latency (seconds) from `size` more trials of this task;
        `peer_s`: its latency at the best throughput a task of its kind has reached."""
        latency = state.latency_s
        if latency is None:
            return math.inf
        damp = 0.5**state.empty_searches
        if state.rounds == 0:
            return state.task.weight * latency * self.first_round_gain * damp
        trials = max(1, state.depth)
        # A task the library has tuned to a plateau is valued on a flat curve.
        alpha = (
            self.min_alpha if state.plateau else max(self.min_alpha, self.exponent(state) or 0.0)
        )
        growth = ((trials + size) / trials) ** -alpha
        # The tuned best follows the curve; the model gains once it beats what runs now.
        tuned = state.best_s if state.best_s is not None else latency
        cut = max(
            latency - tuned * growth,
            latency * (1.0 - ((trials + size) / trials) ** -self.min_alpha),
            peer_cut(state, size, peer_s),
        )
        return state.task.weight * cut * damp

    def exponent(self, state: TaskState) -> float | None:
        """alpha of the task's curve, latency ~ trials ** -alpha, over its last `window`
        rounds; None without two points."""
        points = [(1, state.baseline_s)] if state.baseline_s is not None else []
        points += [
            (n, best)
            for n, best in zip(state.trials_after, state.history, strict=True)
            if math.isfinite(best)
        ]
        points = points[-(self.window + 1) :]
        if len(points) < 2 or points[-1][0] <= points[0][0]:
            return None
        (n0, l0), (n1, l1) = points[0], points[-1]
        return math.log(l0 / l1) / math.log(n1 / n0)


def peer_cut(state: TaskState, size: int, peer_s: float | None) -> float:
    """The cut of the task's latency (seconds) a round of `size` is expected to make toward
    `peer_s`, its latency at its kind's best throughput: size / (trials + size) of the gap."""
    latency = state.latency_s
    if peer_s is None or latency is None or peer_s >= latency:
        return 0.0
    return (latency - peer_s) * size / (max(1, state.depth) + size)


@dataclasses.dataclass(frozen=True)
class RoundCosts:
    """A round of k candidates costs `fixed_s + per_candidate_s * k` seconds."""

    fixed_s: float
    per_candidate_s: float

    def seconds(self, candidates: int) -> float:
        return self.fixed_s + self.per_candidate_s * candidates

    @classmethod
    def of(cls, state: TaskState, recent: int = 3) -> RoundCosts | None:
        """From the task's last `recent` rounds; None before its first."""
        return cls._median(
            list(zip(state.round_trials, state.round_s, state.round_fixed_s, strict=True))[-recent:]
        )

    @classmethod
    def typical(cls, states: Sequence[TaskState], recent: int = 3) -> RoundCosts:
        """From every task's last `recent` rounds; a second per candidate before any round."""
        rounds = [
            r
            for s in states
            for r in list(zip(s.round_trials, s.round_s, s.round_fixed_s, strict=True))[-recent:]
        ]
        return cls._median(rounds) or cls(0.0, 1.0)

    @classmethod
    def _median(cls, rounds: Sequence[tuple[int, float, float]]) -> RoundCosts | None:
        rounds = [(n, s, f) for n, s, f in rounds if n > 0]
        if not rounds:
            return None
        fixed = statistics.median(f for _, _, f in rounds)
        per = statistics.median(max(0.0, s - f) / n for n, s, f in rounds)
        return cls(fixed, max(per, 1e-6))
