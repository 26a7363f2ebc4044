"""What a candidate costs and what it may gain: the filter's ranking by gain per second.

A round is paid for in seconds, and its candidates do not cost the same: smallcnn's measured
candidates built in 0.24 s (median) on the 2-core VM, a tenth of them in over 0.46 s, a few in
2-9 s, and a build cut by its timeout costs the timeout and a worker's restart for nothing.
Those slow builds rarely pay: the fastest tenth of each task's candidates built at or below the
task's median (2026-11-28, one 3-minute run's 479 candidates rebuilt). `BuildCost` learns a
candidate's build seconds from its features (XGBoost on the pooled store features, the
log of the seconds; cross-validated rank correlation 0.70 over that run, 0.5-0.7 within a
task), and `gain_per_second` ranks by what a candidate is expected to gain over the task's best
per second of building and measuring it.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence

import numpy as np

from tune_orchestrator.predictor import pooled

_PARAMS = {"max_depth": 4, "eta": 0.15, "subsample": 0.9, "min_child_weight": 2.0}
_ROUNDS = 60
# A timed-out build took at least its timeout: it is learned as this many times it, so that
# a candidate like it is predicted to time out too.
_TIMED_OUT = 1.5
# The spread of the predictor's error (log ratio) assumed before enough of it is seen.
_SIGMA = 0.5
_MIN_SIGMA = 0.05


class BuildCost:
    """Seconds to build a candidate, learned from the run's builds: one XGBoost regression of
    log seconds on a candidate's pooled store features, refitted as builds are added. The
    newest `max_samples` builds are kept; `min_samples` are needed before it predicts."""

    def __init__(
        self, *, min_samples: int = 32, max_samples: int = 2048, seed: int = 0, threads: int = 1
    ) -> None:
        if not 2 <= min_samples <= max_samples:
            raise ValueError(
                f"need 2 <= min_samples <= max_samples, got {min_samples}, {max_samples}."
            )
        self.min_samples = min_samples
        self.seed = seed
        self.threads = threads
        self._rows: collections.deque[np.ndarray] = collections.deque(maxlen=max_samples)
        self._log_s: collections.deque[float] = collections.deque(maxlen=max_samples)
        self.timeout_s: float | None = None  # the shortest timeout a build was cut by
        self.samples = 0
        self._fitted_at = 0  # samples when it was last fitted
        self._booster = None

    @property
    def ready(self) -> bool:
        return self._booster is not None

    def add(
        self, features: Sequence[np.ndarray], seconds: Sequence[float], timed_out: Sequence[bool]
    ) -> None:
        """Builds of candidates with these features: seconds each took (a timed-out one, its
        timeout). Builds that failed otherwise and their seconds of 0 are not passed."""
        rows = pooled(features)
        bad = np.isnan(rows).all(axis=1)  # unreadable
        for row, secs, cut, skip in zip(rows, seconds, timed_out, bad, strict=True):
            if skip or secs <= 0:
                continue
            if cut:
                self.timeout_s = secs if self.timeout_s is None else min(self.timeout_s, secs)
            self._rows.append(row)
            self._log_s.append(math.log(secs * (_TIMED_OUT if cut else 1.0)))
            self.samples += 1

    def fit(self) -> None:
        """Refit once a quarter more builds (at least `min_samples`) came since the last fit:
        a fit every round cost the filter ~2 s of a 3-minute run on 2 cores."""
        import xgboost as xgb

        new = self.samples - self._fitted_at
        if len(self._log_s) < self.min_samples or new < max(self.min_samples, self.samples // 4):
            return
        self._fitted_at = self.samples
        params = {
            **_PARAMS,
            "objective": "reg:squarederror",
            "seed": self.seed,
            "nthread": self.threads,
        }
        train = xgb.DMatrix(np.vstack(self._rows), label=np.asarray(self._log_s))
        self._booster = xgb.train(params, train, num_boost_round=_ROUNDS)

    def predict(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Predicted build seconds per candidate; the median build for an unreadable one."""
        import xgboost as xgb

        if self._booster is None:
            raise RuntimeError("the build cost has not been fitted")
        if not len(features):
            return np.zeros(0)
        median = math.exp(float(np.median(self._log_s)))
        rows = pooled(features, self._booster.num_features())
        bad = np.isnan(rows).all(axis=1)  # unreadable
        out = np.full(len(features), median)
        if (~bad).any():
            out[~bad] = np.exp(self._booster.predict(xgb.DMatrix(rows[~bad])))
        return out

    def times_out(self, predicted_s: np.ndarray) -> np.ndarray:
        """Which candidates are predicted to build past the timeout that has cut a build (none
        before one has)."""
        if self.timeout_s is None:
            return np.zeros(len(predicted_s), dtype=bool)
        return predicted_s >= self.timeout_s


class Residuals:
    """The spread of the latency predictor's error on measured candidates (log ratio): how far
    a prediction is to be trusted when the gain it promises is reckoned."""

    def __init__(self, keep: int = 512, min_count: int = 16) -> None:
        self._errors: collections.deque[float] = collections.deque(maxlen=keep)
        self.min_count = min_count

    def add(self, predicted: Sequence[float], measured: Sequence[float]) -> None:
        """Predicted and measured log(latency / task's best) of candidates that ran."""
        for p, m in zip(predicted, measured, strict=True):
            if math.isfinite(p) and math.isfinite(m):
                self._errors.append(m - p)

    @property
    def sigma(self) -> float:
        if len(self._errors) < self.min_count:
            return _SIGMA
        return max(_MIN_SIGMA, float(np.std(self._errors)))


def expected_gain(predicted: np.ndarray, sigma: float) -> np.ndarray:
    """Expected share of the task's best latency a candidate saves, E[max(0, 1 - latency/best)],
    when its log(latency / best) is normal around `predicted` with spread `sigma`."""
    from scipy.special import ndtr

    r = np.asarray(predicted, dtype=float)
    z = -r / sigma
    # exp(r + sigma^2 / 2) overflows for hopeless candidates, whose gain is 0 anyway.
    tail = np.exp(np.minimum(r + sigma * sigma / 2.0, 700.0)) * ndtr(z - sigma)
    return np.maximum(ndtr(z) - tail, 0.0)


def gain_per_second(
    predicted: np.ndarray, cost_s: np.ndarray, sigma: float, measure_s: float
) -> np.ndarray:
    """The order to keep candidates in, as a ranking key (lower first): expected gain per
    second of building (`cost_s`) and measuring (`measure_s` each); candidates expected to gain
    nothing measurable follow in the order of their predicted latency."""
    gain = expected_gain(predicted, sigma) / (np.asarray(cost_s) + measure_s)
    worthless = gain <= 0
    key = np.where(worthless, 0.0, -gain)
    # Among the worthless, the predicted latency orders (after every candidate with a gain).
    order = np.lexsort((np.asarray(predicted, dtype=float), key))
    out = np.empty(len(order))
    out[order] = np.arange(len(order))
    return out


class Pricing:
    """What the filter knows of a round's costs: the build cost model, the latency predictor's
    error, and the measuring seconds a candidate takes (the mean over the run's rounds)."""

    def __init__(self, *, seed: int = 0, threads: int = 1) -> None:
        self.builds = BuildCost(seed=seed, threads=threads)
        self.residuals = Residuals()
        self.measure_s = 0.0
        self._measured = 0
        self.vetoed: set[int] = set()  # keys of candidates left unbuilt as predicted to time out

    def learn(
        self,
        features: Sequence[np.ndarray],
        build_s: Sequence[float],
        timed_out: Sequence[bool],
        measure_s: float,
    ) -> None:
        """One round's builds (seconds, and which were cut by the timeout) and the seconds its
        measuring took."""
        self.builds.add(features, build_s, timed_out)
        self.builds.fit()
        measured = sum(1 for s, cut in zip(build_s, timed_out, strict=True) if s > 0 and not cut)
        if measured:
            total = self.measure_s * self._measured + measure_s
            self._measured += measured
            self.measure_s = total / self._measured

    def build_s(self, features: Sequence[np.ndarray]) -> np.ndarray | None:
        """Predicted build seconds per candidate; None until the build cost is fitted."""
        return self.builds.predict(features) if self.builds.ready else None

    def timeouts(self, build_s: np.ndarray | None, count: int) -> np.ndarray:
        """Which of `count` candidates (`build_s`: their predicted build seconds) are predicted
        to time out; none without a prediction."""
        if build_s is None:
            return np.zeros(count, dtype=bool)
        return self.builds.times_out(build_s)

    def order(self, predicted: np.ndarray, build_s: np.ndarray | None) -> np.ndarray:
        """A ranking key (lower first) for candidates with these predicted log(latency /
        best) and build seconds: gain per second once the build cost is learned, the predicted
        latency before."""
        if build_s is None:
            return np.asarray(predicted, dtype=float)
        return gain_per_second(predicted, build_s, self.residuals.sigma, self.measure_s)

    def stats(self) -> dict[str, float | int | None]:
        return {
            "ranking": "gain_per_second" if self.builds.ready else "latency",
            "build_samples": self.builds.samples,
            "predicted_timeouts_dropped": len(self.vetoed),
            "timeout_s": self.builds.timeout_s,
            "prediction_sigma": round(self.residuals.sigma, 4),
            "measure_s": round(self.measure_s, 4),
        }
