"""A task's default schedule as a record of the run's database, so it competes with tuning.

`compile_relax` uses a task's best record whenever there is one, even when it is slower than
the schedule the task gets without tuning (dlight's on GPUs, the plain lowering on CPUs). With
that default schedule committed as a record of its own, with its measured time, stock
`compile_relax` (ours, or a user's on our database) picks per task the faster of the two.

The search must not see these records: TVM's own evolutionary search seeds its population with
the database's best records, cannot evolve a dlight trace, and replaying one through its
postprocessors can abort it. Our search (search/strategy.py) keeps its parents in memory, but
the database it hands TVM at `pre_tuning` is still `SearchView`, which hides them, so that no
TVM code path that reads the database meets one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import PyDatabase

from .targets import ResolvedTarget
from .tasks import Task, structural_key


@dataclasses.dataclass(frozen=True, eq=False)
class DefaultSchedule:
    """The schedule a task runs with untuned. `trace` is None where replaying it does not
    give the same kernel (then it cannot be recorded)."""

    mod: Any  # IRModule {"main": scheduled PrimFunc}: what is built and timed
    trace: Any  # tvm.s_tir.schedule.Trace, or None
    key: int  # structural key of the schedule a record of `trace` replays to

    @property
    def recordable(self) -> bool:
        return self.trace is not None


def default_rules() -> list[Any]:
    """The dlight rules `compile_relax` schedules unrecorded GPU functions with, in its order."""
    from tvm.s_tir import dlight as dl

    return [
        dl.gpu.Matmul(),
        dl.gpu.GEMV(),
        dl.gpu.Reduction(),
        dl.gpu.GeneralReduction(),
        dl.gpu.Fallback(),
    ]


def first_rule_schedule(func: Any, target: Any, rules: Sequence[Any], tunable: bool) -> Any:
    """What the first of `rules` that schedules `func` gives, as dlight takes it, or None.

    A rule that raises counts as not applying: TVM 0.27's Reduction asserts on a reduction it
    half recognises (an outer product summed, `einsum("bi,bj->bij")` then `sum(-1)`), which
    failed the whole compile on CUDA where GeneralReduction or Fallback, next in line, would
    have scheduled it."""
    from tvm import s_tir

    for rule in rules:
        try:
            space = rule.apply(func, target, tunable)
        except Exception:  # as not applying: the rules after it are the fallback
            continue
        if space is not None:
            return [space] if isinstance(space, s_tir.Schedule) else space
    return None


def tolerate_failing_rules() -> None:
    """Have dlight, wherever TVM schedules a function with it (compile_relax's functions
    without a record), pass over a rule that raises, as first_rule_schedule does."""
    from tvm.s_tir.dlight.base import transform

    transform._apply_rules = first_rule_schedule


def default_schedule(task: Task, target: ResolvedTarget) -> DefaultSchedule:
    """The task's default schedule (never changing `task.workload`, which the database keys on).

    On GPUs the first dlight rule that applies, as `compile_relax` applies it; on CPUs the
    workload as it is lowered, recorded as a trace that only looks up the root block (the
    database never returns a record whose trace is empty). The trace is kept only if
    replaying it on the workload, as `compile_relax` does with a record, gives the same
    PrimFunc.
    """
    import tvm
    import tvm_ffi
    from tvm import s_tir

    func = task.workload["main"]
    sch = None
    if target.device_type == "cuda":
        with target.target:
            space = first_rule_schedule(func, target.target, default_rules(), False)
        sch = space[0] if space else None
    replayed = s_tir.Schedule(task.workload)
    try:
        if sch is None:
            sch = s_tir.Schedule(task.workload)
            sch.get_sblock("root")
        sch.trace.apply_to_schedule(replayed, remove_postproc=False)
        same = tvm_ffi.structural_equal(replayed.mod["main"], sch.mod["main"])
    except Exception:  # a trace that does not replay is one we cannot record
        same = False
    scheduled = (sch.mod["main"] if sch is not None else func).with_attr("tirx.is_scheduled", True)
    return DefaultSchedule(
        tvm.IRModule({"main": scheduled}), sch.trace if same else None, structural_key(replayed.mod)
    )


def record_default(
    database: Any, task: Task, default: DefaultSchedule, run_secs: Sequence[float], target: Any
) -> Any:
    """Commit the default schedule with its measured run times; returns the record."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    record = TuningRecord(
        default.trace,
        database.commit_workload(task.workload),
        [float(s) for s in run_secs],
        target,
        ArgInfo.from_prim_func(task.workload["main"]),
    )
    database.commit_tuning_record(record)
    return record


class DefaultRecords:
    """Records default schedules for a session: each task's baseline journal entry first,
    naming the record, then the record (a crash between the two leaves a baseline whose
    record the next session commits, see `add_missing`)."""

    def __init__(
        self,
        database: Any,
        target: ResolvedTarget,
        restored: Any,  # restore.Restored
        journal: Callable[[dict[str, Any]], None],
    ) -> None:
        self.database = database
        self.target = target
        self.restored = restored
        self.journal = journal

    def add(
        self,
        state: Any,  # scheduler.TaskState, its baseline set
        default: DefaultSchedule,
        run_secs: list[float] | None,
        error: str | None = None,
    ) -> None:
        index = state.task.index
        recorded = bool(run_secs) and default.recordable
        entry = {
            "type": "baseline",
            "task": index,
            "latency_s": state.baseline_s,
            "finite": state.untuned_finite,
            "run_secs": run_secs,
            "record_key": hex_key(default.key) if recorded else None,
        }
        if error:
            entry["error"] = error
        if run_secs and not default.recordable:
            entry["note"] = "the default schedule does not replay to the same kernel: not recorded"
        self.journal(entry)
        if recorded:
            record = record_default(
                self.database, state.task, default, run_secs, self.target.target
            )
            self.restored.default_records[index] = record
            self.restored.measured.setdefault(index, set()).add(default.key)

    def add_missing(self) -> None:
        """Defaults measured in an earlier session but not in the database (a crash between
        the journal and the database, or a run directory older than default records)."""
        for index, run_secs in sorted(self.restored.unrecorded.items()):
            state = self.restored.states[index]
            self.add(state, default_schedule(state.task, self.target), list(run_secs))
        self.restored.unrecorded.clear()


@derived_object
class SearchView(PyDatabase):
    """The run's database as the search sees it: every record but the hidden ones (the
    default schedules). Commits go through to the database."""

    def __init__(self, database: Any, hidden: Sequence[Any] = ()) -> None:
        super().__init__()
        self.database = database
        self.hidden = list(hidden)

    def hide(self, record: Any) -> None:
        self.hidden.append(record)

    def _visible(self, record: Any) -> bool:
        return not any(record.same_as(h) for h in self.hidden)

    def has_workload(self, mod: Any) -> bool:
        return self.database.has_workload(mod)

    def commit_workload(self, mod: Any) -> Any:
        return self.database.commit_workload(mod)

    def commit_tuning_record(self, record: Any) -> None:
        self.database.commit_tuning_record(record)

    def commit_named(self, record: Any) -> str | None:
        """The record committed, named as the run's database names it (None where it names
        none: another database)."""
        named = getattr(self.database, "commit_named", None)
        if named is None:
            self.database.commit_tuning_record(record)
            return None
        return named(record)

    def get_top_k(self, workload: Any, top_k: int) -> list[Any]:
        found = self.database.get_top_k(workload, top_k + len(self.hidden))
        return [r for r in found if self._visible(r)][:top_k]

    def get_all_tuning_records(self) -> list[Any]:
        return [r for r in self.database.get_all_tuning_records() if self._visible(r)]

    def __len__(self) -> int:  # the hidden records are in the database
        return len(self.database) - len(self.hidden)


def hex_key(key: int) -> str:
    """A structural key as the journal writes it: 16 hex digits."""
    return f"{key & (2**64 - 1):016x}"


def deployed_schedule(*, best_s: float | None, default_s: float | None, recorded: bool) -> str:
    """Which schedule `compile_relax` gives the task: the record with the lowest mean run time,
    where the default schedule counts only once it is recorded; "default" without records."""
    if best_s is None:
        return "default"
    if recorded and default_s is not None and default_s <= best_s:
        return "default"
    return "tuned"
