"""How much to keep: a keep threshold calibrated on audits, and the audit sample itself.

Each round's candidates are ranked by the predictor, and each gets its position in that
ranking as a share of the round, (rank + 1) / n: 1/n for the predicted best, 1.0 for the
predicted worst. The kept ones (position <= threshold) are measured; a stratified random sample
of the rejected ones is measured too, each standing for its stratum (inverse-sampling weight).
From those measurements the round's true top share (weighted) is known together with the
positions the predictor gave it, so the threshold that would have kept `target` of it can be
read off. The threshold used is the one that keeps `target` of the top candidates of the last
rounds.

Positions, not predicted gaps: the spread of a round's predictions changes from round to
round and task to task (a round searched around one fast schedule is predicted within a few
percent, a first round within a factor of ten), so a gap threshold pooled over rounds lands
near the widest round's spread and keeps nearly everything everywhere else: live runs kept
97-98% of what they were offered (both calibrations were replayed on measured rounds by
benchmarks/filter_replay.py, removed after 314362b; docs/benchmarks.md, Earlier studies).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence

import numpy as np

# One measured candidate: (its position in the round's predicted ranking, weight, latency s).
Sample = tuple[float, float, float]


def top_weights(samples: Sequence[Sample], share: float) -> list[float]:
    """How much of each sample's weight lies in the round's fastest `share` (of the total
    weight): all of it, none, or, for the one straddling the cut, the part that fits. Failed
    candidates (inf) are never in it."""
    order = sorted(range(len(samples)), key=lambda i: samples[i][2])
    finite = [i for i in order if math.isfinite(samples[i][2])]
    room = share * sum(samples[i][1] for i in finite)
    out = [0.0] * len(samples)
    for i in finite:
        if room <= 0:
            break
        out[i] = min(samples[i][1], room)
        room -= out[i]
    return out


def stratified_sample(
    ranked: Sequence[int], count: int, rng: np.random.Generator
) -> list[tuple[int, float]]:
    """`count` of `ranked` (best predicted first), one drawn at random from each of `count`
    equal runs of the ranking; each with its weight (its run's size). Every candidate has a
    known chance of being drawn, so weighted sums over the sample estimate sums over all."""
    if count >= len(ranked):
        return [(i, 1.0) for i in ranked]
    if count <= 0:
        return []
    return [
        (int(run[rng.integers(len(run))]), float(len(run)))
        for run in np.array_split(np.asarray(ranked), count)
    ]


class Calibration:
    """The keep threshold on the predicted position, from the top candidates of the last
    `rounds` audited rounds of every task (positions are shares of each round, so rounds of
    different sizes and tasks compare). None until `min_rounds` rounds are in.

    The evidence is of past rounds, judged by past predictors; when the next rounds are harder
    to rank (a search closing in on similar schedules, a predictor retrained every round) a
    threshold that would have kept `target` of the past tops keeps less of the next. So the
    share it aims at, `level`, starts at `target` and moves after each judged round by `step`
    times the round's shortfall (adaptive conformal inference, Gibbs and Candes 2021): up after
    a round that kept less than `target` of its top, back down (never below `target`) after
    rounds that kept more."""

    def __init__(
        self,
        *,
        target: float,
        share: float,
        rounds: int = 8,
        min_rounds: int = 2,
        step: float = 0.0,
    ) -> None:
        if not 0 < target <= 1:
            raise ValueError(f"target must be in (0, 1] but got {target}.")
        if step < 0:
            raise ValueError(f"step cannot be negative but got {step}.")
        if not 0 < share < 1:
            raise ValueError(f"share must be in (0, 1) but got {share}.")
        if not 1 <= min_rounds <= rounds:
            raise ValueError(f"need 1 <= min_rounds <= rounds, got {min_rounds}, {rounds}.")
        self.target = target
        self.level = target
        self.step = step
        self.share = share
        self.min_rounds = min_rounds
        # Per round: (position, weight) of each of its top candidates.
        self.evidence: collections.deque[list[tuple[float, float]]] = collections.deque(
            maxlen=rounds
        )

    def add(self, samples: Sequence[Sample], recall: float | None = None) -> None:
        """One round's measured candidates (kept: weight 1; audited: their weight), and the
        share of its top that the round kept, where its audit could tell."""
        tops = top_weights(samples, self.share)
        if any(tops):
            self.evidence.append([(s[0], w) for s, w in zip(samples, tops, strict=True) if w])
        if recall is not None:
            self._aim(self.level + self.step * (self.target - recall))

    def threshold(self) -> float | None:
        """The smallest position that would have kept `level` of the recent top candidates'
        weight and of one more like them: the next round's top is not among the evidence, and
        a plain quantile of n past tops covers a new one only ceil(target n) / (n + 1) of the
        time (85% for 12 tops at a 90% target; the split-conformal quantile). Too little
        evidence for that keeps everything (1.0)."""
        if len(self.evidence) < self.min_rounds:
            return None
        tops = sorted(pair for round_ in self.evidence for pair in round_)
        total, running = sum(w for _, w in tops), 0.0
        for position, w in tops:
            running += w
            if running >= self.level * (total + 1.0) - 1e-9:
                return position
        return 1.0

    def _aim(self, level: float) -> None:
        """Aim at `level` of the top, never below `target`, at most all of it."""
        self.level = min(1.0, max(self.target, level))

    def to_dict(self) -> dict[str, object]:
        return {
            "on": "position",
            "level": self.level,
            "evidence": [list(map(list, r)) for r in self.evidence],
        }

    def restore(self, state: dict[str, object]) -> None:
        if state.get("on") != "position":  # an older run's evidence was on predicted gaps
            return
        self._aim(float(state.get("level", self.target)))  # type: ignore[arg-type]
        for round_ in state.get("evidence", []):  # type: ignore[union-attr]
            self.evidence.append([(float(g), float(w)) for g, w in round_])
