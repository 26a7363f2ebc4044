"""Resuming: rebuild task states, measured sets, spend and the cost model from the run directory.

The database is the truth for what was measured (a record is committed before the journal
line of its round); the journal is the truth for rounds, untuned latencies and spend. A task's
default schedule is in the database too (see defaults.py); the journal's baseline entry names
its record, which is no trial and teaches nothing.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from tune_orchestrator.budget import Spend
from tune_orchestrator.budget.ledger import Point
from tune_orchestrator.filters import Filter
from tune_orchestrator.measure import Measurement

from ..model.tasks import Candidate, Task, structural_key
from ..run.failing import search_failed
from ..run.loop import FAILED_RUN_SECS
from ..run.scheduler import TaskState
from ..run.skipped import Skipped
from ..search.transfer import one_line
from .learned import Learned


@dataclasses.dataclass
class LibraryUse:
    """What earlier sessions of a run took from the tuning library, read from its journal."""

    rounds: dict[int, Mapping[str, Any]] = dataclasses.field(default_factory=dict)  # by task
    transferred: dict[int, Mapping[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def done(self) -> set[int]:
        """The tasks that had their library round: none again."""
        return set(self.rounds)


@dataclasses.dataclass
class Restored:
    states: list[TaskState]
    measured: dict[int, set[int]]  # task index -> candidate keys already in the database
    sessions: int  # earlier sessions of this run directory
    untuned: dict[str, Any] | None  # the untuned model's latency and check, if measured
    baselines: set[int]  # tasks whose untuned latency was measured (or failed) before
    points: list[Point]  # the convergence curve so far
    default_records: dict[int, Any]  # task index -> its default schedule's record
    unrecorded: dict[int, list[float]]  # task index -> run times of a default not recorded yet
    # task index -> its measured candidates that ran (MeasureCandidate, mean seconds), fastest
    # first: a resumed task's search starts from them, as the earlier session's search would
    # have gone on from them
    bests: dict[int, list[tuple[Any, float]]] = dataclasses.field(default_factory=dict)
    library: LibraryUse = dataclasses.field(default_factory=LibraryUse)

    @property
    def trials(self) -> int:
        return sum(s.trials for s in self.states)


@dataclasses.dataclass(frozen=True)
class Earlier:
    """What earlier sessions left that decides whether a budget is refused up front: the
    trials measured, the tasks whose untuned latency was measured (or failed), whether the
    untuned model was."""

    trials: int
    baselines: frozenset[int]
    untuned: bool

    @classmethod
    def of(cls, restored: Restored) -> Earlier:
        return cls(restored.trials, frozenset(restored.baselines), restored.untuned is not None)

    @classmethod
    def of_journal(cls, journal: Sequence[Mapping[str, Any]], tasks: Sequence[Task]) -> Earlier:
        """The same from the journal alone, before the database is read back: trials as its
        rounds counted them (a finished run's journal counts every one)."""
        rounds = [e for e in journal if e.get("type") in ("round", "library_round")]
        baselines = _baselines(journal, {task.index for task in tasks})
        untuned = any(e.get("type") == "untuned" for e in journal)
        return cls(sum(map(_trials, rounds)), frozenset(baselines), untuned)


def spend_so_far(journal: Sequence[Mapping[str, Any]]) -> Spend:
    """The spend recorded last; earlier sessions' spend counts against the budget."""
    for entry in reversed(journal):
        if "spend" in entry:
            return Spend.from_dict(entry["spend"])
    return Spend()


def restore(
    tasks: Sequence[Task],
    journal: Sequence[Mapping[str, Any]],
    database: Any,
    *,
    cost_model: Any,
    target: Any,
    candidate_filter: Filter | None = None,
    parents: int | None = None,
    skipped: Skipped | None = None,
    known: Known | None = None,
    threads: int = 1,
) -> Restored:
    """A run directory's state for its next session. `parents`: how many of each task's
    fastest measured schedules its search is handed (None: all; the rest are not kept);
    `skipped` counts the records that no longer replay (they stay in the database);
    `known`: what the run and the tuning library kept of records, which the cost model and
    the filter then relearn without replaying or extracting them again (where the cost model
    is ours: TVM's XGBModel learns from schedules); `threads` replay the parents."""
    states = [TaskState(task) for task in tasks]
    measured: dict[int, set[int]] = {task.index: set() for task in tasks}
    baselines = _baselines(journal, measured)
    skipped = skipped or Skipped()
    known = known or Known()
    if not hasattr(cost_model, "add_features"):
        known = Known()
    # 1. Measured candidates, best latencies and trial counts from the database; the
    #    baselines' default schedules are known by the keys the journal gives them.
    default_records, ran, learn = _read_database(
        database, tasks, states, measured, baselines, skipped, known
    )
    # 2. Rounds, retirements, untuned latencies and the convergence curve from the journal.
    sessions, untuned, points, library = _read_journal(journal, states, measured, baselines)
    # 3. The cost model and the filter relearn everything measured before.
    if learn:
        _retrain(cost_model, candidate_filter, tasks, target, learn)
    unrecorded = {
        index: entry.get("run_secs") or [entry["latency_s"]]
        for index, entry in baselines.items()
        if entry.get("latency_s") is not None
        and index not in default_records
        and ("record_key" not in entry or entry["record_key"] is not None)
    }
    bests = _parents(ran, tasks, parents, skipped, threads)
    return Restored(
        states,
        measured,
        sessions,
        untuned,
        set(baselines),
        points,
        default_records,
        unrecorded,
        bests,
        library,
    )


def _read_database(
    database: Any,
    tasks: Sequence[Task],
    states: Sequence[TaskState],
    measured: dict[int, set[int]],
    baselines: Mapping[int, Mapping[str, Any]],
    skipped: Skipped,
    known: Known,
) -> tuple[dict[int, Any], dict[int, list[_Ran]], dict[int, tuple[list[Any], list[Any]]]]:
    """Count each task's trials, failures and best latency from its records, and mark them
    measured: (each task's default schedule's record, its candidates that ran with their mean
    seconds, its candidates and results to relearn). A record whose key and features the
    run kept (learned.py) is not replayed."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from ..model.defaults import hex_key

    by_key = {structural_key(task.workload): task for task in tasks}
    tasks_of: dict[Any, Task | None] = {}  # a workload's handle -> its task
    default_records: dict[int, Any] = {}
    ran: dict[int, list[_Ran]] = {}
    learn: dict[int, tuple[list[Any], list[Any]]] = {}
    for stored in _every_record(database, skipped):
        handle = stored.workload.__chandle__()
        if handle not in tasks_of:
            tasks_of[handle] = by_key.get(structural_key(stored.workload.mod))
        task = tasks_of[handle]
        if task is None:
            continue
        note = known.learned.get(stored.digest) if stored.digest is not None else None
        record, candidate = _replayed(stored, task, skipped) if note is None else (None, None)
        if note is None and candidate is None:
            continue
        key = note.key if note is not None else structural_key(candidate.sch.mod)
        measured[task.index].add(key)
        if hex_key(key) == baselines.get(task.index, {}).get("record_key"):
            record = record if record is not None else _replayed(stored, task, skipped)[0]
            if record is not None:
                default_records[task.index] = record
            continue
        state = states[task.index]
        state.trials += 1
        run_secs = stored.run_secs
        secs = [float(s) for s in run_secs] if run_secs else [float("inf")]
        ok = all(s < FAILED_RUN_SECS for s in secs)
        if ok:
            mean = statistics.fmean(secs)
            state.best_s = mean if state.best_s is None else min(state.best_s, mean)
            ran.setdefault(task.index, []).append(_Ran(stored, candidate, mean))
        else:
            state.failures += 1
        if note is not None and note.features is None:  # its build failed: nothing was learned
            continue
        features = note.features if note is not None else known.features(stored.digest)
        cands, results = learn.setdefault(task.index, ([], []))
        cands.append(Candidate(task, candidate, key, features))
        results.append(RunnerResult(secs if ok else None, None if ok else "failed earlier"))
    return default_records, ran, learn


@dataclasses.dataclass(frozen=True)
class Known:
    """What the run (learned.py: by record) and the tuning library (library/features.py:
    features by record) kept of records, so that they need not be replayed."""

    learned: Mapping[str, Learned] = dataclasses.field(default_factory=dict)
    library: Mapping[str, tuple[str, Any]] = dataclasses.field(default_factory=dict)

    def features(self, digest: str | None) -> Any:
        found = self.library.get(digest) if digest is not None else None
        return None if found is None else found[1]


@dataclasses.dataclass(frozen=True)
class _Ran:
    """A record that ran: as stored, its MeasureCandidate where it was replayed, its mean."""

    stored: Any
    candidate: Any
    mean_s: float


def _replayed(stored: Any, task: Task, skipped: Skipped) -> tuple[Any, Any]:
    """(TuningRecord, MeasureCandidate) of a stored record; (None, None), counted, where its
    trace no longer applies to its workload (it stays in the file)."""
    replay = _replay(stored)
    if isinstance(replay, Exception):
        skipped.add("run_records", f"{task.name}: {one_line(replay)}")
        return None, None
    return replay


def _parents(
    ran: Mapping[int, list[_Ran]],
    tasks: Sequence[Task],
    parents: int | None,
    skipped: Skipped,
    threads: int,
) -> dict[int, list[tuple[Any, float]]]:
    """Each task's `parents` fastest records that ran, fastest first, as (MeasureCandidate,
    mean seconds): only these are replayed where the run kept what it learned of them, on
    `threads` threads (TVM replays outside Python's lock: 1.6x on 2 cores)."""
    bests: dict[int, list[tuple[Any, float]]] = {}
    with concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
        for index, records in ran.items():
            ordered = sorted(records, key=lambda r: r.mean_s)
            chosen = bests[index] = []
            while ordered and (parents is None or len(chosen) < parents):
                wanted = len(ordered) if parents is None else parents - len(chosen)
                batch, ordered = ordered[:wanted], ordered[wanted:]
                replays = pool.map(
                    _replay, [r.stored if r.candidate is None else None for r in batch]
                )
                for r, replay in zip(batch, replays, strict=True):
                    if isinstance(replay, Exception):  # counted here, on this thread
                        skipped.add("run_records", f"{tasks[index].name}: {one_line(replay)}")
                    else:
                        candidate = replay[1] if r.candidate is None else r.candidate
                        chosen.append((candidate, r.mean_s))
    return bests


def _replay(stored: Any) -> tuple[Any, Any] | Exception | None:
    """A stored record replayed (None: nothing to replay), or what it raised."""
    try:
        return None if stored is None else stored.replay()
    except Exception as exc:  # noqa: BLE001 - TVM raises its own types
        return exc


class _Held:
    """A record of another MetaSchedule database, as RunDatabase.each_stored gives its own."""

    digest = None

    def __init__(self, record: Any) -> None:
        self.record = record
        self.workload = record.workload
        self.run_secs = record.run_secs

    def replay(self) -> tuple[Any, Any]:
        return self.record, self.record.as_measure_candidate()


def _every_record(database: Any, skipped: Skipped) -> Iterable[Any]:
    """The database's records as stored (database.py: Stored), one at a time where it can;
    one that cannot be read is counted and stays in the file. From another database, its
    records without digests (nothing was kept of them)."""
    each = getattr(database, "each_stored", None)
    if each is None:
        return (_Held(record) for record in database.get_all_tuning_records())

    def unreadable(number: int, error: Exception) -> None:
        skipped.add("run_records", f"record {number}: {one_line(error)}")

    return each(unreadable)


def _read_journal(
    journal: Sequence[Mapping[str, Any]],
    states: Sequence[TaskState],
    measured: Mapping[int, set[int]],
    baselines: Mapping[int, Mapping[str, Any]],
) -> tuple[int, dict[str, Any] | None, list[Point], LibraryUse]:
    """Replay the journal onto the task states: (earlier sessions, the untuned model's
    latency and check, the convergence curve, what the tuning library gave)."""
    sessions, untuned, points, library = 0, None, [], LibraryUse()
    for index, entry in baselines.items():
        states[index].baseline_s = entry.get("latency_s")
        states[index].untuned_finite = entry.get("finite")
    for entry in journal:
        kind = entry.get("type")
        if kind == "session":
            sessions += 1
        elif kind == "round" and entry.get("task") in measured:
            _round(states[entry["task"]], entry)
            if entry.get("kind") == "transfer" and isinstance(entry.get("transfer"), dict):
                library.transferred[entry["task"]] = entry["transfer"]
        elif kind == "library_round" and entry.get("task") in measured:
            _library_round(states[entry["task"]], entry)
            library.rounds[entry["task"]] = entry
        elif kind == "empty_search" and entry.get("task") in measured:
            states[entry["task"]].wasted_s += float(entry.get("seconds", 0.0))
        elif kind == "task_retired" and entry.get("task") in measured:
            _retired(states[entry["task"]], str(entry.get("reason", "retired")))
        elif kind == "untuned":
            untuned = {
                k: entry[k] for k in ("latency", "check", "compile_s", "check_s") if k in entry
            }
        point = _point(entry)
        if point is not None:
            points.append(point)
    return sessions, untuned, points, library


def journal_points(journal: Sequence[Mapping[str, Any]]) -> list[Point]:
    """The run's convergence curve as its journal recorded it."""
    return [p for p in map(_point, journal) if p is not None]


def _point(entry: Mapping[str, Any]) -> Point | None:
    """The point of the curve a journal line records: a round's or a point's, with its spend."""
    if (
        entry.get("type") in ("round", "point")
        and entry.get("model_latency_s")
        and "spend" in entry
    ):
        return Point.at(Spend.from_dict(entry["spend"]), float(entry["model_latency_s"]))
    return None


def _retired(state: TaskState, reason: str) -> None:
    """A task retired in an earlier session stays so, but for one whose search kept failing:
    what failed it (a compiler, a device) may have been mended since, so it is searched
    again."""
    state.retired = None if search_failed(reason) else reason


def _round(state: TaskState, entry: Mapping[str, Any]) -> None:
    """A task's round as the loop recorded it: a point of its curve, its trials and seconds,
    and what its search proposed, filtered, built and audited."""
    best = entry.get("best_s")
    state.history.append(best if best is not None else float("inf"))
    state.round_trials.append(_trials(entry))
    state.round_s.append(float(entry.get("seconds") or 0.0))
    state.round_fixed_s.append(float(entry.get("fixed_s", 0.0)))
    if entry.get("measured"):
        state.measured_rounds += 1
    state.proposed += int(entry.get("proposed", 0))
    state.filtered += int(entry.get("filtered", 0))
    state.built += int(entry.get("built", 0))
    state.audited += int(entry.get("audited", 0))


def _trials(entry: Mapping[str, Any]) -> int:
    """A round's trials as the journal counts them (older journals: measured and failed)."""
    return int(entry.get("trials", entry.get("measured", 0) + entry.get("failed", 0)))


def _library_round(state: TaskState, entry: Mapping[str, Any]) -> None:
    """A task's library round as the loop recorded it: a point of its curve at the library's
    trials of it, no trials of the search's (its measured trials are in the database)."""
    best = entry.get("best_s")
    state.history.append(best if best is not None else float("inf"))
    state.round_trials.append(0)
    state.round_s.append(float(entry.get("seconds") or 0.0))
    state.round_fixed_s.append(0.0)
    if entry.get("measured"):
        state.measured_rounds += 1
    state.library_trials = int(entry.get("library_trials", 0))
    state.plateau = bool(entry.get("plateau"))


def _baselines(
    journal: Sequence[Mapping[str, Any]], tasks: Collection[int]
) -> dict[int, Mapping[str, Any]]:
    """The last baseline entry of each task. Its `record_key` names the default schedule's
    record (None: it has none); journals older than default records lack the key."""
    found: dict[int, Mapping[str, Any]] = {}
    for entry in journal:
        if entry.get("type") == "baseline" and entry.get("task") in tasks:
            found[entry["task"]] = entry
    return found


def _retrain(
    cost_model: Any,
    candidate_filter: Filter | None,
    tasks: Sequence[Task],
    target: Any,
    learn: Mapping[int, tuple[list[Candidate], list[Any]]],
) -> None:
    from tvm.s_tir.meta_schedule import TuneContext

    from .. import _tvm
    from ..search.cost_model import candidate_features

    _tvm.load_tensor_intrinsics(target)
    # Our cost model learns every task first and trains once; TVM's XGBModel trains per task.
    add_features = getattr(cost_model, "add_features", None)
    for index, (candidates, results) in learn.items():
        task = tasks[index]
        ctx = TuneContext(mod=task.workload, target=target, task_name=task.name)
        if add_features is None:
            cost_model.update(ctx, [c.measure_candidate for c in candidates], results)
        else:
            missing = [i for i, c in enumerate(candidates) if c.features is None]
            found = candidate_features(
                cost_model, ctx, [candidates[i].measure_candidate for i in missing]
            )
            for i, features in zip(missing, found, strict=True):
                candidates[i] = dataclasses.replace(candidates[i], features=features)
            add_features(task.workload, [c.features for c in candidates], results)
        if candidate_filter is not None:
            measurements = [
                Measurement(tuple(float(s) for s in r.run_secs), None)
                if r.run_secs
                else Measurement(None, r.error_msg)
                for r in results
            ]
            candidate_filter.learn(task, candidates, measurements)
    if hasattr(cost_model, "fit"):
        cost_model.fit()
