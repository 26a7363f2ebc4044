"""Tasks of one kind share their schedules during a run.

A task's search climbs from the best schedules of its own first rounds, and where those sat in a
poor region it can stay there: on the example model one run's 16->32 convolution spent 280
trials at 201 us while two other runs reached 97-98 us, and the best schedule of its own
3->16 convolution, replayed on it, ran in 152 us. So a task that has no best yet, or whose best
trails a task of the same kind (the same blocks, other shapes: search/transfer.py) by FLOP/s,
is offered that sister's fastest schedules, replayed with their decisions re-derived for its
extents: each at most once, a few a round. They are measured as exploration the cost model did
not choose, and one that is fast becomes a parent of the task's next searches like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..model.tasks import Task, structural_key
from .transfer import blocks, replay

# A sister's fastest schedules looked at for a task, per offer.
_PER_SISTER = 2


class Sisters:
    """Which tasks are of one kind, and which of their schedules each task was offered.

    `trail`: a task with a best is offered a sister's schedules only while its FLOP/s is below
    `trail` x the sister's; `share`: the most schedules offered to a task a round (0: off)."""

    def __init__(self, tasks: Sequence[Task], *, target: Any, trail: float, share: int) -> None:
        self.target, self.trail, self.share = target, trail, share
        kinds = {t.index: blocks(t.workload) for t in tasks if share and t.workload is not None}
        self._of = {
            task.index: [t for t in tasks if t is not task and kinds.get(t.index) == kind]
            for task in tasks
            if (kind := kinds.get(task.index)) is not None
        }
        self._tried: dict[int, set[tuple[int, int]]] = {}  # task -> (sister, schedule key)
        self.offered = 0  # schedules replayed and offered, all tasks
        self.failed = 0  # schedules that did not replay on the task

    def offers(
        self,
        task: Task,
        best_s: float | None,
        fastest: Callable[[int], Sequence[tuple[float, Any]]],
    ) -> list[Any]:
        """Schedules (tvm.s_tir.Schedule) of `task`'s faster sisters, replayed on it, not
        offered to it before: up to `share`, the fastest sister (by FLOP/s) first.
        `fastest(index)` gives a task's fastest measured (seconds, schedule), fastest first."""
        tried = self._tried.setdefault(task.index, set())
        found: list[Any] = []
        for sister, bests in self._ahead(task, best_s, fastest):
            for _, sch in bests[:_PER_SISTER]:
                key = (sister.index, structural_key(sch.mod))
                if key in tried:
                    continue
                tried.add(key)
                # A prime extent splits trivially in every schedule of the task, its own
                # samples too: refusing the sister's schedule for it would refuse all of them.
                result = replay(sch.trace, task.workload, self.target, allow_trivial=True)
                if result.schedule is None:
                    self.failed += 1
                    continue
                found.append(result.schedule)
                break  # one a sister a round: the next round may take its next
            if len(found) >= self.share:
                break
        self.offered += len(found)
        return found

    def _ahead(
        self,
        task: Task,
        best_s: float | None,
        fastest: Callable[[int], Sequence[tuple[float, Any]]],
    ) -> list[tuple[Task, Sequence[tuple[float, Any]]]]:
        """The task's sisters whose FLOP/s leads its own by the trail (all with a best when it
        has none), fastest first, with their fastest schedules."""
        ahead = []
        for sister in self._of.get(task.index, []):
            bests = fastest(sister.index)
            if not bests:
                continue
            rate = sister.flops / bests[0][0]
            if best_s is None or task.flops / best_s < self.trail * rate:
                ahead.append((rate, sister, bests))
        ahead.sort(key=lambda item: -item[0])
        return [(sister, bests) for _, sister, bests in ahead]
