"""The cost report's data (`report.json`): what was spent, what it bought, why it stopped.

The schema is `budget/report.schema.json`; `render.py` turns a report into Markdown, HTML
and plots.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from .forecast import fit_curve
from .grammar import Budget
from .ledger import Point, Spend
from .limits import budget_status, primary_limit

SCHEMA = "tune-orchestrator/report"
VERSION = 1
# Phases shown as "spend by phase"; "idle" is wall time in none of them.
PHASES = (
    "import",
    "library",  # reading the tuning library, training on it, adding to it
    "restore",
    "untuned",
    "search",
    "build",
    "measure",
    "learn",
    "filter",
    "ahead",  # waiting for a round prepared in the background to be ready
    "compile",
    "check",
    "report",  # rendering and writing the report
)


def schema() -> dict[str, Any]:
    """The JSON Schema every report.json validates against."""
    return json.loads(resources.files(__package__).joinpath("report.schema.json").read_text())


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskWork:
    """What one task was given: trials measured (and how many failed) in how many rounds;
    candidates its searches proposed, the filter set aside, were built, audited, and left
    waiting; the seconds its rounds took."""

    trials: int
    failures: int
    rounds: int
    proposed: int = 0
    filtered: int = 0
    built: int = 0
    audited: int = 0
    waiting: int = 0
    spend_s: float = 0.0


def task_row(
    *,
    name: str,
    index: int,
    weight: int,
    flops: float,
    work: TaskWork,
    untuned_s: float | None,
    best_s: float | None,
    retired: str | None,
    schedule: str,
    share: float | None = None,
) -> dict[str, Any]:
    """One task's line: latencies are of one call; speedup is untuned / best; `schedule` is
    the one the compiled model uses, "tuned" (the best record) or "default" (the schedule the
    task has untuned, when nothing tuned beat it); `share` its share of the model's kernel time
    as it runs now (scheduler.current_shares)."""
    return {
        "index": index,
        "name": name,
        "weight": weight,
        "flops": flops,
        **{k: v for k, v in dataclasses.asdict(work).items() if k != "spend_s"},
        "untuned_s": untuned_s,
        "best_s": best_s,
        "speedup": untuned_s / best_s if untuned_s and best_s else None,
        "gflops": flops / best_s / 1e9 if best_s else None,
        "spend_s": work.spend_s,
        "share": share,
        "retired": retired,
        "schedule": schedule,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What was run, and where: the model, the target, the settings, the budget and its price,
    whether it only compiled, its sessions, its files, its provenance (when, with which
    versions, on which host, by what command), and the simulated GPU's figures (None: a real
    device measured)."""

    model: Mapping[str, Any]
    target: Mapping[str, Any]
    settings: Mapping[str, Any]
    budget: Budget
    price: Mapping[str, Any] | None
    build_only: bool
    sessions: int
    paths: Mapping[str, str]
    provenance: Mapping[str, Any]
    simulated: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outcome:
    """What the run ended with: the untuned and tuned builds ({"latency": ..., "check": ...}),
    how they compared when timed in turn (None: not timed), which one model.so is
    (deploy.shipment.Shipment), and why and how it stopped."""

    untuned: Mapping[str, Any] | None
    tuned: Mapping[str, Any] | None
    comparison: Mapping[str, Any] | None = None
    shipment: Mapping[str, Any]
    stop_reason: str
    stop: str = ""
    interrupted: bool = False
    budget_too_small: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Notes:
    """What the run says of itself: warnings, what it skipped in files it read, and how its
    filter, measurement, search and tuning library went."""

    warnings: Sequence[str] = ()
    skipped: Mapping[str, int] | None = None
    candidate_filter: Mapping[str, Any] | None = None
    measurement: Mapping[str, Any] | None = None
    search: Mapping[str, Any] | None = None
    library: Mapping[str, Any] | None = None


def make_report(
    facts: RunFacts,
    outcome: Outcome,
    *,
    tasks: Sequence[Mapping[str, Any]],
    spend: Spend,
    curve: Sequence[Point],
    notes: Notes = Notes(),
) -> dict[str, Any]:
    """The whole report (`report.json`), built once; render.py only formats it."""
    phases = dict(spend.phases)
    accounted = sum(phases.get(p, 0.0) for p in PHASES)
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "provenance": dict(facts.provenance),
        "model": dict(facts.model),
        "target": dict(facts.target),
        "budget": {
            "text": str(facts.budget),
            "limits": budget_status(facts.budget, spend),
            "longest_step": _longest_step(spend),
        },
        "price": dict(facts.price) if facts.price else None,
        "build_only": facts.build_only,
        # Timings from a simulated GPU (--simulate): None for a run on a real device.
        "simulated": dict(facts.simulated) if facts.simulated else None,
        "sessions": facts.sessions,
        "summary": _summary(outcome, tasks, spend),
        **_notes(notes),
        "untuned": dict(outcome.untuned) if outcome.untuned else None,
        "tuned": dict(outcome.tuned) if outcome.tuned else None,
        "comparison": dict(outcome.comparison) if outcome.comparison else None,
        "tasks": [dict(t) for t in tasks],
        "spend": spend.to_dict(),
        "phases": {
            **{p: phases.get(p, 0.0) for p in PHASES},
            "idle": max(0.0, spend.wall_s - accounted),
        },
        "overlapped": dict(spend.overlapped),
        "measuring_share": phases.get("measure", 0.0) / spend.wall_s if spend.wall_s else 0.0,
        "convergence": [_point(p) for p in curve],
        "forecast": _forecast(facts.budget, spend, curve),
        "settings": dict(facts.settings),
        "paths": dict(facts.paths),
    }


def reverted_tasks(build: Mapping[str, Any] | None) -> frozenset[str]:
    """The tasks of a build that run their default schedules because their tuned CUDA kernels
    did not compile (its kernel check's `reverted`)."""
    return frozenset(((build or {}).get("kernels") or {}).get("reverted", ()))


def _summary(outcome: Outcome, tasks: Sequence[Mapping[str, Any]], spend: Spend) -> dict[str, Any]:
    """The report's headline figures: latencies, the verdict, what shipped, coverage, spend,
    why it stopped."""
    shares = [t.get("share") for t in tasks]
    reverted = reverted_tasks(outcome.tuned)
    untouched = (
        None
        if any(x is None for x in shares)
        else sum(t["share"] for t in tasks if not t["trials"])
    )
    return {
        "untuned_latency_s": _median(outcome.untuned),
        "tuned_latency_s": _median(outcome.tuned),
        **_verdict(outcome.comparison),
        **_shipped(outcome.shipment),
        "kept_default": [
            t["name"]
            for t in tasks
            if t["trials"] and t["schedule"] == "default" and t["name"] not in reverted
        ],
        "tasks_tuned": sum(1 for t in tasks if t["trials"]),
        "untouched_share": untouched,
        "trials": spend.trials,
        "rounds": spend.rounds,
        "wall_s": spend.wall_s,
        "device_h": spend.device_h,
        "usd": spend.usd,
        "energy_j": spend.energy_j,
        "stop_reason": outcome.stop_reason,
        "stop": outcome.stop,
        "interrupted": outcome.interrupted,
        "budget_too_small": outcome.budget_too_small,
        "check_ok": (outcome.tuned or {}).get("check", {}).get("ok"),
    }


def _notes(notes: Notes) -> dict[str, Any]:
    return {
        "warnings": list(notes.warnings),
        "skipped": dict(notes.skipped or {}),
        "filter": dict(notes.candidate_filter or {"name": "none"}),
        "measurement": dict(notes.measurement or {}),
        "search": dict(notes.search or {}),
        "library": dict(notes.library) if notes.library else None,
    }


def _verdict(comparison: Mapping[str, Any] | None) -> dict[str, Any]:
    """One verdict and one figure: the speedup claimed (1.0 for "no change"); the ratio of
    the medians as measured only under its own name."""
    if not comparison:
        return {"speedup": None, "change": None, "measured_ratio": None}
    return {
        "speedup": comparison["speedup"],
        "change": comparison["change"],
        "measured_ratio": comparison["measured_ratio"],
    }


def _shipped(shipment: Mapping[str, Any]) -> dict[str, Any]:
    """Which build model.so is and whether its outputs were checked against onnxruntime."""
    keys = (
        "shipped",
        "shipped_checked",
        "checked_on",
        "unchecked_reason",
        "mismatch_library",
        "check_status",
        "tuned_not_shipped",
        "default_schedules",
    )
    return {k: shipment.get(k) for k in keys}


def _point(p: Point) -> dict[str, Any]:
    return {
        "wall_s": p.wall_s,
        "device_h": p.device_h,
        "usd": p.usd,
        "trials": p.trials,
        "energy_j": p.energy_j,
        "latency_s": p.latency_s,
    }


def _forecast(budget: Budget, spend: Spend, curve: Sequence[Point]) -> dict[str, Any] | None:
    """What the rest of the primary limit would likely have bought, from the fitted curve."""
    limit = primary_limit(budget)
    points = [(p.spent(limit.kind), p.latency_s) for p in curve if p.spent(limit.kind) is not None]
    now = spend.spent(limit.kind)
    if now is None or len(points) < 3:
        return None
    fitted = fit_curve([x for x, _ in points], [y for _, y in points])
    if fitted is None:
        return None
    left = max(0.0, limit.amount - now)
    return {
        "limit": limit.text,
        "kind": limit.kind,
        "spent": now,
        "left": left,
        "gain": fitted.gain(now, now + left),
        "latency_s": fitted(now + left),
        "curve": {
            "kind": fitted.kind,
            "floor": fitted.floor,
            "span": fitted.span,
            "scale": fitted.scale,
            "power": fitted.power,
            "rms_log_error": fitted.rms_log_error,
        },
    }


def _longest_step(spend: Spend) -> dict[str, Any] | None:
    """The longest block the run could not stop inside: how far past a limit a stop can land."""
    if spend.longest_step is None:
        return None
    phase, seconds = spend.longest_step
    return {"phase": phase, "seconds": seconds}


def _median(section: Mapping[str, Any] | None) -> float | None:
    if not section or not section.get("latency"):
        return None
    return section["latency"]["median_s"]
