"""The RPC engine: candidates measured on a fleet registered with a TVM RPC tracker.

TVM's tracker and servers are the existing machinery for this: servers registered under one
key form a pool, and the tracker lends each server to one session at a time, so every server
is one timed window (a GPU server measures one candidate at a time). The parallel engine's
scheduling keeps one candidate in flight per server (or `--parallelism N`); each job uploads
the artifact, times it there with the adaptive rule of a local GPU and checks the outputs for
NaN / Inf (_rpc_worker.py). Only the tracker the user named is ever contacted.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Sequence
from typing import Any

from . import _rpc_worker
from ._pool import WorkerPool
from ._timing import TimingPlan
from ._workers import Job, Outcome, Workers, settle_finished
from .base import MeasureInput
from .local import TimerConfig
from .parallel import ParallelEngine


def parse_tracker(address: str) -> tuple[str, int]:
    """`host:port` -> (host, port); ValueError naming the form otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--rpc {address!r} is not HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


def tracker_keys(host: str, port: int, *, timeout_s: float = 10.0) -> dict[str, int]:
    """Server keys registered with the tracker and how many servers each has (free or busy).
    A tracker that does not answer is an OSError within `timeout_s`: TVM's own client retries
    a refused connection for a minute, logging a warning every 5 s."""
    import socket

    from tvm import rpc

    socket.create_connection((host, port), timeout=timeout_s).close()

    summary = rpc.connect_tracker(host, port).summary()
    counts: dict[str, int] = {}
    for info in summary.get("server_info", []):
        key = str(info.get("key", "")).split(":")[-1]
        counts[key] = counts.get(key, 0) + 1
    return counts


_CUDA_ATTRIBUTES = (
    "exist",
    "compute_version",
    "max_threads_per_block",
    "max_shared_memory_per_block",
    "warp_size",
    "device_name",
)


def remote_cuda(host: str, port: int, key: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """What a target needs to know of the first GPU of a server under `key`: the attributes
    of tvm.cuda(0) there ({"exist": False} on a server without one). ValueError when no
    server under the key became free within `timeout_s`."""
    found: dict[str, Any] = {}
    failed: list[BaseException] = []

    def ask() -> None:
        from tvm import rpc

        try:
            session = rpc.connect_tracker(host, port).request(key, priority=0, session_timeout=60)
            dev = session.cuda(0)
            found["exist"] = bool(dev.exist)
            if found["exist"]:
                for name in _CUDA_ATTRIBUTES[1:]:
                    found[name] = getattr(dev, name)
        except Exception as exc:  # reported below, in one line
            failed.append(exc)

    asker = threading.Thread(target=ask, name="remote-target", daemon=True)
    asker.start()
    asker.join(timeout_s)
    if asker.is_alive():
        raise ValueError(f"no server under key {key!r} became free within {timeout_s:g} s")
    if failed:
        raise ValueError(f"cannot open a session on a server under key {key!r}: {failed[0]}")
    return found


def evaluator_config(timer: TimerConfig) -> Any:
    """MetaSchedule's EvaluatorConfig for our timer settings."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

    return EvaluatorConfig(
        number=timer.number,
        repeat=timer.repeat,
        min_repeat_ms=timer.min_repeat_ms,
        enable_cpu_cache_flush=timer.cpu_cache_flush,
    )


def runner_inputs(inputs: Sequence[MeasureInput], device_type: str) -> list[Any]:
    """MetaSchedule RunnerInputs for built artifacts (what its runners take)."""
    from tvm.s_tir.meta_schedule.arg_info import TensorInfo
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    return [
        RunnerInput(
            item.artifact,
            device_type,
            [TensorInfo(dtype, list(shape)) for dtype, shape in item.args],
        )
        for item in inputs
    ]


class RpcWorkers(Workers):
    """`slots` candidates in flight on the fleet, each in a process of our pool; a slot is
    one lane of the scheduler (the tracker picks the server)."""

    def __init__(
        self,
        *,
        tracker: tuple[str, int],
        key: str,
        device_type: str,
        slots: int,
        timeout_s: float,
        cpu_cache_flush: bool,
    ) -> None:
        self.gpus = list(range(slots))
        self.tracker, self.key = tracker, key
        self.device_type = device_type
        self.timeout_s = timeout_s
        self.cpu_cache_flush = cpu_cache_flush
        self._pool = WorkerPool(workers=slots, timeout_s=timeout_s)
        self._running: dict[concurrent.futures.Future, Job] = {}

    def now(self) -> float:
        return time.monotonic()

    def start(self, job: Job, plan: TimingPlan) -> None:
        future = self._pool.submit(
            _rpc_worker.measure,
            self.tracker,
            self.key,
            self.timeout_s,
            job.item.artifact,
            self.device_type,
            job.item.args,
            plan,
            job.best_s,
            self.cpu_cache_flush,
        )
        self._running[future] = job

    def wait(self) -> list[tuple[Job, Outcome]]:
        return settle_finished(self._running, lambda job: self._pool, "RPC measurement")

    def stats(self) -> dict[str, Any]:
        return {
            "tracker": f"{self.tracker[0]}:{self.tracker[1]}",
            "key": self.key,
            "in_flight": len(self.gpus),
            "gpus": [],  # the fleet's servers measure; `busy` is per slot in flight
        }

    def close(self) -> None:
        self._pool.close()


class RpcEngine(ParallelEngine):
    """Measures on the servers registered under `key` with the tracker at host:port."""

    def __init__(
        self,
        *,
        tracker: str,
        key: str,
        device_type: str = "cpu",
        plan: TimingPlan | None = None,
        cpu_cache_flush: bool = False,
        timeout_s: float = 60.0,
        workers: int | None = None,
    ) -> None:
        """`workers`: candidates in flight at once; default one per server under `key`."""
        host, port = parse_tracker(tracker)
        if workers is None:
            workers = max(1, tracker_keys(host, port).get(key, 0))
        self.workers_in_flight = workers
        self.device_type = device_type
        super().__init__(
            RpcWorkers(
                tracker=(host, port),
                key=key,
                device_type=device_type,
                slots=workers,
                timeout_s=timeout_s,
                cpu_cache_flush=cpu_cache_flush,
            ),
            fixed_dop=1,
            plan=plan,
        )
