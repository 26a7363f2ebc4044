"""Candidates proposed and not measured when a session stopped, kept for the next session.

TVM's search never proposes a schedule twice in a session, and a new session's search does not
know what the last one proposed: without this file, what waited in the proposal pool at the
stop (set aside by the filter, cut by the budget, prepared ahead) would be searched for again
or lost. One line per candidate: its task's index and key and its MetaSchedule tuning record
(the schedule's trace, no run time), rewritten whole at each stop. Read back, it is input like
any file: a line that is torn, for another task list, unreadable or untrusted
(search/trusted.py) is skipped and counted.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..library.files import record_json
from ..model.tasks import Candidate, Task
from ..run.skipped import Skipped
from ..search.transfer import one_line
from ..search.trusted import untrusted
from .database import replayed
from .directory import RunDir

FILE = "waiting.jsonl"


def save_waiting(run: RunDir, waiting: Mapping[int, Sequence[Candidate]], target: Any) -> int:
    """Write the candidates left waiting (replacing the last session's); how many."""
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    lines = []
    for index, candidates in sorted(waiting.items()):
        for c in candidates:
            mc = c.measure_candidate
            record = TuningRecord(
                mc.sch.trace, Workload(c.task.workload), None, target, mc.args_info
            )
            entry = {"task": index, "task_key": c.task.key, "record": record_json(record)}
            lines.append(json.dumps(entry))
    run.write_text(FILE, "".join(line + "\n" for line in lines))
    return len(lines)


def load_waiting(
    run: RunDir,
    tasks: Sequence[Task],
    *,
    target: Any,
    skipped: Skipped | None = None,
    threads: int = 1,
) -> dict[int, list[Any]]:
    """The candidates an earlier session left waiting, as MeasureCandidates per task index,
    replayed on `threads` threads (TVM replays outside Python's lock); a line that cannot be
    used is counted in `skipped` (its candidate is searched anew)."""
    path = run.path / FILE
    if not path.is_file():
        return {}
    skipped = skipped if skipped is not None else Skipped()
    by_index = {t.index: t for t in tasks}
    out: dict[int, list[Any]] = {}
    try:
        lines = path.read_bytes().splitlines()
    except OSError as error:
        skipped.add("waiting", f"{path} cannot be read ({error.strerror or error})")
        return {}
    with concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
        parked = list(pool.map(lambda line: _parked(line, by_index, target), lines))
    for number, found in enumerate(parked, start=1):
        if isinstance(found, _Unusable):
            skipped.add(found.kind, f"{path} line {number}: {found}")
        elif found is not None:
            task, candidate = found
            out.setdefault(task.index, []).append(candidate)
    return out


class _Unusable(Exception):
    """Why a line cannot be used, and the Skipped kind it counts as."""

    def __init__(self, why: str, kind: str = "waiting") -> None:
        super().__init__(why)
        self.kind = kind


def _parked(
    line: bytes, tasks: dict[int, Task], target: Any
) -> tuple[Task, Any] | None | _Unusable:
    """The task and MeasureCandidate of one line; None for an empty line, the _Unusable that
    says why where there are none."""
    if not line.strip():
        return None
    try:
        return _candidate(line, tasks, target)
    except _Unusable as unusable:
        return unusable


def _candidate(line: bytes, tasks: dict[int, Task], target: Any) -> tuple[Task, Any]:
    """The task and MeasureCandidate of one line; _Unusable where there are none."""
    from tvm.s_tir.meta_schedule.database import Workload

    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        raise _Unusable("not JSON (a torn write?)") from None
    if not isinstance(entry, dict) or not isinstance(entry.get("task"), int):
        raise _Unusable("not a parked candidate")
    task = tasks.get(entry["task"])
    if task is None or entry.get("task_key", task.key) != task.key:
        raise _Unusable("for another task list")
    try:  # one replay, where TVM's from_json and as_measure_candidate make two
        record, candidate = replayed(entry.get("record"), Workload(task.workload))
    except Exception as error:  # noqa: BLE001 - another TVM version's, or not for this task
        raise _Unusable(f"this TVM cannot replay it on its task ({one_line(error)})") from None
    unsafe = untrusted(record.trace, target)
    if unsafe is not None:
        raise _Unusable(f"holds {unsafe}", "unsafe_traces")
    return task, candidate
