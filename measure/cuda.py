"""The CUDA engine: candidates timed on the device, in parallel, on every GPU given.

Each GPU gets a pool of worker processes (one CUDA context each, up to the DOP ceiling). A
batch puts up to DOP candidates on every GPU at once; each worker loads its candidate,
allocates inputs once per workload (cupy, handed to TVM through DLPack), warms up and times
with CUDA events. Loading and allocation of some candidates overlap the timed runs of others;
with `overlap_timing=False` the timed sections themselves are serialised per GPU. A candidate
that crashes or hangs costs one result; its worker is replaced. Telemetry is read around each
batch.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import _cuda_worker
from ._pool import WorkerPool
from .base import MeasureInput, Measurement
from .dop import DopController
from .local import TimerConfig
from .parallel import ParallelEngine
from .telemetry import GpuTelemetry


def cuda_available() -> bool:
    """cupy can use a GPU here (the engine needs it; TVM alone is not enough)."""
    try:
        import cupy

        return bool(cupy.cuda.is_available())
    except Exception:  # cupy missing, or no driver
        return False


class CudaEngine(ParallelEngine):
    device_type = "cuda"

    def __init__(
        self,
        *,
        gpus: Sequence[int] = (0,),
        controller: DopController | None = None,
        fixed_dop: int | None = None,
        timer: TimerConfig | None = None,
        timeout_s: float = 30.0,
        flush_l2: bool = False,
        overlap_timing: bool = True,
        log_path: str | Path | None = None,
    ) -> None:
        if not gpus:
            raise ValueError("gpus cannot be empty.")
        try:
            import cupy  # noqa: F401
        except ImportError:
            raise RuntimeError(
                "measuring on NVIDIA GPUs needs cupy: pip install 'tune-orchestrator[gpu]'"
            ) from None
        controller = controller or DopController()
        super().__init__(controller, fixed_dop=fixed_dop)
        self.gpus = list(gpus)
        self.lanes = len(self.gpus)
        self.timer = timer or TimerConfig()
        self.flush_l2 = flush_l2
        workers = max(fixed_dop or 0, controller.config.max_dop)
        self._pools = {
            g: WorkerPool(
                workers=workers,
                timeout_s=timeout_s,
                log_path=log_path,
                initializer=functools.partial(_cuda_worker.warm_up, g),
            )
            for g in self.gpus
        }
        self._locks = {
            g: None
            if overlap_timing
            else str(Path(tempfile.gettempdir()) / f"tune-orchestrator-timing-gpu{g}.lock")
            for g in self.gpus
        }
        self.telemetry = GpuTelemetry(self.gpus)
        self.batch_telemetry: list[dict[str, Any]] = []

    def _run(self, inputs: Sequence[MeasureInput], dop: int) -> list[Measurement]:
        before = self.telemetry.sample()
        t = self.timer
        futures = []
        for i, item in enumerate(inputs):
            gpu = self.gpus[i % len(self.gpus)]
            futures.append(
                (
                    gpu,
                    self._pools[gpu].submit(
                        _cuda_worker.measure,
                        item.artifact,
                        gpu,
                        item.args,
                        t.number,
                        t.repeat,
                        t.min_repeat_ms,
                        self.flush_l2,
                        self._locks[gpu],
                    ),
                )
            )
        results = []
        for gpu, future in futures:
            value, error = self._pools[gpu].outcome(future, "measurement")
            if error:
                results.append(Measurement(None, error, dop=dop))
            else:
                run_secs, finite = value
                results.append(Measurement(tuple(run_secs), finite=finite, dop=dop))
        after = self.telemetry.sample()
        self.batch_telemetry.append(
            GpuTelemetry.batch(before, after, candidates=len(inputs), dop=dop)
        )
        return results

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self.telemetry.close()

    def stats(self) -> dict[str, object]:
        return {
            **super().stats(),
            "gpus": self.gpus,
            "telemetry": GpuTelemetry.summary(self.batch_telemetry),
        }
