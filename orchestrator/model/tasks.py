"""Tuning tasks (one per distinct fused PrimFunc) and the candidates proposed for them."""

from __future__ import annotations

import dataclasses
from typing import Any

from tune_orchestrator.measure.base import ArgSpec

from ..errors import InputError


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
    """A workload to tune. `weight` is how many call sites in the model share it."""

    index: int
    name: str
    weight: int
    flops: float
    workload: Any  # IRModule {"main": PrimFunc}: the key the database stores records under
    key: str  # structural hash of the workload, hex

    def describe(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "weight": self.weight,
            "flops": self.flops,
            "key": self.key,
        }


@dataclasses.dataclass(frozen=True, eq=False)
class Candidate:
    """One schedule proposed by the search for a task."""

    task: Task
    measure_candidate: Any  # MetaSchedule MeasureCandidate (schedule + argument info)
    key: int  # structural hash of the scheduled module: the same schedule has the same key
    features: Any = None  # its per-store feature matrix (numpy), once extracted
    # One of the search's random picks (eps-greedy): exploration the cost model did not
    # choose, which the filter, ranking with that model, lets through unjudged.
    explore: bool = False

    @property
    def mod(self) -> Any:
        return self.measure_candidate.sch.mod

    @property
    def label(self) -> tuple[str, float, int]:
        """What a simulated device keys its latency on: (task key, task FLOPs, candidate key)."""
        return (self.task.key, self.task.flops, self.key)

    @property
    def args(self) -> tuple[ArgSpec, ...]:
        return arg_specs(self.measure_candidate.args_info)


def structural_key(mod: Any) -> int:
    """A module's structural hash: the same schedule (or workload) has the same key."""
    import tvm_ffi

    return int(tvm_ffi.structural_hash(mod))


def measure_candidate(sch: Any) -> Any:
    """A schedule as MetaSchedule's MeasureCandidate: the schedule and its entry function's
    arguments, as the workload takes them (before any layout rewrite)."""
    from tvm.s_tir.meta_schedule import MeasureCandidate
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def task_key(workload: Any) -> str:
    """A workload's key as a task, the learned model and the run's files name it: hex."""
    return f"{structural_key(workload) & (2**64 - 1):016x}"


def database_key(workload: Any) -> str:
    """The same hash as MetaSchedule writes it in a database's workload line: decimal."""
    return str(structural_key(workload) & (2**64 - 1))


def arg_specs(args_info: Any) -> tuple[ArgSpec, ...]:
    """MetaSchedule ArgInfo -> ((dtype, shape), ...), plain data a worker can take."""
    specs = []
    for info in args_info:
        kind, dtype, shape = info.as_json()
        if kind != "TENSOR":
            raise ValueError(f"unsupported argument kind {kind!r}")
        specs.append((str(dtype), tuple(int(d) for d in shape)))
    return tuple(specs)


def _static(workload: Any) -> bool:
    """Whether every argument of the workload has a fixed shape, as measuring it needs."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    try:
        ArgInfo.from_prim_func(workload["main"])
    except (TypeError, ValueError):  # TVM's: a shape holds a variable (a parameter, even)
        return False
    return True


def _prescheduled(workload: Any) -> bool:
    """Whether TVM dispatched the PrimFunc to a kernel of its own, scheduled already (a scan
    on CUDA: written for any size, so its shapes are variables)."""
    return bool(workload["main"].attrs.get("tirx.is_scheduled", False))


def extract_tasks(fused_mod: Any, target: Any) -> list[Task]:
    """One Task per distinct PrimFunc of the fused module, heaviest (weight x FLOPs) first;
    InputError where one has shapes that depend on the input's values (MetaSchedule measures
    only static shapes, and every input's shape is fixed by then). A kernel TVM dispatched
    for any size (cumsum on CUDA) is no task: it is compiled as TVM scheduled it."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    extracted, dynamic = [], []
    for item in ms.relax_integration.extract_tasks(fused_mod, target):
        if _static(item.dispatched[0]):
            extracted.append(item)
        elif not _prescheduled(item.dispatched[0]):
            dynamic.append(item.task_name)
    if dynamic:
        raise InputError(
            f"the model's operators {', '.join(dynamic[:3])} have shapes computed from the "
            "input's values (after an operator such as NonZero), which MetaSchedule cannot "
            "tune; export the model with those operators removed or their output sizes fixed"
        )
    rows = []
    for item in extracted:
        workload = item.dispatched[0]
        flops = max(1.0, float(s_tir.analysis.estimate_tir_flops(workload)))
        rows.append((item.task_name, int(item.weight), flops, workload))
    rows.sort(key=lambda r: (-r[1] * r[2], r[0]))
    return [
        Task(i, name, weight, flops, workload, task_key(workload))
        for i, (name, weight, flops, workload) in enumerate(rows)
    ]
