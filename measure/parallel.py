"""The parallel engine's scheduling, shared by the CUDA and the simulated engines: what runs on
which GPU and how many at once. The device-specific half is a `Workers` (see _workers.py).

Exclusive window (the default): each GPU keeps `dop` workers busy preparing candidates (load,
allocate, warm up, check in parallel) while one candidate at a time holds its timed window, so
every timing is taken alone. Candidates go to whichever GPU has a free worker; after each span
of results the DOP controller paces the workers from the windows' busy share. A failure among
other workers is measured again alone; failures only the crowd causes make the DOP back off.

Overlapping timings (`overlap_timing=True`, DOPpler): batches of `dop` candidates per GPU are
timed at once; a sample of each batch is re-timed alone, one at a time per GPU, and the
controller compares; a result faster than the task's best is re-timed alone before it is
reported, so no final choice rests on a timing taken in parallel.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from typing import Any

from ._figures import Figures, Span
from ._timing import TimingPlan
from ._workers import Job, Outcome, Workers
from .base import Engine, MeasureInput, Measurement
from .dop import Check, DopController

_BUSY_RETRIES = 2  # a candidate that never got the window is measured again this often
# A span (results between two pacing decisions) holds per GPU at least _SPAN_MIN candidates and
# _SPAN_PER_WORKER per preparing worker, so that its busy share is more than noise.
_SPAN_MIN, _SPAN_PER_WORKER = 16, 4


class _Call:
    """One measure() call: results by index, the best so far, reporting as results arrive."""

    def __init__(
        self,
        n: int,
        on_result: Callable[[int, Measurement], None] | None,
        best_s: float | None,
        figures: Figures,
    ) -> None:
        self.results: list[Measurement | None] = [None] * n
        self.best = best_s if best_s is not None else math.inf
        self._on_result = on_result
        self._figures = figures

    def best_or_none(self) -> float | None:
        return self.best if math.isfinite(self.best) else None

    def report(self, index: int, m: Measurement) -> None:
        self.results[index] = m
        if m.can_lead:
            self.best = min(self.best, m.mean_s)
        self._figures.reported(m.ok, m.raced)
        if self._on_result is not None:
            self._on_result(index, m)


class ParallelEngine(Engine):
    """Times candidates on the GPUs of `workers`; see the module docstring."""

    device_type = "cuda"

    def __init__(
        self,
        workers: Workers,
        controller: DopController | None = None,
        *,
        fixed_dop: int | None = None,
        overlap_timing: bool = False,
        plan: TimingPlan | None = None,
    ) -> None:
        if fixed_dop is not None and fixed_dop < 1:
            raise ValueError(f"fixed_dop must be at least 1 but got {fixed_dop}.")
        self.workers = workers
        self.controller = controller or DopController()
        self.fixed_dop = fixed_dop  # --parallelism N: no adaptation
        self.overlap_timing = overlap_timing
        self.plan = plan or TimingPlan()
        self.lanes = len(workers.gpus)
        self.figures = Figures(self.lanes)
        self.isolated_runs = 0  # runs alone on a GPU: checks, confirmations, crowd failures
        self.batches: list[dict[str, object]] = []  # the DOP over time, one entry per span
        self._span = Span(self.lanes)  # exclusive mode: results since the last pacing

    @property
    def dop(self) -> int:
        return self.fixed_dop or self.controller.dop

    @property
    def checks(self) -> list[Check]:
        return self.controller.history

    def measure(
        self,
        inputs: Sequence[MeasureInput],
        on_result: Callable[[int, Measurement], None] | None = None,
        best_s: float | None = None,
    ) -> list[Measurement]:
        if not inputs:
            return []
        call = _Call(len(inputs), on_result, best_s, self.figures)
        self.figures.fold()
        self.workers.begin()
        started, runs = self.workers.now(), self.figures.runs
        jobs = [Job(i, item) for i, item in enumerate(inputs)]
        if self.overlap_timing:
            self._overlapping(jobs, call)
        else:
            self._exclusive(jobs, call)
        self.figures.phase_s += self.workers.now() - started
        self.workers.end(self.figures.runs - runs, self.dop)
        missing = [i for i, m in enumerate(call.results) if m is None]
        if missing:  # a scheduling bug, never a candidate's failure
            raise RuntimeError(f"no result for inputs {missing}")
        return call.results  # type: ignore[return-value]

    # -- the two modes ----------------------------------------------------------------------

    def _exclusive(self, jobs: list[Job], call: _Call) -> None:
        crowd: list[Job] = []  # failed among other workers: measured again alone
        queue = collections.deque(jobs)
        self._span.open(self.workers.now())

        def done(job: Job, outcome: Outcome) -> None:
            self._span.add(job, outcome, self.workers.now())
            m = outcome.measurement(dop=1)  # the window was held alone: an isolated timing
            if not m.ok and self.dop > 1 and outcome.fault != "timeout":
                crowd.append(job)
            else:
                call.report(job.index, m)
            if self._span.count >= self.lanes * max(_SPAN_MIN, _SPAN_PER_WORKER * self.dop):
                self._end_span()

        self._pump(queue, lambda: self.dop, done, call, exclusive=True)
        self._span.close(self.workers.now())
        if crowd:
            again = self._alone(crowd, call, exclusive=True)
            for job, m in zip(crowd, again, strict=True):
                call.report(job.index, m)
            if self.fixed_dop is None:
                self.controller.crowd_failures(
                    failed=len(crowd), reproduced=sum(not m.ok for m in again), candidates=len(jobs)
                )

    def _overlapping(self, jobs: list[Job], call: _Call) -> None:
        start = 0
        while start < len(jobs):
            dop = self.dop
            batch = jobs[start : start + dop * self.lanes]
            timed = self._run(batch, dop, call, exclusive=False)
            self.batches.append({"dop": dop, "candidates": len(batch)})
            if dop > 1:
                timed = self._checked(batch, timed, call)
            elif self.fixed_dop is None:  # a clean serial batch: nothing to compare, go up
                self.controller.check(
                    [], [], failed_parallel=0, failed_isolated=0, batch=len(batch)
                )
            for job, m in zip(batch, timed, strict=True):
                if m.ok and m.dop > 1 and m.mean_s < call.best:  # a new best: confirm it alone
                    m = self._alone([job], call, exclusive=False)[0]
                call.report(job.index, m)
            start += len(batch)

    def _checked(
        self, batch: list[Job], timed: list[Measurement], call: _Call
    ) -> list[Measurement]:
        """Re-time a sample alone, let the controller judge, keep the isolated timings."""
        latencies = [m.mean_s for m in timed]
        sample = self.controller.sample(latencies)
        failed = [i for i, m in enumerate(timed) if not m.ok]
        again = sorted(set(sample) | set(failed))  # failures too: the candidate or the crowd?
        isolated = self._alone([batch[i] for i in again], call, exclusive=False)
        by_index = dict(zip(again, isolated, strict=True))
        if self.fixed_dop is None:
            self.controller.check(
                [latencies[i] for i in sample],
                [by_index[i].mean_s for i in sample],
                failed_parallel=len(failed),
                failed_isolated=sum(1 for i in failed if not by_index[i].ok),
                batch=len(batch),
            )
        return [by_index.get(i, m) for i, m in enumerate(timed)]

    # -- running jobs -----------------------------------------------------------------------

    def _alone(self, jobs: list[Job], call: _Call, *, exclusive: bool) -> list[Measurement]:
        """Run each job with nothing else on its GPU: one at a time per GPU."""
        self.isolated_runs += len(jobs)
        again = [Job(j.index, j.item, alone=True) for j in jobs]
        return self._run(again, 1, call, exclusive=exclusive)

    def _run(self, jobs: list[Job], dop: int, call: _Call, *, exclusive: bool) -> list[Measurement]:
        """Run `jobs` with up to `dop` per GPU at once; Measurements in the order of `jobs`."""
        out: dict[int, Measurement] = {}
        position = {id(job): k for k, job in enumerate(jobs)}

        def done(job: Job, outcome: Outcome) -> None:
            out[position[id(job)]] = outcome.measurement(dop=1 if job.alone else dop)

        self._pump(collections.deque(jobs), lambda: dop, done, call, exclusive=exclusive)
        return [out[k] for k in range(len(jobs))]

    def _pump(
        self,
        queue: collections.deque[Job],
        limit: Callable[[], int],
        done: Callable[[Job, Outcome], None],
        call: _Call,
        *,
        exclusive: bool,
    ) -> None:
        """Keep up to limit() jobs in flight per GPU until `queue` is empty and all are done;
        `done` sees each finished job once (it may queue more)."""
        in_flight = [0] * self.lanes
        while queue or any(in_flight):
            # 1. Fill the GPUs, the least loaded first, so candidates spread evenly.
            while queue:
                lane = min(range(self.lanes), key=in_flight.__getitem__)
                if in_flight[lane] >= limit():
                    break
                job = queue.popleft()
                job.lane, job.best_s, job.exclusive = lane, call.best_or_none(), exclusive
                job.started = self.workers.now()
                self.workers.start(job, self.plan)
                in_flight[lane] += 1
            # 2. Take what finished; a job that never got the window goes again, first.
            for job, outcome in self.workers.wait():
                in_flight[job.lane] -= 1
                self.figures.ran(job, outcome)
                if outcome.busy and job.attempt < _BUSY_RETRIES:
                    job.attempt += 1
                    queue.appendleft(job)
                    continue
                if outcome.busy:
                    outcome = Outcome.failed(outcome.error or "the timed window stayed busy")
                done(job, outcome)

    def _end_span(self) -> None:
        """Close the span, let the controller pace the workers, open the next one."""
        span, now = self._span, self.workers.now()
        span.close(now)
        entry = self._entry(span)
        self.batches.append(entry)
        if self.fixed_dop is None:
            self.controller.pace(
                busy=entry["busy"],
                cycle_s=sum(span.cycles) / span.count,
                wait_s=sum(span.waits) / span.count,
                timed_s=sum(span.timed) / span.count,
                candidates=span.count,
            )
        self._span = Span(self.lanes)
        self._span.open(now)

    # -- reporting --------------------------------------------------------------------------

    def stats(self) -> dict[str, object]:
        """For the report: throughput, busy share, steps, the DOP over time and why."""
        out: dict[str, object] = {
            **super().stats(),
            "mode": "overlap" if self.overlap_timing else "exclusive",
            "gpus": list(self.workers.gpus),
            "dop": self.dop,
            "ceiling": self.controller.ceiling,
            "fixed_dop": self.fixed_dop,
            **self.figures.to_dict(),
            "batches": self.batches + self._open_span(),
            "isolated_runs": self.isolated_runs,
        }
        if self.overlap_timing:
            out["checks"] = [
                {
                    "dop": c.dop,
                    "sampled": c.sampled,
                    "rel_error": c.rel_error,
                    "failure_rate": c.failure_rate,
                    "new_dop": c.new_dop,
                }
                for c in self.checks
                if c.sampled or c.failure_rate
            ]
        else:
            out["paces"] = [
                {
                    "dop": p.dop,
                    "candidates": p.candidates,
                    "busy": p.busy,
                    "need": p.need,
                    "failure_rate": p.failure_rate,
                    "new_dop": p.new_dop,
                    "reason": p.reason,
                }
                for p in self.controller.paces
            ]
        return {**out, **self.workers.stats()}

    def _open_span(self) -> list[dict[str, object]]:
        """The span still collecting results, so that a short run shows its DOP too."""
        if self.overlap_timing or not self._span.count:
            return []
        return [self._entry(self._span)]

    def _entry(self, span: Span) -> dict[str, Any]:
        """A span as `batches` lists it: its DOP, candidates, busy share, seconds, and the
        seconds before its first timed windows (`busy` counts from there)."""
        return {
            "dop": self.dop,
            "candidates": span.count,
            "busy": span.busy(),
            "seconds": span.seconds,
            "filling_s": span.filling_s(),
        }

    def close(self) -> None:
        self.workers.close()
