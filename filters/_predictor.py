"""The Trimmer predictor: XGBoost on MetaSchedule's per-store features, trained on how much
slower than its task's best each measured candidate ran.

The target, the log of the latency ratio to the task's best measured candidate, is absolute
enough to pool the tasks of a model, and of other models (warm start), in one booster. Two
objectives learn it. `regression` predicts the log ratio itself: the search's cost model
(orchestrator/search/cost_model.py) turns it into the predicted throughput TVM's evolution
samples parents by. `rank` (XGBoost's rank:ndcg, each task a query, the log ratio cut into
relevance levels) learns only the order, weighted to the fastest: the filter's model, which
keeps candidates by their place in a round's ranking. Replayed on four measured runs, the
ranker holds 90% of a round's true top 10% within 49-71% of the round against 63-82% for the
regression (benchmarks/filter_replay.py; the README's Benchmarks).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# The target of a candidate that failed to build or run: log(20), "far slower than the best".
FAILED_TARGET = math.log(20.0)
_PARAMS = {"max_depth": 6, "eta": 0.1, "subsample": 0.9, "nthread": 2}
_ROUNDS = 120
OBJECTIVES = {"regression": "reg:squarederror", "rank": "rank:ndcg"}
# rank:ndcg's hessians (pairwise lambdas, normalized per query) are far below a squared
# error's 1 per row: at the regression's min_child_weight of 2 the ranker made no split at all
# on a task of 64 records, and ranked every candidate alike (the filter then kept the search's
# order). At 0.1 it learns from the first round; replayed on four --filter none runs, its
# correlation within rounds rose on all four (0.31-0.49 -> 0.37-0.53).
_MIN_CHILD_WEIGHT = {"regression": 2.0, "rank": 0.1}
# `rank`: relevance levels from the best (log ratio 0) down to a failure (FAILED_TARGET).
_LEVELS = 10


def pooled_features(context: Any, measure_candidates: Sequence[Any]) -> np.ndarray:
    """One row per candidate: sum, max and mean over its stores of MetaSchedule's per-store
    features, and the number of stores. A candidate TVM cannot extract features from (it
    raises for some GPU schedules) gets a row of NaN, which the predictor ranks last, instead
    of failing the whole batch and with it the task's search."""
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    extractor = PerStoreFeature()
    candidates = list(measure_candidates)
    try:
        matrices = [m.numpy() for m in extractor.extract_from(context, candidates)]
    except Exception:  # find the bad ones: one at a time
        matrices = []
        for candidate in candidates:
            try:
                matrices.append(extractor.extract_from(context, [candidate])[0].numpy())
            except Exception:
                matrices.append(None)
    width = next((m.shape[-1] for m in matrices if m is not None and m.ndim == 2), 1)
    rows = []
    for stores in matrices:
        if stores is None:
            rows.append(np.full(3 * width + 1, np.nan))
            continue
        if stores.size == 0:
            stores = np.zeros((1, stores.shape[-1] if stores.ndim == 2 else 1))
        rows.append(np.concatenate([stores.sum(0), stores.max(0), stores.mean(0), [len(stores)]]))
    return np.vstack(rows).astype(np.float32)


def unreadable(features: np.ndarray) -> np.ndarray:
    """Rows whose features could not be extracted (all NaN)."""
    return np.isnan(features).all(axis=1) if features.size else np.zeros(len(features), bool)


class Predictor:
    """Training data by workload, and the booster fitted on all of it."""

    def __init__(
        self, *, seed: int = 0, min_samples: int = 64, objective: str = "regression"
    ) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(
                f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}."
            )
        self.seed = seed
        self.objective = objective
        self.min_samples = min_samples
        self.warm = False  # trained on earlier runs: usable before min_samples of this run
        self.booster: Any | None = None
        self._data: dict[str, tuple[list[np.ndarray], list[float]]] = {}

    @property
    def samples(self) -> int:
        return sum(len(lat) for _, lat in self._data.values())

    @property
    def ready(self) -> bool:
        return self.booster is not None and (self.warm or self.samples >= self.min_samples)

    def add(self, workload: str, features: np.ndarray, latencies: Sequence[float]) -> None:
        """Measured candidates of one workload; inf latency marks a failure."""
        rows, lats = self._data.setdefault(workload, ([], []))
        for row, latency, bad in zip(features, latencies, unreadable(features), strict=True):
            if not bad:  # a row without features teaches nothing
                rows.append(row)
                lats.append(float(latency))

    def fit(self) -> None:
        import xgboost as xgb

        xs, ys, query = [], [], []
        for group, (rows, lats) in enumerate(self._data.values()):
            finite = [x for x in lats if math.isfinite(x)]
            if not finite:
                continue
            best = min(finite)
            xs.extend(rows)
            ys.extend(math.log(x / best) if math.isfinite(x) else FAILED_TARGET for x in lats)
            query.extend([group] * len(lats))
        if len(ys) < 2:
            return
        y = np.asarray(ys)
        if self.objective == "rank":  # each task a query; levels: 0 failed .. _LEVELS best
            levels = np.round(_LEVELS * (1.0 - np.minimum(y, FAILED_TARGET) / FAILED_TARGET))
            train = xgb.DMatrix(np.vstack(xs), label=levels, qid=np.asarray(query))
        else:
            train = xgb.DMatrix(np.vstack(xs), label=y)
        params = {
            **_PARAMS,
            "objective": OBJECTIVES[self.objective],
            "min_child_weight": _MIN_CHILD_WEIGHT[self.objective],
            "seed": self.seed,
        }
        self.booster = xgb.train(params, train, num_boost_round=_ROUNDS)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Per row, lower is better: the predicted log(latency / task's best) for
        `regression`, the negated ranking score for `rank`. Unreadable rows come last."""
        import xgboost as xgb

        if self.booster is None:
            raise RuntimeError("the predictor has not been fitted")
        predicted = self.booster.predict(xgb.DMatrix(features))
        if self.objective == "rank":
            return np.where(unreadable(features), np.inf, -predicted)
        return np.where(unreadable(features), FAILED_TARGET, predicted)

    def save(self, path: Path) -> None:
        """xgboost's JSON format (never pickle), replaced atomically."""
        if self.booster is None:
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.json")
        self.booster.save_model(str(tmp))
        os.replace(tmp, path)

    def load(self, path: Path) -> None:
        import xgboost as xgb

        booster = xgb.Booster()
        booster.load_model(str(path))
        self.booster = booster
        # A saved booster says what it learned: a ranker's scores are not log ratios.
        learned = json.loads(booster.save_config())["learner"]["objective"]["name"]
        self.objective = "rank" if learned.startswith("rank:") else "regression"


def workload_key(mod: Any) -> str:
    """The task key of a workload (as orchestrator.tasks gives it)."""
    import tvm_ffi

    return f"{tvm_ffi.structural_hash(mod) & (2**64 - 1):016x}"


def record_features(
    records: Sequence[Any], target: Any | None = None
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Workload key, pooled feature row and mean latency (inf: failed) of each tuning record,
    in the order given; features are extracted a workload at a time, for `target` (each
    record's own when None)."""
    from tvm.s_tir.meta_schedule import TuneContext

    keys, latencies, by_workload = [], [], {}
    for i, record in enumerate(records):
        key = workload_key(record.workload.mod)
        secs = [float(s) for s in record.run_secs]
        keys.append(key)
        latencies.append(sum(secs) / len(secs) if all(s < 1e9 for s in secs) else math.inf)
        by_workload.setdefault(key, []).append(i)
    rows: list[np.ndarray | None] = [None] * len(keys)
    for key, members in by_workload.items():
        first = records[members[0]]
        context = TuneContext(
            mod=first.workload.mod, target=target or first.target, task_name=f"records-{key}"
        )
        features = pooled_features(context, [records[i].as_measure_candidate() for i in members])
        for i, row in zip(members, features, strict=True):
            rows[i] = row
    matrix = np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32)
    return keys, matrix, np.asarray(latencies)


def warm_start(predictors: Sequence[Predictor], source: Path, target: Any) -> str:
    """Train each of `predictors` on an earlier run directory's records (any model: the target
    is relative to each workload's best; features are extracted once for all of them) or load
    a saved predictor into each; returns what was used."""
    if source.is_file():
        for predictor in predictors:
            predictor.load(source)
            predictor.warm = True
        return f"predictor {source}"
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    records = JSONDatabase(work_dir=str(source)).get_all_tuning_records()
    keys, features, latencies = record_features(records, target)
    workloads: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        workloads.setdefault(key, []).append(i)
    for predictor in predictors:
        for key, mine in workloads.items():
            predictor.add(f"warm:{key}", features[mine], latencies[mine])
        predictor.fit()
        predictor.warm = predictor.booster is not None
    return f"{len(keys)} records of {len(workloads)} workloads in {source}"
