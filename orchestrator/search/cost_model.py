"""The search's learned model: the Trimmer predictor as MetaSchedule's cost model.

TVM's XGBModel would extract features of its own and train on the same measurements as the
filter. Here one predictor (filters/_predictor.py, objective `packsum`: XGBoost on per-store
features, fitted to throughput relative to the task's best) scores the evolution's schedules
and ranks the filter's rounds; each schedule's features are extracted once (cached by
schedule while it is held) and the same matrices go to the filter and to learning, and one
fit per round serves both.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel

from tune_orchestrator.predictor import Fitted, Predictor, store_features

from ..model.tasks import task_key

# Schedules whose features stay cached (each entry holds its schedule alive, so a cached
# handle can never be reused by another schedule).
_CACHE = 8192


def candidate_features(
    cost_model: Any, context: Any, candidates: Sequence[Any]
) -> list[np.ndarray]:
    """Store features of MeasureCandidates: from our cost model's cache when it guides the
    search (what it scored them with), else extracted now."""
    features = getattr(cost_model, "features", None)
    if features is not None:
        return features(context, candidates)
    return store_features(context, list(candidates))


@derived_object
class SharedCostModel(PyCostModel):
    """Scores schedules for the search with our predictor: exp(-predicted log ratio to the
    task's best), i.e. predicted throughput relative to the best. Before `warmup`
    measurements (and unless warm-started) it scores with the `prior` shipped with the package
    where the run set one (orchestrator/prior.py), else at random, as TVM's XGBModel does.
    Once ready, the run's predictor and the prior predict together: their log ratios averaged,
    the prior weighted as `prior_weight` measurements against the run's own.

    TVM calls `predict` from the search threads (those searching ahead too) while the loop's
    thread adds and fits: they score with the predictor's `fitted`, read once per call and
    replaced whole by each fit, and never touch its training data."""

    def __init__(
        self, predictor: Predictor, *, warmup: int = 0, prior_weight: int = 0, seed: int = 0
    ) -> None:
        super().__init__()
        self.predictor = predictor
        self.warmup = warmup
        self.prior_weight = prior_weight
        self.times = {"predict": 0.0, "features": 0.0, "fit": 0.0}  # seconds, all threads
        self._local = threading.local()  # the same, for the calling thread only
        self._cache: collections.OrderedDict[int, tuple[Any, np.ndarray]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()
        self._rng = np.random.default_rng(seed)
        # Scores in place of random ones until the predictor is ready (orchestrator/prior.py).
        self.prior: Fitted | None = None

    @property
    def ready(self) -> bool:
        return self.predictor.fitted.ready(self.warmup)

    def scorers(self) -> list[tuple[Fitted, float]]:
        """What scores schedules now, each with its weight: the predictor once ready, beside
        the prior (weighted `prior_weight` to the predictor's measurements) where the run set
        one; before, the prior alone; none: at random."""
        fitted = self.predictor.fitted  # one read: the model ready and the one predicting
        if not fitted.ready(self.warmup):
            return [] if self.prior is None else [(self.prior, 1.0)]
        if self.prior is None or not self.prior_weight or fitted.objective == "rank":
            return [(fitted, 1.0)]
        share = self.prior_weight / (self.prior_weight + fitted.samples)
        return [(fitted, 1.0 - share), (self.prior, share)]

    def features(self, context: Any, candidates: Sequence[Any]) -> list[np.ndarray]:
        """Store features of MeasureCandidates, extracted once per schedule."""
        found: dict[int, np.ndarray] = {}
        with self._lock:
            for i, candidate in enumerate(candidates):
                hit = self._cache.get(candidate.sch.__chandle__())
                if hit is not None:
                    found[i] = hit[1]
        missing = [i for i in range(len(candidates)) if i not in found]
        if missing:
            start = time.perf_counter()
            new = store_features(context, [candidates[i] for i in missing])
            self._charge("features", time.perf_counter() - start)
            with self._lock:
                for stores, i in zip(new, missing, strict=True):
                    found[i] = stores
                    sch = candidates[i].sch
                    self._cache[sch.__chandle__()] = (sch, stores)
                while len(self._cache) > _CACHE:
                    self._cache.popitem(last=False)
        return [found[i] for i in range(len(candidates))]

    def predict(self, context: Any, candidates: list[Any]) -> np.ndarray:
        if not candidates:
            return np.zeros(0)
        scorers = self.scorers()
        if not scorers:  # random scores need no features
            return self._rng.uniform(size=len(candidates))
        features = self.features(context, candidates)
        start = time.perf_counter()
        if len(scorers) == 1:
            scores = throughput(scorers[0][0], features)
        else:  # a weighted geometric mean of the predicted throughputs
            scores = np.exp(-sum(weight * fitted.predict(features) for fitted, weight in scorers))
        self._charge("predict", time.perf_counter() - start)
        return np.asarray(scores, dtype="float64")

    def update(self, context: Any, candidates: list[Any], results: list[Any]) -> None:
        """MetaSchedule's interface: learn one task's results and train at once."""
        self.add(context, candidates, results)
        self.fit()

    def add(self, context: Any, candidates: Sequence[Any], results: Sequence[Any]) -> None:
        """Learn one task's results (RunnerResults; failures as infinitely slow) without
        training yet."""
        self.add_features(context.mod, self.features(context, candidates), results)

    def add_features(
        self, mod: Any, features: Sequence[np.ndarray], results: Sequence[Any]
    ) -> None:
        """`add` for schedules of the workload `mod` known by their features alone (a resumed
        run's records: rundir/learned.py)."""
        latencies = [
            sum(r.run_secs) / len(r.run_secs) if r.run_secs and not r.error_msg else math.inf
            for r in results
        ]
        self.predictor.add(task_key(mod), features, latencies)

    def fit(self) -> None:
        start = time.perf_counter()
        self.predictor.fit()
        self._charge("fit", time.perf_counter() - start)

    def thread_times(self) -> dict[str, float]:
        """Seconds this thread spent predicting, extracting features and fitting so far."""
        return dict(getattr(self._local, "times", {}))

    def _charge(self, name: str, seconds: float) -> None:
        with self._lock:
            self.times[name] += seconds
        local = self._local.__dict__.setdefault("times", {})
        local[name] = local.get(name, 0.0) + seconds

    def load(self, path: str) -> None:
        self.predictor.load(path)

    def save(self, path: str) -> None:
        from pathlib import Path

        self.predictor.save(Path(path))


def throughput(predictor: Predictor | Fitted, features: Sequence[np.ndarray]) -> np.ndarray:
    """The search's scores: predicted throughput relative to the task's best, exp(-predicted
    log ratio), above 0; TVM's evolution samples parents in proportion to them. A ranker's
    scores (the predictor.json of a version whose filter had its own, loaded by --warm-start)
    are no log ratios: the batch's best is placed at 1."""
    predicted = predictor.predict(features)
    if predictor.objective == "rank" and len(predicted):
        predicted = predicted - np.min(predicted)
    return np.exp(-predicted)


def make_cost_model(settings: Any, predictor: Predictor | None) -> Any:
    """The search's cost model: our predictor, or TVM's own XGBModel when
    `[search] cost_model = "tvm-xgb"` (the xgb filter then trains a predictor of its own)."""
    s = settings.search
    if predictor is not None:
        return SharedCostModel(
            predictor,
            warmup=s.cost_model_warmup,
            prior_weight=s.prior_weight,
            seed=settings.tune.seed,
        )
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    return XGBModel(num_warmup_samples=s.cost_model_warmup)
