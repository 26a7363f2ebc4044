"""When to stop timing one candidate: adaptive repeats and racing.

Written once and used by every worker, GPU and CPU, real and simulated, so the simulated
device stops where the real one would. Pure Python: it is imported inside measuring processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Iterator, Sequence
from typing import Any

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip

TIGHT, LONGEST, RACED = "tight", "max_repeats", "raced"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimingPlan:
    """How a candidate is timed inside its window (on a CPU: `min_repeats` = `max_repeats`,
    the configured repeats, each lasting `repeat_ms`, that is min_repeat_ms).

    Repeats go on until the 95% confidence interval of the mean is within `max_rel_ci` of it
    (at least `min_repeats`, at most `max_repeats`). One repeat is one CUDA event pair around
    back-to-back launches lasting at least `repeat_ms` (at least `min_launches`), so kernels of
    a few microseconds are not timed at the event's resolution. With a task best known, a
    candidate whose interval after `race_after` repeats lies above best x (1 + `race_margin`)
    is cut short (`race=False` never does). `flush_l2` writes a buffer twice the L2 size
    before every repeat and then times a single launch per repeat, so each timed launch starts
    cold.
    """

    min_repeats: int = 3
    max_repeats: int = 20
    max_rel_ci: float = 0.01
    repeat_ms: float = 1.0
    min_launches: int = 1
    race: bool = True
    race_after: int = 1
    race_margin: float = 0.5
    flush_l2: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.min_repeats <= self.max_repeats:
            raise ValueError(
                f"need 1 <= min_repeats <= max_repeats but got {self.min_repeats}, "
                f"{self.max_repeats}."
            )
        if not 0 < self.max_rel_ci < 1:
            raise ValueError(f"max_rel_ci must be in (0, 1) but got {self.max_rel_ci}.")
        if self.repeat_ms < 0 or self.min_launches < 1:
            raise ValueError(
                f"repeat_ms cannot be negative and min_launches must be at least 1 but got "
                f"{self.repeat_ms}, {self.min_launches}."
            )
        if self.race_after < 1 or self.race_margin < 0:
            raise ValueError(
                f"race_after must be at least 1 and race_margin non-negative but got "
                f"{self.race_after}, {self.race_margin}."
            )

    def launches(self, once_s: float) -> int:
        """Back-to-back launches per repeat for a kernel that takes `once_s` per launch."""
        if self.flush_l2:
            return 1
        if once_s <= 0 or not math.isfinite(once_s):
            return self.min_launches
        return max(self.min_launches, math.ceil(self.repeat_ms / 1e3 / once_s - 1e-9))


def rel_half_width(samples: Sequence[float]) -> float:
    """Half-width of the 95% confidence interval of the mean, relative to the mean."""
    n = len(samples)
    if n < 2:
        return math.inf
    mean = statistics.fmean(samples)
    if mean <= 0:
        return math.inf
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96 + 2.4 / (n - 1)
    return t * statistics.stdev(samples) / math.sqrt(n) / mean


def verdict(samples: Sequence[float], plan: TimingPlan, best_s: float | None = None) -> str | None:
    """None to time another repeat, otherwise why to stop: TIGHT, LONGEST or RACED."""
    n = len(samples)
    if n == 0:
        return None
    if plan.race and best_s is not None and best_s > 0 and n >= plan.race_after:
        spread = rel_half_width(samples) if n >= 2 else 0.0
        low = statistics.fmean(samples) * (1 - spread)
        if low > best_s * (1 + plan.race_margin):
            return RACED
    if n >= plan.max_repeats:
        return LONGEST
    if n >= plan.min_repeats and rel_half_width(samples) <= plan.max_rel_ci:
        return TIGHT
    return None


def timed_repeats(
    module: Any,
    dev: Any,
    tensors: Sequence[Any],
    plan: TimingPlan,
    best_s: float | None,
    cpu_cache_flush: bool = False,
) -> tuple[list[float], str]:
    """Seconds per launch of `module`'s entry function, one sample per repeat, until
    `verdict` says stop; and why it stopped. TVM's time evaluator gives one repeat per call:
    the first call sizes a repeat (it raises the launches until one lasts `repeat_ms`) and is
    the first sample; every call makes one untimed launch first, and with `cpu_cache_flush`
    the CPU caches are flushed before each repeat. Used by the local and the RPC worker."""
    preproc = "cache_flush_cpu_non_first_arg" if cpu_cache_flush else ""
    first = module.time_evaluator(
        module.entry_name,
        dev,
        number=plan.min_launches,
        repeat=1,
        min_repeat_ms=int(round(plan.repeat_ms)),
        f_preproc=preproc,
    )
    samples = [float(first(*tensors).mean)]
    again = module.time_evaluator(
        module.entry_name,
        dev,
        number=plan.launches(samples[0]),
        repeat=1,
        min_repeat_ms=0,
        f_preproc=preproc,
    )
    while (reason := verdict(samples, plan, best_s)) is None:
        samples.append(float(again(*tensors).mean))
    return samples, reason


@contextlib.contextmanager
def step(steps: dict[str, float], name: str) -> Iterator[None]:
    """Add the block's duration to steps[name] (seconds): where a candidate's time goes."""
    start = time.monotonic()
    try:
        yield
    finally:
        steps[name] = steps.get(name, 0.0) + time.monotonic() - start
