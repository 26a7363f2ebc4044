"""The local engine: one candidate at a time, in an isolated worker, on this host's device."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import _worker
from ._pool import WorkerPool
from ._timing import TimingPlan
from .base import Engine, MeasureInput, Measurement


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimerConfig:
    """time_evaluator settings: `number` runs per repeat (raised until a repeat lasts
    `min_repeat_ms`), `repeat` timed repeats, optional CPU cache flush between repeats. With
    `race`, a candidate clearly slower than the task's best x (1 + `race_margin`) after
    `race_after` repeats is cut short, by the GPUs' rule (_timing.py)."""

    number: int = 1
    repeat: int = 3
    min_repeat_ms: int = 15
    cpu_cache_flush: bool = False
    race: bool = False
    race_after: int = 1
    race_margin: float = 0.5

    def __post_init__(self) -> None:
        if self.number < 1 or self.repeat < 1:
            raise ValueError(f"number and repeat must be at least 1 but got {self}.")
        if self.min_repeat_ms < 0:
            raise ValueError(f"min_repeat_ms cannot be negative but got {self.min_repeat_ms}.")
        self.plan()  # checks the racing settings

    def plan(self) -> TimingPlan:
        """The repeats as a TimingPlan: `repeat` of them, fewer when raced."""
        return TimingPlan(
            min_repeats=self.repeat,
            max_repeats=self.repeat,
            repeat_ms=self.min_repeat_ms,
            min_launches=self.number,
            race=self.race,
            race_after=self.race_after,
            race_margin=self.race_margin,
        )


class LocalEngine(Engine):
    """Times candidates serially in one worker process on device `device_type`:0.

    Serial measurement keeps candidates from disturbing each other; with racing on, one
    clearly slower than the best so far (`best_s`, then this call's results) is cut short. A
    candidate that crashes the worker or runs past `timeout_s` costs one failed Measurement;
    the worker is replaced.
    """

    def __init__(
        self,
        *,
        device_type: str = "cpu",
        timer: TimerConfig | None = None,
        timeout_s: float = 30.0,
        log_path: str | Path | None = None,
    ) -> None:
        if device_type not in ("cpu", "cuda"):
            raise ValueError(f"device_type must be 'cpu' or 'cuda' but got {device_type!r}.")
        self.device_type = device_type
        self.timer = timer or TimerConfig()
        self._plan = self.timer.plan()
        self._pool = WorkerPool(
            workers=1, timeout_s=timeout_s, log_path=log_path, initializer=_worker.warm_up
        )
        self._pool.start(1)  # its import of TVM overlaps the caller's work until the first job
        self.candidates = 0
        self.measure_s = 0.0  # time inside measure() calls
        self.raced = 0  # candidates cut short as clearly slower than their task's best

    def measure(
        self,
        inputs: Sequence[MeasureInput],
        on_result: Callable[[int, Measurement], None] | None = None,
        best_s: float | None = None,
    ) -> list[Measurement]:
        results = []
        started = time.monotonic()
        best = best_s
        for index, item in enumerate(inputs):
            m = self._measure_one(item, best)
            results.append(m)
            if m.can_lead and (best is None or m.mean_s < best):
                best = m.mean_s
            self.raced += m.raced
            if on_result is not None:
                on_result(index, m)
        self.measure_s += time.monotonic() - started
        self.candidates += len(inputs)
        return results

    def stats(self) -> dict[str, object]:
        return {
            **super().stats(),
            "candidates": self.candidates,
            "measure_s": self.measure_s,
            "candidates_per_s": self.candidates / self.measure_s if self.measure_s else None,
            "raced": self.raced,
        }

    def close(self) -> None:
        self._pool.close()

    def _measure_one(self, item: MeasureInput, best_s: float | None) -> Measurement:
        future = self._pool.submit(
            _worker.measure,
            item.artifact,
            self.device_type,
            item.args,
            self._plan,
            best_s,
            self.timer.cpu_cache_flush,
        )
        value, error = self._pool.outcome(future, "measurement")
        if error:
            return Measurement(None, error)
        run_secs, finite, raced = value
        return Measurement(tuple(run_secs), finite=finite, raced=raced)
