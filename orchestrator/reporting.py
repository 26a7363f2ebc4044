"""Writing the cost report into a run directory: JSON, Markdown, HTML and plots."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tune_orchestrator.budget import render
from tune_orchestrator.budget.report import schema

from .errors import InputError
from .rundir import RunDir


def write_report(run: RunDir, report: Mapping[str, Any]) -> dict[str, Path]:
    """Write report.json, the plots, report.md and report.html (each replaced atomically)."""
    plots = render.write_plots(report, run[RunDir.PLOTS])
    written = {
        "json": run.write_json(RunDir.REPORT, report),
        "markdown": run.write_text(RunDir.REPORT_MD, render.markdown(report, plots, run.path)),
        "html": run.write_text(RunDir.REPORT_HTML, render.to_html(report, plots, run.path)),
    }
    return {**written, **{f"plot_{name}": path for name, path in plots.items()}}


def rerender(path: str | Path) -> dict[str, Path]:
    """`orchestrate report RUN`: render the report of a finished session again."""
    with RunDir.open_existing(path) as run:
        if not run[RunDir.REPORT].exists():
            raise InputError(
                f"{run.path} has no report.json yet (no session has finished); resume the run "
                "with orchestrate --out to produce one"
            )
        report = run.read_json(RunDir.REPORT)
        if (
            not isinstance(report, dict)
            or report.get("schema") != schema()["properties"]["schema"]["const"]
        ):
            raise InputError(f"{run[RunDir.REPORT]} is not a tune-orchestrator report")
        return write_report(run, report)
