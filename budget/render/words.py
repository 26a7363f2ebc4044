"""Words for a report's figures, shared by report.md, report.html and the printed summary."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..units import counted, fmt_duration, fmt_latency


def describe_provenance(p: Mapping[str, Any] | None) -> str | None:
    """When, by what command, with which versions and on what the run was made, in a line."""
    if not p:  # a report written before reports carried it
        return None
    host = p["host"]
    gpu = p.get("gpu")
    cores = f"{host['cores']} core{'s' if host['cores'] != 1 else ''}"
    quota = f", a CPU quota of {host['cpu_quota']}" if host.get("cpu_quota") else ""
    threads = f", TVM_NUM_THREADS={host['tvm_threads']}" if host.get("tvm_threads") else ""
    on = f"{host['name']} ({host['cpu']}, {cores}{quota}{threads})"
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
    return f" (+{counted(count, 'library round')})" if count else ""


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
    "skipped": "NOT COMPARED",
}


def describe_check(check: Mapping[str, Any], *, subject: bool = True) -> str:
    """A build's output check in one phrase: its verdict, with its figure or its reason
    (`subject` False: without the word "outputs", for a line labelled so)."""
    status = check.get("status") or ("matched" if check.get("ok") else "differs")
    if status == "matched":
        on = f" on {check['samples']} samples" if check.get("samples") else ""
        nudged = f"; {check['reason']}" if check.get("reason") else ""  # sample k matched nudged
        said = f"match onnxruntime{on} (max relative error {check['max_rel_error']:.1e}{nudged})"
        return f"outputs {said}" if subject else said
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
    build = f"the {summary['shipped']} build"
    if summary["shipped"] == "tuned" and summary.get("default_schedules"):
        build = "the build with TVM's default schedules (no task runs a tuned one)"
    return f"{build}, {checked}{not_tuned}"


def describe_kernels(k: Mapping[str, Any]) -> str:
    """What the CUDA kernel check found, in one phrase."""
    if k.get("error"):
        return f"DO NOT COMPILE with {k['compiler']} for {k['arch']}: {k['error']}"
    if k["checked"] and k.get("reverted"):
        return (
            f"{k['kernels']} kernels compile with {k['compiler']} for {k['arch']}; the tuned "
            f"ones of {', '.join(k['reverted'])} did not (TVM wrote code nvcc rejects), so "
            "those tasks run their default schedules"
        )
    if k["checked"]:
        return f"{k['kernels']} kernels compile with {k['compiler']} for {k['arch']}"
    return f"NOT CHECKED: {k['reason']}; a GPU host compiles them when it loads model.so"


def budget_title(budget: Mapping[str, Any]) -> str:
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


def phase_name(name: str, report: Mapping[str, Any]) -> str:
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
