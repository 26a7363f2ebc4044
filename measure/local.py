"""The local engine: one candidate at a time, in an isolated worker, on this host's device."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from . import _worker
from .base import Engine, MeasureInput, Measurement, short_error


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
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive but got {timeout_s}.")
        from tvm.support.popen_pool import PopenPoolExecutor

        self.device_type = device_type
        self.timer = timer or TimerConfig()
        self.timeout_s = timeout_s
        self._log: IO[bytes] | int = open(log_path, "ab") if log_path else subprocess.DEVNULL
        self._pool = PopenPoolExecutor(
            max_workers=1, timeout=timeout_s, stdout=self._log, stderr=self._log
        )

    def measure(self, inputs: Sequence[MeasureInput]) -> list[Measurement]:
        return [self._measure_one(item) for item in inputs]

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if not isinstance(self._log, int):
            self._log.close()

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
        try:
            run_secs = future.result()
        except TimeoutError:
            return Measurement(None, f"measurement timed out after {self.timeout_s:g} s")
        except ChildProcessError:
            return Measurement(None, "the candidate crashed the measuring process")
        except Exception as exc:  # a runtime error of this candidate: data, not a crash
            return Measurement(None, f"run failed: {short_error(exc)}")
        return Measurement(tuple(run_secs))
