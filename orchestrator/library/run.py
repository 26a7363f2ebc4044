"""What one run does with its target's tuning library: read it, start the shared cost model
on its records, measure the fastest records of each task it knows (the task's library round),
and add the run's own records at the end, when the tuned model passed its output check."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tune_orchestrator.predictor import fit_warm, learn_features, learn_records

from ..errors import InputError
from ..model.tasks import Task, database_key
from ..run.scheduler import TaskState, model_latency_s
from ..run.skipped import Skipped
from ..rundir.atomic import link_to_nothing
from ..rundir.learned import LearnedFile
from ..search.transfer import one_line
from .features import FEATURES, FeatureShelf, RecordNames, shelf_tag
from .files import Contents, Library, default_root, record_json, trace_key
from .records import LibraryView, Match
from .transfer_round import Transferred, record_rounds, replayed

Journal = Callable[[dict[str, Any]], None]
Emit = Callable[..., None]


class RunLibrary:
    """The library as one run uses it; `library` None when the run leaves it alone (`off`
    says why)."""

    TRAIN_CHUNK = 32  # records read and learned at a time, between looks at the clock

    def __init__(
        self,
        library: Library | None,
        settings: Any,  # config.Settings
        *,
        off: str | None = None,
        warn: Callable[[str], None] = lambda message: None,
        unreadable: str | None = None,
        read_only: str | None = None,
    ) -> None:
        # Told where the library's lock is long in coming.
        self.library = (
            dataclasses.replace(library, waiting=self._waiting) if library is not None else None
        )
        self.settings = settings
        self.clock = time.monotonic  # what training on the library looks at
        self.off = off
        self.warn = warn
        self.skipped = Skipped()  # the run's tally, from `read`
        self.unreadable = unreadable  # why the library's folder cannot be used at all
        self.read_only = read_only  # why it is read but the run's records cannot be added
        self.view: LibraryView | None = None
        self.reused_records = self.reused_tasks = self.plateau_tasks = 0
        self.trained_records = self.trained_workloads = 0
        self.added: int | None = None
        self.not_added: str | None = None
        self.transferred: dict[str, Transferred] = {}  # by task name
        self.shelf: FeatureShelf | None = None  # the library's features, once `train` read them

    @classmethod
    def open(
        cls, given: str | Path | bool | None, target: Any, settings: Any, *, build_only: bool
    ) -> RunLibrary:
        """The library for `target` (targets.ResolvedTarget): `given` None or True for the
        default root, a folder for another root, False to leave it alone. Simulated and
        build-only runs leave it alone too: their records are not measured on the device."""
        if given is False:
            return cls(None, settings, off="--no-library")
        if target.simulated:
            return cls(None, settings, off="a simulated run neither reads nor adds records")
        if build_only:
            return cls(None, settings, off="a build-only run measures nothing")
        named = given is not None and given is not True
        root = Path(given) if named else default_root()  # type: ignore[arg-type]
        problem = _unusable(root)
        if problem is not None:
            if named:
                raise InputError(f"--library {root} {problem}; give a directory you can read")
            # The default root: a folder the user did not name, so counted (read), not fatal.
            why = f"{root} {problem}; set XDG_CACHE_HOME to a folder you can write, or --library"
            return cls(None, settings, off=f"{root} {problem}", unreadable=why)
        library = Library.for_target(target, root)
        return cls(library, settings, read_only=library.read_only())

    @property
    def path(self) -> Path | None:
        return self.library.path if self.library is not None else None

    def read(self, *, target: Any, skipped: Skipped | None = None) -> None:
        """Read the library once, before the run's first round, for a run on `target`; what
        cannot be used (a file, a line, a record) is counted in `skipped`."""
        if skipped is not None:
            self.skipped = skipped
        if self.unreadable is not None:
            self.skipped.add("library_files", f"{self.unreadable}; tuning without the library")
        if self.library is None:
            return
        try:
            contents = self.library.read()
        except OSError as exc:
            self.skipped.add(
                "library_files", f"{self.library.path} cannot be read ({exc}); tuning without it"
            )
            return
        self.view = LibraryView(contents, target=target, skipped=self.skipped)

    def train(
        self,
        predictors: Sequence[Any],
        target: Any,
        tasks: Sequence[Task],
        *,
        fit: bool,
        seconds: float | None = None,
    ) -> None:
        """Give the shared cost model (and the filter's own) the library's records of this
        target, this model's workloads first: those whose features the library keeps
        (features.py) at once, the others read and extracted a chunk at a time for at most
        `seconds` (None: no limit but the record count), their features kept for the next
        run; fit it unless a warm start fits it next."""
        if self.view is None or not predictors:
            return
        first = {database_key(t.workload) for t in tasks}
        positions = self.view.training(self.settings.library.train_records, first)
        shelf = self.shelf = FeatureShelf(self.library.path / FEATURES, shelf_tag(target))
        kept = [p for p in positions if self.view.digest(p) in shelf]
        workloads = self._learn_kept(predictors, shelf, kept)
        rest = [p for p in positions if self.view.digest(p) not in shelf]
        deadline = self.clock() + (math.inf if seconds is None else seconds)
        for start in range(0, len(rest), self.TRAIN_CHUNK):
            if self.clock() >= deadline:
                break
            chunk = rest[start : start + self.TRAIN_CHUNK]
            workloads |= self._learn_read(predictors, target, shelf, chunk)
        self.trained_workloads = len(workloads)
        self._keep_features(shelf)
        if fit and self.trained_records:
            fit_warm(predictors)

    def _learn_kept(
        self, predictors: Sequence[Any], shelf: FeatureShelf, positions: Sequence[int]
    ) -> set[str]:
        """Learn the records at `positions` from the features the library keeps of them."""
        keys, features, latencies = [], [], []
        for position in positions:
            latency = self.view.latency(position)
            if latency is not None:
                key, stores = shelf.get(self.view.digest(position))
                keys.append(key)
                features.append(stores)
                latencies.append(latency)
        self.trained_records += len(keys)
        return learn_features(predictors, keys, features, latencies, source="library")

    def _learn_read(
        self, predictors: Sequence[Any], target: Any, shelf: FeatureShelf, positions: Sequence[int]
    ) -> set[str]:
        """Learn the records at `positions`, read into TVM and their features extracted,
        which go on the shelf."""
        pairs = self.view.parsed(positions)
        digests = [self.view.digest(p) for p, _ in pairs]
        self.trained_records += len(pairs)
        return learn_records(
            predictors, [record for _, record in pairs], target, source="library",
            skipped=self.skipped,
            extracted=lambda i, key, stores: shelf.put(digests[i], key, stores),
        )  # fmt: skip

    def _keep_features(self, shelf: FeatureShelf) -> None:
        """Write what this run extracted beside the library, less the features of records it
        no longer holds."""
        if shelf.new:
            self._write(shelf, lambda: {self.view.digest(p) for p in range(self.view.records)})

    def _write(self, shelf: FeatureShelf, keep: Callable[[], set[str]]) -> None:
        """Write `shelf`'s new entries under the library's lock, less those whose names are
        not in `keep()` (shelf.write); a cache, so a failure to write it is no loss."""
        if self.read_only is not None or not shelf.new:
            return
        try:
            with self.library.exclusive():
                shelf.write(keep())
        except OSError:
            pass

    def kept(self) -> dict[str, tuple[str, Any]]:
        """The features the library keeps of records, by digest (library/features.py): those
        of a resumed run's own records are among them when its earlier session added them."""
        return self.shelf.entries if self.shelf is not None else {}

    def resume(self, earlier: Any, states: Sequence[TaskState]) -> None:
        """Count what the run's earlier sessions took from the library (`earlier`:
        rundir.restore.LibraryUse), so a resumed run's report says what the whole run reused."""
        for entry in earlier.rounds.values():
            self.reused_records += int(entry.get("measured", 0)) + int(entry.get("failed", 0))
            self.reused_tasks += 1
            self.plateau_tasks += bool(entry.get("plateau"))
        fields = {f.name for f in dataclasses.fields(Transferred)}
        names = {s.task.index: s.task.name for s in states}
        for index, tally in earlier.transferred.items():
            kept = {k: v for k, v in tally.items() if k in fields}
            self.transferred[names[index]] = Transferred(**kept)

    def reuse(
        self,
        loop: Any,
        states: Sequence[TaskState],
        done: set[int],
        ledger: Any,
        journal: Journal,
        emit: Emit,
    ) -> None:
        """The library round, before the first round: each task whose workload the library
        holds (and that had no library round in an earlier session, `done`) gets its
        fastest library records measured here (loop.measure_given). They compete with the
        default schedule in the run's database and become its search's parents; the task's
        curve then starts at the library's trials of it (scheduler.TaskState)."""
        with ledger.phase("library"):
            matches = self._matches(states, done)
            given = {index: self._schedules(m.records) for index, m in matches.items()}
        if not any(given.values()):
            return
        start = ledger.clock()
        results = loop.measure_given(given)  # charged to build, measure and learn
        if not results:  # all measured in this run before, or no budget for any
            return
        seconds = ledger.clock() - start
        total = sum(map(len, results.values()))
        for state in states:
            measured = results.get(state.task.index)
            if measured:
                share = seconds * len(measured) / total
                self._record(state, matches[state.task.index], measured, share, ledger, journal)
                self._emit(state, measured, len(states), ledger, emit)
        latency = model_latency_s(states)
        ledger.record_point(latency)
        journal({"type": "point", "model_latency_s": latency, "spend": ledger.snapshot().to_dict()})

    def transfer(
        self, loop: Any, states: Sequence[TaskState], ledger: Any, journal: Journal
    ) -> None:
        """Transfer-tuning, after the library rounds: each task still untouched gets the
        library's schedules of tasks of its kind, replayed on it, measured as its first round
        (transfer_round.py)."""
        if self.view is None:
            return
        lib = self.settings.library
        with ledger.phase("library"):
            given, stats = replayed(
                self.view, states, loop.target, most=lib.transfer,
                per_workload=lib.transfer_per_workload,
            )  # fmt: skip
        names = {s.task.index: s.task.name for s in states}
        self.transferred.update({names[i]: tally for i, tally in stats.items()})
        if not any(given.values()):
            return
        start = ledger.clock()
        results = loop.measure_given(given)  # charged to build, measure and learn
        snapshot = lambda: ledger.snapshot().to_dict()  # noqa: E731
        record_rounds(states, results, stats, ledger.clock() - start, journal, snapshot)
        latency = model_latency_s(states)
        ledger.record_point(latency)
        journal({"type": "point", "model_latency_s": latency, "spend": snapshot()})

    def _matches(self, states: Sequence[TaskState], done: set[int]) -> dict[int, Match]:
        """The library's match of each task that had no library round yet."""
        found = {}
        for state in states:
            match = None if state.task.index in done else self._match(state.task)
            if match is not None:
                found[state.task.index] = match
        return found

    def _match(self, task: Task) -> Match | None:
        if self.view is None:
            return None
        lib, stop = self.settings.library, self.settings.stopping
        return self.view.match(
            task.workload,
            top=lib.reuse,
            min_trials=lib.plateau_trials,
            share=lib.plateau_share,
            min_gain=stop.task_min_gain,
        )

    def _record(
        self,
        state: TaskState,
        match: Match,
        measured: Sequence[Any],
        seconds: float,
        ledger: Any,
        journal: Journal,
    ) -> None:
        """The task's library round: no trials of its curve's own (their count is the
        library's), its measured ones counted as trials of the run."""
        good = [m.mean_s for m in measured if m.ok]
        state.trials += len(measured)
        state.failures += len(measured) - len(good)
        state.record_round(min(good) if good else None, trials=0, seconds=seconds)
        state.library_trials, state.plateau = match.trials, match.plateau
        self.reused_records += len(measured)
        self.reused_tasks += 1
        self.plateau_tasks += match.plateau
        journal(
            {
                "type": "library_round",
                "task": state.task.index,
                "task_key": state.task.key,
                "measured": len(good),
                "failed": len(measured) - len(good),
                "library_trials": match.trials,
                "library_best_s": match.best_s,
                "plateau": match.plateau,
                "best_s": state.best_s,
                "round_best_s": min(good, default=None),
                "seconds": round(seconds, 3),
                "spend": ledger.snapshot().to_dict(),
            }
        )

    @staticmethod
    def _emit(
        state: TaskState, measured: Sequence[Any], tasks: int, ledger: Any, emit: Emit
    ) -> None:
        from ..run.loop import spend_fields

        emit(
            "library_round",
            task=state.task.name,
            task_index=state.task.index,
            tasks=tasks,
            measured=sum(m.ok for m in measured),
            failed=sum(not m.ok for m in measured),
            best_s=state.best_s,
            library_trials=state.library_trials,
            plateau=state.plateau,
            spend=spend_fields(ledger),
        )

    def add(
        self,
        database: tuple[Path, Path],
        defaults: Iterable[Any],
        tuned: Mapping[str, Any] | None,
        learned: LearnedFile | None = None,
    ) -> None:
        """Add the run's records (its `database` files: workloads, records), its default
        schedules' records left out, when the tuned model's outputs matched onnxruntime; the
        features the run `learned` of them go beside them (library/features.py)."""
        if self.library is None:
            return
        if self.read_only is not None:
            self.not_added = f"read-only here: {self.read_only}"
            return
        check = (tuned or {}).get("check") or {}
        if check.get("ok") is not True:
            self.not_added = (
                "the tuned model's outputs differ from onnxruntime's"
                if check.get("ok") is False
                else "the tuned model was not checked"
            )
            return
        try:
            skip = {trace_key(record_json(record)) for record in defaults}
            keep = self.settings.library.keep_per_workload
            held, self.added = self.library.merge_files(*database, skip=skip, keep=keep)
            if learned is not None:
                self._keep_learned(learned, held)
        except OSError as exc:
            self._failed(f"it cannot be written ({exc})", str(exc))
        except Exception as exc:  # noqa: BLE001 - the model shipped: a library is no reason to fail
            error = f"{type(exc).__name__}: {exc}"
            self._failed(f"adding them failed ({error})", f"{error}; please report it")

    def _keep_learned(self, learned: LearnedFile, held: Contents) -> None:
        """The features of the run's records beside the library's, less those of records it
        no longer holds (`held`: as the run's records left it; a cache: no failure)."""
        shelf = FeatureShelf(self.library.path / FEATURES, learned.tag)
        shelf.new = {
            digest: (entry.task, entry.features)
            for digest, entry in learned.read().items()
            if entry.features is not None
        }
        names = RecordNames(held.workloads)
        self._write(shelf, lambda: {names(line, record) for line, record in held.records})

    def _waiting(self) -> None:
        self.warn(
            f"waiting for the tuning library {self.path}: another orchestrate process holds its "
            "lock (one stopped with Ctrl-Z holds it until it goes on: fg)"
        )

    def _failed(self, why: str, detail: str) -> None:
        self.not_added = why
        self.warn(
            f"the run's records were not added to the tuning library {self.library.path}: {detail}"
        )

    def report(self) -> dict[str, Any]:
        """The report's `library` section."""
        view = self.view
        return {
            "path": str(self.path) if self.path else None,
            "off": self.off,
            "records": view.records if view else None,
            "workloads": len(view.by_workload) if view else None,
            "skipped_lines": view.contents.broken if view else None,
            "reused_records": self.reused_records,
            "reused_tasks": self.reused_tasks,
            "plateau_tasks": self.plateau_tasks,
            "trained_records": self.trained_records,
            "trained_workloads": self.trained_workloads,
            "added": self.added,
            "not_added": self.not_added,
            "transferred": {name: t.to_dict() for name, t in self.transferred.items()},
        }

    def _schedules(self, records: Sequence[Any]) -> list[Any]:
        """MeasureCandidates of records (read and trusted: LibraryView) whose trace replays
        on their workload; one that does not is counted."""
        out = []
        for record in records:
            try:
                out.append(record.as_measure_candidate())
            except Exception as error:  # a trace of another TVM version, say
                why = f"a record does not replay on its workload ({one_line(error)})"
                self.skipped.add("library_records", why)
        return out


def _unusable(root: Path) -> str | None:
    """Why a library root cannot be used at all (None: it can). One that does not exist yet is
    made now, so that a root that cannot be is known before the run, not after it."""
    try:
        exists = root.exists()
    except OSError as exc:  # a folder on the way this user may not enter
        return f"cannot be reached ({exc.strerror})"
    if not exists:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # under a file or a folder not yours, on a read-only disk
            return f"cannot be created ({link_to_nothing(root) or exc.strerror or exc})"
        return None
    if not root.is_dir():
        return "is a file"
    if not os.access(root, os.R_OK | os.X_OK):
        return "is not readable by you"
    return None
