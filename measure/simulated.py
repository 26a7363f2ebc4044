"""A simulated GPU for tests and benchmarks: the parallel engine's own scheduling (parallel.py)
on simulated workers that run on a virtual clock, misbehaving the way real GPUs do.

Each candidate has a true latency (from its artifact name, or an injected `latency`). A job
prepares for `prepare_s` (load, allocate, warm up: overlaps freely with other jobs), then times
its repeats, with the same adaptive rule as the real worker (_timing.py), in the GPU's timed
window: exclusive and first come, first served, or overlapping with other timings, which slow
each other down (`interference` per extra kernel beyond `quiet_until`, with noise that grows
too); then it checks. A discrete-event schedule gives the virtual seconds, so nothing sleeps.
The GPU also runs throttled in random episodes, and a job crashes with a small probability
that grows with the number of jobs on its GPU.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import itertools
import math
import random
from collections.abc import Callable, Sequence

from ._timing import RACED, TimingPlan, verdict
from ._workers import Job, Outcome, Workers
from .base import MeasureInput
from .dop import DopController
from .parallel import ParallelEngine


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimulatedGpu:
    noise: float = 0.01  # log-normal sigma of an isolated timing
    interference: float = 0.0  # relative slowdown per extra concurrent timing
    interference_noise: float = 0.0  # extra sigma per extra concurrent timing
    quiet_until: int = 1  # concurrency that costs nothing (idle SMs absorb it)
    throttle_probability: float = 0.0  # share of throttle_episode_s episodes run throttled
    throttle_slowdown: float = 1.3
    throttle_episode_s: float = 0.05
    crash_probability: float = 0.0  # per candidate, alone
    crash_per_extra: float = 0.0  # added per extra job on the GPU beyond quiet_until
    prepare_s: float = 0.01  # load + allocate + warm-up of a candidate (median)
    prepare_spread: float = 0.3  # log-normal sigma of the preparation time
    check_s: float = 0.001  # the NaN / Inf check after timing
    repeat_overhead_s: float = 2e-5  # per repeat: recording and waiting for an event pair
    window_overhead_s: float = 1e-4  # per window: taking and releasing it, one warm launch
    seed: int = 0

    def true_latency(self, artifact: str) -> float:
        digest = int(hashlib.sha256(artifact.encode()).hexdigest()[:8], 16)
        return 1e-4 * (1.0 + (digest % 10_000) / 1_000)  # 0.1 ms .. 1.1 ms

    def throttled(self, lane: int, t: float) -> bool:
        if self.throttle_probability <= 0:
            return False
        episode = math.floor(t / self.throttle_episode_s)
        return random.Random(hash((self.seed, lane, episode))).random() < self.throttle_probability


# How a simulated preparation splits into the steps the real worker reports.
_PREPARE_SHARES = {"load": 0.6, "allocate": 0.1, "warm_up": 0.3}


class SimulatedWorkers(Workers):
    """Jobs on `gpus` simulated GPUs, on a virtual clock (`clock`, seconds)."""

    def __init__(
        self,
        gpu: SimulatedGpu,
        gpus: int | Sequence[int] = 1,
        latency: Callable[[MeasureInput], float] | None = None,
    ) -> None:
        self.gpu = gpu
        self.gpus = list(range(gpus)) if isinstance(gpus, int) else list(gpus)
        if not self.gpus:
            raise ValueError("gpus cannot be empty.")
        self.clock = 0.0
        self.jobs: list[tuple[int, float, float, bool]] = []  # (lane, started, done, alone)
        self._latency = latency or (lambda item: gpu.true_latency(item.artifact))
        self._rng = random.Random(gpu.seed)
        self._events: list[tuple[float, int, str, Job, object]] = []
        self._order = itertools.count()
        self._window_free = [0.0] * len(self.gpus)
        self._on_gpu: list[list[Job]] = [[] for _ in self.gpus]

    def now(self) -> float:
        return self.clock

    def start(self, job: Job, plan: TimingPlan) -> None:
        prepare = self.gpu.prepare_s * math.exp(self._rng.gauss(0.0, self.gpu.prepare_spread))
        self._on_gpu[job.lane].append(job)
        self._push(self.clock + prepare, "prepared", job, (plan, prepare))

    def wait(self) -> list[tuple[Job, Outcome]]:
        while self._events:
            t, _, kind, job, payload = heapq.heappop(self._events)
            self.clock = t
            if kind == "prepared":
                self._time(job, *payload)  # type: ignore[misc]
                continue
            self._on_gpu[job.lane].remove(job)
            self.jobs.append((job.lane, job.started, t, job.alone))
            return [(job, payload)]  # type: ignore[list-item]
        raise RuntimeError("wait() was called with no job in flight")

    def _push(self, t: float, kind: str, job: Job, payload: object) -> None:
        heapq.heappush(self._events, (t, next(self._order), kind, job, payload))

    def _time(self, job: Job, plan: TimingPlan, prepare: float) -> None:
        """The job is prepared: time it (in the window, or overlapping) and schedule its end."""
        g, t, lane = self.gpu, self.clock, job.lane
        extra = max(0, len(self._on_gpu[lane]) - g.quiet_until)
        steps = {step: share * prepare for step, share in _PREPARE_SHARES.items()}
        if self._rng.random() < g.crash_probability + g.crash_per_extra * extra:
            failed = Outcome(None, "measurement crashed the worker process", "crash", steps=steps)
            self._push(t, "done", job, failed)
            return
        true = self._latency(job.item)
        if not (math.isfinite(true) and true > 0):
            self._push(
                t, "done", job, Outcome(None, "the candidate failed to run", "error", steps=steps)
            )
            return
        start = max(t, self._window_free[lane]) if job.exclusive else t
        crowd = 0 if job.exclusive or job.alone else extra  # timings that overlap this one
        slow = (g.throttle_slowdown if g.throttled(lane, start) else 1.0) * (
            1 + g.interference * crowd
        )
        sigma = g.noise + g.interference_noise * crowd
        launches = plan.launches(true)
        samples: list[float] = []
        held = g.window_overhead_s
        while True:
            per_launch = true * slow * math.exp(self._rng.gauss(0.0, sigma))
            samples.append(per_launch)
            held += per_launch * launches + g.repeat_overhead_s
            reason = verdict(samples, plan, job.best_s)
            if reason is not None:
                break
        end = start + held
        if job.exclusive:
            self._window_free[lane] = end
        steps.update(wait=start - t, timed=held, check=g.check_s)
        outcome = Outcome(
            tuple(samples), finite=True, raced=reason == RACED, steps=steps, window=(start, end)
        )
        self._push(end + g.check_s, "done", job, outcome)


class SimulatedEngine(ParallelEngine):
    """The parallel engine on `gpus` simulated GPUs. `latency(item)` gives a candidate's true
    seconds per run in isolation (default: from a hash of its artifact name; a non-finite
    value makes it fail). `virtual_s` is the virtual time all measure() calls took: what a
    caller charges to its ledger as measuring time (device-hours are that x GPUs held)."""

    device_type = "cuda"

    def __init__(
        self,
        gpu: SimulatedGpu | None = None,
        controller: DopController | None = None,
        *,
        gpus: int | Sequence[int] = 1,
        fixed_dop: int | None = None,
        overlap_timing: bool = False,
        plan: TimingPlan | None = None,
        latency: Callable[[MeasureInput], float] | None = None,
    ) -> None:
        self.gpu = gpu or SimulatedGpu()
        super().__init__(
            SimulatedWorkers(self.gpu, gpus, latency),
            controller,
            fixed_dop=fixed_dop,
            overlap_timing=overlap_timing,
            plan=plan,
        )

    @property
    def virtual_s(self) -> float:
        return self.workers.clock  # type: ignore[attr-defined]
