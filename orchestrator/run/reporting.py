"""Writing the cost report into a run directory: JSON, Markdown, HTML, plots, rounds.csv."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tune_orchestrator.budget import render
from tune_orchestrator.budget.report import schema

from ..errors import InputError
from ..rundir import RunDir


def write_report(run: RunDir, report: Mapping[str, Any]) -> dict[str, Path]:
    """Write report.json, the plots, report.md, report.html and rounds.csv (each replaced
    atomically)."""
    plots = render.write_plots(report, run[RunDir.PLOTS])
    doc = render.document(report)  # the text both report.md and report.html show
    written = {
        "json": run.write_json(RunDir.REPORT, report),
        "markdown": run.write_text(RunDir.REPORT_MD, render.markdown(doc, plots, run.path)),
        "html": run.write_text(RunDir.REPORT_HTML, render.to_html(doc, plots, run.path)),
        "rounds": run.write_text(RunDir.ROUNDS_CSV, rounds_csv(run.journal(), report["tasks"])),
    }
    return {**written, **{f"plot_{name}": path for name, path in plots.items()}}


# rounds.csv's columns: the round's own figures, then spend so far (all sessions).
ROUND_COLUMNS = (
    "round",
    "task",
    "task_index",
    "trials",
    "measured",
    "failed",
    "best_s",
    "round_best_s",
    "model_latency_s",
    "round_s",
    "wall_s",
    "trials_so_far",
    "device_h",
    "usd",
    "energy_j",
    "early_stop_waits",
)


def rounds_csv(journal: Sequence[Mapping[str, Any]], tasks: Sequence[Mapping[str, Any]]) -> str:
    """One line per round from the journal's "round" entries; an unknown value is empty."""
    names = {t["index"]: t["name"] for t in tasks}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(ROUND_COLUMNS)
    for e in journal:
        if e.get("type") != "round":
            continue
        spend = e.get("spend") or {}
        row = {
            **{k: e.get(k) for k in ("round", "trials", "measured", "failed", "best_s")},
            **{k: e.get(k) for k in ("round_best_s", "model_latency_s")},
            "task": names.get(e.get("task"), e.get("task_key")),
            "task_index": e.get("task"),
            "round_s": e.get("seconds"),
            **{k: spend.get(k) for k in ("wall_s", "device_h", "usd", "energy_j")},
            "trials_so_far": spend.get("trials"),
            "early_stop_waits": e.get("early_stop_waits"),
        }
        writer.writerow(["" if row[c] is None else row[c] for c in ROUND_COLUMNS])
    return out.getvalue()


def rerender(path: str | Path) -> dict[str, Path]:
    """`orchestrate report RUN`: render the report of a finished session again."""
    with RunDir.open_existing(path) as run:
        if not run[RunDir.REPORT].exists():
            raise InputError(
                f"{run.path} has no report.json yet (no session has finished); resume the run "
                "with orchestrate --out to produce one"
            )
        report = run.read_json(RunDir.REPORT)
        path, known = run[RunDir.REPORT], schema()["properties"]
        if not isinstance(report, dict) or report.get("schema") != known["schema"]["const"]:
            raise InputError(f"{path} is not a tune-orchestrator report")
        if report.get("version") != known["version"]["const"]:
            raise InputError(
                f"{path} is a report of version {report.get('version')!r}; this tune-orchestrator "
                f"renders version {known['version']['const']}: use the version that wrote it"
            )
        try:
            return write_report(run, report)
        except KeyError as exc:  # a report of this version has every field the renderer reads
            raise InputError(
                f"{path} lacks {exc}: it was edited or cut short; resume the run (orchestrate "
                f"--out {run.path}) to write it again"
            ) from None
