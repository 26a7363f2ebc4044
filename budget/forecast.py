"""Tuning curves: fit latency against spend, and forecast what more spend would buy.

Two shapes are fitted and the closer one kept: exponential saturation
`floor + span * exp(-x / scale)` and a power law `floor + span * (1 + x / scale) ** -power`.
An exponential alone tends to promise nothing more right after the knee; the power law keeps
a long tail, which is what auto-tuning curves usually show.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Curve:
    kind: str  # "exp" or "power"
    floor: float
    span: float
    scale: float
    power: float = 1.0
    rms_log_error: float = 0.0  # fit quality: RMS of log(observed / fitted)

    def __call__(self, x: float) -> float:
        x = max(0.0, x)
        if self.kind == "exp":
            return self.floor + self.span * math.exp(-x / self.scale)
        return self.floor + self.span * (1.0 + x / self.scale) ** -self.power

    def gain(self, x_from: float, x_to: float) -> float:
        """Relative latency cut the curve predicts between two amounts of spend."""
        start = self(x_from)
        return max(0.0, (start - self(x_to)) / start) if start > 0 else 0.0

    def spend_for(self, fraction: float, x_max: float) -> float | None:
        """Spend at which `fraction` of the gain attainable by `x_max` has been had."""
        total = self(0.0) - self(x_max)
        if total <= 0:
            return None
        target = self(0.0) - fraction * total
        lo, hi = 0.0, x_max
        for _ in range(60):  # the curve falls monotonically: bisect
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self(mid) > target else (lo, mid)
        return hi


def fit_curve(xs: Sequence[float], ys: Sequence[float]) -> Curve | None:
    """The better of the two shapes for points (spend, latency); None with fewer than 3
    distinct points or when neither shape fits."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y) & (y > 0)
    x, y = x[keep], y[keep]
    if len(np.unique(x)) < 3:
        return None
    fits = [c for c in (_fit(x, y, "exp"), _fit(x, y, "power")) if c is not None]
    return min(fits, key=lambda c: c.rms_log_error) if fits else None


def _fit(x: np.ndarray, y: np.ndarray, kind: str) -> Curve | None:
    from scipy.optimize import curve_fit

    span0 = max(float(y.max() - y.min()), 1e-12)
    scale0 = max(float(np.median(x[x > 0])) if (x > 0).any() else 1.0, 1e-9)
    if kind == "exp":

        def model(t, floor, span, scale):
            return floor + span * np.exp(-t / scale)

        p0, lower, upper = [y.min() * 0.95, span0, scale0], [0, 0, 1e-9], [np.inf, np.inf, np.inf]
    else:

        def model(t, floor, span, scale, power):
            return floor + span * (1.0 + t / scale) ** -power

        p0 = [y.min() * 0.9, span0, scale0, 1.0]
        lower, upper = [0, 0, 1e-9, 0.05], [np.inf, np.inf, np.inf, 5.0]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            params, _ = curve_fit(model, x, y, p0=p0, bounds=(lower, upper), maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    fitted = model(x, *params)
    if not np.all(fitted > 0):
        return None
    error = float(np.sqrt(np.mean(np.log(y / fitted) ** 2)))
    if kind == "exp":
        return Curve("exp", float(params[0]), float(params[1]), float(params[2]), 1.0, error)
    return Curve(
        "power", float(params[0]), float(params[1]), float(params[2]), float(params[3]), error
    )


@dataclasses.dataclass(frozen=True)
class TuningPrior:
    """How a task's gain accrues with its trials: fraction(t) = 1 - (1 + t / scale) ** -power,
    as a share of the gain the task will eventually reach."""

    scale: float
    power: float
    source: str
    points: int = 0  # (trials, fraction) observations it was fitted on; 0 for the built-in

    def fraction(self, trials: float) -> float:
        return 1.0 - (1.0 + max(0.0, trials) / self.scale) ** -self.power


# From 5 runs of examples/smallcnn.onnx on a 2-core CPU (llvm, 2026-11): untuned CPU kernels
# are naive loops, so a convolution's first 32 trials bring ~97% of its final gain (13
# observations: 0.957-1.0 at 32 trials, 0.973-0.992 at 64, 0.995-0.999 at 128). GPU targets,
# whose untuned kernels use default schedules, improve more slowly: there it is optimistic.
BUILTIN_PRIOR = TuningPrior(
    scale=0.8, power=1.0, source="built-in curve from CPU runs of a small CNN (optimistic for GPUs)"
)


def fit_prior(observations: Sequence[tuple[float, float]], source: str) -> TuningPrior | None:
    """Fit a prior to (trials, fraction of the task's final gain) observations."""
    from scipy.optimize import curve_fit

    data = [(t, f) for t, f in observations if t > 0 and 0.0 <= f <= 1.0]
    if len(data) < 4:
        return None
    t = np.array([d[0] for d in data])
    f = np.array([d[1] for d in data])

    def model(x, scale, power):
        return 1.0 - (1.0 + x / scale) ** -power

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (scale, power), _ = curve_fit(
                model, t, f, p0=[8.0, 1.0], bounds=([0.01, 0.05], [1e5, 10.0])
            )
    except (RuntimeError, ValueError):
        return None
    return TuningPrior(float(scale), float(power), source, len(data))


class Allocation:
    """Rounds given one at a time as the run's scheduler gives them (GainScheduler): first a
    first round (of the size `next_round` is told) to every task holding `coverage` or more
    of the attainable gain, the largest first; then to the task and size whose round adds
    the most gain per second. `shares` are the tasks' shares of the attainable gain;
    `floors` (trials per task) only say when the early stop may judge (`floors_met`), never
    who gets a round."""

    def __init__(
        self,
        shares: Sequence[float],
        prior: TuningPrior,
        floors: Sequence[int] = (),
        *,
        coverage: float = 0.0,
    ) -> None:
        total = sum(shares)
        self.shares = [s / total for s in shares] if total > 0 else []
        self.prior = prior
        self.coverage = coverage
        self.trials = [0] * len(self.shares)
        self.rounds = [0] * len(self.shares)
        # Without shares (no task's untuned latency measured) there is nothing to allocate.
        self.floors = (list(floors) or [0] * len(self.shares)) if self.shares else []
        if len(self.floors) != len(self.shares):
            raise ValueError(f"{len(self.floors)} floors for {len(self.shares)} tasks")
        self.reached = 0.0  # share of the attainable gain had so far

    @property
    def floors_met(self) -> bool:
        return all(t >= f for t, f in zip(self.trials, self.floors, strict=True))

    def gain(self, task: int, size: int) -> float:
        """The share of the attainable gain a round of `size` for `task` would add."""
        f, t = self.prior.fraction, self.trials[task]
        return self.shares[task] * (f(t + size) - f(t))

    @property
    def uncovered(self) -> list[int]:
        """Tasks still to get a first round: none given yet, holding `coverage` or more."""
        return [i for i in to_cover(self.shares, self.coverage) if self.rounds[i] == 0]

    def next_round(
        self, sizes: Sequence[int], seconds: Callable[[int], float] = float, first: int = 0
    ) -> tuple[int, int] | None:
        """(task, size) of the next round, sizes from `sizes` (a first round's `first`, by
        default the smallest), a round of k costing `seconds(k)`; None with nothing to
        allocate."""
        if not self.shares or not sizes:
            return None
        uncovered = self.uncovered
        if uncovered:
            return max(uncovered, key=lambda i: (self.shares[i], -i)), first or min(sizes)
        pairs = [(i, k) for i in range(len(self.shares)) for k in sizes]
        return max(pairs, key=lambda p: (self.gain(*p) / max(seconds(p[1]), 1e-9), -p[1], -p[0]))

    def give(self, task: int, size: int) -> float:
        """Give `task` a round of `size` candidates; the share of the gain it adds."""
        gained = self.gain(task, size)
        self.trials[task] += size
        self.rounds[task] += 1
        self.reached += gained
        return gained


def to_cover(shares: Sequence[float], coverage: float) -> list[int]:
    """The tasks that get a first round before any task a second: those holding `coverage`
    or more of the attainable gain (`shares`, in any unit)."""
    total = sum(shares)
    return [i for i, s in enumerate(shares) if s > 0 and s / total >= coverage] if total > 0 else []


def plan(
    shares: Sequence[float],
    prior: TuningPrior,
    *,
    sizes: Sequence[int],
    seconds: Callable[[int], float],
    targets: Sequence[float] = (0.9, 0.95, 0.99),
    max_rounds: int = 100_000,
    coverage: float = 0.0,
    first: int = 0,
) -> list[dict[str, float]]:
    """Rounds, trials and seconds to reach each target share of the attainable gain, rounds
    of `sizes` (first rounds of `first`, by default the smallest) given as `Allocation` gives
    them (a round of k costing `seconds(k)`), as a run's forecast gives them."""
    allocation = Allocation(shares, prior, coverage=coverage)
    if not allocation.shares:
        return []
    out, rounds, trials, spent = [], 0, 0, 0.0
    pending = sorted(targets)
    while pending and rounds < max_rounds:
        task, size = allocation.next_round(sizes, seconds, first)
        allocation.give(task, size)
        rounds, trials, spent = rounds + 1, trials + size, spent + seconds(size)
        while pending and allocation.reached >= pending[0]:
            out.append(
                {"target": pending.pop(0), "rounds": rounds, "trials": trials, "seconds": spent}
            )
    return out
