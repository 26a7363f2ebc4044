"""GPU telemetry through NVML, read-only: this module never changes any device setting.

NVML being absent (no driver, no `nvidia-ml-py`) or a query being unsupported means
"unknown" (None), never an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _nvml() -> Any | None:
    """The initialised pynvml module, or None where NVML cannot be used."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError (library not found, driver not loaded, ...)
        return None
    return pynvml


class NvmlEnergy:
    """Cumulative energy (joules) of the given GPUs from NVML's total-energy counters."""

    def __init__(self, nvml: Any, indices: Sequence[int]) -> None:
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in indices]

    def __call__(self) -> float | None:
        try:
            millijoules = sum(
                self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self._handles
            )
        except Exception:  # not supported on this GPU (pre-Volta) or the device went away
            return None
        return millijoules / 1e3


def energy_meter(device_type: str, indices: Sequence[int] = (0,)) -> NvmlEnergy | None:
    """An energy meter for the run's GPUs, or None when energy cannot be read here."""
    if device_type != "cuda":
        return None
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        meter = NvmlEnergy(nvml, indices)
    except Exception:
        return None
    return meter if meter() is not None else None
