"""The filter seam: choose which proposed candidates are worth building and measuring."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from measure import Measurement
    from orchestrator.tasks import Candidate, Task


@dataclasses.dataclass(frozen=True)
class Selection:
    """Indices (into the proposed candidates, ascending) of those to build and measure;
    `audit` are those among them measured only to check the filter's judgement."""

    keep: tuple[int, ...]
    audit: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if list(self.keep) != sorted(set(self.keep)):
            raise ValueError(f"keep must be ascending and unique but got {self.keep}.")
        if not set(self.audit) <= set(self.keep):
            raise ValueError(f"audited candidates must be kept too, got {self.audit}.")


class Filter(abc.ABC):
    """Decides, per round, which candidates of a task go on to be built and measured."""

    name: str = ""

    @abc.abstractmethod
    def select(self, task: Task, candidates: Sequence[Candidate]) -> Selection: ...

    def learn(
        self, task: Task, candidates: Sequence[Candidate], measurements: Sequence[Measurement]
    ) -> None:
        """Learn from what was measured (failed measurements included)."""

    def stats(self) -> dict[str, Any]:
        """For the report: what the filter did and how good its judgement was."""
        return {"name": self.name}
