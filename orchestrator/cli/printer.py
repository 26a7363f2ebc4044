"""Human-readable progress and the closing summary, printed from the run's events."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from tune_orchestrator.budget.base import BUILD_ONLY
from tune_orchestrator.budget.render import (
    describe_change,
    describe_check,
    describe_coverage,
    describe_filter,
    describe_kernels,
    describe_library,
    describe_measurement,
    describe_search,
    describe_shipped,
    describe_simulated,
    library_rounds,
)
from tune_orchestrator.budget.units import counted, fmt_amount, fmt_duration, fmt_latency

from ..api import ANSWER, Result


def fmt_flops(flops: float) -> str:
    for unit, scale in (("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.0f} FLOP"


class Printer:
    """An `on_event` callback for people: on a terminal, a progress bar (spend against the
    budget, best model latency so far) under the step lines; elsewhere one plain line per
    step. `quiet` keeps only warnings and the summary."""

    BAR = 24

    def __init__(self, *, quiet: bool = False, tty: bool | None = None) -> None:
        self.quiet = quiet
        self.tty = sys.stdout.isatty() if tty is None else tty
        self._bar = ""  # the progress line on screen, if any
        self._shipped_as = "model.so"  # the shipped file's name, as run_started gives it

    def __call__(self, event: dict[str, Any]) -> None:
        handler = getattr(self, "_on_" + event["event"], None)
        if handler is not None:
            handler(event)

    def _say(self, text: str) -> None:
        if self.quiet:
            return
        if self._bar:  # print above the bar, then draw it again
            click.echo("\r" + " " * len(self._bar) + "\r", nl=False)
        click.echo(text)
        if self._bar:
            click.echo(self._bar, nl=False)

    def _progress(self, text: str) -> None:
        if self.quiet:
            return
        padding = " " * max(0, len(self._bar) - len(text))
        self._bar = text
        click.echo("\r" + text + padding, nl=False)

    def _end_progress(self) -> None:
        if self._bar and not self.quiet:
            click.echo()
        self._bar = ""

    def _on_run_started(self, e: dict[str, Any]) -> None:
        self._shipped_as = Path(e["library"]).name
        if e["resumed"]:  # the first thing said: nothing starts over unannounced
            self._say(
                f"resuming {e['run_dir']}: {fmt_duration(e['spent_s'])} and "
                f"{counted(e['trials'], 'trial')} spent before count against the budget "
                "(--fresh starts over)"
            )
        if e["build_only"]:
            self._say(f"compiling {e['model']} for {e['target']} (build only: no tuning)")
        else:
            price = f" at ${e['price']:.3g}/h" if e["price"] is not None else ""
            self._say(f"tuning {e['model']} for {e['target']} within {e['budget']}{price}")
        if not e["resumed"]:
            self._say(f"run directory: {e['run_dir']}")

    def _on_tasks(self, e: dict[str, Any]) -> None:
        tasks = e["tasks"]
        self._tasks = len(tasks)
        listed = ", ".join(
            f"{t['name']} (x{t['weight']}, {fmt_flops(t['flops'])})" for t in tasks[:6]
        )
        more = f", and {len(tasks) - 6} more" if len(tasks) > 6 else ""
        self._say(f"{len(tasks)} tasks: {listed}{more}" if tasks else "0 tasks: nothing to tune")

    def _on_untuned_tasks(self, e: dict[str, Any]) -> None:
        failed = [t["task"] for t in e["tasks"] if t["latency_s"] is None]
        note = f" ({len(failed)} could not be measured untuned)" if failed else ""
        self._say(f"measured {len(e['tasks'])} tasks untuned{note}")

    def _on_compiled(self, e: dict[str, Any]) -> None:
        label = e["label"]
        if e.get("kernels") is not None:
            self._say(f"{label} model's CUDA kernels: {describe_kernels(e['kernels'])}")
        check = e["check"]
        if check is None:
            self._say(f"{label} model compiled (no device here to run it)")
            return
        latency = f"{fmt_latency(e['latency']['median_s'])} per inference, " if e["latency"] else ""
        self._say(f"{label} model: {latency}{describe_check(check)}")
        if check["ok"] is not True:
            click.echo(
                f"WARNING: the {label} model: {describe_check(check)}; do not deploy it without "
                "finding out why",
                err=True,
            )

    def _on_compared(self, e: dict[str, Any]) -> None:
        self._say(
            f"untuned and tuned model timed in turn, {e['repeats']} timings each: "
            f"{fmt_latency(e['untuned']['median_s'])} -> {fmt_latency(e['tuned']['median_s'])}, "
            f"{describe_change(e['change'], e['speedup'])}; {self._shipped_as} is the {e['shipped']} build"
        )

    def _on_shipped(self, e: dict[str, Any]) -> None:
        self._say(f"{self._shipped_as}: {describe_shipped(e)}")

    def _on_round(self, e: dict[str, Any]) -> None:
        spend = e["spend"]
        failed = f", {e['failed']} failed" if e["failed"] else ""
        line = (
            f"round {e['round']:>3}  {e['task']} [{e['task_index'] + 1}/{e['tasks']}]  "
            f"{e['measured']} measured{failed}  task best {fmt_latency(e['best_s'])}  "
            f"model ~{fmt_latency(e['model_latency_s'])}  "
            f"{fmt_duration(spend['wall_s'])}, {counted(spend['trials'], 'trial')}"
            + ("  (the early stop waits for this task)" if e.get("early_stop_waits") else "")
        )
        if not self.tty:
            self._say(line)
            return
        used = min(1.0, e["budget_used"] or 0.0)
        filled = int(round(used * self.BAR))
        money = f", ${spend['usd']:.2f}" if spend["usd"] is not None else ""
        self._say(line)
        self._progress(
            f"[{'#' * filled}{'.' * (self.BAR - filled)}] {used:4.0%} of budget  "
            f"{fmt_duration(spend['wall_s'])}{money}  best model ~{fmt_latency(e['model_latency_s'])}"
        )

    def _on_library_round(self, e: dict[str, Any]) -> None:
        failed = f", {e['failed']} failed" if e["failed"] else ""
        plateau = ", at a plateau there" if e["plateau"] else ""
        self._say(
            f"library    {e['task']} [{e['task_index'] + 1}/{e['tasks']}]  {e['measured']} of its "
            f"fastest records measured{failed}  task best {fmt_latency(e['best_s'])}  "
            f"({e['library_trials']} library trials{plateau})"
        )

    def _on_task_retired(self, e: dict[str, Any]) -> None:
        self._say(f"task {e['task']} retired: {e['reason']}")

    def _on_warning(self, e: dict[str, Any]) -> None:
        self._end_progress()
        click.echo(f"warning: {e['message']}", err=True)

    def _on_stopped(self, e: dict[str, Any]) -> None:
        self._end_progress()
        self._say(f"stopped: {e['reason']}")

    def summary(self, result: Result) -> None:
        """The closing summary, printed even when quiet."""
        # A finished run asked again answers with its report: its budget and stop, not this one's.
        finished = ", as the finished run's report has it" if ANSWER in result.report else ""
        lines = ["", f"Summary ({result.model} on {result.target}){finished}"]
        lines += _outcome_lines(result)
        lines += _spend_lines(result)
        lines += _workings_lines(result.report)
        lines += [
            f"  run directory       {result.run_dir}",
            f"  {_shipped_name(result):<20}{describe_shipped(result.report['summary'])}",
        ]
        if result.shipped != "none":
            lines.append(f"{'':<22}{result.paths['library']}")
        click.echo("\n".join(lines))


def _shipped_name(result: Result) -> str:
    """model.so, or a simulated run's model-SIMULATED.so."""
    return Path(result.paths["library"]).name


def _outcome_lines(result: Result) -> list[str]:
    """Latency untuned and tuned, the schedules, the kernels, the output check."""
    lines = []
    if result.untuned_latency_s and result.tuned_latency_s and result.speedup:
        untuned = result.shipped == "untuned"
        shipped = f"; {_shipped_name(result)} is the untuned build" if untuned else ""
        lines.append(
            f"  end-to-end latency  {fmt_latency(result.untuned_latency_s)} untuned -> "
            f"{fmt_latency(result.tuned_latency_s)} tuned "
            f"({describe_change(result.change, result.speedup)}){shipped}"
        )
        u, t = result.untuned_latency or {}, result.tuned_latency or {}
        if u and t:
            lines.append(
                f"{'':<22}median of {t['repeats']} timings each, in turn at the end: "
                f"untuned {fmt_latency(u['min_s'])}-{fmt_latency(u['max_s'])}, "
                f"tuned {fmt_latency(t['min_s'])}-{fmt_latency(t['max_s'])}"
            )
    elif result.tuned_latency_s and result.tuned_latency:  # one build, nothing to compare
        lines.append(
            f"  end-to-end latency  {fmt_latency(result.tuned_latency_s)}, median of "
            f"{result.tuned_latency['repeats']} timings"
        )
    if result.trials:
        lines.append(f"  schedules           {describe_schedules(result)}")
    elif result.stop == BUILD_ONLY:  # e.g. a GPU build on a new --out: a plain compile
        lines.append(
            "  schedules           TVM's defaults: the run directory holds no tuned records, "
            "so the tuned build is the untuned model"
        )
    if result.kernels is not None:
        lines.append(f"  CUDA kernels        {describe_kernels(result.kernels)}")
    simulated = describe_simulated(result.report.get("simulated"))
    if simulated:
        lines.append(f"  {simulated}")
    tuned_check = (result.report.get("tuned") or {}).get("check")
    if tuned_check:
        lines.append(f"  outputs             {describe_check(tuned_check, subject=False)}")
    return lines


def _spend_lines(result: Result) -> list[str]:
    """Trials, spend by phase, the budget, why it stopped."""
    phases = ", ".join(
        f"{name} {fmt_duration(secs)}"
        for name, secs in sorted(result.phases.items(), key=lambda kv: -kv[1])
        if secs >= 0.05
    )
    spent = fmt_duration(result.wall_s)
    if result.device_h:
        spent += f", {result.device_h:.3g} GPU-h"
    if result.usd is not None:
        spent += f", ${result.usd:.2f}"
    if result.energy_j is not None:
        spent += f", {result.energy_j / 1e3:.3g} kJ"
    coverage = describe_coverage(result.report["summary"], len(result.report["tasks"]))
    return [
        f"  trials              {result.trials} in {counted(result.rounds, 'round')}"
        + library_rounds(result.report.get("library"))
        + (f"; {coverage.rstrip('.')}" if coverage else ""),
        f"  spent               {spent} ({phases})",
        f"  budget              {describe_budget(result.report['budget'])}",
        f"  stopped because     {result.stop_reason}",
    ]


def _workings_lines(report: Mapping[str, Any]) -> list[str]:
    """How the library, the search, the filter and the measurement went."""
    lines = []
    for name, said in (
        ("library", describe_library(report.get("library"))),
        ("search", describe_search(report.get("search") or {})),
        ("filter", describe_filter(report.get("filter") or {})),
    ):
        if said:
            lines.append(f"  {name:<20}{said}")
    measured = describe_measurement(report.get("measurement") or {})
    lines += [f"  {'measurement' if i == 0 else '':<20}{x}" for i, x in enumerate(measured)]
    return lines


def describe_budget(budget: Mapping[str, Any]) -> str:
    """Each limit against what was spent, any overshoot, and the longest step."""
    parts = []
    for row in budget["limits"]:
        text = f"{fmt_amount(row['kind'], row['spent'])} of {row['limit']}"
        if row["overshoot"]:
            text += f" (over by {fmt_amount(row['kind'], row['overshoot'])})"
        parts.append(text)
    step = budget.get("longest_step")
    if step:
        parts.append(f"longest step {step['phase']} {fmt_duration(step['seconds'])}")
    return "; ".join(parts)


def describe_schedules(result: Result) -> str:
    """Which tasks run tuned schedules, and which kept their default one."""
    tuned = [t for t in result.tasks if t.schedule == "tuned"]
    kept = list(result.kept_default)
    text = f"{len(tuned)} of {len(result.tasks)} tasks run tuned schedules"
    if kept:
        more = f", and {len(kept) - 4} more" if len(kept) > 4 else ""
        text += (
            f"; {len(kept)} tuned kept the default schedule, faster than every candidate: "
            f"{', '.join(kept[:4])}{more}"
        )
    return text


def print_estimate(estimate: dict[str, Any]) -> None:
    """The `orchestrate estimate` table. A model with no task (TVM computes it all at compile
    time) gets no forecast: a run of it compiles and checks, and tunes nothing."""
    tasks = estimate["tasks"]
    click.echo(
        f"{estimate['model']['name']} on {estimate['target']['description']}: {len(tasks)} tasks"
    )
    if tasks:
        click.echo(f"  {'task':<52}{'weight':>7}{'FLOPs':>13}{'untuned':>11}{'share':>8}")
    for t in tasks:
        share = t["share"]
        click.echo(
            f"  {t['name'][:51]:<52}{t['weight']:>7}{fmt_flops(t['flops']):>13}"
            f"{fmt_latency(t['untuned_s']):>11}{share:>8.1%}"
        )
    untuned = estimate["untuned"]
    if untuned:
        click.echo(
            f"untuned model: {fmt_latency(untuned['latency']['median_s'])} per inference, "
            f"{describe_check(untuned['check'])}"
        )
        if untuned["check"]["status"] == "differs":
            from ..deploy.check import UNTUNED_DIFFERS_FIX, UNTUNED_DIFFERS_WHY

            click.echo(
                f"a run stops here, before tuning, and exits 4: {UNTUNED_DIFFERS_WHY}; "
                f"{UNTUNED_DIFFERS_FIX}"
            )
    else:
        click.echo("untuned model: not measured (no device here to run it)")
    if not tasks:
        click.echo("nothing to tune: no operator is left to search once TVM has compiled it")
        _print_runs(estimate, per_budget=False)
        return
    _print_forecast(estimate)
    _print_runs(estimate, per_budget=True)
    click.echo(f"trust: {estimate['trust']}")


def _print_forecast(estimate: dict[str, Any]) -> None:
    r = estimate["round"]
    size, seconds = f"{r['candidates']}", f"~{fmt_duration(r['seconds'])}"
    if r["first_candidates"] < r["candidates"]:
        size = f"{r['first_candidates']}-{size}"
        seconds = f"~{fmt_duration(r['first_seconds'])} to {seconds}"
    click.echo(f"rounds of {size} candidates, {seconds} each ({r['source']})")
    for row in estimate["forecast"]:
        money = f", ${row['usd']:.2f}" if row["usd"] is not None else ""
        gpu = f", {row['device_h']:.3g} GPU-h" if row["device_h"] else ""
        click.echo(
            f"  {row['target']:.0%} of the attainable gain: {counted(row['rounds'], 'round')}, "
            f"{row['trials']} trials, ~{fmt_duration(row['seconds'])}{gpu}{money}"
        )


def _print_runs(estimate: dict[str, Any], *, per_budget: bool) -> None:
    """What every run spends, then (`per_budget`) what a run would at each budget."""
    runs = estimate.get("runs") or []
    if not runs:
        return
    f = estimate["fixed"]
    how = "measured now" if f["measured"] else "forecast (no device here)"
    click.echo(
        f"every run: import {fmt_duration(f['import_s'])}, untuned baseline "
        f"{fmt_duration(f['untuned_s'])}, compile {fmt_duration(f['compile_s'])}, check "
        f"{fmt_duration(f['check_s'] + f['timing_s'])} ({how})"
    )
    for run in runs if per_budget else ():
        click.echo(describe_run_forecast(run))


_STOPS = {
    "budget": "budget spent",
    "trials": "trial cap reached",
    "converged": "stops paying",
    "rounds": "round limit",
}


def describe_run_forecast(run: dict[str, Any]) -> str:
    """One line per budget: refused, or the spend by phase and the latency it would reach."""
    if run["refused"]:
        return (
            f"  --budget {run['budget']}: refused up front; give --budget {run['minimum']} or more"
        )
    phases = ", ".join(
        f"{name} {fmt_duration(seconds)}"
        for name, seconds in run["phases"].items()
        if seconds >= 0.5
    )
    reach = ""
    if run["latency_s"] is not None:
        reach = f" -> {fmt_latency(run['latency_s'])} ({run['speedup']:.2f}x)"
    if run.get("not_forecast"):
        reach += f"; {', '.join(run['not_forecast'])} not forecast (a run meters the GPU's power)"
    return (
        f"  --budget {run['budget']}: ~{fmt_duration(run['total_s'])}, {run['trials']} trials in "
        f"{counted(run['rounds'], 'round')} ({_STOPS[run['stop']]}){reach}\n      {phases}"
    )
