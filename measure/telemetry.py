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


# NVML clock-event reasons that mean the GPU is being slowed down (not idle, not app clocks).
_SLOWDOWN = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
}


class GpuTelemetry:
    """Samples of the GPUs' state around measurement batches. Reads only; every field that
    NVML cannot give here is None."""

    def __init__(self, indices: Sequence[int]) -> None:
        self.indices = list(indices)
        self._nvml = _nvml()
        self._handles: dict[int, Any] = {}
        if self._nvml is not None:
            for i in self.indices:
                try:
                    self._handles[i] = self._nvml.nvmlDeviceGetHandleByIndex(i)
                except Exception:
                    pass

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def sample(self) -> list[dict[str, Any]]:
        return [self._sample(i) for i in self.indices]

    def _sample(self, index: int) -> dict[str, Any]:
        nvml, handle = self._nvml, self._handles.get(index)
        row: dict[str, Any] = {"index": index}

        def read(key: str, fn: Any, scale: float = 1.0) -> None:
            try:
                value = fn()
                row[key] = value * scale if isinstance(value, (int, float)) else value
            except Exception:  # not supported here: unknown
                row[key] = None

        if handle is None:
            for key in (
                "name",
                "sm_clock_mhz",
                "max_sm_clock_mhz",
                "temperature_c",
                "power_w",
                "energy_j",
            ):
                row[key] = None
            row["slowdown"], row["pids"] = [], []
            return row
        read("name", lambda: str(nvml.nvmlDeviceGetName(handle)))
        read("sm_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        read("max_sm_clock_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
        read(
            "temperature_c",
            lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
        )
        read("power_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle), 1e-3)
        read("energy_j", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle), 1e-3)
        try:
            reasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
            row["slowdown"] = [name for bit, name in _SLOWDOWN.items() if reasons & bit]
        except Exception:
            row["slowdown"] = []
        try:
            row["pids"] = [p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)]
        except Exception:
            row["pids"] = []
        return row

    @staticmethod
    def batch(
        before: list[dict[str, Any]], after: list[dict[str, Any]], *, candidates: int, dop: int
    ) -> dict[str, Any]:
        """What one batch cost and saw: energy per candidate, lowest SM clock, hottest, power,
        slow-downs, and compute processes that are not this run's."""
        ours = _our_pids()
        energy = [
            a["energy_j"] - b["energy_j"]
            for b, a in zip(before, after, strict=True)
            if a.get("energy_j") is not None and b.get("energy_j") is not None
        ]
        clocks = [a["sm_clock_mhz"] for a in after if a.get("sm_clock_mhz") is not None]
        temps = [a["temperature_c"] for a in after if a.get("temperature_c") is not None]
        power = [a["power_w"] for a in after if a.get("power_w") is not None]
        return {
            "candidates": candidates,
            "dop": dop,
            "energy_per_candidate_j": sum(energy) / candidates if energy and candidates else None,
            "sm_clock_mhz": min(clocks) if clocks else None,
            "temperature_c": max(temps) if temps else None,
            "power_w": max(power) if power else None,
            "slowdown": sorted({s for a in after for s in a.get("slowdown", [])}),
            "other_pids": sorted({p for a in after for p in a.get("pids", []) if p not in ours}),
        }

    @staticmethod
    def summary(batches: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Totals for the report, with warnings for throttling and shared GPUs."""
        energy = [
            b["energy_per_candidate_j"] * b["candidates"]
            for b in batches
            if b["energy_per_candidate_j"] is not None
        ]
        candidates = sum(
            b["candidates"] for b in batches if b["energy_per_candidate_j"] is not None
        )
        slow = [b for b in batches if b["slowdown"]]
        others = sorted({p for b in batches for p in b["other_pids"]})
        warnings = []
        if slow:
            reasons = sorted({s for b in slow for s in b["slowdown"]})
            warnings.append(
                f"the GPU was slowed down ({', '.join(reasons)}) during {len(slow)} of {len(batches)} batches"
            )
        if others:
            warnings.append(
                f"other processes used the GPU while measuring (pids {', '.join(map(str, others))})"
            )
        clocks = [b["sm_clock_mhz"] for b in batches if b["sm_clock_mhz"] is not None]
        temps = [b["temperature_c"] for b in batches if b["temperature_c"] is not None]
        return {
            "batches": len(batches),
            "energy_j": sum(energy) if energy else None,
            "energy_per_candidate_j": sum(energy) / candidates if candidates else None,
            "min_sm_clock_mhz": min(clocks) if clocks else None,
            "max_temperature_c": max(temps) if temps else None,
            "throttled_batches": len(slow),
            "other_pids": others,
            "warnings": warnings,
        }

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass


def _our_pids() -> set[int]:
    """This process and its descendants (our measuring workers)."""
    import os

    try:
        import psutil

        me = psutil.Process(os.getpid())
        return {me.pid, *(c.pid for c in me.children(recursive=True))}
    except Exception:
        return {os.getpid()}
