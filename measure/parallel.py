"""Parallel measurement with a live degree of parallelism; the device-specific part is `_run`.

`measure()` times candidates in batches of the current DOP. After each batch measured in
parallel, a sample is re-timed in isolation and the DOP controller compares them (the
isolated timings replace the parallel ones). A result faster than the task's best so far is
re-timed in isolation before it is reported, so a new best never rests on a parallel
measurement. Results are reported (on_result) as soon as they are final.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence

from .base import Engine, MeasureInput, Measurement
from .dop import Check, DopController


class ParallelEngine(Engine):
    """An engine that can time several candidates at once on one device."""

    lanes = 1  # devices timed side by side (GPUs); a batch holds DOP x lanes candidates

    def __init__(self, controller: DopController, *, fixed_dop: int | None = None) -> None:
        self.controller = controller
        self.fixed_dop = fixed_dop  # --parallelism N: no adaptation
        self.isolated_runs = 0  # re-timings in isolation (checks and confirmations)
        self.batches: list[tuple[int, int]] = []  # (dop, candidates) per batch

    @abc.abstractmethod
    def _run(self, inputs: Sequence[MeasureInput], dop: int) -> list[Measurement]:
        """Time `inputs` with up to `dop` timed concurrently; one Measurement each, in order."""

    @property
    def dop(self) -> int:
        return self.fixed_dop or self.controller.dop

    @property
    def checks(self) -> list[Check]:
        return self.controller.history

    def measure(
        self,
        inputs: Sequence[MeasureInput],
        on_result: Callable[[int, Measurement], None] | None = None,
        best_s: float | None = None,
    ) -> list[Measurement]:
        results: list[Measurement] = []
        best = best_s if best_s is not None else math.inf
        start = 0
        while start < len(inputs):
            dop = self.dop
            batch = list(inputs[start : start + dop * self.lanes])
            timed = self._run(batch, dop)
            self.batches.append((dop, len(batch)))
            if dop > 1:
                timed = self._checked(batch, timed, dop)
            elif self.fixed_dop is None:  # a clean serial batch: nothing to compare, go up
                self.controller.check(
                    [], [], failed_parallel=0, failed_isolated=0, batch=len(batch)
                )
            for offset, m in enumerate(timed):
                if m.ok and m.dop > 1 and m.mean_s < best:  # a new best: confirm it in isolation
                    m = self._isolated([batch[offset]])[0]
                if m.ok:
                    best = min(best, m.mean_s)
                results.append(m)
                if on_result is not None:
                    on_result(start + offset, m)
            start += len(batch)
        return results

    def _checked(
        self, batch: list[MeasureInput], timed: list[Measurement], dop: int
    ) -> list[Measurement]:
        """Re-time a sample in isolation, let the controller judge, keep the isolated timings."""
        latencies = [m.mean_s for m in timed]
        sample = self.controller.sample(latencies)
        failed = [i for i, m in enumerate(timed) if not m.ok]
        again = sorted(set(sample) | set(failed))  # failures too: the candidate or the crowd?
        isolated = self._isolated([batch[i] for i in again])
        by_index = dict(zip(again, isolated, strict=True))
        if self.fixed_dop is None:
            self.controller.check(
                [latencies[i] for i in sample],
                [by_index[i].mean_s for i in sample],
                failed_parallel=len(failed),
                failed_isolated=sum(1 for i in failed if not by_index[i].ok),
                batch=len(batch),
            )
        return [by_index.get(i, m) for i, m in enumerate(timed)]

    def _isolated(self, inputs: Sequence[MeasureInput]) -> list[Measurement]:
        self.isolated_runs += len(inputs)
        return self._run(inputs, 1)

    def stats(self) -> dict[str, object]:
        """For the report: the DOP over time and the checks that justified it."""
        return {
            **super().stats(),
            "dop": self.dop,
            "ceiling": self.controller.ceiling,
            "batches": [{"dop": d, "candidates": n} for d, n in self.batches],
            "isolated_runs": self.isolated_runs,
            "checks": [
                {
                    "dop": c.dop,
                    "sampled": c.sampled,
                    "rel_error": c.rel_error,
                    "failure_rate": c.failure_rate,
                    "new_dop": c.new_dop,
                }
                for c in self.checks
                if c.sampled or c.failure_rate
            ],
        }
