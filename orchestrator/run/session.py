"""One invocation on a run directory: measure untuned, tune, compile, check, report."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from tune_orchestrator.budget import Decision, Ledger
from tune_orchestrator.budget.base import (
    BUDGET,
    BUILD_ONLY,
    INTERRUPTED,
    NOTHING_TO_TUNE,
    TRIALS,
    UNTUNED_DIFFERS,
)
from tune_orchestrator.budget.ledger import RoundCost
from tune_orchestrator.budget.limits import clock_seconds, seconds_short
from tune_orchestrator.budget.report import (
    Notes,
    Outcome,
    RunFacts,
    TaskWork,
    make_report,
    reverted_tasks,
    task_row,
)
from tune_orchestrator.budget.units import fmt_duration
from tune_orchestrator.measure import Builder, Engine, LocalEngine
from tune_orchestrator.predictor import warm_start

from ..api import ANSWER
from ..deploy import devices
from ..deploy.builds import UNTUNED, ModelBuilds, Shipment
from ..deploy.check import DIFFERS, UNTUNED_DIFFERS_FIX, UNTUNED_DIFFERS_WHY
from ..errors import BudgetTooSmall, InputError
from ..forecast import overheads
from ..host import host_cores, idle_cores, tvm_threads
from ..model.defaults import DefaultRecords, SearchView, default_schedule, deployed_schedule
from ..model.importer import Imported
from ..model.loading import OnnxModel
from ..model.targets import (
    ResolvedTarget,
    cores_text,
    measured_on_other_cpu,
    more_cores_than_here,
)
from ..prior import load_prior, prior_for
from ..provenance import provenance, tvm_version, utc_now
from ..rundir import RunDir
from ..rundir.directory import other_run
from ..rundir.durability import (
    DeviceClaim,
    Heartbeat,
    checkpointed_spend,
    open_database,
    repair_database,
)
from ..rundir.learned import LearnedFile
from ..rundir.restore import Earlier, Known, Restored, restore, spend_so_far
from ..rundir.waiting import load_waiting, save_waiting
from ..search import make_cost_model
from ..search.strategy import most_parents
from ..simulate import WORD, VirtualClock
from . import rerun
from .loop import LoopParts, LoopRules, LoopStart, TuningLoop, spend_fields
from .measuring import RunPools, cpu_caveat, measure_untuned_tasks
from .prepare import Given, candidate_filter, resumed_with
from .reporting import write_report
from .scheduler import GainScheduler, current_shares, model_latency_s
from .skipped import Skipped, reason

Emit = Callable[..., None]


class Session:
    """One invocation on a run directory, for a run `given` (prepare.describe) and its model
    `imported`; `pools` are the workers started before the import (else started when needed)."""

    def __init__(
        self,
        given: Given,
        imported: Imported,
        *,
        run: RunDir,
        emit: Emit,
        pools: RunPools | None = None,
    ) -> None:
        self.given = given
        self.model, self.target, self.settings = given.model, given.target, given.settings
        self.budget, self.fleet, self.library = given.budget, given.fleet, given.library
        self.price, self.energy = given.cost.price, given.cost.energy
        self.relax_mod, self.tasks, self.import_s = (
            imported.relax_mod,
            list(imported.tasks),
            imported.import_s,
        )
        self.run, self.emit, self.pools = run, emit, pools
        self.build_only = given.invocation.build_only
        self.interrupt = given.stopping.interrupt
        self.warnings: list[str] = []
        self.measurement: dict[str, Any] = {}
        self.search: dict[str, Any] = {}  # where search time went (search.SearchTimes)
        self.started = utc_now()
        # What the run passes over in files it reads, from the filter's saved state on.
        self.skipped = Skipped()
        self.prior: str | None = None  # the shipped prior the learned model started on
        self.filter, predictor = candidate_filter(
            given.settings, given.target, run.path, skipped=self.skipped
        )
        self.skipped.listen(self._warn)
        # The learned model: the search's cost model, which the xgb filter ranks with; with
        # [search] cost_model = "tvm-xgb", the filter's own. A warm start trains it.
        self.search_predictor = predictor
        own = getattr(self.filter, "predictor", None)
        self.predictors = list(dict.fromkeys(p for p in (predictor, own) if p is not None))
        self.library.warn = self._warn
        self.builds = self._model_builds()

    def _model_builds(self) -> ModelBuilds:
        # A fleet's server is held for every check and timing at the end: minutes.
        timeout_s = max(600.0, self.settings.measure.timeout_s)
        return ModelBuilds(
            model=self.model,
            relax_mod=self.relax_mod,
            target=self.target,
            settings=self.settings,
            run=self.run,
            emit=self.emit,
            device=devices.for_run(self.target, self.fleet, timeout_s=timeout_s),
            checker=self.given.checker,
            tasks=self.tasks,
        )

    def execute(self) -> dict[str, Any]:
        """Run the session; returns the report (also written to report.json)."""

        # 1. Restore what earlier sessions measured and spent; mend what a crash tore.
        journal = self.run.journal()  # read (and refused if corrupt) before anything is mended
        repairs = self.run.repairs + repair_database(self.run)
        ledger = self._ledger(journal)
        fixed = overheads.forecast_fixed(
            self.tasks,
            device_type=self.target.device_type,
            device_present=self.target.device_present,
            timing=self.builds.timing,
            graph_ops=self.model.op_counts(),
        )
        # The final compile, check and report are kept back from the start.
        ledger.reserved_s = fixed.final_s
        finished = _finished(journal, self.run)
        if finished and not self.build_only:  # the same command again: told before reading back
            done = self._done_already(journal, ledger, fixed)
            if done is not None:
                return done
        database = open_database(self.run, self.skipped)
        cost_model = make_cost_model(self.settings, self.search_predictor)
        restored = self._restore(journal, database, cost_model, ledger)
        if not self.build_only:  # a build-only run spends what compiling takes
            self._refuse_too_small(ledger, fixed, Earlier.of(restored), finished=finished)
        self._start(restored, ledger)
        self._warn_on_start(repairs)
        with Heartbeat(self.run, ledger.snapshot):
            defaults = DefaultRecords(database, self.target, restored, self.run.append)
            defaults.add_missing()
            untuned = restored.untuned
            stopped = Decision(True, _build_only(journal), BUILD_ONLY)
            if not self.build_only:
                untuned, stopped = self._measure_and_tune(
                    restored, database, defaults, cost_model, ledger
                )
            self.interrupt.tuned = True
            # 4. With the workers gone: compile with the database, check both builds, time
            #    them in turn, ship the faster of those whose outputs match.
            shipment = self._ship(database, ledger, untuned, restored)
            report = self._write_report(journal, restored, shipment, ledger, stopped)
            self.run.append({"type": "session_end", "spend": ledger.snapshot().to_dict()})
        return report

    def _done_already(
        self, journal: list[dict[str, Any]], ledger: Ledger, fixed: overheads.FixedCosts
    ) -> dict[str, Any] | None:
        """The report the finished run wrote, where this session, asking for the same run,
        would stop before its first round (rerun.py) or its budget is spent: nothing is read
        back, built or written then. Else BudgetTooSmall where the up-front check refuses the
        budget, or None: the session goes the whole way."""
        report = self._standing_report(journal, ledger)
        rule = self.given.stopping.rule
        decision = rerun.stops_again(rule, ledger, journal) if report is not None else None
        to_do = None
        if decision is None:
            try:
                self._refuse_too_small(
                    ledger, fixed, Earlier.of_journal(journal, self.tasks), finished=True
                )
                return None
            except BudgetTooSmall as refusal:
                if report is None:
                    raise
                decision, to_do = rerun.spent(str(self.budget), refusal.minimum)
        answer = rerun.answer(decision, to_do)
        self.emit(
            "stopped",
            reason=answer,
            stop=decision.code,
            interrupted=False,
            spend=spend_fields(ledger),
        )
        # Not written: the run's report as it stands, and this session's answer beside it.
        return {**report, "paths": {**report["paths"], **self._paths()}, ANSWER: answer}

    def _standing_report(
        self, journal: list[dict[str, Any]], ledger: Ledger
    ) -> dict[str, Any] | None:
        """The finished run's report, where it answers for this session; None where a warm
        start, a fleet, other settings or check samples, a run that did not end with exit code
        0, or a database short of records make it go the whole way."""
        if self.given.warm_start is not None or self.fleet.rpc:
            return None
        checks = not self.target.simulated  # a simulated GPU's builds are never run
        report = rerun.earlier_report(
            self.run, self.given.checker.samples.source if checks else None
        )
        if report is None:
            return None
        if not rerun.same_run(self.run.read_json(RunDir.CONFIG), self.config_record()):
            return None
        if not rerun.records_kept(self.run, journal, ledger.trials):
            return None
        return report

    def _ledger(self, journal: list[dict[str, Any]]) -> Ledger:
        """The run's ledger, carrying what earlier sessions spent, with the import charged."""
        # A simulated GPU measures in no real time: its clock adds the device's virtual time.
        clock = VirtualClock() if self.target.simulated else time.monotonic
        ledger = Ledger(
            clock=clock,
            carried=checkpointed_spend(self.run, spend_so_far(journal)),
            devices=self.fleet.devices(self.target.device_type),
            cores=host_cores(),
            usd_per_hour=self.price.usd_per_hour if self.price else None,
            energy=self.energy,
            earlier_s=self.import_s,
        )
        ledger.charge_phase("import", self.import_s)
        return ledger

    def _restore(
        self, journal: list[dict[str, Any]], database: Any, cost_model: Any, ledger: Ledger
    ) -> Restored:
        """Train the learned model on the tuning library, restore the run directory's state
        (a warm start fitting the learned model next), and bring the ledger up to date."""
        # The tuning library's records train the learned model before its first round; a
        # warm start fits it next, on both.
        clock = clock_seconds(self.budget, ledger)
        with ledger.phase("library"):
            if self.tasks:  # a model with nothing to tune has nothing to learn for
                self.library.read(target=self.target.target, skipped=self.skipped)
                self.library.train(
                    self.predictors,
                    self.target.target,
                    self.tasks,
                    fit=self.given.warm_start is None,
                    seconds=None if clock is None else clock * self.settings.library.train_share,
                )
        with ledger.phase("restore"):
            restored = restore(
                self.tasks,
                journal,
                database,
                cost_model=cost_model,
                target=self.target.target,
                candidate_filter=self.filter,
                parents=most_parents(self.settings),
                skipped=self.skipped,
                known=Known(self._learned.read(), self.library.kept()),
                threads=host_cores(),
            )
            self._warm_start(restored, cost_model)
        # A crash between a database commit and its journal line leaves records the journal
        # has not counted: count them, so that the trial budget is never exceeded.
        ledger.trials = max(ledger.trials, restored.trials)
        ledger.history = list(restored.points)
        return restored

    @functools.cached_property
    def _learned(self) -> LearnedFile:
        """What the run learned of each record it measured (rundir/learned.py)."""
        return LearnedFile.for_target(self.run[RunDir.LEARNED], self.target.target)

    def _warm_start(self, restored: Restored, cost_model: Any) -> None:
        """Start the learned model on --warm-start; where nothing started it (no --warm-start,
        no library record, nothing of this run measured yet), give the search the prior."""
        if not self.predictors:
            return
        if self.given.warm_start is not None:
            used = warm_start(
                self.predictors, self.given.warm_start, self.target.target, skipped=self.skipped
            )
            self.run.append(
                {"type": "warm_start", "source": str(self.given.warm_start), "used": used}
            )
            return
        path = prior_for(self.target) if self.settings.search.prior else None
        fresh = self.library.trained_records == 0 and restored.trials == 0
        if path is None or not fresh or not hasattr(cost_model, "prior"):
            return
        try:
            cost_model.prior = load_prior(path)
        except (OSError, ValueError) as error:  # xgboost's XGBoostError is a ValueError
            self.skipped.add("prior", f"{path.name}: {reason(error)}")
            return
        self.prior = path.name

    def _warn_on_start(self, repairs: Sequence[str]) -> None:
        """What the run directory's repairs mended, that timings are simulated, and that the
        output check's samples give the same outputs."""
        for repair in repairs:
            self._warn(f"the run directory was mended after a crash: {repair}")
        if self.target.simulated:
            self._warn(
                f"{WORD} run: search and CUDA builds are real, every timing comes from a "
                f"simulated GPU; the database and library are named {WORD}"
            )
        measured_here = self.target.device_type == "cpu" and self.target.device_present
        if measured_here and not self.fleet.rpc and not self.build_only:
            self._warn_other_cpu(self.target.target)
        timed_here = self.target.device_type == "cpu" and not self.fleet.rpc
        idle = idle_cores() if timed_here and not self.build_only else None
        if idle:
            self._warn(idle)
        checked = devices.runs_model(self.target, self.fleet)  # else no build is checked
        caveat = self.given.checker.reference_caveat() if checked else None
        if caveat is not None:
            self._warn(f"the output check will prove little: {caveat}")

    def _warn_other_cpu(self, target: Any) -> None:
        """Where an llvm target names another CPU or more cores than this host's, on which its
        candidates are measured: the schedules are chosen for this host."""
        host_cpu = measured_on_other_cpu(target)
        if host_cpu:
            self._warn(
                f"the target names CPU {target.attrs['mcpu']}, but candidates are measured on "
                f"this host's, {host_cpu}: the schedules are chosen for {host_cpu}"
            )
        cores = more_cores_than_here(target)
        if cores:
            self._warn(
                f"the target gives {cores_text(int(target.attrs['num-cores']))}, but candidates "
                f"are measured on this host's {cores}: the schedules are chosen for "
                f"{cores_text(cores)}"
            )

    def _ship(
        self, database: Any, ledger: Ledger, untuned: dict[str, Any] | None, restored: Restored
    ) -> Shipment:
        """Compile, check and time the builds (builds.finish); the records of a model that
        passed its check go to the tuning library."""
        shipment = self.builds.finish(
            database, ledger, untuned, tuned_schedules=runs_tuned(restored)
        )
        if shipment.comparison is not None:
            self.run.append({"type": "compared", **shipment.comparison})
        with ledger.phase("library"):  # only records of a model that passed its check
            self.library.add(
                (self.run[RunDir.WORKLOAD_DB], self.run[RunDir.RECORD_DB]),
                restored.default_records.values(),
                shipment.tuned,
                self._learned,
            )
        return shipment

    def _write_report(
        self,
        journal: list[dict[str, Any]],
        restored: Restored,
        shipment: Shipment,
        ledger: Ledger,
        stopped: Decision,
    ) -> dict[str, Any]:
        """Write report.md, .html and then report.json, which counts the writing of the
        others; returns the report."""
        # The run started with its first session, perhaps on another day.
        started = next((e["started"] for e in journal if e.get("type") == "session"), None)
        report = self._report(restored, shipment, ledger, stopped, started)
        with ledger.phase("report"):
            write_report(self.run, report)
        # report.json counts its own writing; report.md and .html were written before.
        report = self._report(restored, shipment, ledger, stopped, started)
        self.run.write_json(RunDir.REPORT, report)
        return report

    def _start_pools(self) -> RunPools:
        return RunPools(self.settings, self.target, self.run[RunDir.LOGS], self.fleet)

    def _measure_and_tune(
        self,
        restored: Restored,
        database: Any,
        defaults: DefaultRecords,
        cost_model: Any,
        ledger: Ledger,
    ) -> tuple[dict[str, Any], Decision]:
        with contextlib.ExitStack() as claims:
            pools = claims.enter_context(self.pools or self._start_pools())
            builder, engine = pools.builder, pools.engine
            if isinstance(ledger.clock, VirtualClock):
                ledger.clock.attach(lambda: engine.virtual_s)  # type: ignore[attr-defined]
            if self.target.device_type == "cuda" and isinstance(engine, LocalEngine):
                self._warn(
                    "cupy cannot use the GPU here, so candidates are timed one at a time with "
                    "TVM's timer; pip install 'tune-orchestrator[gpu]' for parallel measurement"
                )
            self._claim_devices(claims, pools)
            # 2. Untuned latency of each task (its default schedule recorded), and of the model.
            self._measure_baselines(restored, builder, engine, ledger, defaults)
            untuned = restored.untuned or self._untuned_model(ledger)
            # An earlier session's check, taken now with this session's samples and rtol (at
            # the start rather than the end, where it would be taken again anyway).
            checked = restored.untuned is None or self.builds.check_again(untuned, UNTUNED, ledger)
            if not ledger.history:
                self._point(ledger, model_latency_s(restored.states))
            if "compile_s" in untuned:  # measured: a better forecast than the guess
                self._reserve(ledger, untuned)
            # 3. Tune, the search blind to the default schedules.
            view = SearchView(database, list(restored.default_records.values()))
            if not self.tasks:
                stopped = Decision(True, "the model has no operators to tune", NOTHING_TO_TUNE)
            else:
                differs = _untuned_differs(untuned) if checked else None
                stopped = differs or self._tune(restored, view, cost_model, builder, engine, ledger)
            self.measurement = self._measurement_stats(engine, builder, ledger)
        self.run.append(
            {
                "type": "stopped",
                "reason": stopped.reason,
                "code": stopped.code,
                "spend": ledger.snapshot().to_dict(),
            }
        )
        self.emit(
            "stopped",
            reason=stopped.reason,
            stop=stopped.code,
            interrupted=stopped.code == INTERRUPTED,
            spend=spend_fields(ledger),
        )
        return untuned, stopped

    def _claim_devices(self, claims: contextlib.ExitStack, pools: RunPools) -> None:
        """Claim this host's devices for the run (held until `claims` closes): a run already
        measuring there, this user's or another's, is warned of; lock files that could not
        be shared are counted."""
        for why in pools.lock_files:
            self.skipped.add("lock_files", why)
        for device in self.fleet.claims(self.target.device_type):
            claim = claims.enter_context(
                DeviceClaim(
                    device,
                    on_skip=lambda why: self.skipped.add("lock_files", why),
                    on_joined=functools.partial(self._joined_on, device),
                )
            )
            if claim.shared_with:
                self._warn(
                    f"{other_run(claim.shared_with)} is measuring on {device}: the measurements "
                    "of both runs are disturbed"
                )

    def _joined_on(self, device: str) -> None:
        """Another run measures on `device`, claimed by this one (told from a thread)."""
        self._warn(
            f"another orchestrate process measures on {device} during this run: the "
            "measurements of both runs are disturbed"
        )

    def _refuse_too_small(
        self,
        ledger: Ledger,
        fixed: overheads.FixedCosts,
        earlier: Earlier,
        *,
        finished: bool = False,
    ) -> None:
        """Raise BudgetTooSmall, before any work, when a limit cannot cover the fixed phases,
        a first round's search (forecast as the run will before it times one) and the final
        phase; a budget that covers them is owed that first round (Ledger.promised_round). A
        resumed run with candidates measured before needs no further round: it ships what it
        has when the final phase fits. `finished`: the last session shipped model.so and
        ended (the same command run again)."""
        kept = earlier.trials  # measured in earlier sessions
        first = None
        if not kept and ledger.forecast_round(0) is None:  # no round timed yet
            first = overheads.upfront_first_round_s(
                self.settings,
                tasks=len(self.tasks),
                untuned_s=fixed.untuned_s,
                gpus=self.fleet.devices(self.target.device_type),
                filtered=self.filter.name != "none",
                device_type=self.target.device_type,
            )
        needed = overheads.upfront_minimum_s(
            fixed,
            baseline=any(task.index not in earlier.baselines for task in self.tasks),
            untuned_model=not earlier.untuned,
            first_round=first,
        )
        short = seconds_short(self.budget, ledger, needed)
        if short is None:
            if first is not None:  # accepted for a first round: the run owes it
                ledger.promised_round = overheads.smallest_round(self.settings)
            return
        limit, total = short
        why = self._refusal(limit.text, total, needed, first, ledger, kept=kept, finished=finished)
        raise BudgetTooSmall(why, minimum=total, needed_s=ledger.wall_s + needed)

    def _refusal(
        self,
        limit: str,
        total: str,
        needed: float,
        first: float | None,
        ledger: Ledger,
        *,
        kept: int,
        finished: bool,
    ) -> str:
        """Why budget `limit` is refused up front (`needed` seconds more, `first` of them a
        first round's), and the budget `total` that would do: a run that finished, one with
        `kept` candidates measured earlier, or one that has tuned nothing."""
        if kept and finished:
            return (
                f"the run in {self.run.path} already finished after "
                f"{fmt_duration(ledger.earlier_wall_s)}: "
                f"{self.run[RunDir.LIBRARY].name} is what it shipped ({RunDir.REPORT_MD} says "
                f"what it bought); budget {limit} leaves too little to tune further: give "
                f"--budget {total} or more"
            )
        if kept:
            return (
                f"budget {limit} is too small to compile and check the {kept} candidates "
                f"measured earlier: that needs about {fmt_duration(needed)} more after "
                f"{fmt_duration(ledger.wall_s)} spent; give --budget {total} or more (they stay "
                f"in {self.run.path})"
            )
        what = (
            f"the untuned baseline, a first round (~{fmt_duration(first)} to search, build and "
            f"measure {overheads.smallest_round(self.settings)} candidates on "
            f"{cores_text(host_cores())} for {self.target.device_type}), compiling and checking"
            if first is not None
            else "the untuned baseline, compiling and checking"
        )
        return (
            f"budget {limit} is too small for {self.model.name}: {what} need about "
            f"{fmt_duration(needed)} more"
            + (f" after {fmt_duration(ledger.wall_s)} spent" if ledger.wall_s >= 1 else "")
            + f"; give --budget {total} or more (nothing was tuned)"
        )

    def _measurement_stats(
        self, engine: Engine, builder: Builder, ledger: Ledger
    ) -> dict[str, Any]:
        stats = dict(engine.stats())
        built = builder.stats()
        if built.get("workers_ready_s"):
            stats["builders_ready_s"] = built["workers_ready_s"]
        if built.get("remote"):  # built on the fleet's build servers
            stats["remote_builds"] = built["remote"]
        wall = ledger.wall_s or 1.0
        stats["measuring_share"] = ledger.phases.get("measure", 0.0) / wall
        if self.target.device_type == "cpu" and not self.fleet.rpc:
            stats["caveat"] = cpu_caveat(host_cores(), tvm_threads())
        for warning in stats.get("telemetry", {}).get("warnings", []):  # type: ignore[union-attr]
            self._warn(warning)
        return stats

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        self.run.append({"type": "warning", "message": message})
        self.emit("warning", message=message)

    # -- steps ------------------------------------------------------------------------------

    def _start(self, restored: Restored, ledger: Ledger) -> None:
        """Record the session (config.json, the journal, the events); where a resume measures
        elsewhere or reads another library than the earlier sessions, warn."""
        try:
            resumed = restored.sessions and not self.build_only  # a build measures nothing
            earlier = self.run.read_json(RunDir.CONFIG) if resumed else None
        except InputError:  # torn: its sessions' settings cannot be told
            earlier = None
        record = self.config_record()
        moved = rerun.moved(earlier, record)
        self.run.write_json(RunDir.CONFIG, record)
        self.run.append(
            {
                "type": "session",
                "session": restored.sessions,
                "pid": os.getpid(),
                "started": self.started,
                "budget": str(self.budget),
                "price": self.price.usd_per_hour if self.price else None,
                "tasks": [t.describe() for t in self.tasks],
            }
        )
        self.emit(
            "run_started",
            run_dir=str(self.run.path),
            library=str(self.run[RunDir.LIBRARY]),  # model-SIMULATED.so where simulated
            resumed=self.run.resumed,
            model=self.model.name,
            target=self.target.describe(),
            budget=str(self.budget),
            build_only=self.build_only,
            price=self.price.usd_per_hour if self.price else None,
            spent_s=ledger.earlier_wall_s,  # this session's start is its own spend
            trials=ledger.trials,
        )
        self.emit("tasks", tasks=[t.describe() for t in self.tasks])
        for warning in moved:
            self._warn(warning)

    def _measure_baselines(
        self,
        restored: Restored,
        builder: Any,
        engine: Engine,
        ledger: Ledger,
        defaults: DefaultRecords,
    ) -> None:
        """Untuned latency of each task not measured in an earlier session; its default
        schedule becomes a record with that latency."""
        todo = [s for s in restored.states if s.task.index not in restored.baselines]
        if not todo:
            return
        with ledger.phase("untuned"):
            schedules = [default_schedule(s.task, self.target) for s in todo]
            results = measure_untuned_tasks(
                [s.task for s in todo], self.target, builder, engine, [d.mod for d in schedules]
            )
        for state, m, schedule in zip(todo, results, schedules, strict=True):
            state.baseline_s = m.mean_s if m.ok else None
            state.untuned_finite = m.finite
            restored.baselines.add(state.task.index)
            defaults.add(state, schedule, list(m.run_secs) if m.ok else None, m.error)
        self.emit(
            "untuned_tasks",
            tasks=[{"task": s.task.name, "latency_s": s.baseline_s} for s in todo],
        )

    def _untuned_model(self, ledger: Ledger) -> dict[str, Any]:
        """Compile without any record, check and time: the baseline of progress estimates.
        The library stays in logs/ for the comparison at the end."""
        from tvm.s_tir import meta_schedule as ms

        result = self.builds.build(ms.database.MemoryDatabase(), ledger, "untuned", timed=True)
        self.run.append({"type": "untuned", **result})
        return result

    def _reserve(self, ledger: Ledger, untuned: dict[str, Any]) -> None:
        """What the final phase needs, from the untuned model's compile, check and timing:
        where that model was timed and the curve starts at its kernels' estimate, set anew
        from each point of the curve (overheads.FinalReserve), as the tuned model gets
        faster to check and time."""
        report_s = overheads.report_s(len(self.tasks))
        check_s = untuned.get("check_s", 0.0)
        latency = untuned.get("latency")
        if not (latency and ledger.history):  # not timed here: as if the tuned were as slow
            ledger.reserved_s = overheads.reserve_s(untuned["compile_s"], check_s, report_s)
            return
        ledger.reserve = overheads.FinalReserve(
            compile_s=untuned["compile_s"],
            check_s=check_s,
            latency_s=latency["median_s"],
            kernels_s=ledger.history[0].latency_s,  # a resumed run's curve starts as its first
            report_s=report_s,
            timing=self.builds.timing,
        ).at
        ledger.reserved_s = ledger.reserve(ledger.history[-1].latency_s)

    def _point(self, ledger: Ledger, latency_s: float | None) -> None:
        """The first point of the convergence curve: the untuned model's kernels."""
        if latency_s is None:
            return
        ledger.record_point(latency_s)
        self.run.append(
            {"type": "point", "model_latency_s": latency_s, "spend": ledger.snapshot().to_dict()}
        )

    def _tune(
        self,
        restored: Restored,
        database: Any,
        cost_model: Any,
        builder: Any,
        engine: Engine,
        ledger: Ledger,
    ) -> Decision:
        parts = LoopParts(
            database=database,
            cost_model=cost_model,
            candidate_filter=self.filter,
            builder=builder,
            engine=engine,
            scheduler=GainScheduler.from_settings(self.settings.scheduler),
            learned=self._learned if hasattr(cost_model, "add_features") else None,
        )
        loop = TuningLoop(
            self._loop_rules(),
            parts,
            self._loop_start(restored),
            ledger=ledger,
            journal=self.run.append,
            emit=self.emit,
            threads=host_cores(),
            pipeline=self._pipelined(engine),
        )
        try:
            # Exact reuse first: the library's fastest records of each task it knows.
            self.library.resume(restored.library, restored.states)
            self.library.reuse(
                loop, restored.states, restored.library.done, ledger, self.run.append, self.emit
            )
            # Then transfer: what tasks of the same kind reached, replayed on those untouched.
            self.library.transfer(loop, restored.states, ledger, self.run.append)
            if ledger.prior_round is None:  # the first round, forecast before it is timed
                ledger.prior_round = self._first_round_cost(loop.first_proposals, ledger)
            return loop.run()
        finally:
            proposer = loop.proposer
            self.search = {
                **loop.search_times.to_dict(),
                "waiting_restored": proposer.restored,
                "waiting_saved": save_waiting(self.run, proposer.leftovers(), self.target.target),
                "dropped": sum(proposer.pool.dropped.values()),
                "abandoned": proposer.abandoned,
                **proposer.shared(),
                "prior": self.prior,
            }

    def _loop_rules(self) -> LoopRules:
        stopping = self.given.stopping
        return LoopRules(
            target=self.target.target,
            settings=self.settings,
            stopping=stopping.rule,
            plateau=stopping.plateau,
        )

    def _loop_start(self, restored: Restored) -> LoopStart:
        """Where the loop starts: what earlier sessions measured and left waiting."""
        parked = load_waiting(
            self.run,
            self.tasks,
            target=self.target.target,
            skipped=self.skipped,
            threads=host_cores(),
        )
        return LoopStart(
            states=restored.states,
            measured=restored.measured,
            bests=restored.bests,
            parked=parked,
            # A resumed session searches with a fresh random state: the same seed would
            # propose again what the earlier session already measured.
            rand_state=self.settings.tune.seed + 1_000_003 * restored.sessions,
        )

    def _first_round_cost(self, proposals: int, ledger: Ledger) -> RoundCost:
        """The first round as the up-front check forecast it (overheads.first_round), now with
        what the baseline took per task."""
        return overheads.first_round(
            self.settings,
            proposals=proposals,
            cores=host_cores(),
            device_type=self.target.device_type,
            per_candidate_s=overheads.baseline_task_s(
                ledger.phases.get("untuned", 0.0), len(self.tasks)
            ),
        )

    def _pipelined(self, engine: Engine) -> bool:
        mode = self.settings.measure.pipeline
        if mode != "auto":
            return mode == "on"
        return engine.device_type == "cuda" or bool(self.fleet.rpc)

    def _report(
        self,
        restored: Restored,
        shipment: Shipment,
        ledger: Ledger,
        stopped: Decision,
        started: str | None,
    ) -> dict[str, Any]:
        # Nothing measured in the whole run, stopped by the budget (not by a signal, nor by
        # tasks whose search spaces held nothing to measure; a build-only run and a model with
        # nothing to tune have stop codes of their own): import, untuned measurement and
        # compiling used it up.
        too_small = ledger.trials == 0 and stopped.code in (BUDGET, TRIALS)
        outcome = Outcome(
            untuned=shipment.untuned,
            tuned=shipment.tuned,
            comparison=shipment.comparison,
            shipment=shipment.to_dict(),
            stop_reason=stopped.reason,
            stop=stopped.code,
            interrupted=stopped.code == INTERRUPTED,
            budget_too_small=too_small,
        )
        notes = Notes(
            warnings=self.warnings,
            skipped=self.skipped.to_dict(),
            candidate_filter=self.filter.stats(),
            measurement=self.measurement,
            search=self.search,
            library=self.library.report(),
        )
        reverted = reverted_tasks(shipment.tuned)
        return make_report(
            self._facts(restored, started, reverted),
            outcome,
            tasks=self._task_rows(restored, reverted),
            spend=ledger.snapshot(),
            curve=ledger.history,
            notes=notes,
        )

    def _facts(self, restored: Restored, started: str | None, reverted: frozenset[str]) -> RunFacts:
        """What was run, and where, for the report."""
        target = self.target
        return RunFacts(
            model=self.model.describe(),
            target={
                "spec": target.spec,
                "description": target.describe(),
                "device": target.device_name,
                "tvm": target.to_json(),
            },
            settings=self.settings.to_dict(),
            budget=self.budget,
            price=None
            if self.price is None
            else {"usd_per_hour": self.price.usd_per_hour, "source": self.price.source},
            build_only=self.build_only,
            sessions=restored.sessions + 1,
            paths=self._paths(),
            provenance=self._provenance(started),
            simulated=self._simulated(restored, reverted) if target.simulated else None,
        )

    def _task_rows(self, restored: Restored, reverted: frozenset[str]) -> list[dict[str, Any]]:
        """The report's line for each task, with its share of the model's kernel time now."""
        shares = current_shares(restored.states)
        return [
            task_row(
                name=s.task.name,
                index=s.task.index,
                weight=s.task.weight,
                flops=s.task.flops,
                work=TaskWork(
                    trials=s.trials,
                    failures=s.failures,
                    rounds=s.rounds,
                    proposed=s.proposed,
                    filtered=s.filtered,
                    built=s.built,
                    audited=s.audited,
                    waiting=s.waiting,
                    spend_s=sum(s.round_s) + s.wasted_s,
                ),
                untuned_s=s.baseline_s,
                best_s=s.best_s,
                retired=s.retired,
                schedule="default" if s.task.name in reverted else _schedule(s, restored),
                share=share,
            )
            for s, share in zip(restored.states, shares, strict=True)
        ]

    def _paths(self) -> dict[str, str]:
        """Where the run directory's files are (and the tuning library, if one is used)."""
        return {
            "run_dir": str(self.run.path),
            "database_workload": str(self.run[RunDir.WORKLOAD_DB]),
            "database_tuning_record": str(self.run[RunDir.RECORD_DB]),
            "library": str(self.run[RunDir.LIBRARY]),
            "journal": str(self.run[RunDir.JOURNAL]),
            "config": str(self.run[RunDir.CONFIG]),
            "report": str(self.run[RunDir.REPORT]),
            "report_md": str(self.run[RunDir.REPORT_MD]),
            "report_html": str(self.run[RunDir.REPORT_HTML]),
            "rounds_csv": str(self.run[RunDir.ROUNDS_CSV]),
            **({"tuning_library": str(self.library.path)} if self.library.path else {}),
        }

    def _provenance(self, started: str | None) -> dict[str, Any]:
        """When, with what and on what the run was made; a GPU only where one measured."""
        t = self.target
        measured_on_gpu = t.device_type == "cuda" and t.device_present and not t.simulated
        return provenance(
            started=started or self.started,
            command=self.given.invocation.command,
            gpu=t.device_name if measured_on_gpu else None,
            local_gpu=not self.fleet.rpc,
        )

    def _simulated(self, restored: Restored, reverted: frozenset[str]) -> dict[str, Any]:
        """What a simulated run can say about latency: the sum of its kernels' simulated
        times, untuned and with the faster of tuned and default per task (the default for
        the `reverted` tasks, whose tuned kernels did not compile). No model was run."""
        untuned = (
            None
            if any(s.baseline_s is None for s in restored.states)
            else sum(s.task.weight * s.baseline_s for s in restored.states)  # type: ignore[operator]
        )
        tuned = model_latency_s(restored.states)
        if tuned is not None and reverted:
            tuned += sum(
                s.task.weight * (s.baseline_s - s.latency_s)  # type: ignore[operator]
                for s in restored.states
                if s.task.name in reverted and s.baseline_s is not None
            )
        return {
            "word": WORD,
            "device": self.target.device_name,
            "untuned_kernels_s": untuned,
            "tuned_kernels_s": tuned,
            "speedup": untuned / tuned if untuned and tuned else None,
            "note": "timings come from a simulated GPU; no real kernel was timed",
        }

    def config_record(self) -> dict[str, Any]:
        return {
            "fingerprint": fingerprint(self.model, self.target),
            "model": self.model.describe(),
            "target": {"spec": self.target.spec, "tvm": self.target.to_json()},
            "budget": str(self.budget),
            "price": None
            if self.price is None
            else {
                "usd_per_hour": self.price.usd_per_hour,
                "source": self.price.source,
            },
            "build_only": self.build_only,
            "settings": self.settings.to_dict(),
            "check_inputs": self.given.checker.samples.path,  # --check-inputs, absolute
            "resumed_with": resumed_with(self.given),
        }


def fingerprint(model: OnnxModel, target: ResolvedTarget) -> dict[str, Any]:
    """What must match for a run directory to be resumed."""
    return {
        "model_name": model.name,
        "model_sha256": model.sha256,
        "inputs": [[i.name, list(i.shape), i.dtype] for i in model.inputs],
        "target": target.to_json(),
        # Records a search of another TVM version may not replay.
        "tvm": tvm_version(),
        # Present only when simulated: a simulated run never resumes as a real one.
        **({"simulated": True} if target.simulated else {}),
    }


def runs_tuned(restored: Restored) -> bool:
    """Whether the model runs a tuned schedule for any task (else its build with the database
    is the untuned one)."""
    return any(_schedule(s, restored) == "tuned" for s in restored.states)


def _schedule(state: Any, restored: Restored) -> str:
    """Which schedule the model runs for the task of `state` (a TaskState): "tuned" or
    "default" (model/defaults.deployed_schedule)."""
    return deployed_schedule(
        best_s=state.best_s,
        default_s=state.baseline_s,
        recorded=state.task.index in restored.default_records,
    )


def _build_only(journal: list[dict[str, Any]]) -> str:
    """Why a build-only session stopped, with why the run's tuning had stopped where it had
    tuned before (the report a build-only session writes again is the whole run's)."""
    reason = rerun.last_stop(journal).get("reason")
    before = f" (the run's tuning had stopped: {reason})" if isinstance(reason, str) else ""
    return f"build only: nothing was tuned{before}"


def _finished(journal: list[dict[str, Any]], run: RunDir) -> bool:
    """Whether the run's last session ended and left the model it shipped. Warnings after its
    end are this session's own, about files it read as it began (an unreadable filter.json)."""
    last = next((e for e in reversed(journal) if e.get("type") != "warning"), {})
    return last.get("type") == "session_end" and run[run.LIBRARY].is_file()


def _untuned_differs(untuned: dict[str, Any]) -> Decision | None:
    """Stop before tuning where the untuned build's outputs differ from onnxruntime's:
    tuning changes how the operators run, not what they compute, so no tuned build would
    match and the budget would buy a model that cannot ship."""
    check = untuned.get("check") or {}
    if check.get("status") != DIFFERS:
        return None
    reason = (
        f"the untuned build's outputs differ from onnxruntime's ({check['reason']}) and "
        f"{UNTUNED_DIFFERS_WHY}: nothing was tuned; {UNTUNED_DIFFERS_FIX}; then run the same "
        "command"
    )
    return Decision(True, reason, UNTUNED_DIFFERS)
