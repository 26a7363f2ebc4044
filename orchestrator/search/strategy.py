"""Driving MetaSchedule's search for one task."""

from __future__ import annotations

from typing import Any

from .. import _tvm
from ..config import Settings
from ..tasks import Task


class TaskSearch:
    """One task's MetaSchedule state: a TuneContext with an EvolutionarySearch."""

    def __init__(
        self,
        task: Task,
        *,
        target: Any,
        settings: Settings,
        database: Any,
        cost_model: Any,
        rand_state: int,
        threads: int,
        proposals: int,
    ) -> None:
        from tvm.s_tir import meta_schedule as ms

        _tvm.load_tensor_intrinsics()
        s = settings.search
        strategy = ms.search_strategy.EvolutionarySearch(
            population_size=s.population,
            init_measured_ratio=s.init_measured_ratio,
            genetic_num_iters=s.genetic_num_iters,
            genetic_mutate_prob=s.genetic_mutate_prob,
            genetic_max_fail_count=s.genetic_max_fail_count,
            eps_greedy=s.eps_greedy,
        )
        self.task = task
        self.ctx = ms.TuneContext(
            mod=task.workload,
            target=target,
            space_generator="post-order-apply",
            search_strategy=strategy,
            task_name=task.name,
            rand_state=rand_state,
            num_threads=threads,
            logger=_tvm.quiet_logger(),
        )
        # The strategy stops proposing once `max_trials` results were reported, shrinking the
        # last batches on the way; the budget stops the loop instead, so give it ample room.
        self.ctx.pre_tuning(
            max_trials=1 << 30,
            num_trials_per_iter=proposals,
            design_spaces=self.ctx.generate_design_space(),
            database=database,
            cost_model=cost_model,
        )
        self.workload = database.commit_workload(task.workload)
        self.exhausted = False

    def propose(self) -> list[Any]:
        """New candidates (MeasureCandidates) for one round; empty when this search found
        nothing new. After TVM's strategy gives up (it does after 5 empty searches, or when it
        cannot sample a valid initial population), `exhausted` is set."""
        if self.exhausted:
            return []
        proposed = self.ctx.generate_measure_candidates()
        if proposed is None:
            self.exhausted = True
            return []
        return list(proposed)
