"""The cost report for people: the text of report.md and report.html, and their plots."""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .grammar import DEVICE_HOURS, DOLLARS, WALL
from .units import fmt_amount, fmt_duration, fmt_latency

PLOTS = "plots"


# -- text -----------------------------------------------------------------------------------


def _headline(report: Mapping[str, Any]) -> list[str]:
    s = report["summary"]
    lines = [
        f"Model `{report['model']['name']}` on {report['target']['description']}, budget `{report['budget']['text']}`."
    ]
    if s["untuned_latency_s"] and s["tuned_latency_s"]:
        shipped = "; model.so is the untuned build" if s.get("shipped") == "untuned" else ""
        lines.append(
            f"End-to-end latency {fmt_latency(s['untuned_latency_s'])} untuned -> "
            f"{fmt_latency(s['tuned_latency_s'])} tuned "
            f"(**{describe_change(s.get('change'), s['speedup'])}**{shipped})."
        )
        comparison = report.get("comparison")
        if comparison:
            u, t = comparison["untuned"], comparison["tuned"]
            lines.append(
                f"Both timed in turn at the end of the run, {comparison['repeats']} timings "
                f"each: untuned {fmt_latency(u['min_s'])}-{fmt_latency(u['max_s'])}, tuned "
                f"{fmt_latency(t['min_s'])}-{fmt_latency(t['max_s'])}; a change is claimed only "
                "when every timing of one beats every timing of the other."
            )
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
    spent = [fmt_duration(s["wall_s"])]
    if report["spend"]["device_h"]:
        spent.append(f"{s['device_h']:.3g} GPU-h")
    if s["usd"] is not None:
        spent.append(f"${s['usd']:.2f}")
    if s["energy_j"] is not None:
        spent.append(f"{s['energy_j'] / 1e3:.3g} kJ")
    lines.append(
        f"Spent {', '.join(spent)} on {s['trials']} trials in {s['rounds']} rounds"
        f"{library_rounds(report.get('library'))}."
    )
    coverage = describe_coverage(s, len(report["tasks"]))
    if coverage:
        lines.append(coverage)
    library = describe_library(report.get("library"))
    if library:
        lines.append(f"Library: {library}.")
    lines.append(f"Stopped because {s['stop_reason']}.")
    skipped = report.get("skipped")
    if skipped:
        counted = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in skipped.items())
        lines.append(f"Skipped as broken, foreign or unsafe (see the warnings): {counted}.")
    tuned_check = (report.get("tuned") or {}).get("check")
    if tuned_check and tuned_check.get("ok") is not True:
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


def describe_provenance(p: Mapping[str, Any] | None) -> str | None:
    """When, by what command, with which versions and on what the run was made, in a line."""
    if not p:  # a report written before reports carried it
        return None
    host = p["host"]
    gpu = p.get("gpu")
    on = f"{host['name']} ({host['cpu']}, {host['cores']} cores)"
    if gpu:
        on += f", GPU {gpu['name']} (driver {gpu['driver'] or 'unknown'})"
    return (
        f"Run {p['started']} to {p['ended']} by `{p['command']}`, with tune-orchestrator "
        f"{p['package'] or 'unknown'}, TVM {p['tvm']}, Python {p['python']} on {on}."
    )


def describe_coverage(summary: Mapping[str, Any], tasks: int) -> str | None:
    """How many tasks got trials, and how much of the model the others hold."""
    tuned = summary.get("tasks_tuned")
    if tuned is None:
        return None
    line = f"{tuned} of {tasks} tasks tuned"
    untouched = summary.get("untouched_share")
    if untouched is not None and tuned < tasks:
        line += f"; the {tasks - tuned} never tuned hold {untouched:.1%} of the model's kernel time"
    return line + "."


def library_rounds(library: Mapping[str, Any] | None) -> str:
    """What follows "N trials in R rounds" when tasks had library rounds besides."""
    count = (library or {}).get("reused_tasks") or 0
    return f" (+{count} library round{'' if count == 1 else 's'})" if count else ""


def describe_library(library: Mapping[str, Any] | None) -> str | None:
    """What the run took from the tuning library and gave it, in one line (None: a report
    from before the library)."""
    if not library:
        return None
    if library.get("off"):
        return f"off ({library['off']})"
    reused = f"{library['reused_records']} records of {library['reused_tasks']} tasks reused"
    if library.get("plateau_tasks"):
        reused += f" ({library['plateau_tasks']} at a plateau there)"
    added = library.get("added")
    if added is None:
        added_text = f"none added ({library.get('not_added') or 'the run did not finish'})"
    else:
        added_text = f"{added} added"
    return f"{reused}{_transfer(library.get('transferred') or {})}, {added_text}; {library['path']}"


def _transfer(transferred: Mapping[str, Mapping[str, Any]]) -> str:
    """Transfer-tuning in a clause: tasks, schedules and how they applied, and how many beat
    their task's default schedule ("" when none was tried)."""
    tried = [t for t in transferred.values() if t["tried"]]
    if not tried:
        return ""
    total = {k: sum(t[k] for t in tried) for k in ("tried", "as_is", "re_derived", "failed")}
    beat = sum(
        1
        for t in tried
        if t["best_s"] is not None and t["default_s"] and t["best_s"] < t["default_s"]
    )
    return (
        f"; {total['tried']} schedules of same-kind tasks replayed on {len(tried)} "
        f"task{'' if len(tried) == 1 else 's'} "
        f"({total['as_is']} as they were, {total['re_derived']} re-derived, {total['failed']} "
        f"failed), the best transferred beating the default schedule on {beat}"
    )


def describe_simulated(simulated: Mapping[str, Any] | None) -> str | None:
    """The one line that tells a simulated run's latencies from measured ones."""
    if not simulated:
        return None
    line = f"{simulated['word']}: timings from a simulated {simulated['device']}"
    if simulated.get("untuned_kernels_s") and simulated.get("tuned_kernels_s"):
        line += (
            f"; kernels {fmt_latency(simulated['untuned_kernels_s'])} untuned -> "
            f"{fmt_latency(simulated['tuned_kernels_s'])} tuned "
            f"({simulated['speedup']:.2f}x, {simulated['word']})"
        )
    return line + "; no real kernel was timed"


def describe_change(change: str | None, speedup: float) -> str:
    """The verdict in words: 2.10x faster, 1.25x slower, or no change (timings overlap)."""
    if change == "no change":
        return "no change: the timings overlap"
    if change == "slower":
        return f"{1 / speedup:.2f}x slower"
    return f"{speedup:.2f}x faster"


_CHECK_WORDS = {
    "differs": "OUTPUTS DIFFER FROM ONNXRUNTIME",
    "failed": "FAILED WHEN RUN",
    "not checkable": "NOT CHECKABLE",
    "unchecked": "NOT CHECKED",
}


def describe_check(check: Mapping[str, Any]) -> str:
    """A build's output check in one phrase: its verdict, with its figure or its reason."""
    status = check.get("status") or ("matched" if check.get("ok") else "differs")
    if status == "matched":
        on = f" on {check['samples']} samples" if check.get("samples") else ""
        return f"outputs match onnxruntime{on} (max relative error {check['max_rel_error']:.1e})"
    reason = check.get("reason") or (
        f"max relative error {check['max_rel_error']:.2e} > rtol {check['rtol']:g}"
    )
    return f"{_CHECK_WORDS[status]}: {reason}"


def describe_shipped(summary: Mapping[str, Any]) -> str:
    """What model.so is, in one phrase: which build, checked where or why not, and why it is
    not the tuned build."""
    why = summary.get("tuned_not_shipped")
    mismatch = summary.get("mismatch_library")
    if why is None and mismatch:  # reports written before they said why
        why = f"its outputs differ, kept aside as {Path(mismatch).name}: do not deploy it"
    if summary["shipped"] == "none":
        return f"NOT WRITTEN: no build passed its output check; the tuned build: {why}"
    if summary["shipped_checked"]:
        checked = f"outputs match onnxruntime (checked on {summary['checked_on']})"
    else:
        checked = f"UNCHECKED, its outputs were never compared with onnxruntime's: {summary['unchecked_reason']}"
    not_tuned = f"; not the tuned build: {why}" if summary["shipped"] != "tuned" and why else ""
    return f"the {summary['shipped']} build, {checked}{not_tuned}"


def describe_kernels(k: Mapping[str, Any]) -> str:
    """What the CUDA kernel check found, in one phrase."""
    if k.get("error"):
        return f"DO NOT COMPILE with {k['compiler']} for {k['arch']}: {k['error']}"
    if k["checked"]:
        return f"{k['kernels']} kernels compile with {k['compiler']} for {k['arch']}"
    return f"NOT CHECKED: {k['reason']}; a GPU host compiles them when it loads model.so"


_SEARCH_PARTS = ("sampling", "mutation", "prediction", "features", "verify")


def _search_parts(search: Mapping[str, Any]) -> list[str]:
    """The parts search time is split into; the late check only where it ran (GPU targets)."""
    return [p for p in _SEARCH_PARTS if p != "verify" or search.get("verify")]


def describe_search(search: Mapping[str, Any]) -> str | None:
    """Where search time went, in one line (summary)."""
    if not search or not search.get("searches"):
        return None
    parts = ", ".join(f"{p} {fmt_duration(search.get(p, 0.0))}" for p in _search_parts(search))
    return (
        f"{search['searches']} searches proposed {search['proposed']} candidates: {parts} "
        f"(postprocessing runs inside sampling and mutation){_gpu_checks(search)}"
        f"{_unmeasured(search)}"
    )


def _unmeasured(search: Mapping[str, Any]) -> str:
    """What became of proposals not measured, as clauses to append ("" when nothing)."""
    clauses = [
        (search.get("waiting_restored"), "left waiting by the last session, pooled again"),
        (search.get("waiting_saved"), "left waiting, saved for a resume (waiting.jsonl)"),
        (search.get("dropped"), "dropped unmeasured: set aside while their task's pool was full"),
        (search.get("abandoned"), "searches ahead still running at the stop, not waited for"),
    ]
    return "".join(f"; {n} {what}" for n, what in clauses if n)


def _gpu_checks(search: Mapping[str, Any]) -> str:
    """What the GPU precheck turned away and the late check dropped, as clauses to append
    ("" when nothing)."""
    notes = ""
    if search.get("prechecked"):
        notes += f"; {search['prechecked']} schedules over the GPU's limits turned away unlowered"
    if search.get("invalid"):
        notes += f"; {search['invalid']} of the evolution's picks failed VerifyGPUCode, dropped"
    return notes


def describe_filter(stats: Mapping[str, Any]) -> str | None:
    """What the candidate filter kept and how good its judgement was, in one line."""
    total = stats.get("total")
    if not total or not total.get("proposed"):
        return None
    kept, offered = total["kept"], total["kept"] + total["rejected"]
    line = f"{stats['name']} kept {kept} of {offered} offered ({kept / offered:.0%})"
    if total.get("explored"):
        line += f", {total['explored']} of them the search's random picks, kept unjudged"
    if stats.get("threshold") is None:
        return f"{line}; not calibrated yet, so everything offered was kept"
    line += f", the best-ranked {stats['threshold']:.0%} of a round at the end"
    aimed, target = stats.get("recall_aimed_at"), stats.get("recall_target")
    if aimed is not None and target is not None and aimed > target + 0.005:
        line += f" (aiming at {aimed:.0%} of its top after rounds that kept less than {target:.0%})"
    if total.get("recall") is None:
        return f"{line}; no audit judged yet"
    missed = total["false_negatives"]
    interval = total.get("recall_interval")
    spread = (
        f" (90% interval {interval[0]:.0%}-{interval[1]:.0%} over {len(total['rounds'])} audited "
        f"rounds)"
        if interval
        else ""
    )
    return (
        f"{line}; audits ({total['audited']} of {total['rejected']} rejected measured) put its "
        f"recall of each round's top 10% at {total['recall']:.0%}{spread}, with "
        f"{missed} false negative{'' if missed == 1 else 's'}; own time "
        f"{fmt_duration(stats['seconds'])}"
    )


def describe_measurement(m: Mapping[str, Any]) -> list[str]:
    """How candidates were measured, in a few plain lines (summary and report): where and how,
    throughput and how busy the GPUs' timed windows were, where a candidate's time went, the
    DOP over time and the checks behind it, telemetry, caveats."""
    if not m:
        return []
    gpus = ", ".join(map(str, m.get("gpus") or []))
    overlap = m.get("mode") == "overlap"
    where = {
        "CudaEngine": f"on GPU {gpus}",
        "SimulatedEngine": f"on simulated GPU {gpus}",
        "RpcEngine": f"on the RPC fleet at {m.get('tracker')} (key {m.get('key')}, "
        f"{m.get('in_flight')} in flight)",
        "LocalEngine": f"one at a time on the host's {m.get('device', 'cpu')} device",
    }.get(m.get("engine", ""), f"by {m.get('engine')}")
    if m.get("mode") == "exclusive" and m.get("engine") != "RpcEngine":
        where += ", one candidate at a time in each GPU's timed window"
    elif overlap:
        where += ", with overlapping timings"
    lines = [f"measured {where}, {m.get('measuring_share', 0.0):.0%} of the run spent measuring"]
    lines += _throughput(m)
    batches = m.get("batches") or []
    if batches:
        path: list[int] = []
        for b in batches:
            if not path or path[-1] != b["dop"]:
                path.append(b["dop"])
        shown = " -> ".join(map(str, path[:12])) + (" -> ..." if len(path) > 12 else "")
        what = (
            "DOP (candidates timed at once per GPU)"
            if overlap
            else "DOP (preparing workers per GPU)"
        )
        first = batches[0]
        took = (
            f"; its first {first['candidates']} candidates (DOP {first['dop']}) took "
            f"{fmt_duration(first['seconds'])}"
            + (
                f", {fmt_duration(first['filling_s'])} of it before the first timing"
                if first.get("filling_s") is not None
                else ""
            )
            if first.get("seconds")
            else ""
        )
        lines.append(
            f"{what} over time {shown} (now {m['dop']}, ceiling {m['ceiling']}){took}; "
            f"{m.get('isolated_runs', 0)} re-timings in isolation"
        )
        checks = m.get("checks") or []
        if checks:
            failed = [c for c in checks if c["new_dop"] < c["dop"]]
            worst = max(c["rel_error"] for c in checks)
            lines.append(
                f"{len(checks)} fidelity checks against isolated timings, {len(failed)} backed "
                f"off; worst median relative error {worst:.1%}"
            )
    lines += _workers_ready(m.get("workers_ready_s") or {}, "measuring", "the engine")
    lines += _workers_ready(m.get("builders_ready_s") or {}, "building", "the run")
    lines += _telemetry(m.get("telemetry") or {})
    if m.get("caveat"):
        lines.append(f"caveat: {m['caveat']}")
    return lines


def _throughput(m: Mapping[str, Any]) -> list[str]:
    """Candidates per second, busy share of the timed windows, time per candidate by step."""
    if not m.get("candidates_per_s"):
        return []
    line = f"{m['candidates']} candidates at {m['candidates_per_s']:.3g}/s"
    if m.get("busy") is not None:
        who = "servers" if m.get("engine") == "RpcEngine" else "GPU"
        line += f"; {who} busy timing {m['busy']:.0%} of the measure phase"
        per = m.get("busy_per_gpu") or []
        if len(per) > 1 and m.get("gpus"):
            line += (
                " ("
                + ", ".join(f"GPU {g} {b:.0%}" for g, b in zip(m["gpus"], per, strict=False))
                + ")"
            )
    lines = [line]
    steps = m.get("step_s") or {}
    if any(steps.values()):
        parts = [f"{name.replace('_', '-')} {fmt_latency(sec)}" for name, sec in steps.items()]
        repeats = m.get("repeats")
        tail = f"; {repeats:.1f} repeats on average" if repeats else ""
        lines.append("per candidate: " + ", ".join(parts) + tail)
    if m.get("raced"):
        lines.append(
            f"{m['raced']} raced: cut short as clearly slower than their task's best "
            "(kept as valid, slower results)"
        )
    return lines


def _workers_ready(w: Mapping[str, Any], doing: str, began: str) -> list[str]:
    """How long the measuring or building processes, all started at once, took to start."""
    if not w.get("started"):
        return []
    line = f"{w['started']} {doing} workers started with {began}"
    if not w.get("ready"):
        return [f"{line}; none ready yet"]
    return [
        f"{line}; {w['ready']} ready, the first after {fmt_duration(w['first'])}, the last "
        f"after {fmt_duration(w['last'])}"
    ]


def _telemetry(t: Mapping[str, Any]) -> list[str]:
    if not t.get("batches"):
        return []
    facts = []
    if t.get("min_sm_clock_mhz") is not None:
        facts.append(f"SM clock >= {t['min_sm_clock_mhz']} MHz")
    if t.get("max_temperature_c") is not None:
        facts.append(f"<= {t['max_temperature_c']} C")
    if t.get("energy_per_candidate_j") is not None:
        facts.append(f"{t['energy_per_candidate_j']:.3g} J per candidate")
    facts.append(f"{t.get('throttled_batches', 0)} throttled batches")
    if t.get("other_pids"):
        facts.append(f"other processes on the GPU: {', '.join(map(str, t['other_pids']))}")
    per_gpu = [g for g in t.get("per_gpu") or [] if g.get("energy_j") is not None]
    if len(per_gpu) > 1:
        facts.append(
            "energy " + ", ".join(f"GPU {g['index']} {g['energy_j'] / 1e3:.3g} kJ" for g in per_gpu)
        )
    return ["GPU telemetry: " + ", ".join(facts)]


def _budget_title(budget: Mapping[str, Any]) -> str:
    step = budget.get("longest_step")
    if not step:
        return "Budget"
    return (
        f"Budget (longest step the run could not stop inside: {step['phase']}, "
        f"{fmt_duration(step['seconds'])})"
    )


def background_work(overlapped: Mapping[str, float]) -> dict[str, float]:
    """Seconds of each phase run in the background (a report's `overlapped`). A background
    round's own `ahead` is its wait for a search running ahead of it: search time too."""
    work = dict(overlapped)
    work["search"] = work.get("search", 0.0) + work.pop("ahead", 0.0)
    return work


def _phase_name(name: str, report: Mapping[str, Any]) -> str:
    """A phase's name; `ahead`, the wait for a round prepared in the background, says what the
    background was busy with (on a GPU run most of the search is there, not in `search`)."""
    work = background_work(report.get("overlapped") or {})
    background = {k: v for k, v in work.items() if v >= 0.05}
    if name != "ahead" or not background:
        return name
    busy = ", ".join(
        f"{k} {fmt_duration(v)}" for k, v in sorted(background.items(), key=lambda kv: -kv[1])
    )
    return f"ahead (waiting for rounds prepared in the background, where the run spent {busy})"


def tasks_by_share(tasks: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Tasks by their share of the model's kernel time as it runs now, largest first (the
    order the scheduler weighs them in); tasks of unknown share last, in model order."""
    return sorted(tasks, key=lambda t: (t.get("share") is None, -(t.get("share") or 0.0)))


def describe_never_tuned(tasks: list[Mapping[str, Any]]) -> str | None:
    """The tasks table's last line: the tasks that got no trial, folded into one."""
    never = [t for t in tasks if not t["trials"]]
    if not never:
        return None
    shares = [t.get("share") for t in never]
    held = "an unknown share" if None in shares else f"{sum(shares):.1%}"
    task = "task" if len(never) == 1 else "tasks"
    return f"{len(never)} {task} never tuned, holding {held} of the model's kernel time"


_Table = tuple[str, list[str], list[list[str]]]  # title, header, rows


def _tables(report: Mapping[str, Any]) -> list[_Table]:
    """The report's tables: the budget, the tasks, spend by phase, and search time when a
    search ran."""
    tables = [_budget_table(report), _tasks_table(report), _phases_table(report)]
    search = _search_table(report)
    if search is not None:
        tables.append(search)
    return tables


def _budget_table(report: Mapping[str, Any]) -> _Table:
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
    return _budget_title(report["budget"]), ["limit", "spent", "left", "overshoot"], rows


def _tasks_table(report: Mapping[str, Any]) -> _Table:
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


def _phases_table(report: Mapping[str, Any]) -> _Table:
    """Time by phase, longest first, as a share of the run's wall time."""
    wall = report["spend"]["wall_s"] or 1.0
    rows = [
        [_phase_name(name, report), fmt_duration(secs), f"{secs / wall:.1%}"]
        for name, secs in sorted(report["phases"].items(), key=lambda kv: -kv[1])
        if secs > 0
    ]
    title = f"Spend by phase (measuring: {report['measuring_share']:.1%} of the run)"
    return title, ["phase", "time", "share"], rows


def _search_table(report: Mapping[str, Any]) -> _Table | None:
    """Where search time went; None when no search ran."""
    search = report.get("search") or {}
    parts = _search_parts(search)
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
        f"(postprocessing runs inside sampling and mutation){_gpu_checks(search)}"
    )
    return title, ["part", "time", "share of search"], rows


def _markdown_row(row: list[str], width: int) -> str:
    """A table row; a row of one cell is a line under the table's rows (the rest empty)."""
    cells = [cell.replace("|", "/") for cell in row] + [""] * (width - len(row))
    return "| " + " | ".join(cells) + " |"


def markdown(report: Mapping[str, Any], plots: Mapping[str, Path], run_dir: Path) -> str:
    out = ["# Tuning report", "", *_headline(report), ""]
    made = describe_provenance(report.get("provenance"))
    if made:
        out += [made, ""]
    measured = describe_measurement(report.get("measurement") or {})
    if measured:
        out += ["## Measurement", "", *(f"- {line}" for line in measured), ""]
    filtered = describe_filter(report.get("filter") or {})
    if filtered:
        out += ["## Filter", "", filtered, ""]
    for title, header, rows in _tables(report):
        out += [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        out += [_markdown_row(row, len(header)) for row in rows]
        out.append("")
    if plots:
        out += (
            ["## Plots", ""]
            + [f"![{name}]({p.relative_to(run_dir).as_posix()})" for name, p in plots.items()]
            + [""]
        )
    return "\n".join(out)


def _html_row(row: list[str], width: int) -> str:
    """A table row; a row of one cell spans the table."""
    if len(row) == 1 < width:
        return f'<tr><td colspan="{width}" style="text-align:left">{html.escape(row[0])}</td></tr>'
    return "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"


def to_html(report: Mapping[str, Any], plots: Mapping[str, Path], run_dir: Path) -> str:
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>Tuning report: '
        + esc(report["model"]["name"])
        + "</title>",
        "<style>body{font-family:sans-serif;max-width:64rem;margin:2rem auto;padding:0 1rem}"
        "table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}"
        "td:first-child,th:first-child{text-align:left}img{max-width:100%}</style></head><body>",
        "<h1>Tuning report</h1>",
    ]
    for line in _headline(report):
        text = esc(line).replace("**", "")
        parts.append(f"<p>{text}</p>")
    made = describe_provenance(report.get("provenance"))
    if made:
        parts.append(f"<p><small>{esc(made)}</small></p>")
    for title, header, rows in _tables(report):
        parts.append(
            f"<h2>{esc(title)}</h2><table><tr>"
            + "".join(f"<th>{esc(h)}</th>" for h in header)
            + "</tr>"
        )
        parts += [_html_row(row, len(header)) for row in rows]
        parts.append("</table>")
    measured = describe_measurement(report.get("measurement") or {})
    if measured:
        parts.append(
            "<h2>Measurement</h2><ul>" + "".join(f"<li>{esc(x)}</li>" for x in measured) + "</ul>"
        )
    filtered = describe_filter(report.get("filter") or {})
    if filtered:
        parts.append(f"<h2>Filter</h2><p>{esc(filtered)}</p>")
    for name, path in plots.items():
        parts.append(
            f'<h2>{esc(name.capitalize())}</h2><img src="{esc(path.relative_to(run_dir).as_posix())}" alt="{esc(name)}">'
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# -- plots ----------------------------------------------------------------------------------


def write_plots(report: Mapping[str, Any], folder: Path) -> dict[str, Path]:
    """convergence.png (latency against spend, stop point, forecast), phases.png, tasks.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def _save(fig: Any, path: Path) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    return path
