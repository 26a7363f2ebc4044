"""Crash injection at the run's durable writes, for the crash tests (as SQLite tests recovery).

    TUNE_ORCHESTRATOR_CRASH_AT=<point>[:<n>[:<when>]]   end the process at the n-th write (default 1)
    TUNE_ORCHESTRATOR_CRASH_LOG=<file>                  append each write point reached, one a line

`when` is `torn` (the write half done, as a kill in the middle of it leaves it: half a line
appended, or half a temporary file beside the one it would replace) or `after` (the write done,
nothing after it). The process ends with os._exit(CRASH_EXIT): no clean-up, no flush, no
`finally`, as a kill -9 or a power cut. Without these variables every call is a dict lookup.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

CRASH_EXIT = 86
# Every durable write of a run, by the name the variables give it.
POINTS = {
    "journal": "a journal line (journal.jsonl)",
    "config": "the run's config.json",
    "workload": "a workload line of database_workload.json",
    "record": "a record line of database_tuning_record.json",
    "learned": "what a round learned, by record (learned.jsonl)",
    "spend": "the spend checkpoint (spend.json)",
    "waiting": "the parked proposals (waiting.jsonl)",
    "predictor": "the learned model (predictor.json)",
    "filter": "the filter's audits (filter.json)",
    "library": "the tuning library's merge",
    "model": "an installed build (model.so, the untuned and tuned builds in logs/)",
    "report": "the report's files (report.json, .md, .html, rounds.csv)",
}
WHEN = ("torn", "after")


def _parse(spec: str | None) -> tuple[str, int, str] | None:
    if not spec:
        return None
    parts = spec.split(":")
    point, n, when = (
        (parts + ["1", "after"][len(parts) - 1 :])[:3] if len(parts) <= 3 else ("", "", "")
    )
    if point not in POINTS or when not in WHEN or not n.isdigit() or int(n) < 1:
        raise ValueError(
            f"TUNE_ORCHESTRATOR_CRASH_AT must be <point>[:<n>[:torn|after]] with a point of "
            f"{', '.join(POINTS)} but got {spec!r}."
        )
    return point, int(n), when


_AT = _parse(os.environ.get("TUNE_ORCHESTRATOR_CRASH_AT"))
_LOG = os.environ.get("TUNE_ORCHESTRATOR_CRASH_LOG")
_seen: dict[str, int] = {}


def active() -> bool:
    return _AT is not None or _LOG is not None


def count(point: str) -> str | None:
    """Count a write of `point`; `torn` or `after` when it is the one to crash at, else None."""
    if not active():
        return None
    _seen[point] = _seen.get(point, 0) + 1
    if _LOG:
        with open(_LOG, "a", encoding="utf-8") as fh:
            fh.write(f"{point}\n")
    if _AT is not None and _AT[:2] == (point, _seen[point]):
        return _AT[2]
    return None


def before(point: str, path: Path | None = None, data: bytes = b"", *, append: bool) -> None:
    """Called before every write of `data` to `path`: at a `torn` crash point, write half of
    it (appended, or into a temporary file beside `path`) and end the process."""
    if count(point) != "torn":
        return
    if path is not None and data:
        half = data[: max(1, len(data) // 2)]
        target = path if append else path.with_name(f".{path.name}.torn")
        with open(target, "ab" if append else "wb") as fh:
            fh.write(half)
            fh.flush()
            os.fsync(fh.fileno())
    crash()


def after(point: str) -> None:
    """Called once that write is durable: at an `after` crash point, end the process."""
    if _AT is not None and _AT == (point, _seen.get(point), "after"):
        crash()


def crash() -> None:
    os._exit(CRASH_EXIT)


def database(db: Any, files: Mapping[str, Path]) -> Any:
    """`db` (a MetaSchedule database writing `files`: {"workload": path, "record": path}), with
    crash points at its commits when crash injection is on; `db` itself otherwise."""
    if not active():
        return db
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.database import PyDatabase

    @derived_object
    class CrashingDatabase(PyDatabase):
        def __init__(self) -> None:
            super().__init__()

        def has_workload(self, mod: Any) -> bool:
            return db.has_workload(mod)

        def commit_workload(self, mod: Any) -> Any:
            if db.has_workload(mod):
                return db.commit_workload(mod)
            return _committed("workload", files["workload"], lambda: db.commit_workload(mod))

        def commit_tuning_record(self, record: Any) -> None:
            self.commit_named(record)

        def commit_named(self, record: Any) -> str:
            return _committed("record", files["record"], lambda: db.commit_named(record))

        def get_top_k(self, workload: Any, top_k: int) -> list[Any]:
            return db.get_top_k(workload, top_k)

        def get_all_tuning_records(self) -> list[Any]:
            return db.get_all_tuning_records()

        def each_record(self, unreadable: Any = None) -> Any:
            return db.each_record(unreadable)

        def each_stored(self, unreadable: Any = None) -> Any:
            return db.each_stored(unreadable)

        def __len__(self) -> int:
            return len(db)

    return CrashingDatabase()


def _committed(point: str, path: Path, commit: Callable[[], Any]) -> Any:
    """A database commit (TVM appends one line to `path`) with its crash points: at `torn`,
    the new line is cut to half of its bytes before the process ends."""
    when = count(point)
    size = path.stat().st_size if path.exists() else 0
    result = commit()
    if when == "torn":
        added = path.stat().st_size - size
        with open(path, "r+b") as fh:
            fh.truncate(size + max(1, added // 2))
            fh.flush()
            os.fsync(fh.fileno())
        crash()
    after(point)
    return result
