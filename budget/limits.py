"""The budget rule: stop before a round that would not fit in what is left of the budget."""

from __future__ import annotations

from .base import GO, Decision, StoppingRule
from .grammar import DEVICE_HOURS, DOLLARS, ENERGY, TRIALS, WALL, Budget
from .ledger import Ledger


def fmt_duration(seconds: float) -> str:
    """12.3s, 4m05s, 1h02m."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def check_applicable(budget: Budget, *, devices: int) -> None:
    """Raise ValueError naming the units that apply when a limit cannot be metered here."""
    usable = "s, min, h, trials" + (", gpu-h, gpu-min" if devices else "")
    for limit in budget.limits:
        if limit.kind == DEVICE_HOURS and not devices:
            raise ValueError(
                f"budget {limit.text!r} is in GPU-hours but this run uses no GPU; "
                f"units that apply: {usable}"
            )
        if limit.kind in (DOLLARS, ENERGY):
            raise ValueError(
                f"budget {limit.text!r}: {limit.words} cannot be metered yet; "
                f"units that apply: {usable}"
            )


class BudgetLimits(StoppingRule):
    """Wall-clock, device-hour and trial limits, counting spend from earlier sessions.

    A round is not started when the forecast of its wall time plus the time reserved for the
    final phase would exceed what is left; the first round of a session always runs if the
    reserve fits, since there is nothing to forecast from.
    """

    def __init__(self, budget: Budget, *, devices: int = 0) -> None:
        check_applicable(budget, devices=devices)
        self.budget = budget

    def decide(self, ledger: Ledger) -> Decision:
        trials = self.budget.get(TRIALS)
        if trials is not None and ledger.trials >= trials:
            return Decision(True, f"trial budget reached: {ledger.trials} of {int(trials)}")
        wall = self.budget.get(WALL)
        if wall is not None:
            decision = self._time_left(ledger, wall - ledger.wall_s, "wall-clock", wall)
            if decision.stop:
                return decision
        device_h = self.budget.get(DEVICE_HOURS)
        if device_h is not None and ledger.devices:
            left_s = (device_h - ledger.device_h) * 3600.0 / ledger.devices
            decision = self._time_left(ledger, left_s, "GPU-hour", device_h * 3600.0)
            if decision.stop:
                return decision
        return GO

    def trials_left(self, ledger: Ledger) -> int | None:
        trials = self.budget.get(TRIALS)
        return None if trials is None else max(0, int(trials) - ledger.trials)

    @staticmethod
    def _time_left(ledger: Ledger, left_s: float, words: str, total_s: float) -> Decision:
        needed = ledger.reserved_s + (ledger.expected_round_s() or 0.0)
        if left_s > needed:
            return GO
        spent = fmt_duration(total_s - left_s)
        return Decision(
            True,
            f"{words} budget reached: {spent} of {fmt_duration(total_s)} spent; the next round "
            f"needs ~{fmt_duration(ledger.expected_round_s() or 0.0)} and "
            f"{fmt_duration(ledger.reserved_s)} are kept for compiling and checking the model",
        )
