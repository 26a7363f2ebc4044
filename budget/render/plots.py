"""The report's plots: convergence (latency against spend), phases and tasks."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..grammar import DEVICE_HOURS, DOLLARS, WALL

PLOTS = "plots"


def write_plots(report: Mapping[str, Any], folder: Path) -> dict[str, Path]:
    """convergence.png (latency against spend, stop point, forecast), phases.png, tasks.png."""
    plt = _pyplot()

    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    curve = report["convergence"]
    if curve:
        axes_kinds = [DEVICE_HOURS if report["spend"]["device_h"] else WALL]
        if curve[-1]["usd"] is not None:
            axes_kinds.append(DOLLARS)
        fig, axes = plt.subplots(
            1, len(axes_kinds), figsize=(6 * len(axes_kinds), 4), squeeze=False
        )
        for ax, kind in zip(axes[0], axes_kinds, strict=True):
            _convergence(ax, report, kind)
        fig.tight_layout()
        written["convergence"] = _save(fig, folder / "convergence.png")
        plt.close(fig)
    phases = {k: v for k, v in report["phases"].items() if v > 0}
    if phases:
        fig, ax = plt.subplots(figsize=(6, 0.4 * len(phases) + 1))
        names = sorted(phases, key=phases.get)
        ax.barh(names, [phases[n] / 60 for n in names], color="#4c72b0")
        ax.set_xlabel("minutes")
        ax.set_title("Spend by phase")
        fig.tight_layout()
        written["phases"] = _save(fig, folder / "phases.png")
        plt.close(fig)
    tuned = [t for t in report["tasks"] if t["untuned_s"] and t["best_s"]]
    if tuned:
        fig, ax = plt.subplots(figsize=(6, 0.5 * len(tuned) + 1.2))
        labels = [t["name"][:40] for t in tuned]
        y = range(len(tuned))
        ax.barh(
            [i + 0.2 for i in y],
            [t["untuned_s"] * 1e6 for t in tuned],
            height=0.4,
            label="untuned",
            color="#c44e52",
        )
        ax.barh(
            [i - 0.2 for i in y],
            [t["best_s"] * 1e6 for t in tuned],
            height=0.4,
            label="tuned",
            color="#55a868",
        )
        ax.set_yticks(list(y), labels, fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("microseconds per call")
        ax.legend()
        fig.tight_layout()
        written["tasks"] = _save(fig, folder / "tasks.png")
        plt.close(fig)
    return written


def _convergence(ax: Any, report: Mapping[str, Any], kind: str) -> None:
    scale, label = {
        WALL: (1 / 60, "minutes"),
        DEVICE_HOURS: (1.0, "GPU-hours"),
        DOLLARS: (1.0, "US dollars"),
    }[kind]
    key = {WALL: "wall_s", DEVICE_HOURS: "device_h", DOLLARS: "usd"}[kind]
    # Milliseconds end to end, where the untuned model was timed; else the kernel time.
    e2e = end_to_end_scale(report)
    to_ms = 1e3 * (e2e or 1.0)
    xs = [p[key] * scale for p in report["convergence"]]
    ys = [p["latency_s"] * to_ms for p in report["convergence"]]
    what = "kernel-time estimate, scaled" if e2e else "model kernel time (estimate)"
    ax.plot(xs, ys, marker="o", markersize=3, label=what)
    ax.scatter([xs[-1]], [ys[-1]], color="black", zorder=3, label="stop")
    forecast = report.get("forecast")
    if forecast and forecast["kind"] == kind and forecast["left"] > 0:
        ax.plot(
            [xs[-1], (forecast["spent"] + forecast["left"]) * scale],
            [ys[-1], forecast["latency_s"] * to_ms],
            linestyle="--",
            color="gray",
            label="forecast to the budget",
        )
    for limit in report["budget"]["limits"]:
        if limit["kind"] == kind:
            ax.axvline(
                limit["amount"] * scale,
                color="#c44e52",
                linewidth=1,
                label=f"budget {limit['limit']}",
            )
    summary = report["summary"]
    if summary["untuned_latency_s"]:
        ax.axhline(
            summary["untuned_latency_s"] * 1e3,
            color="#c44e52",
            linestyle=":",
            label="untuned model, timed at the end",
        )
    if summary["tuned_latency_s"]:
        ax.scatter(
            [xs[-1]],
            [summary["tuned_latency_s"] * 1e3],
            marker="*",
            s=90,
            color="#55a868",
            zorder=4,
            label="tuned model, timed at the end",
        )
    ax.set_xlabel(label)
    ax.set_ylabel("end-to-end latency, ms" if e2e else "model kernel time, ms")
    ax.set_yscale("log")
    ax.set_title(f"{'End-to-end latency' if e2e else 'Kernel time'} against {label}")
    ax.legend(fontsize=7)


def end_to_end_scale(report: Mapping[str, Any]) -> float | None:
    """What turns the run's kernel-time estimate (sum of weight x latency of the tasks) into
    end-to-end latency: untuned end-to-end latency / untuned kernel time; None where either
    is unknown (no model timed, a task never measured untuned).

    A ratio rather than an added offset: isolated task timings can sum to more than the
    model's run (an offset then goes negative as kernels speed up), and a ratio keeps every
    relative gain (the scheduler's and the forecast's terms) and the log axis's shape. The
    untuned latency is the headline's, so the curve starts on the untuned line and ends where
    the estimate says; the tuned model's own timing is drawn beside it as a point, so how far
    the scaled estimate strays shows."""
    untuned_s = report["summary"]["untuned_latency_s"]
    tasks = report["tasks"]
    if not untuned_s or not tasks or any(t["untuned_s"] is None for t in tasks):
        return None
    kernels_s = sum(t["weight"] * t["untuned_s"] for t in tasks)
    return untuned_s / kernels_s if kernels_s > 0 else None


def _pyplot() -> Any:
    """matplotlib's pyplot, drawing to files. Where its config and cache folders (under
    XDG_CACHE_HOME) cannot be made it says so on stderr and uses temporary ones: for three
    PNGs nothing to act on, so that is not said."""
    import logging

    quiet = logging.getLogger("matplotlib")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    finally:
        quiet.setLevel(level)
    return plt


def _save(fig: Any, path: Path) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    return path
