"""Candidates proposed and not yet measured, kept per task for later rounds.

TVM's EvolutionarySearch counts every candidate it hands out as measured and never proposes it
again, so a candidate the filter or the budget sets aside would be lost for the session. Here it
waits for a later round of its task instead.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Collection, Iterable, Sequence

from ..model.tasks import Candidate


class ProposalPool:
    """Per task, proposed candidates waiting to be built and measured.

    `waiting()` lists the latest batch first (the search ranked it with the latest cost
    model), each batch in the order it was proposed. At most `limit` wait per task; beyond
    that the oldest are dropped (`dropped` counts them).
    """

    def __init__(self, *, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1 but got {limit}.")
        self.limit = limit
        self.dropped: dict[int, int] = collections.defaultdict(int)
        # task -> candidate key -> (batch, position, candidate), oldest batch first
        self._waiting: dict[int, dict[int, tuple[int, int, Candidate]]] = collections.defaultdict(
            dict
        )
        self._batches = itertools.count()
        self._lock = threading.Lock()  # searches run ahead in background threads

    def add(self, task: int, candidates: Iterable[Candidate]) -> list[Candidate]:
        """Add candidates not already waiting, as one batch; returns those added."""
        with self._lock:
            return self._add(task, list(candidates))

    def _add(self, task: int, candidates: list[Candidate]) -> list[Candidate]:
        waiting, batch = self._waiting[task], next(self._batches)
        added = []
        for candidate in candidates:
            if candidate.key not in waiting:
                waiting[candidate.key] = (batch, len(added), candidate)
                added.append(candidate)
        while len(waiting) > self.limit:
            oldest = min(waiting, key=lambda k: waiting[k][:2])
            del waiting[oldest]
            self.dropped[task] += 1
        return added

    def waiting(self, task: int) -> list[Candidate]:
        with self._lock:
            entries = sorted(self._waiting[task].values(), key=lambda e: (-e[0], e[1]))
        return [candidate for _, _, candidate in entries]

    def take(self, task: int, candidates: Sequence[Candidate]) -> None:
        """Remove candidates that go on to be built and measured."""
        with self._lock:
            waiting = self._waiting[task]
            for candidate in candidates:
                waiting.pop(candidate.key, None)

    def tasks(self) -> list[int]:
        with self._lock:
            return sorted(self._waiting)

    def size(self, task: int, *, excluding: Collection[int] = ()) -> int:
        """Candidates waiting for `task`, not counting the keys in `excluding`."""
        with self._lock:
            waiting = self._waiting[task]
            return len(waiting) - sum(1 for key in excluding if key in waiting)
