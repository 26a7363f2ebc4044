"""The filter seam: choose which proposed candidates are worth building and measuring."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tune_orchestrator.measure import Measurement
    from tune_orchestrator.model.tasks import Candidate, Task


@dataclasses.dataclass(frozen=True)
class Selection:
    """Indices (into the candidates offered) of those to build and measure, the most promising
    first; `audit` are those among them measured only to check the filter's judgement."""

    keep: tuple[int, ...]
    audit: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(set(self.keep)) != len(self.keep):
            raise ValueError(f"keep must not repeat an index but got {self.keep}.")
        if not set(self.audit) <= set(self.keep):
            raise ValueError(f"audited candidates must be kept too, got {self.audit}.")

    def first(self, n: int) -> tuple[int, ...]:
        """The `n` to measure when no more fit: the most promising, and the audits' share of
        them (at least one when two or more fit), so that the judgement is still checked."""
        if n >= len(self.keep):
            return self.keep
        if n <= 0:
            return ()
        audits = [i for i in self.keep if i in set(self.audit)]
        n_audit = min(len(audits), n * len(audits) // len(self.keep))
        if audits and n >= 2:
            n_audit = max(1, n_audit)
        rest = [i for i in self.keep if i not in set(self.audit)]
        return tuple(rest[: n - n_audit] + audits[:n_audit])


@dataclasses.dataclass(frozen=True)
class RoundCosts:
    """What a round's candidates cost, for a filter that weighs gain against seconds: each
    one's build seconds (a timed-out build, its timeout; 0 for one that failed otherwise),
    which builds the timeout cut, and the seconds the round's measuring took."""

    build_s: tuple[float, ...]
    timed_out: tuple[bool, ...]
    measure_s: float

    def __post_init__(self) -> None:
        if len(self.build_s) != len(self.timed_out):
            raise ValueError(
                f"need a timeout flag per build, got {len(self.timed_out)} for {len(self.build_s)}."
            )


class Filter(abc.ABC):
    """Decides, per round, which candidates of a task go on to be built and measured."""

    name: str = ""

    @abc.abstractmethod
    def select(self, task: Task, candidates: Sequence[Candidate]) -> Selection: ...

    def learn(
        self,
        task: Task,
        candidates: Sequence[Candidate],
        measurements: Sequence[Measurement],
        costs: RoundCosts | None = None,
    ) -> None:
        """Learn from what was measured (failed measurements included) and, where known, what
        it cost."""

    def stats(self) -> dict[str, Any]:
        """For the report: what the filter did and how good its judgement was."""
        return {"name": self.name}
