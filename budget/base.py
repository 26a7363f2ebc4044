"""The stopping seam: a rule looks at the ledger and decides whether the run goes on."""

from __future__ import annotations

import abc
import dataclasses

from .ledger import Ledger


@dataclasses.dataclass(frozen=True)
class Decision:
    """`stop` with a reason a person can read, e.g. "trial budget reached: 500 of 500"."""

    stop: bool
    reason: str = ""


GO = Decision(stop=False)


class StoppingRule(abc.ABC):
    """Decides, before each round, whether the run stops."""

    @abc.abstractmethod
    def decide(self, ledger: Ledger) -> Decision: ...

    def trials_left(self, ledger: Ledger) -> int | None:
        """How many more trials this rule allows; None when it does not limit trials."""
        return None


class AnyOf(StoppingRule):
    """Stops when any of its rules stops; allows the fewest trials any of them allows."""

    def __init__(self, rules: list[StoppingRule]) -> None:
        self.rules = list(rules)

    def decide(self, ledger: Ledger) -> Decision:
        for rule in self.rules:
            decision = rule.decide(ledger)
            if decision.stop:
                return decision
        return GO

    def trials_left(self, ledger: Ledger) -> int | None:
        allowed = [n for n in (r.trials_left(ledger) for r in self.rules) if n is not None]
        return min(allowed) if allowed else None
