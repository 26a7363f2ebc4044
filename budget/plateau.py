"""Retire a task whose best latency has stopped improving, so its budget goes where it pays."""

from __future__ import annotations

from collections.abc import Sequence

from .base import GO, Decision


class TaskPlateau:
    """Retires a task after `patience` rounds that together improved its best by less than
    `min_gain` (relative), or that measured nothing successfully. A task rule: it judges one
    task's history (best latency after each of its rounds, inf before any success)."""

    def __init__(self, *, patience: int = 3, min_gain: float = 0.005) -> None:
        if patience < 1:
            raise ValueError(f"patience must be at least 1 but got {patience}.")
        if not 0 <= min_gain < 1:
            raise ValueError(f"min_gain must be in [0, 1) but got {min_gain}.")
        self.patience = patience
        self.min_gain = min_gain

    def decide(self, history: Sequence[float], *, protected: bool = False) -> Decision:
        """`protected`: the task is still short of its floor of trials, so a plateau does not
        retire it yet (rounds that measured nothing still do)."""
        recent = history[-self.patience :]
        if len(recent) == self.patience and all(best == float("inf") for best in recent):
            return Decision(
                True, f"its last {self.patience} rounds measured no candidate successfully"
            )
        if protected or len(history) <= self.patience:
            return GO
        before, now = history[-self.patience - 1], history[-1]
        if before == float("inf"):
            return GO
        gain = (before - now) / before if before > 0 else 0.0
        if gain >= self.min_gain:
            return GO
        return Decision(
            True,
            f"plateau: its last {self.patience} rounds improved it by {gain:.2%} (< {self.min_gain:.1%})",
        )
