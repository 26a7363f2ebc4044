"""Prices: USD per hour for a GPU (by the name NVML reports) or a CPU machine (by core count)."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from typing import Any

from tune_orchestrator import configs


@dataclasses.dataclass(frozen=True)
class Price:
    """What one hour of the run costs, and where that figure came from."""

    usd_per_hour: float
    source: str  # e.g. "configs/prices.toml: NVIDIA H100 80GB HBM3", "--price"

    def __post_init__(self) -> None:
        if not self.usd_per_hour >= 0:
            raise ValueError(f"a price cannot be negative but got {self.usd_per_hour}.")


def load_table(text: str | None = None) -> dict[str, Any]:
    return tomllib.loads(text if text is not None else configs.read_text("prices.toml"))


def run_price(
    *,
    device_type: str,
    device_name: str,
    devices: int,
    cores: int,
    override: float | None = None,
    table: Mapping[str, Any] | None = None,
) -> Price | None:
    """The price of one hour of this run; None when the table does not know the device.

    `override` (--price) is per GPU on GPU runs and per machine on CPU runs.
    """
    table = table if table is not None else load_table()
    if device_type == "cuda":
        if override is not None:
            return Price(override * devices, f"--price {override:g} x {devices} GPU(s)")
        per_gpu = table.get("gpu", {}).get(device_name)
        if per_gpu is None:
            return None
        return Price(per_gpu * devices, f"configs/prices.toml: {device_name} x {devices}")
    if override is not None:
        return Price(override, f"--price {override:g}")
    cpu = table.get("cpu", {})
    by_cores = {int(k): float(v) for k, v in cpu.get("cores", {}).items()}
    if cores in by_cores:
        return Price(by_cores[cores], f"configs/prices.toml: {cores}-core machine")
    if "per_core" in cpu:
        return Price(
            float(cpu["per_core"]) * cores, f"configs/prices.toml: {cores} cores x per_core"
        )
    return None
