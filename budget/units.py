"""How amounts are written for people: durations, latencies, and spend in each budget unit."""

from __future__ import annotations

import math

from .grammar import DEVICE_HOURS, DOLLARS, TRIALS, WALL


def counted(count: int, noun: str) -> str:
    """`count` of a noun that takes an s: "1 round", "3 rounds"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def fmt_duration(seconds: float) -> str:
    """12.3s, 4m05s, 1h02m."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def fmt_amount(kind: str, value: float | None) -> str:
    """An amount in the unit people use for its kind: 4m05s, 1.21 GPU-h, $3.02, 190 kJ."""
    if value is None:
        return "unknown"
    if kind == WALL:
        return fmt_duration(value)
    if kind == DEVICE_HOURS:
        return f"{value:.3g} GPU-h"
    if kind == DOLLARS:
        return f"${value:.2f}"
    if kind == TRIALS:
        return counted(int(round(value)), "trial")
    return f"{value / 1e3:.3g} kJ"


def fmt_latency(seconds: float | None) -> str:
    """1.91 ms, 512 us, 1.20 s."""
    if seconds is None:
        return "n/a"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def fmt_budget_up(kind: str, value: float) -> str:
    """A budget string of at least `value`, rounded up as a person would give it: 4min, 2h,
    0.05gpu-h, $0.13."""
    if kind == WALL:
        minutes = max(1, math.ceil(value / 60.0))
        return f"{math.ceil(minutes / 60)}h" if minutes >= 120 else f"{minutes}min"
    if kind == DEVICE_HOURS:
        return f"{math.ceil(value * 100) / 100:g}gpu-h"
    if kind == DOLLARS:
        return f"${math.ceil(value * 100) / 100:.2f}"
    return f"{math.ceil(value)}"
