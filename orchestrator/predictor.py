"""The Trimmer predictor: XGBoost on MetaSchedule's per-store features, trained on how much
slower than its task's best each measured candidate ran.

A candidate's features are a matrix, one row per buffer store of its schedule
(MetaSchedule's PerStoreFeature). The target, relative to the task's best measured candidate,
is absolute enough to pool the tasks of a model, and of other models (warm start), in one
booster. Three objectives learn it:

- `packsum` (the default, and the one model of a run): every store row is scored and a
  candidate's score is the sum over its stores, fitted to its throughput relative to the
  task's best (best / latency, 0 for a failure) with squared error weighted to the fastest,
  the formulation of Ansor's and TVM's own cost model. The search's cost model turns it into
  the throughput TVM's evolution samples parents by, and the filter ranks by it: one fit per
  round serves both.
- `regression` and `rank` see a candidate as one pooled row (sum, max and mean over its stores,
  and their count): `regression` predicts log(latency / best), `rank` (XGBoost's rank:ndcg,
  each task a query, the log ratio cut into relevance levels) learns only the order. The
  search used the first and the filter the second before `packsum`; a predictor.json saved by
  those versions still loads. Replayed on six measured runs (39 rounds), holding 90% of a
  round's true top 10% took 62% of the round ranked by `packsum`, 71% by `rank` and by
  `regression`, at rank correlations within rounds of 0.46, 0.38 and 0.36 (means over the
  runs, 2026-11-24; benchmarks/filter_replay.py, removed after 314362b; docs/benchmarks.md,
  Earlier studies).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .model.tasks import task_key
from .run.skipped import Skipped, reason
from .rundir.atomic import write_atomic

# The log ratio of a candidate that failed to build or run: log(20), "far slower than the
# best" (the pooled objectives' target; packsum's throughput target for it is 0).
FAILED_TARGET = math.log(20.0)
_PARAMS = {"max_depth": 6, "eta": 0.1, "subsample": 0.9}
_ROUNDS = 120
OBJECTIVES = {"packsum": "reg:squarederror", "regression": "reg:squarederror", "rank": "rank:ndcg"}
# rank:ndcg's hessians (pairwise lambdas, normalized per query) are far below a squared
# error's 1 per row: at the regression's min_child_weight of 2 the ranker made no split at all
# on a task of 64 records. packsum's hessians are its weights, 0.1-1 per store row.
_MIN_CHILD_WEIGHT = {"packsum": 0.0, "regression": 2.0, "rank": 0.1}
# packsum: TVM's XGBModel's settings (eta 0.2, min_child_weight 0, a tiny gamma) at our depth
# and rounds; each candidate weighs its relative throughput, at least _MIN_WEIGHT (failures
# and far slower candidates still count a little).
_PACKSUM = {"max_depth": 6, "eta": 0.2, "gamma": 1e-4}
_MIN_WEIGHT = 0.1
# A packsum score at or below this (the relative throughput is not a probability: sums can
# go negative) is placed here, log ratio 13.8.
_FLOOR = 1e-6
# `rank`: relevance levels from the best (log ratio 0) down to a failure (FAILED_TARGET).
_LEVELS = 10
# The booster attribute saying which objective a saved predictor learned (packsum's custom
# objective leaves xgboost's own name at reg:squarederror).
_ATTR = "tune_orchestrator_objective"
# The most measurements a predictor trains on. A refit, once a round on the loop's thread,
# costs CPU in proportion to them (0.75 ms a sample on the 2-core VM), and a two-GPU-hour
# run measures 10,000-20,000: uncapped, the refit would outgrow the round
# (docs/how-it-works.md, Long runs). Beyond it the oldest go first, from the workloads that
# hold the most, never a workload's _KEEP_FASTEST fastest (its targets are ratios to its best).
MAX_SAMPLES = 4096
_KEEP_FASTEST = 16


def store_features(context: Any, measure_candidates: Sequence[Any]) -> list[np.ndarray]:
    """Per candidate, MetaSchedule's per-store features: a (stores, width) float32 matrix. A
    candidate TVM cannot extract features from (it raises for some GPU schedules) gets a
    matrix of NaN, which the predictor ranks last, instead of failing the whole batch and with
    it the task's search."""
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
    out = []
    for stores in matrices:
        if stores is None:
            out.append(np.full((1, width), np.nan, dtype=np.float32))
        elif stores.ndim != 2 or len(stores) == 0:  # no stores: one row of zeros
            out.append(np.zeros((1, width), dtype=np.float32))
        else:
            out.append(stores.astype(np.float32))
    return out


def unreadable(features: Sequence[np.ndarray]) -> np.ndarray:
    """Candidates whose features could not be extracted (all NaN)."""
    return np.asarray([bool(np.isnan(m).all()) for m in features], dtype=bool)


def pooled(features: Sequence[np.ndarray], width: int | None = None) -> np.ndarray:
    """One row per candidate: sum, max and mean over its stores, and their count; all NaN
    for an unreadable one (`width`: the row's, when no candidate is readable)."""
    bad = unreadable(features)
    rows = [
        np.concatenate([m.sum(0), m.max(0), m.mean(0), [len(m)]])
        for m, b in zip(features, bad, strict=True)
        if not b
    ]
    width = len(rows[0]) if rows else width or 1
    out = np.full((len(features), width), np.nan, dtype=np.float32)
    if rows:
        out[~bad] = np.vstack(rows)
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fitted:
    """What predicting needs, never changed once made: the booster, the objective it learned,
    the measurements it had and whether it started warm. The learner swaps in a new one
    whole, so the search's threads, which read it once per call, never see half a refit."""

    booster: Any | None = None
    objective: str = "packsum"
    samples: int = 0
    warm: bool = False  # trained on earlier runs: usable before min_samples of this run

    def ready(self, min_samples: int) -> bool:
        return self.booster is not None and (self.warm or self.samples >= min_samples)

    def predict(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Per candidate, lower is better: the predicted log(latency / task's best) for
        `packsum` (from its relative throughput, at most -log(1e-6)) and `regression`, the
        negated ranking score for `rank`. Unreadable candidates come last."""
        import xgboost as xgb

        if self.booster is None:
            raise RuntimeError("the predictor has not been fitted")
        bad = unreadable(features)
        if not len(bad):
            return np.zeros(0)
        if self.objective == "packsum":
            rows, owner = _stacked([m for m, b in zip(features, bad, strict=True) if not b])
            sums = np.zeros(len(bad))
            if len(rows):
                per_store = self.booster.predict(xgb.DMatrix(rows))
                sums[~bad] = np.bincount(owner, weights=per_store, minlength=int((~bad).sum()))
            return np.where(bad, -math.log(_FLOOR), -np.log(np.maximum(sums, _FLOOR)))
        rows = pooled(features, self.booster.num_features())
        predicted = self.booster.predict(xgb.DMatrix(rows))
        if self.objective == "rank":
            return np.where(bad, np.inf, -predicted)
        return np.where(bad, FAILED_TARGET, predicted)


class Predictor:
    """Training data by workload, and the booster fitted on all of it.

    Only the learner (the tuning loop's thread) adds, fits and loads; any thread may predict,
    from `fitted`, which each fit replaces in one assignment. `threads`: the cores a fit
    uses; `max_samples`: the most measurements it trains on (default MAX_SAMPLES)."""

    def __init__(
        self,
        *,
        seed: int = 0,
        min_samples: int = 64,
        objective: str = "packsum",
        threads: int = 1,
        max_samples: int | None = None,
    ) -> None:
        max_samples = MAX_SAMPLES if max_samples is None else max_samples
        if max_samples < _KEEP_FASTEST:
            raise ValueError(f"max_samples must be at least {_KEEP_FASTEST} but got {max_samples}.")
        if objective not in OBJECTIVES:
            raise ValueError(
                f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}."
            )
        if threads < 1:
            raise ValueError(f"threads must be at least 1 but got {threads}.")
        self.seed = seed
        self.min_samples = min_samples
        self.threads = threads
        self.max_samples = max_samples
        self.fitted = Fitted(objective=objective)
        self.samples = 0  # measurements added (those with features), held or dropped since
        self._data: dict[str, tuple[list[np.ndarray], list[float]]] = {}

    @property
    def booster(self) -> Any | None:
        return self.fitted.booster

    @property
    def objective(self) -> str:
        return self.fitted.objective

    @property
    def warm(self) -> bool:
        return self.fitted.warm

    @warm.setter
    def warm(self, warm: bool) -> None:
        self.fitted = dataclasses.replace(self.fitted, warm=warm)

    @property
    def ready(self) -> bool:
        return self.fitted.ready(self.min_samples)

    def add(
        self, workload: str, features: Sequence[np.ndarray], latencies: Sequence[float]
    ) -> None:
        """Measured candidates of one workload (their store matrices); inf latency marks a
        failure."""
        rows, lats = self._data.setdefault(workload, ([], []))
        for stores, latency, bad in zip(features, latencies, unreadable(features), strict=True):
            if not bad:  # a candidate without features teaches nothing
                rows.append(stores)
                lats.append(float(latency))
                self.samples += 1
        self._trim()

    @property
    def held(self) -> int:
        """Measurements the next fit trains on (at most `max_samples`)."""
        return sum(len(lats) for _, lats in self._data.values())

    def _trim(self) -> None:
        """Drop samples until `max_samples` are held: one at a time from the workload that
        holds the most, its oldest first, keeping its _KEEP_FASTEST fastest."""
        held = {name: len(lats) for name, (_, lats) in self._data.items()}
        drop = dict.fromkeys(held, 0)
        for _ in range(sum(held.values()) - self.max_samples):
            name = max(held, key=lambda k: held[k] - drop[k])
            if held[name] - drop[name] <= _KEEP_FASTEST:
                break
            drop[name] += 1
        for name, count in drop.items():
            if count:
                self._data[name] = _without_oldest(*self._data[name], count)

    def fit(self) -> None:
        xs: list[np.ndarray] = []
        ys, query = [], []
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
        booster = self._train(xs, np.asarray(ys), np.asarray(query))
        booster.set_attr(**{_ATTR: self.objective})
        self.fitted = Fitted(
            booster=booster, objective=self.objective, samples=self.samples, warm=self.warm
        )

    def _train(self, xs: list[np.ndarray], y: np.ndarray, query: np.ndarray) -> Any:
        import xgboost as xgb

        if self.objective == "packsum":
            throughput = np.where(y < FAILED_TARGET, np.exp(-y), 0.0)
            return _fit_packsum(xs, throughput, seed=self.seed, threads=self.threads)
        if self.objective == "rank":  # each task a query; levels: 0 failed .. _LEVELS best
            levels = np.round(_LEVELS * (1.0 - np.minimum(y, FAILED_TARGET) / FAILED_TARGET))
            train = xgb.DMatrix(pooled(xs), label=levels, qid=query)
        else:
            train = xgb.DMatrix(pooled(xs), label=y)
        params = {
            **_PARAMS,
            "objective": OBJECTIVES[self.objective],
            "min_child_weight": _MIN_CHILD_WEIGHT[self.objective],
            "seed": self.seed,
            "nthread": self.threads,
        }
        return xgb.train(params, train, num_boost_round=_ROUNDS)

    def predict(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """See Fitted.predict."""
        return self.fitted.predict(features)

    def save(self, path: Path) -> None:
        """xgboost's JSON format (never pickle), replaced atomically. Written by Python, not
        by xgboost: a full disk is then an OSError that says so (xgboost's own writer raises
        a bare XGBoostError, "FileStream.Write incomplete"), and leaves no partial file."""
        booster = self.booster
        if booster is None:
            return
        write_atomic(path, bytes(booster.save_raw(raw_format="json")), point="predictor")

    def load(self, path: Path, *, width: int | None = None) -> None:
        """Load a saved predictor; ValueError (xgboost's XGBoostError is one) where `path` is
        not an XGBoost model, or, given the `width` of a store's features (feature_width() for
        a file from disk), one that ranks candidates of another width."""
        import xgboost as xgb

        booster = xgb.Booster()
        booster.load_model(str(path))
        # A saved booster says what it learned (files saved before packsum by xgboost's name).
        learned = booster.attr(_ATTR)
        if learned not in OBJECTIVES:
            name = json.loads(booster.save_config())["learner"]["objective"]["name"]
            learned = "rank" if name.startswith("rank:") else "regression"
        wanted = None if width is None else width if learned == "packsum" else 3 * width + 1
        if wanted is not None and booster.num_features() != wanted:
            raise ValueError(
                f"a model of {booster.num_features()} features, where this TVM's candidates "
                f"have {wanted} (saved by another TVM version?)"
            )
        self.fitted = Fitted(
            booster=booster, objective=learned, samples=self.samples, warm=self.warm
        )


def _without_oldest(
    rows: list[np.ndarray], lats: list[float], count: int
) -> tuple[list[np.ndarray], list[float]]:
    """The samples less the `count` oldest of those not among the _KEEP_FASTEST fastest."""
    fastest = set(np.argsort(np.asarray(lats), kind="stable")[:_KEEP_FASTEST].tolist())
    dropped = set(itertools.islice((i for i in range(len(lats)) if i not in fastest), count))
    kept = [i for i in range(len(lats)) if i not in dropped]
    return [rows[i] for i in kept], [lats[i] for i in kept]


def _stacked(features: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """All store rows of these candidates in one matrix, and the candidate of each row."""
    if not features:
        return np.zeros((0, 1), dtype=np.float32), np.zeros(0, dtype=np.int64)
    owner = np.repeat(np.arange(len(features)), [len(m) for m in features])
    return np.vstack(features), owner


def _fit_packsum(
    features: Sequence[np.ndarray], throughput: np.ndarray, *, seed: int, threads: int
) -> Any:
    """A booster scoring store rows whose sums per candidate fit `throughput`, each candidate
    weighted by its throughput (at least _MIN_WEIGHT): squared error on the sums, its gradient
    handed to every store row of the candidate."""
    import xgboost as xgb

    rows, owner = _stacked(features)
    weight = np.maximum(throughput, _MIN_WEIGHT)

    def objective(predicted: np.ndarray, _: Any) -> tuple[np.ndarray, np.ndarray]:
        sums = np.bincount(owner, weights=predicted, minlength=len(throughput))
        return ((sums - throughput) * weight)[owner], weight[owner]

    params = {
        **_PACKSUM,
        "min_child_weight": _MIN_CHILD_WEIGHT["packsum"],
        "seed": seed,
        "nthread": threads,
    }
    return xgb.train(params, xgb.DMatrix(rows), num_boost_round=_ROUNDS, obj=objective)


def record_features(
    records: Sequence[Any],
    target: Any | None = None,
    *,
    unreplayed: Callable[[int], None] = lambda index: None,
) -> tuple[list[str], list[np.ndarray], np.ndarray]:
    """Workload key, store features and mean latency of each tuning record, in the order
    given: inf for a failure, NaN for a record without run times (TVM accepts [] and null);
    features are extracted a workload at a time, for `target` (each record's own when None),
    NaN for a record whose trace does not replay (`unreplayed` hears its index)."""
    from tvm.s_tir.meta_schedule import TuneContext

    from tune_orchestrator import _tvm

    _tvm.load_tensor_intrinsics(target)  # before the first TuneContext: its import is slow
    keys, latencies, by_workload = [], [], {}
    for i, record in enumerate(records):
        key = task_key(record.workload.mod)
        keys.append(key)
        latencies.append(mean_latency(record.run_secs))
        by_workload.setdefault(key, []).append(i)
    features: list[np.ndarray] = [np.full((1, 1), np.nan, dtype=np.float32)] * len(keys)
    for key, members in by_workload.items():
        first = records[members[0]]
        context = TuneContext(
            mod=first.workload.mod, target=target or first.target, task_name=f"records-{key}"
        )
        replayed = _replayed(records, members, unreplayed)
        found = store_features(context, [mc for _, mc in replayed])
        for (i, _), stores in zip(replayed, found, strict=True):
            features[i] = stores
    return keys, features, np.asarray(latencies)


def mean_latency(run_secs: Sequence[Any] | None) -> float:
    """A record's mean run time: inf where it failed (MetaSchedule's 1e10), NaN where it has
    no run times."""
    secs = [float(s) for s in run_secs or ()]
    if not secs:
        return math.nan
    return sum(secs) / len(secs) if all(s < 1e9 for s in secs) else math.inf


def _replayed(
    records: Sequence[Any], members: Sequence[int], unreplayed: Callable[[int], None]
) -> list[tuple[int, Any]]:
    """(index, MeasureCandidate) of the records whose trace replays on their workload; one
    that does not (a library record of another TVM version, say) has no features."""
    out = []
    for i in members:
        try:
            out.append((i, records[i].as_measure_candidate()))
        except Exception:  # TVM raises its own errors for a bad trace
            unreplayed(i)
    return out


def learn_records(
    predictors: Sequence[Predictor],
    records: Sequence[Any],
    target: Any,
    *,
    source: str,
    skipped: Skipped | None = None,
    kind: str = "library_records",
    extracted: Callable[[int, str, np.ndarray], None] = lambda index, key, features: None,
) -> set[str]:
    """Give each of `predictors` tuning records of any workloads (the target is relative to
    each workload's best; features are extracted once for all of them), under groups named
    `source:<workload>`, without fitting; returns the keys of the workloads they hold. A
    record without run times, or whose trace does not replay, teaches nothing: it is counted
    in `skipped` (the run's run.skipped.Skipped) under `kind`. `extracted` hears the index,
    workload key and features of each record that teaches."""
    dropped: set[int] = set()
    keys, features, latencies = record_features(records, target, unreplayed=dropped.add)
    dropped |= {i for i, latency in enumerate(latencies) if math.isnan(latency)}
    if skipped is not None and dropped:
        why = "records without run times, or whose trace does not replay on their workload"
        skipped.add(kind, why, len(dropped))
    kept = [i for i in range(len(keys)) if i not in dropped]
    for i in kept:
        extracted(i, keys[i], features[i])
    return learn_features(
        predictors, [keys[i] for i in kept], [features[i] for i in kept], latencies[kept],
        source=source,
    )  # fmt: skip


def learn_features(
    predictors: Sequence[Predictor],
    keys: Sequence[str],
    features: Sequence[np.ndarray],
    latencies: Sequence[float],
    *,
    source: str,
) -> set[str]:
    """Give each of `predictors` measured candidates of any workloads (`keys`: each one's
    workload), under groups named `source:<workload>`, without fitting; returns the keys."""
    workloads: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        workloads.setdefault(key, []).append(i)
    latencies = np.asarray(latencies, dtype=float)
    for predictor in predictors:
        for key, mine in workloads.items():
            predictor.add(f"{source}:{key}", [features[i] for i in mine], latencies[mine])
    return set(workloads)


def fit_warm(predictors: Sequence[Predictor]) -> None:
    """Fit each predictor on what it holds; one that fitted counts as warm (usable before a
    run's own `min_samples`)."""
    for predictor in predictors:
        predictor.fit()
        predictor.warm = predictor.booster is not None


def warm_start(
    predictors: Sequence[Predictor], source: Path, target: Any, *, skipped: Skipped | None = None
) -> str:
    """Train each of `predictors` on an earlier run directory's records (any model), with
    whatever they hold already (the tuning library's records), or load a saved predictor
    into each; returns what was used. What cannot be used is counted in `skipped`; with
    nothing usable they are fitted on what they hold, as without a warm start."""
    skipped = skipped if skipped is not None else Skipped()
    if source.is_file():
        try:
            for predictor in predictors:
                predictor.load(source, width=feature_width())
                predictor.warm = True
        except (OSError, ValueError) as error:  # xgboost's XGBoostError is a ValueError
            skipped.add("warm_start", f"{source}: {reason(error)}")
            fit_warm(predictors)
            return f"nothing: {source} could not be loaded"
        return f"predictor {source}"
    records, workloads = _learn_run(predictors, source, target, skipped)
    if not records:
        skipped.add("warm_start", f"{source} holds no record this run can use")
        fit_warm(predictors)
        return f"nothing: no usable record in {source}"
    fit_warm(predictors)
    return f"{records} records of {len(workloads)} workloads in {source}"


def _learn_run(
    predictors: Sequence[Predictor], source: Path, target: Any, skipped: Skipped
) -> tuple[int, set[str]]:
    """Give `predictors` the records of a run directory's database that this run can use
    (for its kind of target; library.LibraryView counts the rest): from the features that run
    kept of them (rundir/learned.py), the others read into TVM, where trusted, and their
    features extracted; (records learned, their workloads' keys)."""
    from .library.files import RECORDS, WORKLOADS, Contents
    from .library.records import LibraryView
    from .rundir import RunDir
    from .rundir.learned import LearnedFile

    try:
        contents = Contents.parse(
            (source / WORKLOADS).read_bytes(), (source / RECORDS).read_bytes()
        )
    except OSError as error:
        skipped.add("warm_start", f"{source} cannot be read ({error.strerror or error})")
        return 0, set()
    view = LibraryView(contents, target=target, skipped=skipped, kind="warm_start_records")
    kept = LearnedFile.for_target(source / RunDir.LEARNED, target).read()
    keys, features, latencies, rest = [], [], [], []
    for position in range(view.records):
        entry = kept.get(view.digest(position))
        if entry is None or entry.features is None:
            rest.append(position)
            continue
        latency = view.latency(position)
        if latency is not None and not math.isnan(latency):
            keys.append(entry.task)
            features.append(entry.features)
            latencies.append(latency)
    workloads = learn_features(predictors, keys, features, latencies, source="warm")
    records = view.parse(rest)
    if records:
        workloads |= learn_records(
            predictors, records, target, source="warm", skipped=skipped, kind="warm_start_records"
        )
    return len(keys) + len(records), workloads


def saved_problem(path: Path) -> str | None:
    """Why `path` is not a predictor this TVM's candidates can be ranked with (not an XGBoost
    model, or one of another feature width); None when it is."""
    try:
        Predictor().load(path, width=feature_width())
    except (OSError, ValueError) as error:
        return reason(error)
    return None


def feature_width() -> int:
    """The width of a store's features (MetaSchedule's PerStoreFeature) in this TVM."""
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    return int(PerStoreFeature().feature_vector_length)
