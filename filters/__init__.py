"""Candidate filters: which proposed candidates are worth building and measuring."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tune_orchestrator.predictor import Predictor
from tune_orchestrator.run.skipped import Skipped

from .base import Filter, RoundCosts, Selection
from .none import NoFilter
from .xgb import TrimmerConfig, TrimmerFilter

NAMES = (TrimmerFilter.name, NoFilter.name)


def make_filter(
    name: str,
    *,
    target: Any = None,
    config: TrimmerConfig | None = None,
    state_dir: Path | None = None,
    predictor: Predictor | None = None,
    skipped: Skipped | None = None,
) -> Filter:
    """A filter by its short name; ValueError listing the known names otherwise. `predictor`:
    the search's model, for the xgb filter to rank with instead of training its own;
    `skipped`: the run's tally, counting saved state in `state_dir` it cannot read."""
    if name == NoFilter.name:
        return NoFilter()
    if name == TrimmerFilter.name:
        return TrimmerFilter(
            target=target,
            config=config,
            state_dir=state_dir,
            predictor=predictor,
            skipped=skipped,
        )
    raise ValueError(f"unknown filter {name!r}; choose one of: {', '.join(NAMES)}")


__all__ = [
    "NAMES",
    "Filter",
    "NoFilter",
    "Predictor",
    "RoundCosts",
    "Selection",
    "TrimmerConfig",
    "TrimmerFilter",
    "make_filter",
]
