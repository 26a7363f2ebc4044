"""Transfer-tuning from the library: a task the library does not hold gets, as its first round,
the fastest schedules tuned on tasks of the same kind (the same blocks, other shapes), replayed
on it with their decisions re-derived for its extents (search/transfer.py). Those that apply
are measured like a round's candidates, committed, and start its search."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..model.tasks import measure_candidate
from ..run.scheduler import TaskState
from ..search.transfer import AS_IS, FAILED, blocks, replay
from .files import mean_s, record_json
from .records import LibraryView


@dataclasses.dataclass
class Transferred:
    """What transfer brought one task: schedules tried, how each applied, what they reached."""

    tried: int = 0
    as_is: int = 0
    re_derived: int = 0
    failed: int = 0
    measured: int = 0
    best_s: float | None = None  # the fastest transferred schedule, measured here
    default_s: float | None = None  # the task's default schedule, for comparison

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def replayed(
    view: LibraryView,
    states: Sequence[TaskState],
    target: Any,
    *,
    most: int,
    per_workload: int,
) -> tuple[dict[int, list[Any]], dict[int, Transferred]]:
    """For each task not tuned yet (no round, no library record of its own): MeasureCandidates
    of up to `most` schedules of same-kind library workloads that replay on it, and what
    became of each schedule tried."""
    kinds = _kinds(view)
    given: dict[int, list[Any]] = {}
    stats: dict[int, Transferred] = {}
    for state in states:
        if state.rounds or state.retired or not most:
            continue
        records = _same_kind(view, kinds, blocks(state.task.workload), per_workload)[:most]
        if not records:
            continue
        tally = stats[state.task.index] = Transferred(default_s=state.baseline_s)
        for record in records:
            result = replay(record.trace, state.task.workload, target)
            tally.tried += 1
            tally.as_is += result.outcome == AS_IS
            tally.failed += result.outcome == FAILED
            tally.re_derived += result.outcome not in (AS_IS, FAILED)
            if result.schedule is not None:
                given.setdefault(state.task.index, []).append(measure_candidate(result.schedule))
    return given, stats


def record_rounds(
    states: Sequence[TaskState],
    results: Mapping[int, Sequence[Any]],
    stats: Mapping[int, Transferred],
    seconds: float,
    journal: Callable[[dict[str, Any]], None],
    snapshot: Callable[[], dict[str, Any]],
) -> None:
    """Each task's transferred schedules, measured, as its first round (journalled as a round,
    so a resumed run rebuilds it)."""
    total = sum(map(len, results.values())) or 1
    for state in states:
        measured = results.get(state.task.index)
        if not measured:
            continue
        good = [m.mean_s for m in measured if m.ok]
        share = seconds * len(measured) / total
        state.trials += len(measured)
        state.failures += len(measured) - len(good)
        state.record_round(min(good) if good else None, trials=len(measured), seconds=share)
        tally = stats[state.task.index]
        tally.measured, tally.best_s = len(good), min(good, default=None)
        journal(
            {
                "type": "round",
                "kind": "transfer",
                "task": state.task.index,
                "task_key": state.task.key,
                "trials": len(measured),
                "measured": len(good),
                "failed": len(measured) - len(good),
                "transfer": tally.to_dict(),
                "best_s": state.best_s,
                "round_best_s": tally.best_s,
                "seconds": round(share, 3),
                "spend": snapshot(),
            }
        )


def _kinds(view: LibraryView) -> dict[str, tuple]:
    """Each library workload's kind (its blocks and their iterators), by workload key."""
    out = {}
    for key in view.keys():
        workload = view.workload(key)
        if workload is not None:
            out[key] = blocks(workload.mod)
    return out


def _same_kind(
    view: LibraryView, kinds: Mapping[str, tuple], kind: tuple, per_workload: int
) -> list[Any]:
    """The fastest records of every library workload of `kind`, the fastest first."""
    found = [r for key, k in kinds.items() if k == kind for r in view.best(key, per_workload)]
    return sorted(found, key=lambda record: mean_s(record_json(record)))
