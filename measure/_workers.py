"""The device-specific half of the parallel engine.

`Workers` runs one candidate's job on a GPU (prepare, hold the timed window, check) and says
when jobs are done; the scheduling half (parallel.py) decides what runs where and how many at
once. The CUDA engine's workers are processes with CUDA contexts; the simulated engine's run on
a virtual clock. Both report the same `Outcome`, so the scheduler cannot tell them apart.
"""

from __future__ import annotations

import abc
import concurrent.futures
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ._timing import TimingPlan
from .base import MeasureInput, Measurement

# Where a candidate's time goes, in order: loading the module, allocating and uploading its
# arguments, warm-up (first launch, calibration), waiting for the timed window, holding it,
# checking the outputs for NaN / Inf.
STEPS = ("load", "allocate", "warm_up", "wait", "timed", "check")


@dataclasses.dataclass
class Job:
    """One run of one candidate, as the scheduler hands it to the workers."""

    index: int  # position in the inputs of the measure() call
    item: MeasureInput
    lane: int = 0  # which of the workers' GPUs (an index into Workers.gpus)
    best_s: float | None = None  # the task's best so far, for racing
    exclusive: bool = True  # hold the GPU's timed window alone while timing
    alone: bool = False  # nothing else runs on this GPU meanwhile (isolated re-timing)
    attempt: int = 0  # re-runs after the window stayed busy
    started: float = 0.0  # Workers.now() when it was handed over


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one job produced. `window` is when its timed section held the GPU, on the
    workers' clock; `busy` means it never got the window (measure it again)."""

    run_secs: tuple[float, ...] | None
    error: str | None = None
    fault: str | None = None  # "timeout", "crash" or "error" when it failed
    finite: bool | None = None
    raced: bool = False
    steps: Mapping[str, float] = dataclasses.field(default_factory=dict)
    window: tuple[float, float] | None = None
    busy: bool = False

    @classmethod
    def failed(cls, error: str, fault: str = "error") -> Outcome:
        return cls(None, error, fault)

    @classmethod
    def from_worker(cls, value: Mapping[str, Any]) -> Outcome:
        """From the plain dict a worker process returns."""
        window = value.get("window")
        return cls(
            tuple(value["run_secs"]) if value.get("run_secs") else None,
            value.get("error"),
            "error" if value.get("error") else None,
            value.get("finite"),
            bool(value.get("raced", False)),
            dict(value.get("steps", {})),
            tuple(window) if window else None,  # type: ignore[arg-type]
            bool(value.get("busy", False)),
        )

    def measurement(self, dop: int) -> Measurement:
        if self.run_secs is None:
            return Measurement(None, self.error or "measurement failed", dop=dop)
        return Measurement(self.run_secs, finite=self.finite, dop=dop, raced=self.raced)


def settle_finished(
    running: dict[concurrent.futures.Future, Job],
    pool_of: Callable[[Job], Any],
    what: str,
) -> list[tuple[Job, Outcome]]:
    """Wait for at least one of the `running` futures of worker-pool jobs and settle each
    that finished with its pool (a crash or timeout becomes a failed Outcome)."""
    finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
    out = []
    for future in finished:
        job = running.pop(future)
        value, error, fault = pool_of(job).settle(future, what)
        outcome = Outcome.failed(error, fault or "error") if error else None
        out.append((job, outcome or Outcome.from_worker(value)))
    return out


class Workers(abc.ABC):
    """Runs jobs on `gpus`; `wait()` returns those that finished (at least one)."""

    gpus: list[int]

    @abc.abstractmethod
    def now(self) -> float:
        """The clock that job windows are stamped with (seconds)."""

    @abc.abstractmethod
    def start(self, job: Job, plan: TimingPlan) -> None:
        """Begin `job` on GPU `gpus[job.lane]`; returns at once."""

    @abc.abstractmethod
    def wait(self) -> list[tuple[Job, Outcome]]:
        """Block until at least one started job is done; each done job once."""

    def begin(self) -> None:
        """A measure() call starts (telemetry is read here)."""

    def end(self, candidates: int, dop: int) -> None:
        """A measure() call that ran `candidates` jobs, last at `dop`, ended."""

    def stats(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        """Release processes and devices."""
