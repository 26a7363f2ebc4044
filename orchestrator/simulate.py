"""A stand-in for a GPU when none is lent (`--simulate`): the search and the CUDA builds are
real, the timings come from a deterministic landscape, and everything says SIMULATED."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Callable
from typing import Any

# What a simulated run calls itself in prints, reports and file names.
WORD = "SIMULATED"
# The device a simulated run stands for (its price comes from configs/prices.toml).
DEVICE_NAME = "NVIDIA H100 80GB HBM3"

# (task key, task FLOPs, candidate key or None for the default schedule)
Label = tuple[str, float, int | None]


def _unit(*parts: object) -> float:
    """A number in [0, 1) that depends only on `parts`."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


@dataclasses.dataclass(frozen=True, kw_only=True)
class Landscape:
    """True per-call latencies of a simulated GPU.

    Each task has a floor: its FLOPs at `efficiency` x `peak_flops`, plus a launch overhead. A
    tuned candidate runs at floor x exp(spread x |z|), z standard normal drawn from the (task,
    candidate) pair: most candidates are 2-4x off the floor, the best of a few hundred comes
    close to it. The default schedule runs at floor x exp(spread x q), q drawn per task from
    [0.1, 2): on some tasks the default is hard to beat, on others easily beaten, as on a real
    GPU where dlight's schedules are good for some operators and poor for others.
    """

    peak_flops: float = 60e12  # fp32, about an H100's
    efficiency: float = 0.5
    launch_s: float = 3e-6
    spread: float = 1.0
    seed: int = 0

    def floor_s(self, flops: float) -> float:
        return self.launch_s + flops / (self.peak_flops * self.efficiency)

    def latency(self, label: Label) -> float:
        task, flops, candidate = label
        floor = self.floor_s(flops)
        if candidate is None:
            return floor * math.exp(self.spread * (0.1 + 1.9 * _unit(self.seed, task, "default")))
        u1 = max(_unit(self.seed, task, candidate, 1), 1e-12)
        u2 = _unit(self.seed, task, candidate, 2)
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)  # Box-Muller
        return floor * math.exp(self.spread * abs(z))

    def of_input(self, item: Any) -> float:
        """The latency of a MeasureInput whose `label` the loop set."""
        return self.latency(item.label)


def stand_in_gpu(seed: int = 0) -> Any:
    """The simulated device: the per-step costs our engine measured on a lent H100
    (measure/calibration/nvidia-h100.json)."""
    from tune_orchestrator.measure.simulated import SimulatedGpu

    return SimulatedGpu.calibrated("nvidia-h100", seed=seed)


class VirtualClock:
    """The wall clock of a simulated run: real time, plus the time the simulated device spent
    measuring (`attach` its engine's `virtual_s`), less the background work that a real device
    would have hidden behind that measuring (`overlapped`)."""

    def __init__(self, real: Callable[[], float] = time.monotonic) -> None:
        self._real = real
        self._device: Callable[[], float] = lambda: 0.0
        self._hidden = 0.0

    def attach(self, device_s: Callable[[], float]) -> None:
        self._device = device_s

    def overlapped(self, seconds: float) -> None:
        """`seconds` of real time ran while the device was (virtually) busy."""
        self._hidden += seconds

    def __call__(self) -> float:
        return self._real() + self._device() - self._hidden
