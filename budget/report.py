"""The cost report's JSON form (`report.json`): what was spent, what it bought, why it stopped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SCHEMA = "tune-orchestrator/report"
VERSION = 1


def task_row(
    *,
    name: str,
    index: int,
    weight: int,
    flops: float,
    trials: int,
    failures: int,
    rounds: int,
    untuned_s: float | None,
    best_s: float | None,
    done: str | None,
) -> dict[str, Any]:
    """One task's line: latencies are of one call; speedup is untuned / best."""
    speedup = untuned_s / best_s if untuned_s and best_s else None
    return {
        "index": index,
        "name": name,
        "weight": weight,
        "flops": flops,
        "trials": trials,
        "failures": failures,
        "rounds": rounds,
        "untuned_s": untuned_s,
        "best_s": best_s,
        "speedup": speedup,
        "gflops": flops / best_s / 1e9 if best_s else None,
        "done": done,
    }


def make_report(
    *,
    model: Mapping[str, Any],
    target: Mapping[str, Any],
    settings: Mapping[str, Any],
    budget: str,
    build_only: bool,
    sessions: int,
    tasks: Sequence[Mapping[str, Any]],
    untuned: Mapping[str, Any] | None,
    tuned: Mapping[str, Any] | None,
    spend: Mapping[str, Any],
    stop_reason: str,
    paths: Mapping[str, str],
) -> dict[str, Any]:
    """The whole report. `untuned` / `tuned` hold {"latency": {...}, "check": {...}}."""
    untuned_s = _median(untuned)
    tuned_s = _median(tuned)
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "model": dict(model),
        "target": dict(target),
        "budget": budget,
        "build_only": build_only,
        "sessions": sessions,
        "summary": {
            "untuned_latency_s": untuned_s,
            "tuned_latency_s": tuned_s,
            "speedup": untuned_s / tuned_s if untuned_s and tuned_s else None,
            "trials": spend.get("trials", 0),
            "rounds": spend.get("rounds", 0),
            "wall_s": spend.get("wall_s", 0.0),
            "stop_reason": stop_reason,
            "check_ok": (tuned or {}).get("check", {}).get("ok"),
        },
        "untuned": dict(untuned) if untuned else None,
        "tuned": dict(tuned) if tuned else None,
        "tasks": [dict(t) for t in tasks],
        "spend": dict(spend),
        "settings": dict(settings),
        "paths": dict(paths),
    }


def _median(section: Mapping[str, Any] | None) -> float | None:
    if not section or not section.get("latency"):
        return None
    return section["latency"]["median_s"]
