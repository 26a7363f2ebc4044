"""A simulated GPU for tests, benchmarks and `--simulate`: the parallel engine's own scheduling
(parallel.py) on simulated workers that run on a virtual clock, holding each GPU's window the
way the real CUDA worker does (_cuda_worker.py, _window.py).

A job loads its module (`load_s`, outside the window), then holds the window shared for its
device work before timing (allocate, warm up, check: `prepare_s`, slowed by `shared_contention`
per other job holding it shared at once: they share the GPU and the host), then holds it alone
while it times its repeats, with the same adaptive rule as the real worker (_timing.py). The
window serves requests in arrival order, shared ones together, and a waiting timer lets no
later shared request pass (the real turnstile). With `check_after_timing` the check is a
second shared hold after the timing, as the engine did until 2026-11-26. A worker process's
first job pays `worker_start_s` (imports and a CUDA context) unless it was started warm; warm
workers, started with the engine, are ready `ready_s` after the clock's start; and each
process's first preparation pays `first_job_s` more (kernels loaded once a process).
Overlapping timings (`exclusive=False` jobs) slow each other (`interference` per extra kernel
beyond `quiet_until`, with noise that grows too). A discrete-event schedule gives the virtual
seconds, so nothing sleeps. The GPU also runs throttled in random episodes, and a job crashes
with a small probability that grows with the number of jobs on its GPU. `SimulatedGpu.
calibrated(name)` takes the step costs measured on a real GPU (calibration/<name>.json, written
from a real run's report; replay.py).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import heapq
import itertools
import json
import math
import random
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

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
    load_s: float = 0.0  # loading the module, outside the window
    prepare_s: float = 0.01  # allocate + warm up + check, holding the window shared (median)
    prepare_spread: float = 0.3  # log-normal sigma of the preparation time
    shared_contention: float = 0.0  # slowdown of a shared hold per other shared holder
    check_s: float = 0.001  # the NaN / Inf check's part of prepare_s
    check_after_timing: bool = False  # the check as a second shared hold, after the timing
    worker_start_s: float = 0.0  # a worker's first job: imports, a CUDA context
    first_job_s: float = 0.0  # a worker's first preparation, on top: kernels cupy loads once
    repeat_overhead_s: float = 2e-5  # per repeat: recording and waiting for an event pair
    window_overhead_s: float = 1e-4  # per window: taking and releasing it, one warm launch
    seed: int = 0

    @classmethod
    def calibrated(cls, name: str, **overrides: Any) -> SimulatedGpu:
        """The step costs measured on a real GPU, from the package's calibration/<name>.json
        (written by benchmarks/calibrate_simulator.py), with `overrides`."""
        text = resources.files(__package__).joinpath("calibration", f"{name}.json").read_text()
        costs = json.loads(text)["simulated_gpu"]
        return cls(**{**costs, **overrides})

    def true_latency(self, artifact: str) -> float:
        digest = int(hashlib.sha256(artifact.encode()).hexdigest()[:8], 16)
        return 1e-4 * (1.0 + (digest % 10_000) / 1_000)  # 0.1 ms .. 1.1 ms

    def throttled(self, lane: int, t: float) -> bool:
        if self.throttle_probability <= 0:
            return False
        episode = math.floor(t / self.throttle_episode_s)
        return random.Random(hash((self.seed, lane, episode))).random() < self.throttle_probability


# How a simulated preparation splits into the steps the real worker reports (check apart).
_PREPARE_SHARES = {"allocate": 0.1, "warm_up": 0.9}


@dataclasses.dataclass
class _Window:
    """One GPU's window: who holds it, and the requests waiting, in arrival order."""

    timed: Job | None = None
    shared: int = 0
    queue: collections.deque = dataclasses.field(default_factory=collections.deque)


class SimulatedWorkers(Workers):
    """Jobs on `gpus` simulated GPUs, on a virtual clock (`clock`, seconds); `warm` worker
    processes per GPU start with the engine and are ready at `ready_s` (the rest start on their
    first job)."""

    def __init__(
        self,
        gpu: SimulatedGpu,
        gpus: int | Sequence[int] = 1,
        latency: Callable[[MeasureInput], float] | None = None,
        warm: int = 1,
        ready_s: float = 0.0,
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
        self._windows = [_Window() for _ in self.gpus]
        self._on_gpu: list[list[Job]] = [[] for _ in self.gpus]
        # Idle worker processes per GPU: those that ran a job, and those that never did.
        self._idle = [0] * len(self.gpus)
        self._fresh = [warm] * len(self.gpus)
        self._ready_s = ready_s
        self.shared_holds: list[list[tuple[float, float]]] = [[] for _ in self.gpus]
        self._state: dict[int, dict[str, Any]] = {}  # per job in flight (by id)

    def now(self) -> float:
        return self.clock

    def start(self, job: Job, plan: TimingPlan) -> None:
        lane, g = job.lane, self.gpu
        self._on_gpu[lane].append(job)
        # The process idle longest takes it (the pool's threads queue for jobs): a fresh one.
        delay, first = max(0.0, self._ready_s - self.clock), True
        if self._fresh[lane]:
            self._fresh[lane] -= 1
        elif self._idle[lane]:
            self._idle[lane] -= 1
            delay, first = 0.0, False
        else:  # a worker process starts for it
            delay = g.worker_start_s
        steps = {"load": g.load_s, "wait": 0.0}
        self._state[id(job)] = {"plan": plan, "steps": steps, "first": first}
        self._push(self.clock + delay + g.load_s, "loaded", job, None)

    def wait(self) -> list[tuple[Job, Outcome]]:
        while self._events:
            t, _, kind, job, payload = heapq.heappop(self._events)
            self.clock = t
            if kind != "done":
                self._step(kind, job, payload)
                continue
            self._on_gpu[job.lane].remove(job)
            self._idle[job.lane] += 1
            self._state.pop(id(job), None)
            self.jobs.append((job.lane, job.started, t, job.alone))
            return [(job, payload)]  # type: ignore[list-item]
        raise RuntimeError("wait() was called with no job in flight")

    # -- a job's steps ----------------------------------------------------------------------

    def _step(self, kind: str, job: Job, payload: object) -> None:
        if kind == "loaded":
            self._ask(job, "shared", "prepare")
        elif kind == "granted":
            self._granted(job, payload)  # type: ignore[arg-type]
        elif kind == "released":
            self._release(job, payload)  # type: ignore[arg-type]

    def _ask(self, job: Job, mode: str, purpose: str) -> None:
        if not job.exclusive and mode == "timed":  # overlapping timings take no window
            self._push(self.clock, "granted", job, (mode, purpose, self.clock))
            return
        self._windows[job.lane].queue.append((job, mode, purpose, self.clock))
        self._serve(job.lane)

    def _serve(self, lane: int) -> None:
        """Grant from the head of the queue while it can be: shared requests together, a
        timed one alone; a waiting timed request holds back everyone behind it (the real
        window's turnstile)."""
        window = self._windows[lane]
        while window.queue and window.timed is None:
            job, mode, purpose, asked = window.queue[0]
            if mode == "timed" and window.shared:
                return
            window.queue.popleft()
            if mode == "timed":
                window.timed = job
            else:
                window.shared += 1
            self._push(self.clock, "granted", job, (mode, purpose, asked))

    def _granted(self, job: Job, grant: tuple[str, str, float]) -> None:
        mode, purpose, asked = grant
        state = self._state[id(job)]
        state["steps"]["wait"] += self.clock - asked
        if mode == "timed":
            self._time(job, state)
            return
        g = self.gpu
        crowd = max(0, self._windows[job.lane].shared - 1)
        slow = 1.0 + g.shared_contention * crowd
        if purpose == "check":
            seconds = g.check_s * slow
            state["steps"]["check"] = seconds
        else:
            prepare = g.prepare_s * math.exp(self._rng.gauss(0.0, g.prepare_spread)) * slow
            prepare += g.first_job_s if state["first"] else 0.0
            check = 0.0 if g.check_after_timing else min(prepare, g.check_s * slow)
            state["steps"].update(
                {s: share * (prepare - check) for s, share in _PREPARE_SHARES.items()}
            )
            state["steps"]["check"] = check
            seconds = prepare
        self.shared_holds[job.lane].append((self.clock, self.clock + seconds))
        self._push(self.clock + seconds, "released", job, (mode, purpose))

    def _release(self, job: Job, held: tuple[str, str]) -> None:
        mode, purpose = held
        window = self._windows[job.lane]
        if mode == "timed" and job.exclusive:
            window.timed = None
        elif mode == "shared":
            window.shared -= 1
        self._serve(job.lane)
        state = self._state[id(job)]
        if purpose == "prepare":
            self._prepared(job, state)
        elif purpose == "timing" and self.gpu.check_after_timing and state["outcome"].run_secs:
            self._ask(job, "shared", "check")
        else:
            outcome = state["outcome"]
            self._push(self.clock, "done", job, dataclasses.replace(outcome, steps=state["steps"]))

    def _prepared(self, job: Job, state: dict[str, Any]) -> None:
        """Prepared: fail it (a crash, a candidate that does not run) or ask to time it."""
        g, lane = self.gpu, job.lane
        extra = max(0, len(self._on_gpu[lane]) - g.quiet_until)
        steps = state["steps"]
        if self._rng.random() < g.crash_probability + g.crash_per_extra * extra:
            state["outcome"] = Outcome(None, "measurement crashed the worker process", "crash")
        elif not (math.isfinite(true := self._latency(job.item)) and true > 0):
            state["outcome"] = Outcome(None, "the candidate failed to run", "error")
        else:
            state["true"] = true
            self._ask(job, "timed", "timing")
            return
        self._push(self.clock, "done", job, dataclasses.replace(state["outcome"], steps=steps))

    def _time(self, job: Job, state: dict[str, Any]) -> None:
        """Hold the window (or overlap others) while the repeats run; release at the end."""
        g, lane, start = self.gpu, job.lane, self.clock
        plan, true = state["plan"], state["true"]
        extra = max(0, len(self._on_gpu[lane]) - g.quiet_until)
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
        state["steps"]["timed"] = held
        state["outcome"] = Outcome(
            tuple(samples), finite=True, raced=reason == RACED, window=(start, start + held)
        )
        self._push(start + held, "released", job, ("timed", "timing"))

    def _push(self, t: float, kind: str, job: Job, payload: object) -> None:
        heapq.heappush(self._events, (t, next(self._order), kind, job, payload))


class SimulatedEngine(ParallelEngine):
    """The parallel engine on `gpus` simulated GPUs. `latency(item)` gives a candidate's true
    seconds per run in isolation (default: from a hash of its artifact name; a non-finite
    value makes it fail). `warm` worker processes per GPU start with the engine (default: as
    many as the DOP can reach; the real engine starts as many as the DOP starts at), ready at
    `ready_s`. `virtual_s` is the virtual time all measure() calls took: what a caller charges
    to its ledger as measuring time (device-hours are that x GPUs held)."""

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
        warm: int | None = None,
        ready_s: float = 0.0,
    ) -> None:
        self.gpu = gpu or SimulatedGpu()
        controller = controller or DopController()
        if warm is None:
            warm = fixed_dop or controller.ceiling
        super().__init__(
            SimulatedWorkers(self.gpu, gpus, latency, warm, ready_s),
            controller,
            fixed_dop=fixed_dop,
            overlap_timing=overlap_timing,
            plan=plan,
        )

    @property
    def virtual_s(self) -> float:
        return self.workers.clock  # type: ignore[attr-defined]
