"""Candidates proposed and not measured when a session stopped, kept for the next session.

TVM's search never proposes a schedule twice in a session, and a new session's search does not
know what the last one proposed: without this file, what waited in the proposal pool at the
stop (set aside by the filter, cut by the budget, prepared ahead) would be searched for again
or lost. One line per candidate: its task's index and its MetaSchedule tuning record (the
schedule's trace, no run time), rewritten whole at each stop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..library.files import record_json
from ..model.tasks import Candidate, Task
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
            lines.append(json.dumps({"task": index, "record": record_json(record)}))
    run.write_text(FILE, "".join(line + "\n" for line in lines))
    return len(lines)


def load_waiting(run: RunDir, tasks: Sequence[Task]) -> dict[int, list[Any]]:
    """The candidates an earlier session left waiting, as MeasureCandidates per task index; a
    line that no longer applies (another task list, a torn write) is skipped."""
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    path = run.path / FILE
    if not path.is_file():
        return {}
    by_index = {t.index: t for t in tasks}
    out: dict[int, list[Any]] = {}
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
            task = by_index[entry["task"]]
            record = TuningRecord.from_json(entry["record"], Workload(task.workload))
            out.setdefault(task.index, []).append(record.as_measure_candidate())
        except Exception:  # noqa: BLE001 - a candidate that cannot be rebuilt is searched anew
            continue
    return out
