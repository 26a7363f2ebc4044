"""The budget rule: a round runs only as large as what is left of the budget allows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .base import BUDGET, GO, Decision, StoppingRule, TaskProgress
from .base import TRIALS as TRIALS_CODE
from .grammar import DEVICE_HOURS, DOLLARS, ENERGY, TRIALS, WALL, Budget, Limit
from .ledger import Ledger, Spend
from .units import fmt_amount, fmt_budget_up, fmt_duration


def check_applicable(
    budget: Budget,
    *,
    devices: int,
    price_known: bool = False,
    energy_known: bool = False,
    free: bool = False,
) -> None:
    """Raise ValueError naming the units that apply when a limit cannot be metered here, or
    when no limit can ever be reached: dollars alone at a price of $0/h (`free`)."""
    usable = ["s", "min", "h", "trials"]
    if devices:
        usable += ["gpu-h", "gpu-min"]
    if price_known:
        usable += ["$ / usd"]
    if energy_known:
        usable += ["J", "kJ", "Wh", "kWh"]
    units = ", ".join(usable)
    for limit in budget.limits:
        if limit.kind == DEVICE_HOURS and not devices:
            raise ValueError(
                f"budget {limit.text!r} is in GPU-hours but this run uses no GPU; "
                f"units that apply: {units}"
            )
        if limit.kind == DOLLARS and not price_known:
            raise ValueError(
                f"budget {limit.text!r} is in dollars but configs/prices.toml has no price for "
                f"this machine; give one with --price USD_PER_HOUR (units that apply: {units})"
            )
        if limit.kind == ENERGY and not energy_known:
            raise ValueError(
                f"budget {limit.text!r} is GPU energy, which needs NVML on a GPU run; "
                f"units that apply: {units}"
            )
    if free and budget.kinds == {DOLLARS}:
        raise ValueError(
            f"budget {str(budget)!r} is in dollars, which a price of $0/h never reaches: the run "
            f"would not stop; add a limit, e.g. {str(budget) + ',1h'!r} (units: {units})"
        )


class BudgetLimits(StoppingRule):
    """Every limit of the budget, counting spend from earlier sessions.

    Before a round, each limit's remaining amount is turned into seconds (trials excepted) and
    the round shrinks to the candidates whose forecast cost, plus the time reserved for the
    final compile and check, still fits; a round smaller than `min_round` is not started, but
    for the first round a budget accepted up front was promised (`Ledger.promised_round`).
    """

    def __init__(self, budget: Budget, *, round_size: int, min_round: int | None = None) -> None:
        if round_size < 1:
            raise ValueError(f"round_size must be at least 1 but got {round_size}.")
        self.budget = budget
        self.round_size = round_size
        self.min_round = min_round if min_round is not None else max(1, round_size // 4)

    def decide(self, ledger: Ledger, tasks: Sequence[TaskProgress] = ()) -> Decision:
        for limit in self.budget.limits:
            if self._allowance(ledger, limit, self.round_size) < self._smallest(limit):
                code = TRIALS_CODE if limit.kind == TRIALS else BUDGET
                return Decision(True, self._reason(ledger, limit), code)
        return GO

    def allowance(self, ledger: Ledger, wanted: int) -> int:
        return min([wanted] + [self._allowance(ledger, lim, wanted) for lim in self.budget.limits])

    def progress(self, ledger: Ledger) -> float | None:
        shares = [(ledger.spent(lim.kind) or 0.0) / lim.amount for lim in self.budget.limits]
        return max(shares)

    def _smallest(self, limit: Limit) -> int:
        # Trials are exact (500trials measures 500); time-like limits do not start a round
        # too small to repay its search.
        return 1 if limit.kind == TRIALS else self.min_round

    def seconds_left(self, ledger: Ledger) -> float | None:
        lefts = [self._left_s(ledger, lim) for lim in self.budget.limits if lim.kind != TRIALS]
        return min(lefts) if lefts else None

    @staticmethod
    def _left_s(ledger: Ledger, limit: Limit) -> float:
        """Seconds `limit` leaves for tuning (inf for energy before the power is known)."""
        left = limit.amount - (ledger.spent(limit.kind) or 0.0)
        per_second = _units_per_second(ledger, limit.kind)
        left_s = left / per_second if per_second else (math.inf if left > 0 else 0.0)
        return left_s - ledger.reserved_s - ledger.committed_s

    def _allowance(self, ledger: Ledger, limit: Limit, wanted: int) -> int:
        if limit.kind == TRIALS:
            left = limit.amount - (ledger.spent(limit.kind) or 0.0) - ledger.committed_trials
            return max(0, min(wanted, int(left)))
        left_s = self._left_s(ledger, limit)
        if left_s <= 0:
            return 0
        full = ledger.forecast_round(wanted)
        if full is None or full <= left_s:  # nothing to forecast from yet, or it all fits
            return wanted
        # A first round the budget was accepted for is measured whatever the forecast says now.
        promised = min(wanted, ledger.promised_round) if not ledger.trials else 0
        fixed = ledger.forecast_round(0) or 0.0
        per_candidate = (full - fixed) / wanted if wanted else 0.0
        if per_candidate <= 0:
            return promised
        return max(promised, min(wanted, int((left_s - fixed) / per_candidate)))

    def _reason(self, ledger: Ledger, limit: Limit) -> str:
        if limit.kind == TRIALS:
            return f"trial budget reached: {ledger.trials} of {int(limit.amount)}"
        spent = fmt_amount(limit.kind, ledger.spent(limit.kind))
        head = (
            f"{limit.words} budget reached: {spent} of {fmt_amount(limit.kind, limit.amount)} spent"
        )
        smallest = self._smallest(limit)
        needed = ledger.forecast_round(smallest)
        if needed is None:
            return f"{head}; {fmt_duration(ledger.reserved_s)} are kept for compiling and checking the model"
        return (
            f"{head}; a round of {smallest}+ candidates needs ~{fmt_duration(needed)} and "
            f"{fmt_duration(ledger.reserved_s)} are kept for compiling and checking the model"
        )


def clock_rates(devices: int, usd_per_hour: float | None) -> dict[str, float]:
    """Units of each limit the clock meters spent per second of wall clock (wall, GPU-hours,
    dollars); a rate of 0 is not metered. Energy is not here: its rate is the power drawn."""
    return {WALL: 1.0, DEVICE_HOURS: devices / 3600.0, DOLLARS: (usd_per_hour or 0.0) / 3600.0}


def _units_per_second(ledger: Ledger, kind: str) -> float | None:
    rate = clock_rates(ledger.devices, ledger.usd_per_hour).get(kind)
    # Energy: the session's mean power, once known.
    return rate if rate is not None else ledger.joules_per_second()


def clock_seconds(budget: Budget, ledger: Ledger) -> float | None:
    """The seconds the tightest clock-metered limit (wall, GPU-hours, dollars) allows the
    whole run, earlier sessions included; None when no limit is metered by the clock."""
    seconds = [
        limit.amount / per_second
        for limit in budget.limits
        if limit.kind in (WALL, DEVICE_HOURS, DOLLARS)
        and (per_second := _units_per_second(ledger, limit.kind))
    ]
    return min(seconds) if seconds else None


def seconds_short(budget: Budget, ledger: Ledger, needed_s: float) -> tuple[Limit, str] | None:
    """The first limit metered by the clock (wall, GPU-hours, dollars) that cannot pay for
    `needed_s` more seconds, with the smallest budget in its unit that would; None if all can."""
    for limit in budget.limits:
        if limit.kind not in (WALL, DEVICE_HOURS, DOLLARS):
            continue
        per_second = _units_per_second(ledger, limit.kind)
        if not per_second:
            continue
        total = (ledger.spent(limit.kind) or 0.0) + needed_s * per_second
        if total > limit.amount:
            return limit, fmt_budget_up(limit.kind, total)
    return None


def budget_status(budget: Budget, spend: Spend) -> list[dict[str, Any]]:
    """Per limit: amount, spent, left and overshoot, for the report."""
    rows = []
    for limit in budget.limits:
        spent = spend.spent(limit.kind)
        rows.append(
            {
                "limit": limit.text,
                "kind": limit.kind,
                "amount": limit.amount,
                "spent": spent,
                "left": None if spent is None else max(0.0, limit.amount - spent),
                "overshoot": None if spent is None else max(0.0, spent - limit.amount),
            }
        )
    return rows


def primary_limit(
    budget: Budget, preferred: Sequence[str] = (DEVICE_HOURS, DOLLARS, WALL, ENERGY, TRIALS)
) -> Limit:
    """The limit reports are drawn against: GPU-hours, then dollars, wall time, energy, trials."""
    for kind in preferred:
        for limit in budget.limits:
            if limit.kind == kind:
                return limit
    return budget.limits[0]
