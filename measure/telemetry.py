"""GPU telemetry through NVML, read-only: this module never changes any device setting.

NVML being absent (no driver, no `nvidia-ml-py`) or a query being unsupported means
"unknown" (None), never an error. GPUs are named by their CUDA index, as everywhere else in
this project; NVML numbers them its own way (all GPUs, PCI order), so each CUDA index is
matched to its NVML device by PCI bus id, or else through CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
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


def driver_version() -> str | None:
    """The NVIDIA driver's version, None where NVML cannot tell."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        text = nvml.nvmlSystemGetDriverVersion()
    except Exception:  # NVMLError: "not supported" means unknown
        return None
    return text.decode() if isinstance(text, bytes) else str(text)


def visible_entry(cuda_index: int, env: Mapping[str, str] | None = None) -> str | None:
    """The CUDA_VISIBLE_DEVICES entry (an index or a UUID) behind CUDA device `cuda_index`,
    or None when the variable is not set."""
    text = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if text is None:
        return None
    entries = [e.strip() for e in text.split(",") if e.strip()]
    return entries[cuda_index] if 0 <= cuda_index < len(entries) else ""


def _pci_bus_id(cuda_index: int) -> str | None:
    try:
        import cupy

        return str(cupy.cuda.runtime.deviceGetPCIBusId(cuda_index))
    except Exception:  # no cupy, no driver, no such device
        return None


def nvml_handle(nvml: Any, cuda_index: int, env: Mapping[str, str] | None = None) -> Any:
    """NVML's handle for CUDA device `cuda_index`; raises when there is none."""
    bus = _pci_bus_id(cuda_index)
    if bus:
        return nvml.nvmlDeviceGetHandleByPciBusId(bus)  # convertStrBytes takes str
    entry = visible_entry(cuda_index, env)
    if entry is None:
        return nvml.nvmlDeviceGetHandleByIndex(cuda_index)
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry))
    for i in range(nvml.nvmlDeviceGetCount()):  # a UUID, possibly shortened
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        uuid = nvml.nvmlDeviceGetUUID(handle)
        if entry and (uuid.decode() if isinstance(uuid, bytes) else str(uuid)).startswith(entry):
            return handle
    raise LookupError(f"no NVML device for CUDA device {cuda_index} ({entry!r})")


def physical_gpu(cuda_index: int, env: Mapping[str, str] | None = None) -> str:
    """A name for the GPU behind CUDA device `cuda_index` that is the same in every process
    on this host, whatever their CUDA_VISIBLE_DEVICES: its PCI bus id when a driver answers."""
    bus = _pci_bus_id(cuda_index)
    if bus:
        return bus.lower()
    entry = visible_entry(cuda_index, env)
    return str(cuda_index) if entry is None else entry or f"invisible-{cuda_index}"


class NvmlEnergy:
    """Cumulative energy (joules) of the given GPUs from NVML's total-energy counters."""

    def __init__(self, nvml: Any, indices: Sequence[int]) -> None:
        self._nvml = nvml
        self._handles = [nvml_handle(nvml, i) for i in indices]

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
                    self._handles[i] = nvml_handle(self._nvml, i)
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
        """What one batch cost and saw, in all and per GPU: energy per candidate, lowest SM
        clock, hottest, power, slow-downs, and compute processes that are not this run's."""
        ours = _our_pids()
        gpus = [_gpu_row(b, a, ours) for b, a in zip(before, after, strict=True)]
        energy = [g["energy_j"] for g in gpus if g["energy_j"] is not None]
        clocks = [g["sm_clock_mhz"] for g in gpus if g["sm_clock_mhz"] is not None]
        temps = [g["temperature_c"] for g in gpus if g["temperature_c"] is not None]
        power = [g["power_w"] for g in gpus if g["power_w"] is not None]
        return {
            "candidates": candidates,
            "dop": dop,
            "energy_per_candidate_j": sum(energy) / candidates if energy and candidates else None,
            "sm_clock_mhz": min(clocks) if clocks else None,
            "temperature_c": max(temps) if temps else None,
            "power_w": max(power) if power else None,
            "slowdown": sorted({s for g in gpus for s in g["slowdown"]}),
            "other_pids": sorted({p for g in gpus for p in g["other_pids"]}),
            "gpus": gpus,
        }

    @staticmethod
    def summary(batches: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Totals for the report, per GPU too, with warnings for throttling and shared GPUs."""
        energy = [
            b["energy_per_candidate_j"] * b["candidates"]
            for b in batches
            if b["energy_per_candidate_j"] is not None
        ]
        candidates = sum(
            b["candidates"] for b in batches if b["energy_per_candidate_j"] is not None
        )
        per_gpu = _per_gpu(batches)
        warnings = []
        for g in per_gpu:
            if g["throttled_batches"]:
                warnings.append(
                    f"GPU {g['index']} was slowed down ({', '.join(g['slowdown'])}) during "
                    f"{g['throttled_batches']} of {len(batches)} batches"
                )
        others = sorted({p for b in batches for p in b["other_pids"]})
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
            "throttled_batches": sum(1 for b in batches if b["slowdown"]),
            "other_pids": others,
            "per_gpu": per_gpu,
            "warnings": warnings,
        }

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass


def _gpu_row(before: dict[str, Any], after: dict[str, Any], ours: set[int]) -> dict[str, Any]:
    """One GPU over one batch."""
    energy = None
    if after.get("energy_j") is not None and before.get("energy_j") is not None:
        energy = after["energy_j"] - before["energy_j"]
    return {
        "index": after["index"],
        "energy_j": energy,
        "sm_clock_mhz": after.get("sm_clock_mhz"),
        "temperature_c": after.get("temperature_c"),
        "power_w": after.get("power_w"),
        "slowdown": list(after.get("slowdown", [])),
        "other_pids": sorted(p for p in after.get("pids", []) if p not in ours),
    }


def _per_gpu(batches: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each GPU's totals over the batches."""
    rows: dict[int, list[dict[str, Any]]] = {}
    for b in batches:
        for g in b.get("gpus", []):
            rows.setdefault(g["index"], []).append(g)
    out = []
    for index, seen in sorted(rows.items()):
        energy = [g["energy_j"] for g in seen if g["energy_j"] is not None]
        clocks = [g["sm_clock_mhz"] for g in seen if g["sm_clock_mhz"] is not None]
        temps = [g["temperature_c"] for g in seen if g["temperature_c"] is not None]
        out.append(
            {
                "index": index,
                "energy_j": sum(energy) if energy else None,
                "min_sm_clock_mhz": min(clocks) if clocks else None,
                "max_temperature_c": max(temps) if temps else None,
                "throttled_batches": sum(1 for g in seen if g["slowdown"]),
                "slowdown": sorted({s for g in seen for s in g["slowdown"]}),
            }
        )
    return out


def _our_pids() -> set[int]:
    """This process and its descendants (our measuring workers)."""
    try:
        import psutil

        me = psutil.Process(os.getpid())
        return {me.pid, *(c.pid for c in me.children(recursive=True))}
    except Exception:
        return {os.getpid()}
