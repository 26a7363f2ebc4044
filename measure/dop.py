"""The degree of parallelism (DOP) of measurement, chosen live.

With one timed window per GPU (the default), the DOP is the number of workers preparing
candidates for each GPU, and `pace()` picks the fewest that keep the window busy: from the
measured busy share of the window and the time a candidate spends outside it. Failures that
only happen in a crowd (`crowd_failures()`) make it back off.

With overlapping timings (`[dop] overlap_timing = true`) the DOP is how many candidates are
timed at once, and `check()` applies DOPpler's rule: start at 1; after a batch measured with
DOP > 1, re-measure a sample in isolation (the batch's outliers plus a random share) and
compare. While the median relative error and the failure rate stay under their thresholds,
raise the DOP by `step` (up to the ceiling); otherwise multiply it by `backoff` and lower the
ceiling to where it went wrong. A result faster than the task's best is re-timed in isolation
before it is reported (see parallel.py), so no final choice rests on a parallel timing.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True, kw_only=True)
class DopConfig:
    start: int = 1
    max_dop: int = 16
    step: int = 2
    backoff: float = 0.8
    max_rel_error: float = 0.05  # median |parallel - isolated| / isolated over the sample
    max_failure_rate: float = 0.1  # of the batch, beyond what isolation also fails
    sample_share: float = 0.2  # random share re-measured in isolation, besides the outliers
    outlier_z: float = 2.0  # |log latency - median| / MAD above this is an outlier
    target_busy: float = 0.9  # exclusive window: the busy share the workers should reach

    def __post_init__(self) -> None:
        if not 1 <= self.start <= self.max_dop:
            raise ValueError(f"need 1 <= start <= max_dop but got {self.start}, {self.max_dop}.")
        if self.step < 1:
            raise ValueError(f"step must be at least 1 but got {self.step}.")
        if not 0 < self.backoff < 1:
            raise ValueError(f"backoff must be in (0, 1) but got {self.backoff}.")
        if not 0 < self.outlier_z < math.inf:
            raise ValueError(f"outlier_z must be positive and finite but got {self.outlier_z}.")
        for name in ("max_rel_error", "max_failure_rate", "sample_share", "target_busy"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in (0, 1] but got {getattr(self, name)}.")


@dataclasses.dataclass(frozen=True)
class Check:
    """One fidelity check: what was compared, and what the DOP became."""

    dop: int  # the DOP the batch was measured at
    sampled: int
    rel_error: float
    failure_rate: float
    new_dop: int
    ceiling: int

    @property
    def passed(self) -> bool:
        return self.new_dop >= self.dop


@dataclasses.dataclass(frozen=True)
class Pace:
    """One decision of the exclusive-window mode: what a span of candidates showed, and what
    the DOP (preparing workers per GPU) became."""

    dop: int
    candidates: int
    busy: float | None  # share of the span the GPUs' timed windows were held (mean over GPUs)
    need: int  # workers the step times call for: target_busy x cycle / timed
    failure_rate: float
    new_dop: int
    ceiling: int
    reason: str


# A busy window with candidates waiting longer than this many windows for it has spare workers.
_SPARE_WAITS = 2.0


class DopController:
    """Holds the current DOP and its ceiling; `pace()` (exclusive window) or `check()`
    (overlapping timings) moves them."""

    def __init__(self, config: DopConfig | None = None, *, seed: int = 0) -> None:
        self.config = config or DopConfig()
        self.dop = self.config.start
        self.ceiling = self.config.max_dop
        self.history: list[Check] = []
        self.paces: list[Pace] = []
        self._rng = random.Random(seed)

    def pace(
        self, *, busy: float, cycle_s: float, wait_s: float, timed_s: float, candidates: int
    ) -> Pace:
        """After a span at the current DOP: `busy` is the windows' busy share; per candidate,
        `cycle_s` is the mean time it held a worker apart from waiting for the window, `wait_s`
        the mean wait and `timed_s` the mean time it held the window."""
        c, at = self.config, self.dop
        need = at if timed_s <= 0 else max(1, math.ceil(c.target_busy * cycle_s / timed_s))
        if busy >= c.target_busy:
            # Prepared candidates queueing for more than two windows: a worker is spare.
            spare = at > 1 and wait_s > _SPARE_WAITS * timed_s
            new, reason = (at - 1, "candidates queue for the window") if spare else (at, "busy")
        elif need > at:
            new, reason = need, "the window idles: more workers"
        else:
            new, reason = at + c.step, "the window idles although the step times say enough"
        self.dop = max(1, min(self.ceiling, new))
        result = Pace(at, candidates, busy, need, 0.0, self.dop, self.ceiling, reason)
        self.paces.append(result)
        return result

    def crowd_failures(self, *, failed: int, reproduced: int, candidates: int) -> Pace | None:
        """`failed` candidates failed among other workers, `reproduced` of them also alone;
        failures only the crowd causes, beyond max_failure_rate, make the DOP back off."""
        rate = max(0, failed - reproduced) / candidates if candidates else 0.0
        if rate <= self.config.max_failure_rate:
            return None
        at = self.dop
        self.ceiling = max(1, at - 1)
        self.dop = max(1, min(self.ceiling, math.floor(at * self.config.backoff)))
        result = Pace(at, candidates, None, at, rate, self.dop, self.ceiling, "failures")
        self.paces.append(result)
        return result

    def sample(self, latencies: Sequence[float]) -> list[int]:
        """Indices to re-measure in isolation: the batch's outliers (on log latency, robust
        z-score) plus a random `sample_share` of the rest, at least one."""
        finite = [i for i, lat in enumerate(latencies) if math.isfinite(lat) and lat > 0]
        if not finite:
            return []
        logs = {i: math.log(latencies[i]) for i in finite}
        centre = statistics.median(logs.values())
        mad = statistics.median(abs(v - centre) for v in logs.values()) or 1e-12
        outliers = {
            i for i in finite if abs(logs[i] - centre) / (1.4826 * mad) > self.config.outlier_z
        }
        rest = [i for i in finite if i not in outliers]
        k = max(1, math.ceil(self.config.sample_share * len(finite))) - len(outliers)
        chosen = outliers | set(self._rng.sample(rest, min(len(rest), max(0, k))))
        return sorted(chosen)

    def check(
        self,
        parallel: Sequence[float],
        isolated: Sequence[float],
        *,
        failed_parallel: int,
        failed_isolated: int,
        batch: int,
    ) -> Check:
        """Compare parallel with isolated timings of the same candidates (inf: failed) and
        move the DOP; `failed_*` count failures of the batch that isolation did or did not
        reproduce."""
        pairs = [
            (p, s)
            for p, s in zip(parallel, isolated, strict=True)
            if math.isfinite(p) and math.isfinite(s) and s > 0
        ]
        rel_error = statistics.median(abs(p - s) / s for p, s in pairs) if pairs else 0.0
        failure_rate = max(0, failed_parallel - failed_isolated) / batch if batch else 0.0
        measured_at = self.dop
        if rel_error > self.config.max_rel_error or failure_rate > self.config.max_failure_rate:
            self.ceiling = max(1, measured_at - 1)
            self.dop = max(1, min(self.ceiling, math.floor(measured_at * self.config.backoff)))
        else:
            self.dop = min(self.ceiling, measured_at + self.config.step)
        result = Check(measured_at, len(pairs), rel_error, failure_rate, self.dop, self.ceiling)
        self.history.append(result)
        return result
