"""How amounts are written for people: durations, latencies, and spend in each budget unit."""

from __future__ import annotations

from .grammar import DEVICE_HOURS, DOLLARS, TRIALS, WALL


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
        return f"{int(round(value))} trials"
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
