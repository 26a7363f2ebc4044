"""Trimmer: measure the candidates the predictor ranks best in the round; audit the rest.

Each round, the predictor ranks every candidate offered; the best-ranked share of the round is
kept (at least `min_keep`, at most `max_keep`, best first). The share is not fixed: it is
calibrated on audits so that the filter keeps `recall_target` of each round's true top
`top_share` (filters/_calibration.py): a predictor that ranks well keeps little more than the
top, a poor one keeps most of the round. A stratified random sample of the rejected candidates
is measured anyway; each audited candidate stands for its stratum, so recall is estimated with
inverse-sampling weights. Until two rounds have been audited with a trained predictor,
everything offered (up to `max_keep`) is kept: those rounds are the first evidence.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tune_orchestrator.predictor import Predictor, feature_width, store_features, warm_start
from tune_orchestrator.run.skipped import Skipped, reason
from tune_orchestrator.rundir.atomic import write_atomic

from ._calibration import Calibration, Sample, stratified_sample, top_weights
from ._cost import Pricing
from .base import Filter, RoundCosts, Selection

if TYPE_CHECKING:
    from tune_orchestrator.measure import Measurement
    from tune_orchestrator.model.tasks import Candidate, Task


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrimmerConfig:
    min_samples: int = 64  # no filtering before this many measurements (unless warm-started)
    recall_target: float = 0.9  # of each round's true top `top_share`, kept
    top_share: float = 0.1
    evidence_rounds: int = 8  # audited rounds (all tasks) the threshold is calibrated on
    recall_step: float = 0.1  # how far a round's recall shortfall raises the share aimed at
    min_keep: int = 8
    max_keep: int = 64
    audit_share: float = 0.2  # of the rejected candidates, at least `min_audit`
    min_audit: int = 2
    seed: int = 0
    threads: int = 1  # cores a fit of the filter's own predictor uses

    def __post_init__(self) -> None:
        if not 0 < self.recall_target <= 1:
            raise ValueError(f"recall_target must be in (0, 1] but got {self.recall_target}.")
        if not 0 < self.top_share < 1:
            raise ValueError(f"top_share must be in (0, 1) but got {self.top_share}.")
        if self.evidence_rounds < 2:
            raise ValueError(f"evidence_rounds must be at least 2 but got {self.evidence_rounds}.")
        if self.recall_step < 0:
            raise ValueError(f"recall_step cannot be negative but got {self.recall_step}.")
        if not 1 <= self.min_keep <= self.max_keep:
            raise ValueError(
                f"need 1 <= min_keep <= max_keep, got {self.min_keep}, {self.max_keep}."
            )
        if not 0 < self.audit_share <= 1:
            raise ValueError(f"audit_share must be in (0, 1] but got {self.audit_share}.")
        if self.min_audit < 1:
            raise ValueError(f"min_audit must be at least 1 but got {self.min_audit}.")
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1 but got {self.threads}.")


@dataclasses.dataclass
class Audit:
    """What the filter did to one task, and how good its judgement was when measured."""

    proposed: int = 0
    kept: int = 0  # the exploration picks included
    explored: int = 0  # the search's random picks, kept unjudged
    rejected: int = 0
    audited: int = 0
    false_negatives: int = 0
    top_kept: float = 0.0  # weighted count of top-10% candidates that were kept
    top_total: float = 0.0  # weighted count of all top-10% candidates (kept or not)
    # Each audited round's (top_kept, top_total): what the recall's interval is drawn from.
    rounds: list[tuple[float, float]] = dataclasses.field(default_factory=list)

    @property
    def recall(self) -> float | None:
        return self.top_kept / self.top_total if self.top_total else None

    def recall_interval(self, level: float = 0.9, draws: int = 2000) -> tuple[float, float] | None:
        """A `level` bootstrap interval of the recall, resampling the audited rounds: a run's
        figure rests on a few audits, each standing for several rejected candidates, and one
        audit that finds a fast candidate moves it by 10-20 points. None before two rounds."""
        if len(self.rounds) < 2:
            return None
        pairs = np.asarray(self.rounds, dtype=float)
        picks = np.random.default_rng(0).integers(0, len(pairs), (draws, len(pairs)))
        recalls = pairs[picks, 0].sum(axis=1) / pairs[picks, 1].sum(axis=1)
        low, high = np.quantile(recalls, [(1 - level) / 2, (1 + level) / 2])
        return float(low), float(high)

    def to_dict(self) -> dict[str, Any]:
        interval = self.recall_interval()
        return {
            **dataclasses.asdict(self),
            "recall": self.recall,
            "recall_interval": None if interval is None else [round(x, 4) for x in interval],
        }

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> Audit:
        """An audit as `dataclasses.asdict` saved it (fields it does not know are left out)."""
        known = {f.name for f in dataclasses.fields(cls)}
        audit = cls(**{k: v for k, v in saved.items() if k in known})
        audit.rounds = [(float(kept), float(total)) for kept, total in audit.rounds]
        return audit

    def add(self, other: Audit) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def judge(
        self,
        kept: Sequence[float],
        audited: Sequence[tuple[float, float]],
        *,
        best_before: float,
        share: float = 0.1,
    ) -> int:
        """Book one round's measured latencies (inf: failed): kept ones, and audited ones with
        the number of rejected candidates each stands for. Returns the false negatives found:
        audited candidates faster than every kept one and than the task's best before."""
        if not audited:  # nothing rejected was measured: nothing to judge
            return 0
        missed = sum(1 for lat, _ in audited if lat < min(min(kept, default=math.inf), best_before))
        self.false_negatives += missed
        tops = top_weights(
            [(0.0, 1.0, lat) for lat in kept] + [(0.0, w, lat) for lat, w in audited], share
        )
        top_kept, top_total = sum(tops[: len(kept)]), sum(tops)
        self.top_kept += top_kept
        self.top_total += top_total
        if top_total:
            self.rounds.append((top_kept, top_total))
        return missed


# What reading a saved state that is torn, truncated or someone else's can raise.
_BROKEN = (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError)


def positions(predicted: np.ndarray) -> np.ndarray:
    """Each candidate's place in the predicted ranking (lowest predicted first) as a share of
    the round: 1/n for the predicted best, 1.0 for the predicted worst; ties keep their order."""
    n = len(predicted)
    out = np.empty(n)
    out[np.argsort(predicted, kind="stable")] = np.arange(1, n + 1) / n
    return out


def choose(places: np.ndarray, *, threshold: float, min_keep: int, max_keep: int) -> list[int]:
    """Indices placed at most `threshold` into the ranking, best first; at least `min_keep`,
    at most `max_keep`."""
    order = [int(i) for i in np.argsort(places, kind="stable")]
    keep = [i for i in order if places[i] <= threshold + 1e-9][:max_keep]
    return keep if len(keep) >= min_keep else order[: min(len(order), min_keep)]


@dataclasses.dataclass
class _Pending:
    features: dict[int, np.ndarray]  # candidate key -> its store features
    predicted: dict[int, float]  # candidate key -> predicted log(latency / best), if ranked
    places: dict[int, float]  # candidate key -> predicted position (empty: no trained predictor)
    kept: set[int]
    audited: dict[int, float]  # candidate key -> rejected candidates it stands for
    best_before: float


class TrimmerFilter(Filter):
    """The XGBoost predictor filter (Trimmer), with audits and a calibrated threshold."""

    name = "xgb"

    def __init__(
        self,
        *,
        target: Any,
        config: TrimmerConfig | None = None,
        state_dir: Path | None = None,
        predictor: Predictor | None = None,
        skipped: Skipped | None = None,
    ) -> None:
        """`predictor`: the model the search's cost model trains (one fit per round serves
        both); without one the filter trains a predictor of its own on what it is told.
        `skipped`: the run's tally, which counts saved state in `state_dir` that cannot be
        read (the filter then starts afresh)."""
        self.target = target
        self.config = c = config or TrimmerConfig()
        self.state_dir = state_dir
        self.skipped = skipped if skipped is not None else Skipped()
        self.trains = predictor is None
        self.predictor = predictor or Predictor(
            seed=c.seed, min_samples=c.min_samples, threads=c.threads
        )
        self.calibration = self._calibration()
        self.pricing = Pricing(seed=c.seed, threads=c.threads)
        self.audits: dict[str, Audit] = {}
        self.seconds = 0.0  # the filter's own time: prediction, sampling, bookkeeping
        self._rng = np.random.default_rng(c.seed)
        self._contexts: dict[str, Any] = {}
        # Selections not yet learned from, oldest first: with pipelining, a task's next round
        # can be selected before its current round is measured.
        self._pending: dict[str, list[_Pending]] = {}
        self._best: dict[str, float] = {}
        if state_dir is not None:
            self._load_state(state_dir)

    # -- the seam -------------------------------------------------------------------------

    def select(self, task: Task, candidates: Sequence[Candidate]) -> Selection:
        start = time.perf_counter()
        try:
            return self._select(task, candidates)
        finally:
            self.seconds += time.perf_counter() - start

    def _select(self, task: Task, candidates: Sequence[Candidate]) -> Selection:
        c, n = self.config, len(candidates)
        audit = self.audits.setdefault(task.key, Audit())
        if n == 0:
            return Selection(())
        features = self._features(task, candidates)
        audit.proposed += n
        if not self._ready():  # no judgement yet: the search's order, as many as fit
            keep = list(range(min(n, c.max_keep)))
            self._remember(task, candidates, features, None, keep, {})
            audit.kept += len(keep)
            return Selection(tuple(keep))
        # A candidate predicted to build past the timeout would cost it and teach nothing.
        build_s = self.pricing.build_s(features)  # None until the build cost is learned
        doomed = self.pricing.timeouts(build_s, n)
        self.pricing.vetoed.update(c.key for c, d in zip(candidates, doomed, strict=True) if d)
        # The search's random picks are exploration its cost model did not choose: the same
        # model does not veto them here. The rest are ranked among themselves, by expected
        # gain per second once the build cost is learned.
        explore = [i for i, cand in enumerate(candidates) if cand.explore and not doomed[i]]
        explore = explore[: c.max_keep]
        judged = [i for i, cand in enumerate(candidates) if not cand.explore and not doomed[i]]
        places, predicted = np.full(n, math.nan), np.full(n, math.nan)
        if judged:
            mine = [features[i] for i in judged]
            predicted[judged] = self.predictor.predict(mine)
            cost = None if build_s is None else build_s[judged]
            places[judged] = positions(self.pricing.order(predicted[judged], cost))
        threshold = self.calibration.threshold()
        room = c.max_keep - len(explore)
        picked = (
            choose(
                places[judged],
                threshold=math.inf if threshold is None else threshold,
                min_keep=min(c.min_keep, room),
                max_keep=room,
            )
            if judged and room > 0
            else []
        )
        keep = [judged[i] for i in picked]
        kept = set(keep)
        rejected = [judged[int(i)] for i in np.argsort(places[judged], kind="stable")]
        rejected = [i for i in rejected if i not in kept]
        count = max(c.min_audit, math.ceil(c.audit_share * len(rejected)))
        audited = dict(stratified_sample(rejected, count, self._rng))
        self._remember(task, candidates, features, places, keep, audited, predicted)
        audit.kept += len(keep) + len(explore)
        audit.explored += len(explore)
        audit.rejected += len(rejected) + int(doomed.sum())
        audit.audited += len(audited)
        return Selection(tuple(keep + explore + list(audited)), audit=tuple(audited))

    def learn(
        self,
        task: Task,
        candidates: Sequence[Candidate],
        measurements: Sequence[Measurement],
        costs: RoundCosts | None = None,
    ) -> None:
        start = time.perf_counter()
        pending = self._take_pending(task, candidates)
        latencies = [m.mean_s if m.ok else math.inf for m in measurements]
        if pending is not None:
            self._judge(task, candidates, latencies, pending)
        if self.trains or costs is not None:
            features = (
                [pending.features[c.key] for c in candidates]
                if pending is not None
                else self._features(task, candidates)  # resumed records: no selection
            )
            if costs is not None:
                self.pricing.learn(features, costs.build_s, costs.timed_out, costs.measure_s)
        if self.trains:
            self.predictor.add(task.key, features, latencies)
            self.predictor.fit()  # the filter's own model: its training is the filter's cost
        finite = [x for x in latencies if math.isfinite(x)]
        if finite:
            self._best[task.key] = min(self._best.get(task.key, math.inf), min(finite))
        if self.state_dir is not None:
            self._save_state(self.state_dir)
        self.seconds += time.perf_counter() - start

    def stats(self) -> dict[str, Any]:
        total = Audit()
        for audit in self.audits.values():
            total.add(audit)
        return {
            "name": self.name,
            "warm_start": self.predictor.warm,
            "samples": self.predictor.samples,
            "recall_target": self.config.recall_target,
            "threshold": self.calibration.threshold(),
            "recall_aimed_at": round(self.calibration.level, 4),
            "costs": self.pricing.stats(),
            "seconds": round(self.seconds, 4),
            "total": total.to_dict(),
            "tasks": {key: a.to_dict() for key, a in self.audits.items()},
        }

    # -- warm start -----------------------------------------------------------------------

    def warm_start(self, source: Path) -> str:
        """Start the predictor from an earlier run directory's records (any model) or a saved
        predictor; returns what was used."""
        return warm_start([self.predictor], source, self.target)

    # -- internals ------------------------------------------------------------------------

    def _ready(self) -> bool:
        p = self.predictor
        return p.booster is not None and (p.warm or p.samples >= self.config.min_samples)

    def _features(self, task: Task, candidates: Sequence[Candidate]) -> list[np.ndarray]:
        """The candidates' store features: those the search extracted, or extracted now."""
        if all(c.features is not None for c in candidates):
            return [c.features for c in candidates]
        return store_features(self._context(task), [c.measure_candidate for c in candidates])

    def _context(self, task: Task) -> Any:
        if task.key not in self._contexts:
            from tvm.s_tir.meta_schedule import TuneContext

            self._contexts[task.key] = TuneContext(
                mod=task.workload, target=self.target, task_name=task.name
            )
        return self._contexts[task.key]

    def _remember(
        self,
        task: Task,
        candidates: Sequence[Candidate],
        features: Sequence[np.ndarray],
        places: np.ndarray | None,
        keep: Sequence[int],
        audited: dict[int, float],
        predicted: np.ndarray | None = None,
    ) -> None:
        self._pending.setdefault(task.key, []).append(
            _Pending(
                features={c.key: features[i] for i, c in enumerate(candidates)},
                predicted={}
                if predicted is None
                else {
                    c.key: float(predicted[i])
                    for i, c in enumerate(candidates)
                    if not math.isnan(predicted[i])
                },
                places={}
                if places is None
                else {
                    c.key: float(places[i])
                    for i, c in enumerate(candidates)
                    if not math.isnan(places[i])  # the exploration picks are not ranked
                },
                kept={candidates[i].key for i in keep},
                audited={candidates[i].key: w for i, w in audited.items()},
                best_before=self._best.get(task.key, math.inf),
            )
        )

    def _take_pending(self, task: Task, candidates: Sequence[Candidate]) -> _Pending | None:
        """The selection these candidates came from (None for resumed records)."""
        queue = self._pending.get(task.key, [])
        for i, pending in enumerate(queue):
            if all(c.key in pending.features for c in candidates):
                return queue.pop(i)
        return None

    def _judge(
        self,
        task: Task,
        candidates: Sequence[Candidate],
        latencies: Sequence[float],
        pending: _Pending,
    ) -> None:
        measured = list(zip(candidates, latencies, strict=True))
        # The search's random picks were measured unjudged: an audit slower than one of them
        # missed nothing the round did not find.
        unjudged = [
            lat for c, lat in measured if c.key not in pending.kept and c.key not in pending.audited
        ]
        round_ = Audit()
        round_.judge(
            [lat for c, lat in measured if c.key in pending.kept],
            [(lat, pending.audited[c.key]) for c, lat in measured if c.key in pending.audited],
            best_before=min([pending.best_before, *unjudged]),
            share=self.config.top_share,
        )
        self.audits[task.key].add(round_)
        ranked = [
            (pending.predicted[c.key], lat) for c, lat in measured if c.key in pending.predicted
        ]
        if ranked and math.isfinite(pending.best_before):
            self.pricing.residuals.add(
                [p for p, _ in ranked], [math.log(lat / pending.best_before) for _, lat in ranked]
            )
        if pending.places:  # judged by a trained predictor: evidence for the threshold
            samples: list[Sample] = [
                (pending.places[c.key], pending.audited.get(c.key, 1.0), lat)
                for c, lat in measured
                if c.key in pending.kept or c.key in pending.audited
            ]
            # A round that rejected nothing kept all of its top.
            self.calibration.add(samples, round_.recall if pending.audited else 1.0)

    def _calibration(self) -> Calibration:
        c = self.config
        return Calibration(
            target=c.recall_target, share=c.top_share, rounds=c.evidence_rounds, step=c.recall_step
        )

    def _save_state(self, folder: Path) -> None:
        self.predictor.save(folder / "predictor.json")  # its own or the search's: for --warm-start
        state = {
            "warm": self.predictor.warm,
            "best": self._best,
            "audits": {key: dataclasses.asdict(a) for key, a in self.audits.items()},
            "calibration": self.calibration.to_dict(),
        }
        write_atomic(folder / "filter.json", json.dumps(state, indent=2).encode(), point="filter")

    def _load_state(self, folder: Path) -> None:
        """The state an earlier session saved; what cannot be read is counted and left."""
        saved = folder / "predictor.json"
        if self.trains and saved.is_file():  # the search's: refitted
            try:
                self.predictor.load(saved, width=feature_width())
            except (OSError, ValueError) as error:  # xgboost's XGBoostError is a ValueError
                self.skipped.add("filter_state", f"{saved}: {reason(error)}")
        path = folder / "filter.json"
        if not path.is_file():
            return
        try:
            warm, best, audits, calibration = self._read_state(path)
        except _BROKEN as error:
            self.skipped.add("filter_state", f"{path}: {reason(error)}; starting afresh")
            return
        self.predictor.warm, self._best, self.audits = warm, best, audits
        self.calibration = calibration

    def _read_state(self, path: Path) -> tuple[bool, dict[str, float], dict[str, Audit], Any]:
        """(warm, best latency and audit by task, calibration) from filter.json; one of
        _BROKEN where it is not what _save_state wrote."""
        state = json.loads(path.read_text())
        if not isinstance(state, dict):
            raise TypeError(f"a JSON {type(state).__name__}, not an object")
        best = {str(k): float(v) for k, v in dict(state.get("best", {})).items()}
        audits = {str(k): Audit.from_dict(v) for k, v in dict(state.get("audits", {})).items()}
        calibration = self._calibration()
        calibration.restore(dict(state.get("calibration", {})))
        return bool(state.get("warm")), best, audits, calibration
