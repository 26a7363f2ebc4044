"""The run's tuning database: TVM's two files on disk, in memory only what is read back.

MetaSchedule's `JSONDatabase` holds every record it has seen in memory, each with its trace:
on smallcnn 0.13 MB a record read back from a file, 0.04 MB a record committed in a live run
(docs/how-it-works.md, Long runs), without end. A run reads back only each task's fastest
records: the final compile takes one per task, and the search keeps its own parents.
`RunDatabase` appends every record to the same two files, in the format `JSONDatabase` writes
(stock TVM reads the folder), and keeps in memory each workload's `kept` fastest. Opening it
reads the files' JSON and replays only those; every record is read back, one at a time, by
`each_record` (replayed) or `each_stored` (as the file holds it, named as the tuning library
names it, replayed when asked: what a resumed run reads back).

Which records count as a workload's fastest follows `JSONDatabase.get_top_k` in TVM 0.27: by
mean run time, earlier first among equals; a record with no run time, or with every run failed
(1e10 s), or with a trace of no instructions, is never among them.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import PyDatabase

from ..library.features import RecordNames
from ..library.files import FAILED_RUN_SECS, record_json
from ..model.tasks import structural_key
from .atomic import open_append

# Each workload's fastest records held in memory: the compile reads one; the rest is slack for
# whoever asks get_top_k for a few (TVM's own search asks for a fifth of its population, but
# the search here keeps its parents itself).
KEPT = 16


def mean_s(run_secs: Any) -> float:
    """A record's mean run time as TVM sorts records (no run time: 1e10 s)."""
    secs = [float(s) for s in run_secs] if run_secs else []
    return sum(secs) / len(secs) if secs else FAILED_RUN_SECS


def ranked(run_secs: Any, first_instruction: str | None) -> bool:
    """Whether get_top_k may return a record: it ran at least once, and its trace schedules
    something before its postprocessing (TVM's TuningRecord::IsValid)."""
    ran = bool(run_secs) and any(float(s) != FAILED_RUN_SECS for s in run_secs)
    return ran and first_instruction not in (None, "EnterPostproc")


@derived_object
class RunDatabase(PyDatabase):
    """A MetaSchedule database writing `workloads` and `records` (JSONDatabase's two files)
    and holding each workload's `kept` fastest records."""

    def __init__(self, workloads: str | Path, records: str | Path, kept: int = KEPT) -> None:
        super().__init__()
        self.paths = (Path(workloads), Path(records))
        self.kept = kept
        self.workloads: list[Any] = []  # by line of the workload file
        self._workload_json: list[Any] = []  # the same lines' JSON, as the file holds them
        self._lines: dict[int, list[int]] = {}  # structural key -> workload lines
        self._fastest: dict[int, list[tuple[float, int, Any]]] = {}  # line -> (mean, order, record)
        self._names = RecordNames(self._workload_json)  # records' names (library/features.py)
        self._count = 0
        self._load()

    # -- what TVM calls ------------------------------------------------------------------

    def has_workload(self, mod: Any) -> bool:
        return self._line_of(mod) is not None

    def commit_workload(self, mod: Any) -> Any:
        from tvm.s_tir.meta_schedule.database import Workload

        line = self._line_of(mod)
        if line is not None:
            return self.workloads[line]
        workload = Workload(mod)
        line = [str(v) for v in workload.as_json()]
        _append(self.paths[0], json.dumps(line))
        self._add_workload(workload, line)
        return workload

    def commit_tuning_record(self, record: Any) -> None:
        self.commit_named(record)

    def commit_named(self, record: Any) -> str:
        """Commit `record` (as commit_tuning_record); its name in the tuning library's
        features (library/features.py), which rundir/learned.py keeps what was learned under."""
        line = self._line_of(record.workload.mod, record.workload)
        if line is None:
            raise ValueError("a tuning record for a workload this database has not committed")
        written = record_json(record)
        _append(self.paths[1], json.dumps([line, written]))
        insts = record.trace.insts
        first = insts[0].kind.name if len(insts) else None
        self._offer(line, record, record.run_secs, first)
        return self._names(line, written)

    def get_top_k(self, workload: Any, top_k: int) -> list[Any]:
        if top_k < 0:
            raise ValueError("top_k must be non-negative")
        line = self._line_of(workload.mod)
        held = self._fastest.get(line, []) if line is not None else []
        return [record for _, _, record in held[:top_k]]

    def get_all_tuning_records(self) -> list[Any]:
        return list(self.each_record())

    def __len__(self) -> int:
        return self._count

    # -- every record, from the file -------------------------------------------------------

    def each_record(
        self, unreadable: Callable[[int, Exception], None] | None = None
    ) -> Iterator[Any]:
        """Every record of the file, in the order they were committed, replayed one at a
        time. A record that no longer replays is passed to `unreadable` (line number, error)
        and skipped; without `unreadable`, it raises."""
        from tvm.s_tir.meta_schedule.database import TuningRecord

        return self._each(
            lambda line, record: TuningRecord.from_json(record, self.workloads[line]), unreadable
        )

    def each_stored(
        self, unreadable: Callable[[int, Exception], None] | None = None
    ) -> Iterator[Stored]:
        """Every record as the file holds it, in order, not replayed (`Stored.replay`)."""
        return self._each(
            lambda line, record: Stored(self.workloads[line], record, self._names(line, record)),
            unreadable,
        )

    def _each(
        self,
        read: Callable[[int, Any], Any],
        unreadable: Callable[[int, Exception], None] | None,
    ) -> Iterator[Any]:
        """`read(workload line, record JSON)` of every record of the file, in order; one it
        raises for goes to `unreadable` (line number in the file, error), or raises without
        it."""
        for number, (line, record) in enumerate(_rows(self.paths[1]), start=1):
            try:
                item = read(line, record)
            except Exception as error:  # noqa: BLE001 - TVM raises its own types
                if unreadable is None:
                    raise
                unreadable(number, error)
                continue
            yield item

    # -- in memory ---------------------------------------------------------------------------

    def _load(self) -> None:
        """The workloads, and each one's fastest records, from the files (TVM replays a
        record's trace as it reads it, and raises on the first that does not replay)."""
        from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

        if self.paths[0].is_file():
            for text in self.paths[0].read_bytes().splitlines():
                if text.strip():
                    line = json.loads(text)
                    self._add_workload(Workload.from_json(line), line)
        best: dict[int, list[tuple[float, int, Any]]] = {}
        for order, (line, record) in enumerate(_rows(self.paths[1])):
            if line >= len(self.workloads):
                raise ValueError(f"{self.paths[1]}: record {order + 1} names no workload")
            self._count += 1
            insts = record[0][0] if record and record[0] else []
            first = insts[0][0] if insts else None
            if ranked(record[1], first):
                _keep(best.setdefault(line, []), (mean_s(record[1]), order, record), self.kept)
        for line, held in best.items():
            workload = self.workloads[line]
            self._fastest[line] = [
                (mean, order, TuningRecord.from_json(record, workload))
                for mean, order, record in held
            ]

    def _add_workload(self, workload: Any, line: Any) -> None:
        self._lines.setdefault(structural_key(workload.mod), []).append(len(self.workloads))
        self.workloads.append(workload)
        self._workload_json.append(line)

    def _line_of(self, mod: Any, workload: Any = None) -> int | None:
        import tvm_ffi

        if workload is not None:  # most commits hand back the Workload commit_workload gave
            for line, held in enumerate(self.workloads):
                if held.same_as(workload):
                    return line
        for line in self._lines.get(structural_key(mod), []):
            if tvm_ffi.structural_equal(self.workloads[line].mod, mod):
                return line
        return None

    def _offer(self, line: int, record: Any, run_secs: Any, first: str | None) -> None:
        self._count += 1
        if ranked(run_secs, first):
            entry = (mean_s(run_secs), self._count, record)
            _keep(self._fastest.setdefault(line, []), entry, self.kept)


@dataclasses.dataclass(frozen=True)
class Stored:
    """A record as the file holds it: its Workload, its JSON, its name in the tuning library's
    features (library/features.py)."""

    workload: Any
    record: Any
    digest: str | None

    @property
    def run_secs(self) -> Any:
        return self.record[1]

    def replay(self) -> tuple[Any, Any]:
        """(TuningRecord, MeasureCandidate), one replay of its trace (`replayed`)."""
        return replayed(self.record, self.workload)


def replayed(record: Any, workload: Any) -> tuple[Any, Any]:
    """(TuningRecord, MeasureCandidate) of a record's JSON on its Workload, as TVM's
    TuningRecord.from_json and as_measure_candidate give them (database.cc in TVM 0.27: a
    traced schedule of the workload, the JSON trace applied, the arguments of the scheduled
    module's entry), from one replay."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.schedule import Trace
    from tvm.target import Target

    if not (isinstance(record, list) and len(record) == 4):
        raise ValueError(f"a tuning record is a list of four, not {json.dumps(record)[:80]}")
    trace, run_secs, target, args_info = record
    sch = Schedule(workload.mod)
    Trace.apply_json_to_schedule(trace, sch)
    parsed = TuningRecord(
        sch.trace,
        workload,
        None if run_secs is None else [float(s) for s in run_secs],
        None if target is None else Target(target),
        None if args_info is None else [ArgInfo.from_json(a) for a in args_info],
    )
    return parsed, MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def _keep(held: list[tuple[float, int, Any]], entry: tuple[float, int, Any], kept: int) -> None:
    """Insert `entry` into `held` (sorted by mean, then order) and keep its `kept` first."""
    at = bisect.bisect_right(held, entry[:2], key=lambda e: e[:2])
    if at < kept:
        held.insert(at, entry)
        del held[kept:]


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    """The record file's rows: (workload line, record JSON)."""
    if not path.is_file():
        return
    with open(path, "rb") as fh:
        for number, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            row = json.loads(text)
            if not (isinstance(row, list) and len(row) == 2 and type(row[0]) is int):
                raise ValueError(f"{path} line {number} is not a tuning record")
            yield row[0], row[1]


def _append(path: Path, text: str) -> None:
    """One line at the end of `path`, as JSONDatabase writes it (without fsync, as it does: a
    line torn by a crash is mended when the run reopens, rundir/durability.py)."""
    with open_append(path) as fh:
        fh.write(text.encode() + b"\n")
