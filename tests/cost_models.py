"""A MetaSchedule cost model whose scores a test chooses, to steer a real search."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel


@derived_object
class ScoredBy(PyCostModel):
    """Scores each MeasureCandidate with `score(candidate)` (higher: predicted faster); learns
    nothing."""

    def __init__(self, score: Callable[[Any], float]) -> None:
        self.score = score

    def load(self, path: str) -> None:
        pass

    def save(self, path: str) -> None:
        pass

    def update(self, context: Any, candidates: Any, results: Any) -> None:
        pass

    def predict(self, context: Any, candidates: Any) -> np.ndarray:
        return np.array([self.score(mc) for mc in candidates], dtype="float64")
