"""Tasks whose tuned CUDA kernels do not compile run their default schedules instead.

A simulated run (--simulate) never compiles the CUDA code of the schedules it measures: no GPU
here loads them, so TVM exports their source. TVM 0.27's CUDA code generator writes some that
nvcc rejects (a vector of eight int64 lanes printed as a longlong4 of eight values); a GPU's
build would have failed them, so they never become a task's best there. Where the tuned
model's kernels do not compile, the tasks whose kernels the errors point into are built with
their default schedules, until the kernels compile.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.database import PyDatabase

from ..model.tasks import Task, task_key

_KERNEL_OF = re.compile(r"_kernel(_\d+)?$")  # TVM names a function's kernels <function>_kernel


def tasks_of(kernels: Iterable[str], tasks: Sequence[Task]) -> list[Task]:
    """The tasks whose functions made these kernels."""
    functions = {_KERNEL_OF.sub("", name) for name in kernels}
    return [t for t in tasks if t.name in functions]


@derived_object
class WithoutTasks(PyDatabase):
    """`database` as compile_relax reads it, less the records of `tasks`: those tasks get
    their default schedules."""

    def __init__(self, database: Any, tasks: Sequence[Task]) -> None:
        super().__init__()
        self.database = database
        self.hidden = {t.key for t in tasks}

    def _hides(self, mod: Any) -> bool:
        return task_key(mod) in self.hidden

    def has_workload(self, mod: Any) -> bool:
        return not self._hides(mod) and self.database.has_workload(mod)

    def commit_workload(self, mod: Any) -> Any:
        return self.database.commit_workload(mod)

    def commit_tuning_record(self, record: Any) -> None:
        self.database.commit_tuning_record(record)

    def get_top_k(self, workload: Any, top_k: int) -> list[Any]:
        if self._hides(workload.mod):
            return []
        return self.database.get_top_k(workload, top_k)

    def get_all_tuning_records(self) -> list[Any]:
        return [
            r for r in self.database.get_all_tuning_records() if not self._hides(r.workload.mod)
        ]

    def __len__(self) -> int:
        return len(self.get_all_tuning_records())
