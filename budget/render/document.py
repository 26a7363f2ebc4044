"""A report's text, built once from report.json: its headline lines and its tables."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..units import counted, fmt_amount, fmt_duration, fmt_latency
from .words import (
    budget_title,
    describe_change,
    describe_check,
    describe_coverage,
    describe_kernels,
    describe_library,
    describe_never_tuned,
    describe_provenance,
    describe_shipped,
    describe_simulated,
    library_rounds,
    phase_name,
    tasks_by_share,
)
from .workings import describe_filter, describe_measurement, gpu_checks, prior_clause, search_parts


@dataclasses.dataclass(frozen=True)
class Document:
    """What report.md and report.html say, built once: the headline, the provenance line, the
    measurement's and the filter's words, and the tables."""

    title: str  # the model's name
    headline: list[str]
    provenance: str | None
    measurement: list[str]
    filter: str | None
    tables: list[Table]


def document(report: Mapping[str, Any]) -> Document:
    return Document(
        title=report["model"]["name"],
        headline=headline(report),
        provenance=describe_provenance(report.get("provenance")),
        measurement=describe_measurement(report.get("measurement") or {}),
        filter=describe_filter(report.get("filter") or {}),
        tables=tables(report),
    )


def headline(report: Mapping[str, Any]) -> list[str]:
    """The report's first paragraph: what was tuned, what it bought and spent, why it stopped,
    what shipped."""
    s = report["summary"]
    lines = [
        f"Model `{report['model']['name']}` on {report['target']['description']}, "
        f"budget `{report['budget']['text']}`.",
        *_latency(report),
    ]
    kept = s.get("kept_default") or []
    if kept:
        lines.append(
            f"{len(kept)} tuned task(s) kept their default schedule, faster than every "
            f"candidate: {', '.join(kept)}."
        )
    kernels = (report.get("tuned") or {}).get("kernels")
    if kernels:
        lines.append(f"CUDA kernels: {describe_kernels(kernels)}.")
    simulated = describe_simulated(report.get("simulated"))
    if simulated:
        lines.append(f"**{simulated}**")
    lines += _spent(report)
    lines += _closing(report)
    return lines


def _latency(report: Mapping[str, Any]) -> list[str]:
    """Untuned against tuned, and how the two compared when timed in turn."""
    s = report["summary"]
    if s["tuned_latency_s"] and not s["speedup"]:  # one build, nothing to compare it with
        return [f"End-to-end latency {fmt_latency(s['tuned_latency_s'])}: no schedule was tuned."]
    if not (s["untuned_latency_s"] and s["tuned_latency_s"]):
        return []
    shipped = "; model.so is the untuned build" if s.get("shipped") == "untuned" else ""
    lines = [
        f"End-to-end latency {fmt_latency(s['untuned_latency_s'])} untuned -> "
        f"{fmt_latency(s['tuned_latency_s'])} tuned "
        f"(**{describe_change(s.get('change'), s['speedup'])}**{shipped})."
    ]
    comparison = report.get("comparison")
    if comparison:
        u, t = comparison["untuned"], comparison["tuned"]
        lines.append(
            f"Both timed in turn at the end of the run, {comparison['repeats']} timings "
            f"each: untuned {fmt_latency(u['min_s'])}-{fmt_latency(u['max_s'])}, tuned "
            f"{fmt_latency(t['min_s'])}-{fmt_latency(t['max_s'])}; a change is claimed only "
            "when every timing of one beats every timing of the other."
        )
    return lines


def _spent(report: Mapping[str, Any]) -> list[str]:
    """What was spent on how many trials, how far tuning reached, what the library gave."""
    s = report["summary"]
    spent = [fmt_duration(s["wall_s"])]
    if report["spend"]["device_h"]:
        spent.append(f"{s['device_h']:.3g} GPU-h")
    if s["usd"] is not None:
        spent.append(f"${s['usd']:.2f}")
    if s["energy_j"] is not None:
        spent.append(f"{s['energy_j'] / 1e3:.3g} kJ")
    lines = [
        f"Spent {', '.join(spent)} on {counted(s['trials'], 'trial')} in "
        f"{counted(s['rounds'], 'round')}"
        f"{library_rounds(report.get('library'))}."
    ]
    coverage = describe_coverage(s, len(report["tasks"]))
    if coverage:
        lines.append(coverage)
    library = describe_library(report.get("library"))
    if library:
        lines.append(f"Library: {library}.")
    return lines


def _closing(report: Mapping[str, Any]) -> list[str]:
    """Why it stopped, the run's warnings, what it skipped, whether the tuned model is sound,
    what shipped, and what the rest of the budget would likely have bought."""
    s = report["summary"]
    lines = [f"Stopped because {s['stop_reason']}."]
    lines += [f"Warning: {w.rstrip('.')}." for w in report.get("warnings") or ()]
    skipped = report.get("skipped")
    if skipped:
        counted = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in skipped.items())
        lines.append(f"Skipped as broken, foreign or unsafe (see the warnings): {counted}.")
    tuned_check = (report.get("tuned") or {}).get("check")
    unsound = tuned_check and tuned_check.get("ok") is not True
    if unsound and tuned_check.get("status") != "skipped":  # not compared: model.so's line says so
        lines.append(f"**WARNING: the tuned model: {describe_check(tuned_check)}.**")
    if "shipped_checked" in s:  # reports written before model.so said whether it was checked
        lines.append(f"model.so: {describe_shipped(s)}.")
    forecast = report.get("forecast")
    if forecast and forecast["left"] > 0:
        lines.append(
            f"The remaining {fmt_amount(forecast['kind'], forecast['left'])} would likely have "
            f"cut the model's kernel time by another {forecast['gain']:.1%} "
            f"(fitted {forecast['curve']['kind']} curve)."
        )
    return lines


Table = tuple[str, list[str], list[list[str]]]  # title, header, rows


def tables(report: Mapping[str, Any]) -> list[Table]:
    """The report's tables: the budget, the tasks, spend by phase, and search time when a
    search ran."""
    tables = [_budget_table(report), _tasks_table(report), _phases_table(report)]
    search = _search_table(report)
    if search is not None:
        tables.append(search)
    return tables


def _budget_table(report: Mapping[str, Any]) -> Table:
    """Each limit: spent, left and overshoot."""
    rows = [
        [
            row["limit"],
            fmt_amount(row["kind"], row["spent"]),
            fmt_amount(row["kind"], row["left"]),
            fmt_amount(row["kind"], row["overshoot"]) if row["overshoot"] else "none",
        ]
        for row in report["budget"]["limits"]
    ]
    return budget_title(report["budget"]), ["limit", "spent", "left", "overshoot"], rows


def _tasks_table(report: Mapping[str, Any]) -> Table:
    """The tasks that got trials, by share, then one line for those that got none."""
    rows = [
        [
            t["name"],
            str(t["weight"]),
            f"{t['share']:.1%}" if t.get("share") is not None else "n/a",
            str(t.get("proposed", "")),
            str(t.get("filtered", "")),
            str(t.get("built", "")),
            str(t["trials"]),
            str(t.get("waiting", "")),
            fmt_latency(t["untuned_s"]),
            fmt_latency(t["best_s"]),
            f"{t['speedup']:.2f}x" if t["speedup"] else "n/a",
            t.get("schedule", ""),
            fmt_duration(t["spend_s"]),
            t["retired"] or "",
        ]
        for t in tasks_by_share(report["tasks"])
        if t["trials"]
    ]
    never = describe_never_tuned(report["tasks"])
    if never:
        rows.append([never])  # one cell: spans the table
    header = [
        "task",
        "weight",
        "share now",
        "proposed",
        "filtered",
        "built",
        "measured",
        "waiting",
        "untuned",
        "best",
        "speedup",
        "schedule",
        "spend",
        "retired",
    ]
    return "Tasks", header, rows


def _phases_table(report: Mapping[str, Any]) -> Table:
    """Time by phase, longest first, as a share of the run's wall time."""
    wall = report["spend"]["wall_s"] or 1.0
    rows = [
        [phase_name(name, report), fmt_duration(secs), f"{secs / wall:.1%}"]
        for name, secs in sorted(report["phases"].items(), key=lambda kv: -kv[1])
        if secs > 0
    ]
    title = f"Spend by phase (measuring: {report['measuring_share']:.1%} of the run)"
    return title, ["phase", "time", "share"], rows


def _search_table(report: Mapping[str, Any]) -> Table | None:
    """Where search time went; None when no search ran."""
    search = report.get("search") or {}
    parts = search_parts(search)
    total = sum(search.get(p, 0.0) for p in parts) or 1.0
    rows = [
        [part, fmt_duration(search.get(part, 0.0)), f"{search.get(part, 0.0) / total:.1%}"]
        for part in parts
        if search.get("searches")
    ]
    if not rows:
        return None
    title = (
        f"Search: {search['searches']} searches, {search['proposed']} candidates proposed "
        f"(postprocessing runs inside sampling and mutation){gpu_checks(search)}"
        f"{prior_clause(search)}"
    )
    return title, ["part", "time", "share of search"], rows
