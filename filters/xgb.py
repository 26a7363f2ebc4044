"""Trimmer: keep the candidates the predictor expects near the task's best; audit the rest.

Each round, candidates predicted within `margin` of the task's best known latency are kept
(at least `min_keep`, at most `max_keep`, best predicted first). A sample of the rejected ones,
spread over the feature space with KMeans, is measured anyway. An audited candidate that beats
the task's best is a false negative: the margin widens. Rounds whose audits find none narrow
it. Recall of the round's top-10% candidates is estimated with inverse-sampling weights.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._predictor import Predictor, pooled_features, warm_start
from .base import Filter, Selection

if TYPE_CHECKING:
    from measure import Measurement
    from orchestrator.tasks import Candidate, Task


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrimmerConfig:
    min_samples: int = 64  # no filtering before this many measurements (unless warm-started)
    margin: float = 0.5  # keep predicted latency <= best x (1 + margin)
    min_margin: float = 0.05
    max_margin: float = 4.0
    widen: float = 1.5
    narrow: float = 0.9
    min_keep: int = 8
    max_keep: int = 64
    audit_share: float = 0.1  # of the rejected candidates, at least one
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.min_margin <= self.margin <= self.max_margin:
            raise ValueError(f"need 0 < min_margin <= margin <= max_margin, got {self}.")
        if not (self.widen > 1 and 0 < self.narrow < 1):
            raise ValueError(
                f"widen must be > 1 and narrow in (0, 1), got {self.widen}, {self.narrow}."
            )
        if not 1 <= self.min_keep <= self.max_keep:
            raise ValueError(
                f"need 1 <= min_keep <= max_keep, got {self.min_keep}, {self.max_keep}."
            )
        if not 0 < self.audit_share <= 1:
            raise ValueError(f"audit_share must be in (0, 1] but got {self.audit_share}.")


@dataclasses.dataclass
class Audit:
    """What the filter did to one task, and how good its judgement was when measured."""

    margin: float
    proposed: int = 0
    kept: int = 0
    rejected: int = 0
    audited: int = 0
    false_negatives: int = 0
    top_kept: float = 0.0  # weighted count of top-10% candidates that were kept
    top_total: float = 0.0  # weighted count of all top-10% candidates (kept or not)

    @property
    def recall(self) -> float | None:
        return self.top_kept / self.top_total if self.top_total else None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "recall": self.recall}

    def judge(
        self,
        kept: Sequence[float],
        audited: Sequence[float],
        *,
        rejected: int,
        best_before: float,
        config: TrimmerConfig,
    ) -> int:
        """Book one round's measured latencies (inf: failed) of kept and audited candidates;
        adapt the margin; return the number of false negatives found."""
        if not audited:  # nothing rejected was measured: nothing to judge
            return 0
        weight = rejected / len(audited)  # each audited candidate stands for this many
        pool = [(lat, 1.0, True) for lat in kept] + [(lat, weight, False) for lat in audited]
        best_kept = min(kept, default=math.inf)
        missed = sum(1 for lat in audited if lat < min(best_kept, best_before))
        self.false_negatives += missed
        finite = sorted((lat, w) for lat, w, _ in pool if math.isfinite(lat))
        if finite:
            total, running, cut = sum(w for _, w in finite), 0.0, finite[-1][0]
            for lat, w in finite:  # the weighted 10% quantile of the round's latencies
                running += w
                if running >= 0.1 * total:
                    cut = lat
                    break
            self.top_kept += sum(w for lat, w, was_kept in pool if was_kept and lat <= cut)
            self.top_total += sum(w for lat, w, _ in pool if lat <= cut)
        factor = config.widen if missed else config.narrow
        self.margin = min(config.max_margin, max(config.min_margin, self.margin * factor))
        return missed


def choose(predicted: np.ndarray, *, margin: float, min_keep: int, max_keep: int) -> list[int]:
    """Indices predicted within `margin` of the best (log ratio <= log(1 + margin)), best
    first; at least `min_keep`, at most `max_keep`."""
    order = [int(i) for i in np.argsort(predicted, kind="stable")]
    keep = [i for i in order if predicted[i] <= math.log1p(margin)][:max_keep]
    return keep if len(keep) >= min_keep else order[: min(len(order), min_keep)]


@dataclasses.dataclass
class _Pending:
    features: dict[int, np.ndarray]  # candidate key -> feature row
    kept: set[int]
    audited: set[int]
    rejected: int
    best_before: float


class TrimmerFilter(Filter):
    """The XGBoost predictor filter (Trimmer), with audits."""

    name = "xgb"

    def __init__(
        self,
        *,
        target: Any,
        config: TrimmerConfig | None = None,
        state_dir: Path | None = None,
        predictor: Predictor | None = None,
    ) -> None:
        """`predictor`: a model trained elsewhere (the search's cost model, which learns every
        round); without one the filter trains a predictor of its own on what it is told."""
        self.target = target
        self.config = config or TrimmerConfig()
        self.state_dir = state_dir
        self.trains = predictor is None
        self.predictor = predictor or Predictor(
            seed=self.config.seed, min_samples=self.config.min_samples
        )
        self.audits: dict[str, Audit] = {}
        self._contexts: dict[str, Any] = {}
        # Selections not yet learned from, oldest first: with pipelining, a task's next round
        # can be selected before its current round is measured.
        self._pending: dict[str, list[_Pending]] = {}
        self._best: dict[str, float] = {}
        if state_dir is not None:
            self._load_state(state_dir)

    # -- the seam -------------------------------------------------------------------------

    def select(self, task: Task, candidates: Sequence[Candidate]) -> Selection:
        audit = self.audits.setdefault(task.key, Audit(margin=self.config.margin))
        n = len(candidates)
        if n == 0:
            return Selection(())
        features = self._features(task, candidates)
        audit.proposed += n
        if not self._ready() or task.key not in self._best:
            keep = list(range(min(n, self.config.max_keep)))
            self._remember(task, candidates, features, keep, [], n - len(keep))
            audit.kept += len(keep)
            return Selection(tuple(keep))
        keep = choose(
            self.predictor.predict(features),
            margin=audit.margin,
            min_keep=self.config.min_keep,
            max_keep=self.config.max_keep,
        )
        kept = set(keep)
        rejected = [i for i in range(n) if i not in kept]
        audited = self._audit_sample(rejected, features)
        self._remember(task, candidates, features, keep, audited, len(rejected))
        audit.kept += len(keep)
        audit.rejected += len(rejected)
        audit.audited += len(audited)
        return Selection(tuple(keep + audited), audit=tuple(audited))

    def learn(
        self, task: Task, candidates: Sequence[Candidate], measurements: Sequence[Measurement]
    ) -> None:
        pending = self._take_pending(task, candidates)
        latencies = [m.mean_s if m.ok else math.inf for m in measurements]
        if pending is not None:
            self._judge(task, candidates, latencies, pending)
        if self.trains:
            features = (
                np.vstack([pending.features[c.key] for c in candidates])
                if pending is not None
                else self._features(task, candidates)  # resumed records: no selection
            )
            self.predictor.add(task.key, features, latencies)
            self.predictor.fit()
        finite = [x for x in latencies if math.isfinite(x)]
        if finite:
            self._best[task.key] = min(self._best.get(task.key, math.inf), min(finite))
        if self.state_dir is not None:
            self._save_state(self.state_dir)

    def stats(self) -> dict[str, Any]:
        total = Audit(margin=float("nan"))
        for audit in self.audits.values():
            for field in (
                "proposed",
                "kept",
                "rejected",
                "audited",
                "false_negatives",
                "top_kept",
                "top_total",
            ):
                setattr(total, field, getattr(total, field) + getattr(audit, field))
        out = total.to_dict()
        del out["margin"]
        return {
            "name": self.name,
            "warm_start": self.predictor.warm,
            "samples": self.predictor.samples,
            "total": out,
            "tasks": {key: a.to_dict() for key, a in self.audits.items()},
        }

    # -- warm start -----------------------------------------------------------------------

    def warm_start(self, source: Path) -> str:
        """Start the predictor from an earlier run directory's records (any model) or a saved
        predictor; returns what was used."""
        return warm_start(self.predictor, source, self.target)

    # -- internals ------------------------------------------------------------------------

    def _ready(self) -> bool:
        p = self.predictor
        return p.booster is not None and (p.warm or p.samples >= self.config.min_samples)

    def _features(self, task: Task, candidates: Sequence[Candidate]) -> np.ndarray:
        """The candidates' feature rows: those the search extracted, or extracted now."""
        if all(c.features is not None for c in candidates):
            return np.vstack([c.features for c in candidates])
        return pooled_features(self._context(task), [c.measure_candidate for c in candidates])

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
        features: np.ndarray,
        keep: Sequence[int],
        audited: Sequence[int],
        rejected: int,
    ) -> None:
        self._pending.setdefault(task.key, []).append(
            _Pending(
                features={c.key: features[i] for i, c in enumerate(candidates)},
                kept={candidates[i].key for i in keep},
                audited={candidates[i].key for i in audited},
                rejected=rejected,
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

    def _audit_sample(self, rejected: list[int], features: np.ndarray) -> list[int]:
        """A sample of the rejected candidates spread over the feature space (KMeans)."""
        if not rejected:
            return []
        k = max(1, math.ceil(self.config.audit_share * len(rejected)))
        if k >= len(rejected):
            return list(rejected)
        from sklearn.cluster import KMeans

        points = features[rejected]
        scale = points.std(axis=0)
        points = (points - points.mean(axis=0)) / np.where(scale > 0, scale, 1.0)
        labels = KMeans(n_clusters=k, n_init=3, random_state=self.config.seed).fit_predict(points)
        chosen = []
        for cluster in range(k):
            members = [i for i, label in enumerate(labels) if label == cluster]
            centre = points[members].mean(axis=0)
            chosen.append(
                rejected[min(members, key=lambda i: float(((points[i] - centre) ** 2).sum()))]
            )
        return sorted(chosen)

    def _judge(
        self,
        task: Task,
        candidates: Sequence[Candidate],
        latencies: Sequence[float],
        pending: _Pending,
    ) -> None:
        measured = list(zip(candidates, latencies, strict=True))
        self.audits[task.key].judge(
            [lat for c, lat in measured if c.key in pending.kept],
            [lat for c, lat in measured if c.key in pending.audited],
            rejected=pending.rejected,
            best_before=pending.best_before,
            config=self.config,
        )

    def _save_state(self, folder: Path) -> None:
        if self.trains:
            self.predictor.save(folder / "predictor.json")
        state = {
            "warm": self.predictor.warm,
            "best": self._best,
            "audits": {key: dataclasses.asdict(a) for key, a in self.audits.items()},
        }
        tmp = folder / f".filter.json.{os.getpid()}"
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, folder / "filter.json")

    def _load_state(self, folder: Path) -> None:
        if (folder / "predictor.json").is_file():
            self.predictor.load(folder / "predictor.json")
        if (folder / "filter.json").is_file():
            state = json.loads((folder / "filter.json").read_text())
            self.predictor.warm = bool(state.get("warm"))
            self._best = {k: float(v) for k, v in state.get("best", {}).items()}
            self.audits = {k: Audit(**v) for k, v in state.get("audits", {}).items()}
