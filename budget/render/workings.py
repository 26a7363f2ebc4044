"""How a run worked, in words: its search, its filter, its measurement."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..units import fmt_duration, fmt_latency

_SEARCH_PARTS = ("sampling", "mutation", "prediction", "features", "verify")


def search_parts(search: Mapping[str, Any]) -> list[str]:
    """The parts search time is split into; the late check only where it ran (GPU targets)."""
    return [p for p in _SEARCH_PARTS if p != "verify" or search.get("verify")]


def describe_search(search: Mapping[str, Any]) -> str | None:
    """Where search time went, in one line (summary)."""
    if not search or not search.get("searches"):
        return None
    parts = ", ".join(f"{p} {fmt_duration(search.get(p, 0.0))}" for p in search_parts(search))
    return (
        f"{search['searches']} searches proposed {search['proposed']} candidates: {parts} "
        f"(postprocessing runs inside sampling and mutation){gpu_checks(search)}"
        f"{_unmeasured(search)}{_shared(search)}{prior_clause(search)}"
    )


def prior_clause(search: Mapping[str, Any]) -> str:
    """Which shipped prior ranked the search from its first round (alone until the run's model
    was ready, then beside it unless `[search] prior_weight` is 0), as a clause ("" when none)."""
    if not search.get("prior"):
        return ""
    return (
        f"; the search was ranked by the prior shipped with the package ({search['prior']}) "
        "from its first round"
    )


def _shared(search: Mapping[str, Any]) -> str:
    """What tasks of one kind shared (search/sisters.py), as a clause ("" when nothing)."""
    if not search.get("shared"):
        return ""
    return (
        f"; {search['shared']} schedules shared between tasks of one kind, "
        f"{search.get('shared_best', 0)} of them became their task's best"
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


def gpu_checks(search: Mapping[str, Any]) -> str:
    """What the GPU precheck turned away and the late check dropped, as clauses to append
    ("" when nothing)."""
    notes = ""
    if search.get("prechecked"):
        notes += (
            f"; {search['prechecked']} schedules over the GPU's limits or CUDA's vector widths "
            "turned away unlowered"
        )
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
    costs = stats.get("costs") or {}
    if costs.get("ranking") == "gain_per_second":
        line += f", ranked by expected gain per second ({costs['build_samples']} builds timed)"
    if costs.get("predicted_timeouts_dropped"):
        line += (
            f", {costs['predicted_timeouts_dropped']} predicted to build past the "
            f"{costs['timeout_s']:g}-s timeout left unbuilt"
        )
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
    lines += _dop(m, overlap)
    lines += _workers_ready(m.get("workers_ready_s") or {}, "measuring", "the engine")
    lines += _workers_ready(m.get("builders_ready_s") or {}, "building", "the run")
    lines += _remote_builds(m.get("remote_builds") or {})
    lines += _telemetry(m.get("telemetry") or {})
    if m.get("caveat"):
        lines.append(f"caveat: {m['caveat']}")
    return lines


def _remote_builds(remote: Mapping[str, Any]) -> list[str]:
    if not remote:
        return []
    return [
        f"built on {remote['servers']} build servers under key {remote['key']!r}, "
        f"{remote['failed']} builds failed there, {remote['library_bytes'] / 1e6:.1f} MB received"
    ]


def _dop(m: Mapping[str, Any], overlap: bool) -> list[str]:
    """The degree of parallelism over time, how the first span went, and the fidelity checks
    behind the DOP's changes."""
    batches = m.get("batches") or []
    if not batches:
        return []
    path: list[int] = []
    for b in batches:
        if not path or path[-1] != b["dop"]:
            path.append(b["dop"])
    shown = " -> ".join(map(str, path[:12])) + (" -> ..." if len(path) > 12 else "")
    what = (
        "DOP (candidates timed at once per GPU)" if overlap else "DOP (preparing workers per GPU)"
    )
    first = batches[0]
    took = ""
    if first.get("seconds"):
        took = (
            f"; its first {first['candidates']} candidates (DOP {first['dop']}) took "
            f"{fmt_duration(first['seconds'])}"
        )
        if first.get("filling_s") is not None:
            took += f", {fmt_duration(first['filling_s'])} of it before the first timing"
    lines = [
        f"{what} over time {shown} (now {m['dop']}, ceiling {m['ceiling']}){took}; "
        f"{m.get('isolated_runs', 0)} re-timings in isolation"
    ]
    checks = m.get("checks") or []
    if checks:
        failed = [c for c in checks if c["new_dop"] < c["dop"]]
        worst = max(c["rel_error"] for c in checks)
        lines.append(
            f"{len(checks)} fidelity checks against isolated timings, {len(failed)} backed "
            f"off; worst median relative error {worst:.1%}"
        )
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
    plural = "s" if w["started"] != 1 else ""
    line = f"{w['started']} {doing} worker{plural} started with {began}"
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
