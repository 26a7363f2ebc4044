"""The search side of a round: candidates for a task, from its pool and, when that runs short,
from its search; searches of the next tasks run ahead in background threads."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any

from ..model.tasks import Candidate, Task, measure_candidate, structural_key
from .cost_model import candidate_features
from .pool import ProposalPool
from .sisters import Sisters
from .strategy import SearchTimes, TaskSearch

# Candidates that may wait in the pool per task, in rounds' worth of proposals.
_POOL_ROUNDS = 4


@dataclasses.dataclass(frozen=True)
class TopUp:
    """What one top-up of a task's pool brought."""

    proposed: int = 0  # new candidates the search added to the pool
    duplicates: int = 0  # proposed again although measured before (resumed runs)
    searched: SearchTimes = dataclasses.field(default_factory=SearchTimes)
    seconds: float = 0.0


class Proposer:
    """Each task's search and pool. A round takes candidates with `offer()`; `ahead()` starts
    the next tasks' searches in background threads, and `offer()` waits for a task's own.

    `make_search(task, proposals)` creates a task's TaskSearch for rounds that propose
    `proposals`; `proposals` here is the most any round proposes (what the pools hold is a few
    rounds of that); `measured` maps a task index to the keys
    of candidates measured or being measured (the search knows only what it proposed in this
    process, not the database's records); `set_aside` to the keys the filter rejected, which
    may wait but do not stand in for new proposals; `charge(phase, seconds, overlapped)` books
    time; `sisters` offers each task its faster sisters' schedules (sisters.py).
    """

    def __init__(
        self,
        *,
        make_search: Callable[[Task, int], TaskSearch],
        cost_model: Any,
        measured: dict[int, set[int]],
        set_aside: dict[int, set[int]] | None = None,
        proposals: int,
        ahead: int,
        charge: Callable[[str, float, bool], None],
        parked: Mapping[int, list[Any]] | None = None,
        sisters: Sisters | None = None,
    ) -> None:
        self.make_search = make_search
        self.cost_model = cost_model
        self.measured = measured
        self.set_aside = {} if set_aside is None else set_aside
        self.proposals = proposals
        self.pool = ProposalPool(limit=_POOL_ROUNDS * proposals)
        self.times = SearchTimes()  # every search's, summed
        self._charge = charge
        self.sisters = sisters
        self._searches: dict[int, TaskSearch] = {}
        # MeasureCandidates an earlier session left waiting, per task: pooled with the search.
        self._parked = dict(parked or {})
        self.restored = 0  # of those, how many were pooled again
        self.abandoned = 0  # searches ahead still running at the stop, not waited for
        self._lock = threading.Lock()
        self._main = threading.current_thread()
        self._pending: dict[int, concurrent.futures.Future[TopUp]] = {}
        self._background = (
            concurrent.futures.ThreadPoolExecutor(ahead, thread_name_prefix="search-ahead")
            if ahead
            else None
        )

    def search(self, task: Task, proposals: int | None = None) -> TaskSearch:
        if task.index not in self._searches:
            start = time.monotonic()
            search = self.make_search(task, proposals or self.proposals)
            self._book("search", time.monotonic() - start)
            with self._lock:
                self._searches[task.index] = search
            self._pool_parked(task, search)
        return self._searches[task.index]

    def _pool_parked(self, task: Task, search: TaskSearch) -> None:
        """Pool what an earlier session left waiting for this task, unless measured since."""
        fresh = self._unmeasured(task, self._parked.pop(task.index, []))
        self.restored += len(self._pooled(task, search, fresh, explored=()))

    def _unmeasured(self, task: Task, mcs: Iterable[Any]) -> dict[int, Any]:
        """These MeasureCandidates by structural key, less the task's measured ones and
        repeats (the first of each kept), in their order."""
        known = self.measured.setdefault(task.index, set())
        fresh: dict[int, Any] = {}
        for mc in mcs:
            key = structural_key(mc.sch.mod)
            if key not in known:
                fresh.setdefault(key, mc)
        return fresh

    def _pooled(
        self, task: Task, search: TaskSearch, fresh: dict[int, Any], *, explored: Container[int]
    ) -> list[Candidate]:
        """Pool `fresh` (by key) as one batch, with their features; those whose key is in
        `explored` are exploration the filter lets through unjudged. Returns those added."""
        if not fresh:
            return []
        features = candidate_features(self.cost_model, search.ctx, list(fresh.values()))
        return self.pool.add(
            task.index,
            [
                Candidate(task, mc, key, f, explore=key in explored)
                for (key, mc), f in zip(fresh.items(), features, strict=True)
            ],
        )

    def exhausted(self, task: Task) -> bool:
        """Nothing waits and the search has nothing left to propose."""
        search = self._searches.get(task.index)
        return self.pool.size(task.index) == 0 and search is not None and search.exhausted

    def offer(self, task: Task, proposals: int) -> tuple[list[Candidate], TopUp]:
        """The task's waiting candidates (latest batch first), after a top-up of its pool to
        `proposals` (or the one already running ahead); a search error propagates."""
        pending = self._pending.pop(task.index, None)
        if pending is not None:
            start = time.monotonic()
            done = pending.result()
            self._book("ahead", time.monotonic() - start)  # what it did not hide is waited for
            topped = done if self.pool.size(task.index) else self.top_up(task, proposals)
        else:
            topped = self.top_up(task, proposals)
        self._share(task)
        return self.pool.waiting(task.index), topped

    def _share(self, task: Task) -> None:
        """Pool the schedules the task's sisters offer it, as the latest batch (they come
        first) of exploration the filter lets through unjudged."""
        if self.sisters is None or not self.sisters.share:
            return
        start = time.monotonic()
        search = self.search(task)
        with self._lock:
            others = dict(self._searches)
        found = self.sisters.offers(
            task, search.best_s, lambda i: others[i].fastest() if i in others else []
        )
        fresh = self._unmeasured(task, map(measure_candidate, found))
        search.shared.update(fresh)
        self._pooled(task, search, fresh, explored=fresh)
        self._book("search", time.monotonic() - start)

    def top_up(self, task: Task, proposals: int) -> TopUp:
        """Search for `proposals` more when fewer wait (not counting those the filter set
        aside: a pool full of rejects must not stall the search)."""
        search = self.search(task, proposals)
        if self._fresh(task) >= proposals or search.exhausted:
            return TopUp()
        start = time.monotonic()
        found = search.propose(proposals)
        seconds = time.monotonic() - start
        self._book("search", seconds)
        with self._lock:
            self.times.add(search.last)
        fresh = self._unmeasured(task, found)
        added = self._pooled(task, search, fresh, explored=search.explored)
        return TopUp(len(added), len(found) - len(fresh), search.last, seconds)

    def ahead(self, rounds: Iterable[tuple[Task, int]]) -> None:
        """Start background top-ups of these tasks' pools to these proposals (those not
        already running)."""
        if self._background is None:
            return
        for task, proposals in rounds:
            if task.index not in self._pending and self._fresh(task) < proposals:
                self._pending[task.index] = self._background.submit(self.top_up, task, proposals)

    def shared(self) -> dict[str, int]:
        """Sisters' schedules pooled (not measured before), those that did not replay, and
        how often one became its task's best."""
        with self._lock:
            searches = list(self._searches.values())
        return {
            "shared": sum(len(search.shared) for search in searches),
            "shared_failed": self.sisters.failed if self.sisters is not None else 0,
            "shared_best": sum(search.shared_best for search in searches),
        }

    def _fresh(self, task: Task) -> int:
        return self.pool.size(task.index, excluding=self.set_aside.get(task.index, ()))

    def take(self, task: Task, candidates: Iterable[Candidate]) -> None:
        self.pool.take(task.index, list(candidates))

    def put_back(self, task: Task, candidates: Iterable[Candidate]) -> None:
        self.pool.add(task.index, candidates)

    def leftovers(self) -> dict[int, list[Candidate]]:
        """Every task's waiting candidates: what the next session can start from."""
        return {i: c for i in self.pool.tasks() if (c := self.pool.waiting(i))}

    def close(self) -> None:
        """Stop without waiting for a search ahead still running (a first CUDA search takes
        tens of seconds): its proposals would come after the stop, so nobody uses them."""
        if self._background is not None:
            self.abandoned = sum(1 for f in self._pending.values() if f.running())
            self._background.shutdown(wait=False, cancel_futures=True)

    def _book(self, phase: str, seconds: float) -> None:
        self._charge(phase, seconds, threading.current_thread() is not self._main)
