"""The CUDA engine: candidates timed on the device, on every GPU given, with the scheduling of
parallel.py. Each GPU gets a pool of worker processes (one CUDA context each, as many as the DOP
may reach): as many as the DOP starts at are started at once, so that their start-up overlaps
the caller's own work; the others start as the DOP rises (each imports TVM and cupy and makes a
context: 16 at once during the untuned baseline competed with its builds for the host's cores).
Each job is _cuda_worker.measure. A candidate that crashes or hangs costs one result; its worker is
replaced, as is one whose CUDA context a candidate broke. NVML telemetry is read around each
measure() call.
"""

from __future__ import annotations

import concurrent.futures
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import _cuda_worker
from ._pool import WorkerPool, ready_summary
from ._timing import TimingPlan
from ._workers import Job, Outcome, Workers, settle_finished
from .dop import DopController
from .lockfiles import lock_folder
from .parallel import ParallelEngine
from .telemetry import GpuTelemetry, physical_gpu


def cuda_available() -> bool:
    """cupy can use a GPU here (the engine needs it; TVM alone is not enough)."""
    try:
        import cupy

        return bool(cupy.cuda.is_available())
    except Exception:  # cupy missing, or no driver
        return False


def window_path(cuda_index: int, *, on_skip: Callable[[str], None] | None = None) -> str:
    """The timed window's lock file of a GPU, shared by every user's processes on this host
    (its turnstile beside it); `on_skip` hears why it is this user's own instead."""
    name = f"window-{physical_gpu(cuda_index).replace(':', '_')}.lock"
    return str(lock_folder([name, name + ".gate"], on_skip=on_skip) / name)


class CudaWorkers(Workers):
    """Up to `per_gpu` measuring processes on each of `gpus`, `first` of them started now."""

    def __init__(
        self,
        gpus: Sequence[int],
        *,
        per_gpu: int,
        timeout_s: float,
        log_path: str | Path | None = None,
        first: int | None = None,
        on_skip: Callable[[str], None] | None = None,
    ) -> None:
        if not gpus:
            raise ValueError("gpus cannot be empty.")
        self.gpus = list(gpus)
        self.per_gpu = per_gpu
        self.timeout_s = timeout_s
        self._pools = [
            WorkerPool(
                workers=per_gpu,
                timeout_s=timeout_s,
                log_path=log_path,
                initializer=functools.partial(_cuda_worker.warm_up, gpu),
            )
            for gpu in self.gpus
        ]
        self.first = min(per_gpu, first or per_gpu)
        for pool in self._pools:
            pool.start(self.first)
        self._windows = [window_path(gpu, on_skip=on_skip) for gpu in self.gpus]
        self._running: dict[concurrent.futures.Future, Job] = {}
        self.telemetry = GpuTelemetry(self.gpus)
        self.batch_telemetry: list[dict[str, Any]] = []  # one per measure() call
        self._before: list[dict[str, Any]] = []

    def now(self) -> float:
        return time.monotonic()

    def start(self, job: Job, plan: TimingPlan) -> None:
        future = self._pools[job.lane].submit(
            _cuda_worker.measure,
            job.item.artifact,
            self.gpus[job.lane],
            job.item.args,
            plan,
            job.best_s,
            self._windows[job.lane] if job.exclusive else None,
            self.timeout_s / 2,  # the other half is for timing: a hang elsewhere is not ours
        )
        self._running[future] = job

    def wait(self) -> list[tuple[Job, Outcome]]:
        return settle_finished(self._running, lambda job: self._pools[job.lane], "measurement")

    def begin(self) -> None:
        self._before = self.telemetry.sample()

    def end(self, candidates: int, dop: int) -> None:
        after = self.telemetry.sample()
        self.batch_telemetry.append(
            GpuTelemetry.batch(self._before, after, candidates=candidates, dop=dop)
        )

    def stats(self) -> dict[str, Any]:
        return {
            "telemetry": GpuTelemetry.summary(self.batch_telemetry),
            "workers_ready_s": ready_summary(
                self.first * len(self._pools), [s for pool in self._pools for s in pool.ready_s]
            ),
        }

    def close(self) -> None:
        for pool in self._pools:
            pool.close()
        self.telemetry.close()


class CudaEngine(ParallelEngine):
    """The parallel engine on NVIDIA GPUs (needs cupy)."""

    device_type = "cuda"

    def __init__(
        self,
        *,
        gpus: Sequence[int] = (0,),
        controller: DopController | None = None,
        fixed_dop: int | None = None,
        plan: TimingPlan | None = None,
        timeout_s: float = 30.0,
        overlap_timing: bool = False,
        log_path: str | Path | None = None,
        on_skip: Callable[[str], None] | None = None,
    ) -> None:
        """`on_skip` hears why a GPU's timed window is not the one other users' runs share."""
        try:
            import cupy  # noqa: F401
        except ImportError:
            raise RuntimeError(
                "measuring on NVIDIA GPUs needs cupy: pip install 'tune-orchestrator[gpu]'"
            ) from None
        controller = controller or DopController()
        per_gpu = fixed_dop or controller.config.max_dop
        first = fixed_dop or controller.config.start
        super().__init__(
            CudaWorkers(
                gpus,
                per_gpu=per_gpu,
                timeout_s=timeout_s,
                log_path=log_path,
                first=first,
                on_skip=on_skip,
            ),
            controller,
            fixed_dop=fixed_dop,
            overlap_timing=overlap_timing,
            plan=plan,
        )
