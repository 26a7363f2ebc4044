"""The tuning loop: round by round over MetaSchedule's search, cost model and database.

One round gives one task `trials_per_round` fresh candidates:

    scheduler picks a task -> search proposes -> filter keeps -> builder builds
    -> engine measures -> database, search, cost model and filter learn -> budget decides
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from budget import Ledger, StoppingRule
from budget.plateau import TaskPlateau
from filters import Filter
from measure import Build, Builder, BuildInput, Engine, MeasureInput, Measurement
from measure.base import short_error

from . import _tvm
from .config import Settings
from .scheduler import Scheduler, TaskState, model_latency_s
from .tasks import Candidate, Task, structural_key

Emit = Callable[..., None]
# Failed candidates are stored with this run time, as MetaSchedule's own runner does.
FAILED_RUN_SECS = 1e10
# A task whose search proposes nothing new this many rounds in a row is done.
_MAX_EMPTY_ROUNDS = 3


@dataclasses.dataclass
class Round:
    """A round prepared for measurement: what was proposed, chosen and built."""

    state: TaskState
    search: TaskSearch
    proposed: int
    fresh: int
    kept: int
    audit_keys: set[int]
    chosen: list[Candidate]
    builds: list[Build]
    times: dict[str, float]
    started: float

    def trim(self, allowed: int, builder: Builder) -> None:
        """Measure no more than `allowed` of the chosen candidates."""
        if allowed < len(self.chosen):
            builder.release(self.builds[allowed:])
            self.chosen, self.builds = self.chosen[:allowed], self.builds[:allowed]


class TaskSearch:
    """One task's MetaSchedule state: a TuneContext with an EvolutionarySearch."""

    def __init__(
        self,
        task: Task,
        *,
        target: Any,
        settings: Settings,
        database: Any,
        cost_model: Any,
        rand_state: int,
        threads: int,
        proposals: int,
    ) -> None:
        from tvm.s_tir import meta_schedule as ms

        _tvm.load_tensor_intrinsics()
        s = settings.search
        strategy = ms.search_strategy.EvolutionarySearch(
            population_size=s.population,
            init_measured_ratio=s.init_measured_ratio,
            genetic_num_iters=s.genetic_num_iters,
            genetic_mutate_prob=s.genetic_mutate_prob,
            genetic_max_fail_count=s.genetic_max_fail_count,
            eps_greedy=s.eps_greedy,
        )
        self.ctx = ms.TuneContext(
            mod=task.workload,
            target=target,
            space_generator="post-order-apply",
            search_strategy=strategy,
            task_name=task.name,
            rand_state=rand_state,
            num_threads=threads,
            logger=_tvm.quiet_logger(),
        )
        # The strategy stops proposing once `max_trials` results were reported, shrinking the
        # last batches on the way; the budget stops the loop instead, so give it ample room.
        self.ctx.pre_tuning(
            max_trials=1 << 30,
            num_trials_per_iter=proposals,
            design_spaces=self.ctx.generate_design_space(),
            database=database,
            cost_model=cost_model,
        )
        self.workload = database.commit_workload(task.workload)

    def propose(self) -> list[Any] | None:
        """Candidates for one round; None once the search has nothing left to propose."""
        proposed = self.ctx.generate_measure_candidates()
        return None if proposed is None else list(proposed)


def spend_fields(ledger: Ledger) -> dict[str, Any]:
    """Spend so far, as events report it."""
    return {
        "wall_s": ledger.wall_s,
        "device_h": ledger.device_h,
        "usd": ledger.usd,
        "energy_j": ledger.energy_j,
        "trials": ledger.trials,
    }


class TuningLoop:
    """Runs rounds until a stopping rule or the scheduler ends the run."""

    def __init__(
        self,
        *,
        states: Sequence[TaskState],
        target: Any,
        settings: Settings,
        database: Any,
        cost_model: Any,
        builder: Builder,
        engine: Engine,
        candidate_filter: Filter,
        scheduler: Scheduler,
        stopping: StoppingRule,
        plateau: TaskPlateau | None,
        ledger: Ledger,
        journal: Callable[[dict[str, Any]], None],
        emit: Emit,
        measured: dict[int, set[int]],
        rand_state: int,
        threads: int,
        pipeline: bool = False,
    ) -> None:
        self.states = list(states)
        self.target = target
        self.settings = settings
        self.database = database
        self.cost_model = cost_model
        self.builder = builder
        self.engine = engine
        self.filter = candidate_filter
        self.scheduler = scheduler
        self.stopping = stopping
        self.plateau = plateau
        self.ledger = ledger
        self.journal = journal
        self.emit = emit
        self.measured = measured  # task index -> keys already in the database or being measured
        self.rand_state = rand_state
        self.threads = threads
        # A filter needs more proposals than it keeps, to have something to choose from.
        factor = settings.filter.proposal_factor if candidate_filter.name != "none" else 1
        self.proposals = settings.tune.trials_per_round * factor
        self.pipeline = pipeline
        self._searches: dict[int, TaskSearch] = {}
        self._empty_rounds: dict[int, int] = {}
        self._last_round_end = 0.0

    def run(self) -> str:
        """Tune until stopped; returns the reason the run stopped.

        With `pipeline`, the next round is searched, filtered and built in a background thread
        while this one is measured (its search sees the cost model one round late); it is for
        engines whose timings builds cannot disturb (GPUs, remote machines).
        """
        wanted = self.settings.tune.trials_per_round
        ahead: Round | None = None
        with concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="next-round"
        ) as background:
            while True:
                decision = self.stopping.decide(self.ledger)
                if decision.stop:
                    self._discard(ahead)
                    return decision.reason
                current, ahead = ahead, None
                if current is None:
                    state = self.scheduler.pick(self.states)
                    if state is None:
                        return "every task is retired: " + "; ".join(
                            sorted({s.retired for s in self.states if s.retired})
                        )
                    current = self._prepare(state, self.stopping.allowance(self.ledger, wanted))
                    if current is None:
                        continue
                else:  # prepared a round ago: the budget may allow less now
                    current.trim(self.stopping.allowance(self.ledger, wanted), self.builder)
                    if not current.chosen:
                        continue
                # Marked before measuring: a round prepared meanwhile must not propose them.
                self.measured.setdefault(current.state.task.index, set()).update(
                    c.key for c in current.chosen
                )
                upcoming = None
                nxt = self.scheduler.pick(self.states) if self.pipeline else None
                if nxt is not None:
                    allowed = self.stopping.allowance(self.ledger, wanted)
                    upcoming = background.submit(self._prepare, nxt, allowed)
                measurements = self._measure_round(current)
                ahead = upcoming.result() if upcoming is not None else None
                self._learn_round(current, measurements)

    def _discard(self, prepared: Round | None) -> None:
        if prepared is not None:
            self.builder.release(prepared.builds)

    def _search(self, task: Task) -> TaskSearch:
        if task.index not in self._searches:
            with self.ledger.phase("search"):
                self._searches[task.index] = TaskSearch(
                    task,
                    target=self.target,
                    settings=self.settings,
                    database=self.database,
                    cost_model=self.cost_model,
                    rand_state=self.rand_state,
                    threads=self.threads,
                    proposals=self.proposals,
                )
        return self._searches[task.index]

    @contextlib.contextmanager
    def _phase(self, name: str, times: dict[str, float]) -> Iterator[None]:
        """Charge the block to the ledger's phase `name` and to this round's `times`."""
        start = time.monotonic()
        try:
            with self.ledger.phase(name):
                yield
        finally:
            times[name] = times.get(name, 0.0) + time.monotonic() - start

    def _prepare(self, state: TaskState, allowed: int) -> Round | None:
        """Steps 1-4 of a round: propose, drop what was measured, filter, build. None when
        the round has nothing to measure."""
        task, times = state.task, {}
        started = time.monotonic()
        # 1. The search proposes candidates.
        try:
            search = self._search(task)
            with self._phase("search", times):
                proposed = search.propose()
        except Exception as exc:  # a TVM error in one task's search ends that task, not the run
            self._retire(state, f"search failed: {short_error(exc)}")
            return None
        if proposed is None:
            self._retire(state, "search space exhausted")
            return None
        # 2. Candidates measured in an earlier session are dropped: the search does not know
        #    the database's records, only what it proposed itself in this process.
        known = self.measured.setdefault(task.index, set())
        fresh: list[Candidate] = []
        for mc in proposed:
            key = structural_key(mc.sch.mod)
            if key not in known and all(c.key != key for c in fresh):
                fresh.append(Candidate(task, mc, key))
        # 3. The filter keeps the promising ones; the budget may allow fewer.
        with self._phase("filter", times):
            selection = self.filter.select(task, fresh)
        kept = [fresh[i] for i in selection.keep]
        chosen = kept[:allowed]
        if not chosen:
            self._empty_rounds[task.index] = self._empty_rounds.get(task.index, 0) + 1
            if self._empty_rounds[task.index] >= _MAX_EMPTY_ROUNDS:
                self._retire(state, "search proposes nothing new")
            return None
        self._empty_rounds[task.index] = 0
        # 4. Build.
        with self._phase("build", times):
            builds = self.builder.build([BuildInput(c.mod, self.target) for c in chosen])
        return Round(
            state=state,
            search=search,
            proposed=len(proposed),
            fresh=len(fresh),
            kept=len(kept),
            audit_keys={fresh[i].key for i in selection.audit},
            chosen=chosen,
            builds=builds,
            times=times,
            started=started,
        )

    def _measure_round(self, r: Round) -> list[Measurement]:
        """Step 5: every result goes into the database the moment it is known, so a crash
        loses at most the candidate being timed."""
        with self._phase("measure", r.times):
            measurements = self._measure(r.state, r.search, r.chosen, r.builds)
        self.builder.release(r.builds)
        return measurements

    def _learn_round(self, r: Round, measurements: list[Measurement]) -> None:
        """Steps 6-7: learn, charge the round, extend the curve, journal, retire a plateau."""
        state, chosen, builds = r.state, r.chosen, r.builds
        with self._phase("learn", r.times):
            self._learn(r.search, chosen, builds, measurements)
            self.filter.learn(state.task, chosen, measurements)
        good = [m.mean_s for m in measurements if m.ok]
        # A prepared-ahead round overlapped the previous one: count from where that ended.
        seconds = time.monotonic() - max(r.started, self._last_round_end)
        self._last_round_end = time.monotonic()
        audited = r.audit_keys & {c.key for c in chosen}
        state.trials += len(chosen)
        state.failures += len(chosen) - len(good)
        state.proposed += r.proposed
        state.filtered += r.fresh - r.kept
        state.built += sum(b.ok for b in builds)
        state.audited += len(audited)
        state.record_round(min(good) if good else None)
        state.round_s.append(seconds)
        fixed_s = seconds - r.times.get("build", 0.0) - r.times.get("measure", 0.0)
        self.ledger.charge_round(trials=len(chosen), seconds=seconds, fixed_s=max(0.0, fixed_s))
        self.ledger.record_point(model_latency_s(self.states))
        self._journal_round(
            state,
            proposed=r.proposed,
            fresh=r.fresh,
            kept=r.kept,
            audited=len(audited),
            chosen=chosen,
            builds=builds,
            measurements=measurements,
            seconds=seconds,
        )
        if self.plateau is not None:
            verdict = self.plateau.decide(state.history)
            if verdict.stop:
                self._retire(state, verdict.reason)

    def _measure(
        self,
        state: TaskState,
        search: TaskSearch,
        chosen: Sequence[Candidate],
        builds: Sequence[Build],
    ) -> list[Measurement]:
        """One Measurement per candidate (a build failure is one), each committed at once."""
        results: dict[int, Measurement] = {}

        def arrived(i: int, measurement: Measurement) -> None:
            results[i] = self._checked(state, measurement)
            self._commit(search, chosen[i], results[i])

        for i, b in enumerate(builds):
            if not b.artifact:
                arrived(i, Measurement(None, b.error))
        built = [i for i, b in enumerate(builds) if b.artifact]
        self.engine.measure(
            [MeasureInput(builds[i].artifact, chosen[i].args) for i in built],  # type: ignore[arg-type]
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

    def _commit(self, search: TaskSearch, candidate: Candidate, m: Measurement) -> None:
        from tvm.s_tir.meta_schedule.database import TuningRecord

        mc = candidate.measure_candidate
        run_secs = list(m.run_secs) if m.ok else [FAILED_RUN_SECS]
        self.database.commit_tuning_record(
            TuningRecord(mc.sch.trace, search.workload, run_secs, self.target, mc.args_info)
        )

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
        # Only what was measured is reported: the search counts reported results.
        search.ctx.notify_runner_results(candidates, results)
        # The cost model learns from everything that built (a failed run is a slow candidate).
        built = [i for i, b in enumerate(builds) if b.ok]
        if built:
            self.cost_model.update(
                search.ctx, [candidates[i] for i in built], [results[i] for i in built]
            )

    def _retire(self, state: TaskState, reason: str) -> None:
        state.retired = reason
        self.journal({"type": "task_retired", "task": state.task.index, "reason": reason})
        self.emit("task_retired", task=state.task.name, reason=reason)

    def _journal_round(
        self,
        state: TaskState,
        *,
        proposed: int,
        fresh: int,
        kept: int,
        audited: int,
        chosen: Sequence[Candidate],
        builds: Sequence[Build],
        measurements: Sequence[Measurement],
        seconds: float,
    ) -> None:
        errors = [m.error for m in measurements if not m.ok]
        entry = {
            "type": "round",
            "round": self.ledger.rounds,
            "task": state.task.index,
            "task_key": state.task.key,
            "proposed": proposed,
            "duplicates": proposed - fresh,
            "filtered": fresh - kept,
            "audited": audited,
            "over_budget": kept - len(chosen),
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
        )
