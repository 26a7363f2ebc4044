"""Stop when more spending stops paying: a small windowed gain and a small forecast, judged
only once every task that matters has had its chance."""

from __future__ import annotations

from collections.abc import Sequence

from .base import GO, STOPPED_PAYING, Decision, StoppingRule, TaskProgress
from .forecast import fit_curve
from .grammar import DOLLARS, Limit
from .ledger import Ledger
from .limits import fmt_amount


class DiminishingReturns(StoppingRule):
    """Stops when the last `window` share of spend cut the model latency by less than
    `min_gain`, and the fitted tuning curve forecasts less than `min_gain` more from what
    is left of `limit`.

    Spend is measured in the unit of `limit` (the budget's primary limit). It never decides
    with fewer than `min_rounds` rounds, or with fewer than two rounds inside the window; and,
    when told about the tasks, not before every task holding `min_share` of the untuned
    latency has had `min_measured_rounds` measured rounds and every task has its floor of
    trials, nor while a task's next round is expected to cut `min_gain` of the model's latency
    by catching up with a task of its kind, nor while the tasks never tried together hold
    `min_share` of the model's latency now (retired tasks excepted: the curve says nothing of
    the others). Where the curve alone would stop, its decision names the tasks it waits on,
    for the loop to give them the rounds.
    """

    def __init__(
        self,
        limit: Limit,
        *,
        min_gain: float = 0.01,
        window: float = 0.2,
        min_rounds: int = 4,
        min_share: float = 0.05,
        min_measured_rounds: int = 2,
    ) -> None:
        if not 0 < min_gain < 1:
            raise ValueError(f"min_gain must be in (0, 1) but got {min_gain}.")
        if not 0 < window <= 1:
            raise ValueError(f"window must be in (0, 1] but got {window}.")
        if min_rounds < 2:
            raise ValueError(f"min_rounds must be at least 2 but got {min_rounds}.")
        if not 0 <= min_share <= 1:
            raise ValueError(f"min_share must be in [0, 1] but got {min_share}.")
        if min_measured_rounds < 0:
            raise ValueError(
                f"min_measured_rounds cannot be negative but got {min_measured_rounds}."
            )
        self.limit = limit
        self.min_gain = min_gain
        self.window = window
        self.min_rounds = min_rounds
        self.min_share = min_share
        self.min_measured_rounds = min_measured_rounds

    def decide(self, ledger: Ledger, tasks: Sequence[TaskProgress] = ()) -> Decision:
        reason = self._judge(ledger)
        if reason is None:
            return GO
        waiting = self.waiting_on(tasks)
        if waiting:  # it would stop, but these tasks have not had their chance
            return Decision(False, waiting_on=waiting)
        evidence = self.evidence(tasks)
        return Decision(True, f"{reason}; {evidence}" if evidence else reason, STOPPED_PAYING)

    def _judge(self, ledger: Ledger) -> str | None:
        """Why more spending stops paying, judged on the tuning curve alone; None while it
        still pays."""
        kind = self.limit.kind
        points = [(p.spent(kind), p.latency_s) for p in ledger.history if p.spent(kind) is not None]
        if len(points) < self.min_rounds:
            return None
        x_now, latency_now = points[-1]
        x_start = x_now * (1.0 - self.window)
        before = [lat for x, lat in points if x <= x_start]
        inside = [x for x, _ in points if x > x_start]
        if not before or len(inside) < 2:
            return None
        windowed = max(0.0, (before[-1] - latency_now) / before[-1])
        curve = fit_curve([x for x, _ in points], [lat for _, lat in points])
        left = max(0.0, self.limit.amount - x_now)
        forecast = curve.gain(x_now, x_now + left) if curve is not None else None
        if windowed >= self.min_gain or forecast is None or forecast >= self.min_gain:
            return None
        return self._reason(ledger, x_now, left, windowed, forecast)

    def waiting_on(self, tasks: Sequence[TaskProgress]) -> tuple[int, ...]:
        """The live tasks (positions in `tasks`) that have not had their chance: short of
        their floor of trials, expected to catch up with a task of their kind, holding
        `min_share` of the untuned latency with fewer than `min_measured_rounds` rounds, or
        never tried while those never tried hold `min_share` of the latency now (an unrolled
        LSTM's heaviest kernels have one schedule each: their rounds bought nothing, and a
        curve of those alone stopped runs before the lighter tasks were tried)."""
        untried = sum(map(_share_now, self._untried(tasks))) >= self.min_share
        return tuple(
            i
            for i, t in enumerate(tasks)
            if not t.done
            and (
                t.trials < t.floor
                or t.catch_up >= self.min_gain
                or (self._weighty(t) and t.measured_rounds < self.min_measured_rounds)
                or (untried and t.trials == 0)
            )
        )

    @staticmethod
    def _untried(tasks: Sequence[TaskProgress]) -> list[TaskProgress]:
        """The live tasks that have had no trial."""
        return [t for t in tasks if not t.done and t.trials == 0]

    def _weighty(self, task: TaskProgress) -> bool:
        """It holds `min_share` or more of the untuned latency."""
        return task.share is not None and task.share >= self.min_share

    def evidence(self, tasks: Sequence[TaskProgress]) -> str:
        """What entitled the rule to judge, once no task is waited on ("" when told nothing
        about the tasks)."""
        weighty = [t for t in tasks if self._weighty(t)]
        parts = []
        if weighty:
            held = sum(t.share or 0.0 for t in weighty)
            fewest = min(t.measured_rounds for t in weighty)
            parts.append(
                f"the {len(weighty)} task(s) holding {held:.0%} of the untuned latency had "
                f"{fewest}+ measured rounds each"
            )
        floored = [t for t in tasks if t.floor]
        if floored:
            held = sum(t.share or 0.0 for t in floored)
            fewest = min(t.trials for t in floored)
            parts.append(
                f"the {len(floored)} heaviest (holding {held:.0%}) had {fewest}+ trials each"
            )
        return "evidence: " + ", ".join(parts) if parts else ""

    def _reason(
        self, ledger: Ledger, x_now: float, left: float, windowed: float, forecast: float
    ) -> str:
        kind = self.limit.kind
        where = f"{fmt_amount(kind, x_now)} of {fmt_amount(kind, self.limit.amount)}"
        if kind != DOLLARS and ledger.usd is not None:
            where += f" ({fmt_amount(DOLLARS, ledger.usd)})"
        return (
            f"stopped at {where}: the last {self.window:.0%} of spend improved end-to-end "
            f"latency by {windowed:.2%} (< {self.min_gain:.0%}); forecast for the remaining "
            f"{fmt_amount(kind, left)}: +{forecast:.2%}"
        )


def _share_now(task: TaskProgress) -> float:
    """What the task holds of the model's latency now; its untuned share where not known."""
    now = task.share_now if task.share_now is not None else task.share
    return now or 0.0
