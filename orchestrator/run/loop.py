"""The tuning loop: round by round over MetaSchedule's search, cost model and database.

One round gives one task up to a round's worth of candidates:

    scheduler picks a task -> search proposes (search/) -> filter keeps -> builder builds
    -> engine measures -> database, search, cost model and filter learn -> budget decides
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tune_orchestrator.budget import Decision, Ledger, StoppingRule, TaskProgress
from tune_orchestrator.budget.base import TASKS_DONE
from tune_orchestrator.budget.plateau import TaskPlateau
from tune_orchestrator.filters import Filter, RoundCosts
from tune_orchestrator.measure import Build, Builder, BuildInput, Engine, MeasureInput, Measurement
from tune_orchestrator.measure.base import short_error

from ..config import Settings
from ..model.tasks import Candidate, Task, structural_key
from ..rundir.learned import Learned, LearnedFile
from ..search import Proposer, SearchTimes, Sisters, TaskSearch
from ..search.cost_model import candidate_features
from .failing import SEARCH_FAILED, FailureWatch
from .measuring import build_workers
from .scheduler import (
    RoundPlan,
    RoundSizes,
    Scheduler,
    TaskState,
    assign_floors,
    current_shares,
    model_latency_s,
    peer_cut,
)

Emit = Callable[..., None]
# Failed candidates are stored with this run time, as MetaSchedule's own runner does.
FAILED_RUN_SECS = 1e10
# Searches of one task that may fail with a TVM error in a row before the task is retired.
_SEARCH_ERROR_LIMIT = 3


@dataclasses.dataclass
class Round:
    """A round prepared for measurement: what was proposed, offered, chosen and built."""

    state: TaskState
    search: TaskSearch
    proposed: int  # new candidates the search proposed for this round
    duplicates: int  # proposed again although measured before (resumed runs)
    offered: int  # candidates offered to the filter: the new ones and those waiting
    rejected: int  # set aside by the filter for the first time
    kept: int  # the filter's choice, before the budget's allowance
    audit_keys: set[int]
    chosen: list[Candidate]
    builds: list[Build]
    times: dict[str, float]
    searched: SearchTimes  # where this round's search time went
    started: float
    planned: int  # the size the scheduler gave it
    waited: bool = False  # the early stop waits for its task (RoundPlan.waited)

    def trim(self, allowed: int, builder: Builder, proposer: Proposer) -> None:
        """Measure no more than `allowed` of the chosen candidates; the rest wait."""
        if allowed < len(self.chosen):
            builder.release(self.builds[allowed:])
            proposer.put_back(self.state.task, self.chosen[allowed:])
            self.chosen, self.builds = self.chosen[:allowed], self.builds[:allowed]


def search_ahead(setting: int, cores: int) -> int:
    """Tasks searched in background threads while the device measures: `setting`, or for 0
    one per 4 host cores (at least 1, at most 4), each search with its share of the cores."""
    return setting or max(1, min(4, cores // 4))


def round_size(trials_per_round: int, workers: int, gpus: int = 1) -> int:
    """Candidates per round: `trials_per_round` per GPU (a round fills and drains each
    GPU's pipeline once: with rounds of a fixed size, 8 GPUs measured at 0.55 of linear on the
    simulated device, in a GPU-only study removed after 314362b), in whole waves of the
    builder's `workers`, so that no host core idles through the last builds of a round."""
    workers = max(1, workers)
    wanted = trials_per_round * max(1, gpus)
    return -(-wanted // workers) * workers


def round_sizes(settings: Settings, workers: int, gpus: int = 1) -> RoundSizes:
    """The sizes a run's rounds may have: from a first touch of [scheduler] first_round
    candidates per GPU (least_first_round where a budget cannot cover every task with it) up
    to `round_size`'s, in whole waves of the builder's `workers`."""
    largest = round_size(settings.tune.trials_per_round, workers, gpus)
    s, per_gpu = settings.scheduler, max(1, gpus)
    return RoundSizes.for_run(
        s.first_round * per_gpu, largest, workers, least=s.least_first_round * per_gpu
    )


def proposals_per_round(settings: Settings, round_candidates: int, filtered: bool) -> int:
    """Candidates the search proposes for a round of `round_candidates`: more when a filter
    needs something to choose from."""
    return round_candidates * (settings.filter.proposal_factor if filtered else 1)


def first_proposals(settings: Settings, *, gpus: int, filtered: bool) -> int:
    """What a run's first rounds (first touches) will propose, before its builder (of the
    configured workers) and its engine (of `gpus`) exist: for the first round's forecast up
    front."""
    size = round_sizes(settings, build_workers(settings), gpus).smallest
    return proposals_per_round(settings, size, filtered)


def round_costs(r: Round) -> RoundCosts:
    """What the round's candidates cost to build, and its measuring, for the filter."""
    return RoundCosts(
        build_s=tuple(b.seconds for b in r.builds),
        timed_out=tuple(b.timed_out for b in r.builds),
        measure_s=r.times.get("measure", 0.0),
    )


def spend_fields(ledger: Ledger) -> dict[str, Any]:
    """Spend so far, as events report it."""
    return {
        "wall_s": ledger.wall_s,
        "device_h": ledger.device_h,
        "usd": ledger.usd,
        "energy_j": ledger.energy_j,
        "trials": ledger.trials,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoopRules:
    """What the run's description gives the loop: the target it tunes for, the settings, the
    rule that stops the run and the one that retires a task on its plateau."""

    target: Any
    settings: Settings
    stopping: StoppingRule
    plateau: TaskPlateau | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoopParts:
    """What a round works with: the database and cost model the search learns from, the
    candidate filter, the builder, the measuring engine, the scheduler that picks the task."""

    database: Any
    cost_model: Any
    candidate_filter: Filter
    builder: Builder
    engine: Engine
    scheduler: Scheduler
    # Where what the cost model learns of each record is kept (rundir/learned.py); None: not
    # kept (a cost model other than ours, whose features are its own).
    learned: LearnedFile | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoopStart:
    """Where the loop starts: the tasks' states; the keys already measured (or being measured)
    per task index; each task's measured schedules that ran, as (MeasureCandidate, seconds), for
    its search to start from; the proposals parked by an earlier session; the search's seed."""

    states: Sequence[TaskState]
    measured: dict[int, set[int]]
    rand_state: int
    bests: Mapping[int, list[tuple[Any, float]]] | None = None
    parked: dict[int, list[Any]] | None = None


class TuningLoop:
    """Runs rounds until a stopping rule or the scheduler ends the run."""

    def __init__(
        self,
        rules: LoopRules,
        parts: LoopParts,
        start: LoopStart,
        *,
        ledger: Ledger,
        journal: Callable[[dict[str, Any]], None],
        emit: Emit,
        threads: int,
        pipeline: bool = False,
    ) -> None:
        self.target, self.settings = rules.target, rules.settings
        self.stopping, self.plateau = rules.stopping, rules.plateau
        self.database, self.cost_model = parts.database, parts.cost_model
        self.builder, self.engine = parts.builder, parts.engine
        self.filter, self.scheduler = parts.candidate_filter, parts.scheduler
        self.learned = parts.learned
        self._named: dict[int, str | None] = {}  # candidate key -> its record's digest
        self.states = list(start.states)
        self.measured = start.measured  # task index -> keys in the database or being measured
        self.failing = FailureWatch()
        self.rand_state = start.rand_state
        self._bests = dict(start.bests or {})
        self.ledger = ledger
        self.journal = journal
        self.emit = emit
        self.threads = threads
        self.pipeline = pipeline
        # First rounds are sized when `run` starts, once the budget's forecast is known.
        self.sizes = round_sizes(
            self.settings, getattr(self.builder, "workers", 1), getattr(self.engine, "lanes", 1)
        )
        self._filtered = self.filter.name != "none"
        # The most a round proposes; a first touch proposes for the smallest round.
        self.proposals = proposals_per_round(self.settings, self.sizes.largest, self._filtered)
        self.first_proposals = proposals_per_round(
            self.settings, self.sizes.smallest, self._filtered
        )
        # With pipelining, the next tasks' searches run ahead while the device measures.
        self.ahead = search_ahead(self.settings.search.ahead, threads) if pipeline else 0
        self._rejected: dict[int, set[int]] = {}  # task -> keys the filter ever set aside
        self.proposer = self._make_proposer(start.parked)
        s = self.settings.stopping
        assign_floors(self.states, share=s.heavy_share, trials=s.heavy_trials)
        self._main = threading.current_thread()
        self._last_round_end = 0.0

    def _make_proposer(self, parked: dict[int, list[Any]] | None) -> Proposer:
        """What proposes each round's candidates: the tasks' searches, their sister tasks'
        schedules and the candidates an earlier session left waiting (`parked`)."""
        return Proposer(
            make_search=self._new_search,
            cost_model=self.cost_model,
            measured=self.measured,
            set_aside=self._rejected,
            proposals=self.proposals,
            ahead=self.ahead,
            charge=self._charge,
            parked=parked,
            sisters=Sisters(
                [state.task for state in self.states],
                target=self.target,
                trail=self.settings.search.sister_trail,
                share=self.settings.search.sister_share,
            ),
        )

    def _first_sizes(self) -> RoundSizes:
        """The sizes with first rounds sharing [scheduler] first_rounds candidates over the
        tasks to cover, no more than half of what the budget affords (as forecast once the
        first round's cost is; RoundSizes.for_budget)."""
        most = self.settings.scheduler.first_rounds
        affordable = self.stopping.allowance(self.ledger, 2 * most)
        return self.sizes.for_budget(self._to_cover(), most, affordable)

    def _sizes_now(self) -> RoundSizes:
        """The sizes the next round may have: first rounds shrink while what is left of the
        budget, as forecast from the rounds so far, cannot give every task still to cover one
        of the smallest (RoundSizes.covering); a run that turns out faster than its forecast
        goes back to the smallest."""
        tasks = self._to_cover()
        if not tasks:
            return self.sizes
        affordable = self.stopping.allowance(self.ledger, tasks * self.sizes.smallest)
        return self.sizes.covering(tasks, affordable)

    def _to_cover(self) -> int:
        """Tasks still to get a first round: never tuned, holding the coverage share or more
        of the model's kernel time now (as the scheduler covers them)."""
        share = self.settings.scheduler.coverage_share
        shares = current_shares(self.states)
        return sum(
            1
            for state, held in zip(self.states, shares, strict=True)
            if state.rounds == 0 and (held is None or held >= share)
        )

    @property
    def search_times(self) -> SearchTimes:
        """Where all searches' time went."""
        return self.proposer.times

    def run(self) -> Decision:
        """Tune until stopped; returns why: its reason in words and its code.

        With `pipeline`, the next round (of another task: a task's next round is searched only
        after its last one has been learned) is searched, filtered and built in a background
        thread while this one is measured; it is for engines whose timings builds cannot
        disturb (GPUs, remote machines).
        """
        ahead: Round | None = None
        self.sizes = self._first_sizes()
        with (
            concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="next-round"
            ) as background,
            contextlib.closing(self.proposer),
        ):
            while True:
                decision = self.stopping.decide(self.ledger, self.progress())
                broken = self.failing.decide(self.states)
                if broken is not None or decision.stop:
                    self._discard(ahead)
                    return broken or decision
                current, ahead = ahead, None
                if current is None:
                    plan = self._pick(decision.waiting_on)
                    if plan is None:
                        return self._all_retired()
                    current = self._prepare(plan, self.stopping.allowance(self.ledger, plan.size))
                    if current is None:
                        continue
                else:  # prepared a round ago: the budget may allow less now
                    allowed = self.stopping.allowance(self.ledger, current.planned)
                    current.trim(allowed, self.builder, self.proposer)
                    if not current.chosen:
                        continue
                # Marked before measuring: a round prepared meanwhile must not propose them.
                self.measured.setdefault(current.state.task.index, set()).update(
                    c.key for c in current.chosen
                )
                upcoming = (
                    self._look_ahead(current, background, decision.waiting_on)
                    if self.pipeline
                    else None
                )
                busy_before = self._device_busy()
                measurements = self._measure_round(current)
                if upcoming is not None:
                    with self.ledger.phase("ahead"):  # what measuring did not hide
                        waited = time.monotonic()
                        ahead = upcoming.result()
                        # A simulated device measured in no real time: the background work
                        # it would have hidden is taken off its clock.
                        busy = self._device_busy() - busy_before
                        self._hidden(min(time.monotonic() - waited, busy))
                self._learn_round(current, measurements)

    def _all_retired(self) -> Decision:
        broken = FailureWatch.all_retired(self.states)
        if broken is not None:
            return broken
        retired = "; ".join(sorted({s.retired for s in self.states if s.retired}))
        return Decision(True, f"every task is retired: {retired}", TASKS_DONE)

    def _look_ahead(
        self,
        current: Round,
        background: concurrent.futures.ThreadPoolExecutor,
        waiting_on: Sequence[int] = (),
    ) -> concurrent.futures.Future[Round | None] | None:
        """Start preparing the next round in `background` while `current` is measured, and
        the searches of the rounds after it; None when the budget would throw it away."""
        nxt = self._next_plans({current.state.task.index}, 1 + self.ahead, waiting_on)
        allowed = self._allowed_after([len(current.chosen)], nxt[0].size) if nxt else 0
        if not (nxt and allowed):
            return None
        upcoming = background.submit(self._prepare, nxt[0], allowed)
        # Searches for the rounds after that one, if one still fits.
        if self._allowed_after([len(current.chosen), allowed], nxt[0].size):
            self.proposer.ahead((p.state.task, self._proposals(p.size)) for p in nxt[1:])
        return upcoming

    def measure_given(self, given: Mapping[int, Sequence[Any]]) -> dict[int, list[Measurement]]:
        """Measure schedules the search did not propose (MeasureCandidates by task index, such
        as the tuning library's records of each task) as trials: built together, committed
        and learned like a round's, and handed to each task's search as parents. Schedules
        measured before are left out and the budget's allowance caps the lot. No round is
        counted: the caller says what the results mean for each task."""
        chosen = self._given(given)
        chosen = chosen[: self.stopping.allowance(self.ledger, len(chosen))] if chosen else []
        if not chosen:
            return {}
        times: dict[str, float] = {}
        with self._phase("build", times):
            builds = self.builder.build(
                [BuildInput(c.mod, self.target) for c in chosen], until=self._build_deadline()
            )
        chosen = chosen[: len(builds)]
        for c in chosen:  # marked before measuring, as a round's are
            self.measured.setdefault(c.task.index, set()).add(c.key)
        states = {s.task.index: s for s in self.states}
        results = {}
        for index in dict.fromkeys(c.task.index for c in chosen):
            mine = [i for i, c in enumerate(chosen) if c.task.index == index]
            results[index] = self._measure_given(
                states[index], [chosen[i] for i in mine], [builds[i] for i in mine], times
            )
        self.builder.release(builds)
        with self._phase("learn", times):
            if hasattr(self.cost_model, "fit"):
                self.cost_model.fit()
        self.ledger.trials += len(chosen)
        return results

    def _given(self, given: Mapping[int, Sequence[Any]]) -> list[Candidate]:
        """Candidates of the given schedules not measured before, task by task."""
        states = {s.task.index: s for s in self.states}
        out = []
        for index, schedules in given.items():
            done = self.measured.get(index, set())
            for mc in schedules:
                key = structural_key(mc.sch.mod)
                if key not in done and all(c.key != key for c in out):
                    out.append(Candidate(states[index].task, mc, key))
        return out

    def _measure_given(
        self,
        state: TaskState,
        chosen: Sequence[Candidate],
        builds: Sequence[Build],
        times: dict[str, float],
    ) -> list[Measurement]:
        from tvm.s_tir.meta_schedule import TuneContext
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        from .. import _tvm

        _tvm.load_tensor_intrinsics(self.target)  # before the first TuneContext: see _tvm.py
        task = state.task
        with self._phase("measure", times):
            measured = self._measure(
                state, self.database.commit_workload(task.workload), chosen, builds
            )
        with self._phase("learn", times):
            ran = [
                (c.measure_candidate, m.mean_s)
                for c, m in zip(chosen, measured, strict=True)
                if m.ok
            ]
            parents = self._bests.get(task.index, []) + ran
            self._bests[task.index] = sorted(parents, key=lambda best: best[1])
            built = [i for i, b in enumerate(builds) if b.ok]
            context = TuneContext(mod=task.workload, target=self.target, task_name=task.name)
            if built:
                add = getattr(self.cost_model, "add", None) or self.cost_model.update
                add(
                    context,
                    [chosen[i].measure_candidate for i in built],
                    [
                        RunnerResult(list(m.run_secs) if m.ok else None, m.error)
                        for m in (measured[i] for i in built)
                    ],
                )
            self._keep_learned(context, chosen, built)
        return measured

    def _allowed_after(self, rounds: Sequence[int], wanted: int) -> int:
        """Candidates a round may have after rounds of these sizes, started and not yet paid
        for, are paid for (their forecast time and their trials); 0 when the budget would stop
        before it."""
        self.ledger.committed_s = sum(self.ledger.forecast_round(n) or 0.0 for n in rounds)
        self.ledger.committed_trials = sum(rounds)
        try:
            if self.stopping.decide(self.ledger, self.progress()).stop:
                return 0
            return self.stopping.allowance(self.ledger, wanted)
        finally:
            self.ledger.committed_s, self.ledger.committed_trials = 0.0, 0

    def progress(self) -> list[TaskProgress]:
        """What the stopping rules may judge the tasks by."""
        peers = self.scheduler.peer_latencies(self.states)
        model = model_latency_s(self.states) or math.inf

        def catch_up(s: TaskState) -> float:
            """Of the model's latency, what a largest round would cut toward its peers."""
            return s.task.weight * peer_cut(s, self.sizes.largest, peers.get(s.task.index)) / model

        def share_now(s: TaskState) -> float | None:
            """Of the model's latency, what the task holds now."""
            if s.latency_s is None or math.isinf(model):
                return None
            return s.task.weight * s.latency_s / model

        return [
            TaskProgress(
                name=s.task.name,
                share=s.share,
                trials=s.depth,  # trials in the tuning library are evidence too
                measured_rounds=s.measured_rounds,
                floor=s.floor,
                done=s.retired is not None,
                catch_up=catch_up(s),
                share_now=share_now(s),
            )
            for s in self.states
        ]

    def _discard(self, prepared: Round | None) -> None:
        """A round prepared ahead that the stop leaves unmeasured: its candidates wait."""
        if prepared is not None:
            self.builder.release(prepared.builds)
            self.proposer.put_back(prepared.state.task, prepared.chosen)

    def _pick(
        self, waiting_on: Sequence[int], exclude: frozenset[int] | set[int] = frozenset()
    ) -> RoundPlan | None:
        """The scheduler's next round (no task in `exclude`); while a stopping rule would stop
        but for some tasks (positions in `states`), one of theirs if it can, so the run
        spends on what it waits for rather than running on to its budget. A waited-for task
        whose last search came back empty is left to the scheduler's own order, which looks
        elsewhere first (a search that keeps coming back empty is not asked again and again)."""
        waited = {
            self.states[i].task.index for i in waiting_on if not self.states[i].empty_searches
        }
        sizes = self._sizes_now()
        if waited - exclude:
            others = {s.task.index for s in self.states} - waited
            plan = self.scheduler.pick(self.states, sizes, exclude=exclude | others)
            if plan is not None:
                return dataclasses.replace(plan, waited=True)
        return self.scheduler.pick(self.states, sizes, exclude=exclude)

    def _next_plans(
        self, exclude: set[int], count: int, waiting_on: Sequence[int] = ()
    ) -> list[RoundPlan]:
        """The rounds the scheduler would plan next, in order (no task twice, none
        excluded; `_pick`)."""
        picked: list[RoundPlan] = []
        while len(picked) < count:
            plan = self._pick(waiting_on, exclude)
            if plan is None:
                break
            picked.append(plan)
            exclude = exclude | {plan.state.task.index}
        return picked

    def _proposals(self, size: int) -> int:
        return proposals_per_round(self.settings, size, self._filtered)

    def _new_search(self, task: Task, proposals: int) -> TaskSearch:
        search = TaskSearch(
            task,
            target=self.target,
            settings=self.settings,
            database=self.database,
            cost_model=self.cost_model,
            rand_state=self.rand_state,
            threads=max(1, self.threads // max(1, self.ahead)),
            proposals=proposals,
        )
        search.learn(self._bests.pop(task.index, []))
        return search

    def _device_busy(self) -> float:
        """Seconds a simulated device has spent measuring (0 for real devices, whose time
        the wall clock sees)."""
        return float(getattr(self.engine, "virtual_s", 0.0))

    def _hidden(self, seconds: float) -> None:
        overlapped = getattr(self.ledger.clock, "overlapped", None)
        if overlapped is not None and seconds > 0:
            overlapped(seconds)

    def _charge(self, phase: str, seconds: float, overlapped: bool) -> None:
        self.ledger.charge_phase(phase, seconds, overlapped=overlapped)

    @contextlib.contextmanager
    def _phase(self, name: str, times: dict[str, float]) -> Iterator[None]:
        """Charge the block to the ledger's phase `name` (overlapped when it runs in the
        background) and to this round's `times`."""
        background = threading.current_thread() is not self._main
        # The ledger's clock includes a simulated device's time, which the main thread's
        # measuring advances: background work is timed on the real clock.
        clock = time.monotonic if background else self.ledger.clock
        start = clock()
        try:
            yield
        finally:
            seconds = clock() - start
            times[name] = times.get(name, 0.0) + seconds
            self._charge(name, seconds, background)

    def _prepare(self, plan: RoundPlan, allowed: int) -> Round | None:
        """Steps 1-3 of a round: propose, filter, build. None when it has nothing to measure."""
        state, started = plan.state, self.ledger.clock()
        task = state.task
        # 1. The search tops up the candidates waiting for this task.
        try:
            waiting, topped = self.proposer.offer(task, self._proposals(plan.size))
        except Exception as exc:  # a TVM error in one task's search never ends the run
            self._search_failed(state, exc)
            return None
        state.search_errors = 0
        times = {"search": topped.seconds}
        if not waiting:
            self._empty_search(state, topped.seconds)
            return None
        state.empty_searches = 0
        # 2. The filter keeps the most promising; the budget may allow fewer. The rest wait.
        with self._phase("filter", times):
            selection = self.filter.select(task, waiting)
        chosen = [waiting[i] for i in selection.first(allowed)]
        kept = {waiting[i].key for i in selection.keep}
        rejected = self._rejected.setdefault(task.index, set())
        newly = {c.key for c in waiting if c.key not in kept} - rejected
        rejected |= newly
        self.proposer.take(task, chosen)
        if not chosen:
            return None
        # 3. Build, no more than the budget has time left to measure.
        with self._phase("build", times):
            builds = self.builder.build(
                [BuildInput(c.mod, self.target) for c in chosen], until=self._build_deadline()
            )
        if len(builds) < len(chosen):
            self.proposer.put_back(task, chosen[len(builds) :])
            chosen = chosen[: len(builds)]
            if not chosen:
                return None
        return Round(
            state=state,
            search=self.proposer.search(task),
            proposed=topped.proposed,
            duplicates=topped.duplicates,
            offered=len(waiting),
            rejected=len(newly),
            kept=len(selection.keep),
            audit_keys={waiting[i].key for i in selection.audit},
            chosen=chosen,
            builds=builds,
            times=times,
            searched=topped.searched,
            started=started,
            planned=plan.size,
            waited=plan.waited,
        )

    def _build_deadline(self) -> Callable[[], bool] | None:
        """When a round's builds must stop starting: once the time they took, and the
        measuring and learning they will need after them, would outrun what the budget leaves.
        Forecasts can miss (a task's candidates may build several times slower than the last
        task's); this keeps the round inside the budget whatever the forecast said. Measuring
        and learning are reckoned at this run's ratio to building (one to one before any)."""
        left = self.stopping.seconds_left(self.ledger)
        if left is None or math.isinf(left):
            return None
        phases = self.ledger.phases
        built = phases.get("build", 0.0)
        after = (phases.get("measure", 0.0) + phases.get("learn", 0.0)) / built if built else 1.0
        clock = self.ledger.clock
        start = clock()
        return lambda: (clock() - start) * (1.0 + after) >= left

    def _empty_search(self, state: TaskState, seconds: float) -> None:
        """Nothing to measure: retire the task if its search space is exhausted; otherwise
        count the wasted search, which makes the scheduler look elsewhere first."""
        if self.proposer.exhausted(state.task):
            self._retire(state, "search space exhausted")
            return
        state.empty_searches += 1
        state.wasted_s += seconds
        self.journal({"type": "empty_search", "task": state.task.index, "seconds": seconds})

    def _search_failed(self, state: TaskState, exc: Exception) -> None:
        """TVM raised in the task's search. One sampled schedule can do that (some GPU
        schedules make TVM's own passes fail): the task is searched again later, like after an
        empty search, and retired only when its search fails again and again."""
        state.search_errors += 1
        error = short_error(exc)
        self.journal({"type": "search_error", "task": state.task.index, "error": error})
        if state.search_errors >= _SEARCH_ERROR_LIMIT:
            self._retire(state, f"{SEARCH_FAILED} {state.search_errors} times in a row: {error}")
        else:
            state.empty_searches += 1

    def _measure_round(self, r: Round) -> list[Measurement]:
        """Step 4: every result goes into the database the moment it is known, so a crash
        loses at most the candidate being timed."""
        with self._phase("measure", r.times):
            measurements = self._measure(r.state, r.search.workload, r.chosen, r.builds)
        self.builder.release(r.builds)
        return measurements

    def _learn_round(self, r: Round, measurements: list[Measurement]) -> None:
        """Steps 5-6: learn, charge the round, extend the curve, journal, retire a plateau."""
        state, chosen, builds = r.state, r.chosen, r.builds
        with self._phase("learn", r.times):
            self._learn(r.search, chosen, builds, measurements)
        with self._phase("filter", r.times):  # judging; training only a model of its own
            self.filter.learn(state.task, chosen, measurements, round_costs(r))
        good = [m.mean_s for m in measurements if m.ok]
        self.failing.record(state.task.index, measurements)
        # A prepared-ahead round overlapped the previous one: count from where that ended.
        now = self.ledger.clock()
        seconds = now - max(r.started, self._last_round_end)
        self._last_round_end = now
        audited = r.audit_keys & {c.key for c in chosen}
        state.trials += len(chosen)
        state.failures += len(chosen) - len(good)
        state.proposed += r.proposed
        state.filtered += r.rejected
        state.built += sum(b.ok for b in builds)
        state.audited += len(audited)
        fixed_s = seconds - r.times.get("build", 0.0) - r.times.get("measure", 0.0)
        state.record_round(
            min(good) if good else None, trials=len(chosen), seconds=seconds, fixed_s=fixed_s
        )
        state.waiting = self.proposer.pool.size(state.task.index)
        self.ledger.charge_round(trials=len(chosen), seconds=seconds, fixed_s=max(0.0, fixed_s))
        self.ledger.record_point(model_latency_s(self.states))
        self._journal_round(r, audited=len(audited), measurements=measurements, seconds=seconds)
        if self.plateau is not None:
            verdict = self.plateau.decide(state.history, protected=state.depth < state.floor)
            if verdict.stop:
                self._retire(state, verdict.reason)

    def _measure(
        self,
        state: TaskState,
        workload: Any,
        chosen: Sequence[Candidate],
        builds: Sequence[Build],
    ) -> list[Measurement]:
        """One Measurement per candidate (a build failure is one), each committed at once
        under `workload` (the database's Workload of the task)."""
        results: dict[int, Measurement] = {}

        def arrived(i: int, measurement: Measurement) -> None:
            results[i] = self._checked(state, measurement)
            self._commit(workload, chosen[i], results[i])

        for i, b in enumerate(builds):
            if not b.artifact:
                arrived(i, Measurement(None, b.error))
        built = [i for i, b in enumerate(builds) if b.artifact]
        self.engine.measure(
            [
                # The label lets a simulated device give each candidate its own latency.
                MeasureInput(builds[i].artifact, chosen[i].args, label=chosen[i].label)  # type: ignore[arg-type]
                for i in built
            ],
            on_result=lambda j, m: arrived(built[j], m),
            best_s=state.best_s,  # a parallel engine confirms a new best in isolation
        )
        return [results[i] for i in range(len(chosen))]

    @staticmethod
    def _checked(state: TaskState, m: Measurement) -> Measurement:
        """A candidate that writes NaN or Inf where the untuned kernel does not is wrong."""
        if m.ok and m.finite is False and state.untuned_finite is not False:
            return Measurement(None, "wrote NaN or Inf, which the untuned kernel does not")
        return m

    def _commit(self, workload: Any, candidate: Candidate, m: Measurement) -> None:
        from tvm.s_tir.meta_schedule.database import TuningRecord

        mc = candidate.measure_candidate
        run_secs = list(m.run_secs) if m.ok else [FAILED_RUN_SECS]
        record = TuningRecord(mc.sch.trace, workload, run_secs, self.target, mc.args_info)
        named = getattr(self.database, "commit_named", None) if self.learned is not None else None
        if named is None:
            self.database.commit_tuning_record(record)
        else:
            self._named[candidate.key] = named(record)

    def _learn(
        self,
        search: TaskSearch,
        chosen: Sequence[Candidate],
        builds: Sequence[Build],
        measurements: Sequence[Measurement],
    ) -> None:
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        results = [RunnerResult(list(m.run_secs) if m.ok else None, m.error) for m in measurements]
        candidates = [c.measure_candidate for c in chosen]
        search.learn([(mc, m.mean_s) for mc, m in zip(candidates, measurements, strict=True)])
        # The cost model learns from everything that built (a failed run is a slow candidate).
        built = [i for i, b in enumerate(builds) if b.ok]
        if built:
            self.cost_model.update(
                search.ctx, [candidates[i] for i in built], [results[i] for i in built]
            )
        self._keep_learned(search.ctx, chosen, built)

    def _keep_learned(self, context: Any, chosen: Sequence[Candidate], built: list[int]) -> None:
        """Each committed candidate's key, and the features the cost model has just learned
        of those `built`, beside the database (rundir/learned.py): a resumed run reads them
        instead of replaying the records."""
        named = {i: self._named.pop(c.key, None) for i, c in enumerate(chosen)}
        if self.learned is None:
            return
        mcs = [chosen[i].measure_candidate for i in built]
        features = dict(zip(built, candidate_features(self.cost_model, context, mcs), strict=True))
        self.learned.append(
            (digest, Learned(chosen[i].key, chosen[i].task.key, features.get(i)))
            for i, digest in named.items()
            if digest is not None
        )

    def _retire(self, state: TaskState, reason: str) -> None:
        state.retired = reason
        self.journal({"type": "task_retired", "task": state.task.index, "reason": reason})
        self.emit("task_retired", task=state.task.name, reason=reason)

    def _journal_round(
        self, r: Round, *, audited: int, measurements: Sequence[Measurement], seconds: float
    ) -> None:
        state, chosen, builds = r.state, r.chosen, r.builds
        errors = [m.error for m in measurements if not m.ok]
        entry = {
            "type": "round",
            "round": self.ledger.rounds,
            "task": state.task.index,
            "task_key": state.task.key,
            "trials": len(chosen),
            "fixed_s": round(state.round_fixed_s[-1], 3),
            "proposed": r.proposed,
            "duplicates": r.duplicates,
            "offered": r.offered,
            "filtered": r.rejected,
            "audited": audited,
            "over_budget": max(0, r.kept - len(chosen)),
            "waiting": state.waiting,
            "early_stop_waits": r.waited,
            "search": r.searched.to_dict(),
            "built": sum(b.ok for b in builds),
            "measured": sum(m.ok for m in measurements),
            "failed": len(errors),
            "best_s": state.best_s,
            "round_best_s": min((m.mean_s for m in measurements if m.ok), default=None),
            "build_s": statistics.fmean([b.seconds for b in builds if b.ok] or [0.0]),
            "model_latency_s": model_latency_s(self.states),
            "seconds": round(seconds, 3),
            "spend": self.ledger.snapshot().to_dict(),
        }
        if errors:
            entry["first_error"] = errors[0]
        self.journal(entry)
        self.emit(
            "round",
            round=self.ledger.rounds,
            task=state.task.name,
            task_index=state.task.index,
            tasks=len(self.states),
            measured=entry["measured"],
            failed=entry["failed"],
            best_s=state.best_s,
            model_latency_s=entry["model_latency_s"],
            spend=spend_fields(self.ledger),
            budget_used=self.stopping.progress(self.ledger),
            early_stop_waits=r.waited,
        )
