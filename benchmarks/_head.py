"""A model of the head node of a GPU run: the tuning loop's pipeline (orchestrator/run/loop.py)
on a virtual clock, with the head's CPUs shared by what runs on them and the GPUs measuring in
the product's own engine (measure/parallel.py on the calibrated simulated GPU).

Per round, as the loop runs it with pipelining: while the GPUs measure round i, a background
thread prepares round i+1 (waits for its search, then builds it in the pool of one worker per
core), and searches of the next `ahead` rounds run in threads of their own; once both are done
the main thread refits the learned model, then round i+1 is measured. The head's cores are
shared equally by the threads that want them (processor sharing): a build worker is one thread,
a search `cores // ahead` threads splitting its work, a refit one thread, and on a GPU host each
GPU's measuring workers take `measure_host_s` per candidate. What each costs in CPU-seconds is
measured (head_costs.py); the GPUs' seconds come from the engine, which knows nothing of the
CPUs (its calibration's steps were measured on a loaded 16-core host).
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable
from typing import Any

from tune_orchestrator.measure._figures import covered


@dataclasses.dataclass(frozen=True, kw_only=True)
class Costs:
    """CPU-seconds the head pays: each build (drawn from measured ones), a round's search
    (fixed + per candidate), a refit (fixed + per sample held, at most `max_samples`), and per
    candidate the measuring workers on a GPU host."""

    build_s: tuple[float, ...]
    search_fixed_s: float
    search_per_candidate_s: float
    fit_fixed_s: float
    fit_per_sample_s: float
    max_samples: int = 4096
    measure_host_s: float = 0.0

    def search_s(self, candidates: int) -> float:
        return self.search_fixed_s + self.search_per_candidate_s * candidates

    def fit_s(self, samples: int) -> float:
        return self.fit_fixed_s + self.fit_per_sample_s * min(samples, self.max_samples)

    def on(self, speed: float) -> Costs:
        """The same work on cores `speed` times as fast as those it was measured on."""
        return Costs(
            build_s=tuple(b / speed for b in self.build_s),
            search_fixed_s=self.search_fixed_s / speed,
            search_per_candidate_s=self.search_per_candidate_s / speed,
            fit_fixed_s=self.fit_fixed_s / speed,
            fit_per_sample_s=self.fit_per_sample_s / speed,
            max_samples=self.max_samples,
            measure_host_s=self.measure_host_s / speed,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setup:
    """One configuration: the head's cores, the GPUs, whether they sit on the head or in a
    fleet (measured one candidate at a time per server over RPC), and how long it runs."""

    cores: int
    gpus: int
    fleet: bool = False
    seconds: float = 1200.0
    rounds: int | None = None  # stop after this many rounds, whatever the time
    seed: int = 0
    # Builds on the GPU hosts ([build] rpc_key): this many cores there build, not the head's;
    # each build pays `remote_build_s` more there (its session, the module and library sent).
    build_cores: int = 0
    remote_build_s: float = 0.0


# CPU-seconds below which a thread counts as done (the clock's rounding must not stall it).
_EPSILON = 1e-6


class Cpu:
    """`cores` shared equally by the runnable threads, on a virtual clock."""

    def __init__(self, cores: int) -> None:
        self.cores = cores
        self.now = 0.0
        self.busy_s = 0.0  # core-seconds worked
        self.kind_s: dict[str, float] = {}  # thread-seconds by kind (a build worker's wall)
        self._threads: dict[int, list[Any]] = {}  # id -> [work left, kind, done]
        self._ids = itertools.count()

    def start(self, work: float, kind: str, done: Callable[[], None]) -> None:
        self._threads[next(self._ids)] = [max(work, _EPSILON), kind, done]

    def rate(self) -> float:
        return min(1.0, self.cores / len(self._threads)) if self._threads else 0.0

    def next_done(self) -> float:
        """When the next thread finishes at the current rate (inf with none)."""
        if not self._threads:
            return float("inf")
        return self.now + min(t[0] for t in self._threads.values()) / self.rate()

    def advance(self, until: float) -> None:
        """Run to `until` (never past the next finish); call the finished threads' `done`."""
        dt, rate = until - self.now, self.rate()
        if dt > 0 and self._threads:
            self.busy_s += dt * min(self.cores, len(self._threads))
            for thread in self._threads.values():
                thread[0] -= dt * rate
                self.kind_s[thread[1]] = self.kind_s.get(thread[1], 0.0) + dt
        self.now = max(self.now, until)
        finished = [k for k, t in self._threads.items() if t[0] <= _EPSILON]
        for k in finished:
            self._threads.pop(k)[2]()


@dataclasses.dataclass
class _Round:
    index: int
    task: Any
    size: int
    searched: bool = False
    search_started: bool = False
    built: bool = False
    on_searched: Callable[[], None] | None = None


class HeadRun:
    """One run of `setup` with `costs`, rounds planned by `plan(i) -> (task, size)`, measured by
    `engine` (a SimulatedEngine whose latency reads MeasureInput labels)."""

    def __init__(
        self,
        setup: Setup,
        costs: Costs,
        plan: Callable[[int], tuple[Any, int]],
        engine: Any,
        ahead: int,
    ) -> None:
        self.setup, self.costs, self.plan, self.engine = setup, costs, plan, engine
        self.cpu = Cpu(setup.cores)
        self.builders = Cpu(setup.build_cores) if setup.build_cores else self.cpu
        self.ahead = ahead
        self.rng = random.Random(setup.seed)
        self.rounds: dict[int, _Round] = {}
        self.best: dict[str, float] = {}
        self.measured = 0
        self.gpu_done = float("inf")
        self.waited = {"gpus": 0.0, "search": 0.0, "builds": 0.0, "refit": 0.0}  # main thread
        self.log: list[tuple[int, int, float, float]] = []  # (round, size, measure start, end)

    def round(self, i: int) -> _Round:
        if i not in self.rounds:
            task, size = self.plan(i)
            self.rounds[i] = _Round(i, task, size)
        return self.rounds[i]

    # -- head work ------------------------------------------------------------------------

    def search(self, r: _Round) -> None:
        """Start a round's search, `cores // ahead` threads splitting its work."""
        if r.search_started:
            return
        r.search_started = True
        threads = max(1, self.setup.cores // max(1, self.ahead))
        left = [threads]

        def one_done() -> None:
            left[0] -= 1
            if not left[0]:
                r.searched = True
                if r.on_searched:
                    r.on_searched()

        for _ in range(threads):
            self.cpu.start(self.costs.search_s(r.size) / threads, "search", one_done)

    def prepare(self, r: _Round) -> None:
        """The background round: its search (started ahead or now), then its builds."""

        def build() -> None:
            queue = [self._build_s() + self.setup.remote_build_s for _ in range(r.size)]
            running = [0]

            def next_build() -> None:
                if queue:
                    running[0] += 1
                    self.builders.start(queue.pop(), "build", finished)

            def finished() -> None:
                running[0] -= 1
                next_build()
                if not queue and not running[0]:
                    r.built = True

            for _ in range(min(self.builders.cores, r.size)):
                next_build()

        r.on_searched = build
        self.search(r)
        if r.searched:
            build()

    def _build_s(self) -> float:
        return self.rng.choice(self.costs.build_s)

    # -- the GPUs -------------------------------------------------------------------------

    def measure(self, r: _Round) -> None:
        """Hand round r to the engine; its virtual seconds say when the GPUs are done."""
        from tune_orchestrator.measure import MeasureInput

        task = r.task
        items = [
            MeasureInput(
                f"r{r.index}-c{j}.so",
                task.args,
                label=(task.key, task.flops, r.index * 100_000 + j),
            )
            for j in range(r.size)
        ]
        before = self.engine.virtual_s
        results = self.engine.measure(items, best_s=self.best.get(task.key))
        seconds = self.engine.virtual_s - before
        times = [m.mean_s for m in results if m.ok]
        if times:
            self.best[task.key] = min(times + [self.best.get(task.key, float("inf"))])
        self.measured += len(results)
        self.gpu_done = self.cpu.now + seconds
        self.log.append((r.index, r.size, self.cpu.now, self.gpu_done))
        if self.costs.measure_host_s and not self.setup.fleet:
            share = self.costs.measure_host_s * r.size / self.setup.gpus
            for _ in range(self.setup.gpus):
                self.cpu.start(share, "measure", lambda: None)

    # -- the loop -------------------------------------------------------------------------

    def wait_for(self, cause: str, ready: Callable[[], bool]) -> None:
        """Run the clock until `ready()`, charging the main thread's wait to `cause`."""
        start = self.cpu.now
        # The build hosts' clock first: a search finishing on the head starts its builds there,
        # which must start at the time reached, not be advanced over it.
        clocks = [self.cpu] if self.builders is self.cpu else [self.builders, self.cpu]
        while not ready():
            gpus = self.gpu_done if self.gpu_done > self.cpu.now else float("inf")
            target = min([c.next_done() for c in clocks] + [gpus])
            if target == float("inf"):
                raise RuntimeError("the head model deadlocked")
            for clock in clocks:
                clock.advance(target)
        self.waited[cause] += self.cpu.now - start

    def run(self) -> dict[str, Any]:
        """Round 0 prepared in the foreground, then the pipelined loop until the time is up."""
        first = self.round(0)
        self.prepare(first)
        self.wait_for("search", lambda: first.searched)
        self.wait_for("builds", lambda: first.built)
        i = 0
        while self.cpu.now < self.setup.seconds and i != self.setup.rounds:
            r, nxt = self.round(i), self.round(i + 1)
            self.measure(r)
            self.prepare(nxt)
            for j in range(i + 2, i + 2 + self.ahead):
                self.search(self.round(j))
            self.wait_for("gpus", lambda: self.cpu.now >= self.gpu_done)
            self.wait_for("search", lambda nxt=nxt: nxt.searched)
            self.wait_for("builds", lambda nxt=nxt: nxt.built)
            self.refit()
            i += 1
        return self.figures()

    def refit(self) -> None:
        """The learned model refitted on the main thread, on what has been measured."""
        done = [False]
        self.cpu.start(self.costs.fit_s(self.measured), "refit", lambda: done.__setitem__(0, True))
        self.wait_for("refit", lambda: done[0])

    def figures(self) -> dict[str, Any]:
        wall = self.cpu.now
        figures = self.engine.figures  # windows past its keep are folded into held_s
        held = sum(figures.held_s) + sum(
            covered(w, -float("inf"), float("inf")) for w in figures.windows
        )
        kind = {**self.cpu.kind_s, **self.builders.kind_s}
        return {
            "cores": self.setup.cores,
            "gpus": self.setup.gpus,
            "fleet": self.setup.fleet,
            "wall_s": wall,
            "rounds": len(self.log),
            "candidates": self.measured,
            "candidates_per_s": self.measured / wall,
            "gpu_busy": held / (self.setup.gpus * wall),
            "build_cores": self.builders.cores,
            "builds_remote": self.builders is not self.cpu,
            "build_pool_busy": self.builders.kind_s.get("build", 0.0)
            / (self.builders.cores * wall),
            "head_cpu_busy": self.cpu.busy_s / (self.setup.cores * wall),
            "thread_s": {k: round(v, 1) for k, v in kind.items()},
            "waited": {k: v / wall for k, v in self.waited.items()},
            "dop": getattr(self.engine, "dop", None),
        }
