"""End-to-end latency of compiled models: timings scaled to the model's latency, models timed
in turn, and a change claimed only beyond the spread of the timings."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

FASTER, SLOWER, NO_CHANGE = "faster", "slower", "no change"


@dataclasses.dataclass(frozen=True)
class Latency:
    """End-to-end latency samples (seconds per inference, one per timing)."""

    samples: tuple[float, ...]
    runs_per_timing: int = 1

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples)

    @property
    def min_s(self) -> float:
        return min(self.samples)

    @property
    def max_s(self) -> float:
        return max(self.samples)

    def to_dict(self) -> dict[str, Any]:
        return {
            "median_s": self.median_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "repeats": len(self.samples),
            "runs_per_timing": self.runs_per_timing,
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timing:
    """`repeat` timings of each model, each running it for at least `min_repeat_ms`; fewer
    where one model's timings would take longer than `max_s`, never fewer than `min_repeat`."""

    repeat: int = 10
    min_repeat: int = 3
    max_s: float = 20.0
    min_repeat_ms: float = 50.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_repeat <= self.repeat:
            raise ValueError(
                f"timing needs 1 <= min_repeat <= repeat but got {self.min_repeat}, {self.repeat}."
            )
        if not self.max_s > 0:
            raise ValueError(f"timing max_s must be positive but got {self.max_s}.")

    @classmethod
    def from_settings(cls, check: Any) -> Timing:
        return cls(
            repeat=check.latency_repeat,
            min_repeat=check.latency_min_repeat,
            max_s=check.latency_max_s,
            min_repeat_ms=check.latency_min_repeat_ms,
        )

    def repeats(self, timing_s: float) -> int:
        """Timings of a model whose one timing takes `timing_s`."""
        if timing_s <= 0 or math.isinf(self.max_s):
            return self.repeat
        fit = math.floor(self.max_s / timing_s)
        return max(self.min_repeat, min(self.repeat, fit))


def time_models(
    models: Sequence[tuple[Any, Any]],
    inputs: Sequence[np.ndarray],
    timing: Timing,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> list[Latency]:
    """Time each (VirtualMachine, device) on `inputs`, in turn (A B B A ...), each as often.

    A model slower than `min_repeat_ms` is timed one run at a time on the host `clock` after
    a device sync (no warm-up run per timing); a faster one by TVM's timer, `number` runs per
    timing, as many as last `min_repeat_ms`.
    """
    timers = [_timer(vm, dev, inputs, timing.min_repeat_ms, clock) for vm, dev in models]
    repeats = min(timing.repeats(seconds) for _, _, seconds in timers)
    samples: list[list[float]] = [[] for _ in timers]
    for r in range(repeats):
        order = range(len(timers)) if r % 2 == 0 else reversed(range(len(timers)))
        for i in order:
            samples[i].append(timers[i][0]())
    return [
        Latency(tuple(s), runs_per_timing=number)
        for s, (_, number, _) in zip(samples, timers, strict=True)
    ]


def change(untuned: Latency, tuned: Latency) -> str:
    """FASTER when every tuned timing beats every untuned one, SLOWER the other way round,
    else NO_CHANGE: the difference is within the spread of the timings."""
    if tuned.max_s < untuned.min_s:
        return FASTER
    if tuned.min_s > untuned.max_s:
        return SLOWER
    return NO_CHANGE


def claimed_speedup(verdict: str, untuned: Latency, tuned: Latency) -> float:
    """The speedup a run claims: the ratio of the medians where the timings do not overlap,
    exactly 1.0 where they do (a ratio within the spread is noise, not a result)."""
    if verdict == NO_CHANGE:
        return 1.0
    return untuned.median_s / tuned.median_s


def _timer(
    vm: Any,
    dev: Any,
    inputs: Sequence[np.ndarray],
    min_repeat_ms: float,
    clock: Callable[[], float],
) -> tuple[Callable[[], float], int, float]:
    """(one timing, runs per timing, seconds one timing takes)."""
    import tvm

    args = [tvm.runtime.tensor(a, device=dev) for a in inputs]
    main = vm["main"]

    def once() -> float:
        dev.sync()
        start = clock()
        main(*args)
        dev.sync()
        return clock() - start

    coarse = once()
    if coarse * 1e3 >= min_repeat_ms:
        return once, 1, coarse
    probe = vm.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=min_repeat_ms)
    per_run = max(float(probe(*args).mean), 1e-9)
    number = max(1, math.ceil(min_repeat_ms / 1e3 / per_run))
    evaluator = vm.time_evaluator("main", dev, number=number, repeat=1)

    def timed() -> float:
        return float(evaluator(*args).results[0])

    return timed, number, per_run * (number + 1)
