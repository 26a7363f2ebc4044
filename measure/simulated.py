"""A simulated GPU for tests: it misbehaves the way real GPUs do, so the DOP controller and the
parallel engine are tested without one.

Each candidate has a true latency (from its artifact name). A measurement is that latency
with log-normal noise; kernels timed concurrently slow each other down by `interference` per
extra kernel (with noise that also grows with concurrency); a batch may run throttled; and a
candidate crashes with a small probability that grows with concurrency.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from collections.abc import Sequence

from .base import MeasureInput, Measurement
from .dop import DopController
from .parallel import ParallelEngine


@dataclasses.dataclass(frozen=True, kw_only=True)
class SimulatedGpu:
    noise: float = 0.01  # log-normal sigma of an isolated timing
    interference: float = 0.0  # relative slowdown per extra concurrent kernel
    interference_noise: float = 0.0  # extra sigma per extra concurrent kernel
    quiet_until: int = 1  # concurrency that costs nothing (idle SMs absorb it)
    throttle_probability: float = 0.0  # a batch runs throttled
    throttle_slowdown: float = 1.3
    crash_probability: float = 0.0  # per candidate in isolation
    crash_per_extra: float = 0.0  # added per extra concurrent kernel
    seed: int = 0

    def true_latency(self, artifact: str) -> float:
        digest = int(hashlib.sha256(artifact.encode()).hexdigest()[:8], 16)
        return 1e-4 * (1.0 + (digest % 10_000) / 1_000)  # 0.1 ms .. 1.1 ms


class SimulatedEngine(ParallelEngine):
    """The parallel engine on a SimulatedGpu."""

    device_type = "cuda"

    def __init__(
        self,
        gpu: SimulatedGpu,
        controller: DopController | None = None,
        *,
        fixed_dop: int | None = None,
        repeat: int = 3,
    ) -> None:
        super().__init__(controller or DopController(), fixed_dop=fixed_dop)
        self.gpu = gpu
        self.repeat = repeat
        self._rng = random.Random(gpu.seed)

    def _run(self, inputs: Sequence[MeasureInput], dop: int) -> list[Measurement]:
        g, out = self.gpu, []
        throttled = self._rng.random() < g.throttle_probability
        for start in range(0, len(inputs), dop):
            group = inputs[start : start + dop]
            extra = max(0, len(group) - g.quiet_until)
            for item in group:
                if self._rng.random() < g.crash_probability + g.crash_per_extra * extra:
                    out.append(Measurement(None, "measurement crashed the worker process", dop=dop))
                    continue
                base = g.true_latency(item.artifact) * (1 + g.interference * extra)
                if throttled:
                    base *= g.throttle_slowdown
                sigma = g.noise + g.interference_noise * extra
                secs = tuple(
                    base * math.exp(self._rng.gauss(0.0, sigma)) for _ in range(self.repeat)
                )
                out.append(Measurement(secs, dop=dop, finite=True))
        return out
