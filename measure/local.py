"""The local engine: one candidate at a time, in an isolated worker, on this host's device."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import _worker
from ._pool import WorkerPool
from .base import Engine, MeasureInput, Measurement


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimerConfig:
    """time_evaluator settings: `number` runs per repeat (raised until a repeat lasts
    `min_repeat_ms`), `repeat` timed repeats, optional CPU cache flush between repeats."""

    number: int = 1
    repeat: int = 3
    min_repeat_ms: int = 33
    cpu_cache_flush: bool = False

    def __post_init__(self) -> None:
        if self.number < 1 or self.repeat < 1:
            raise ValueError(f"number and repeat must be at least 1 but got {self}.")
        if self.min_repeat_ms < 0:
            raise ValueError(f"min_repeat_ms cannot be negative but got {self.min_repeat_ms}.")


class LocalEngine(Engine):
    """Times candidates serially in one worker process on device `device_type`:0.

    Serial measurement keeps candidates from disturbing each other. A candidate that crashes
    the worker or runs past `timeout_s` costs one failed Measurement; the worker is replaced.
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
        self._pool = WorkerPool(workers=1, timeout_s=timeout_s, log_path=log_path)
        self.candidates = 0
        self.measure_s = 0.0  # time inside measure() calls

    def measure(
        self,
        inputs: Sequence[MeasureInput],
        on_result: Callable[[int, Measurement], None] | None = None,
        best_s: float | None = None,
    ) -> list[Measurement]:
        results = []
        started = time.monotonic()
        for index, item in enumerate(inputs):
            results.append(self._measure_one(item))
            if on_result is not None:
                on_result(index, results[-1])
        self.measure_s += time.monotonic() - started
        self.candidates += len(inputs)
        return results

    def stats(self) -> dict[str, object]:
        return {
            **super().stats(),
            "candidates": self.candidates,
            "measure_s": self.measure_s,
            "candidates_per_s": self.candidates / self.measure_s if self.measure_s else None,
        }

    def close(self) -> None:
        self._pool.close()

    def _measure_one(self, item: MeasureInput) -> Measurement:
        t = self.timer
        future = self._pool.submit(
            _worker.measure,
            item.artifact,
            self.device_type,
            item.args,
            t.number,
            t.repeat,
            t.min_repeat_ms,
            t.cpu_cache_flush,
        )
        value, error = self._pool.outcome(future, "measurement")
        if error:
            return Measurement(None, error)
        run_secs, finite = value
        return Measurement(tuple(run_secs), finite=finite)
