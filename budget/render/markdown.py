"""report.md, from the report's document (document.py) and its plots."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .document import Document


def markdown(doc: Document, plots: Mapping[str, Path], run_dir: Path) -> str:
    out = ["# Tuning report", "", *doc.headline, ""]
    if doc.provenance:
        out += [doc.provenance, ""]
    if doc.measurement:
        out += ["## Measurement", "", *(f"- {line}" for line in doc.measurement), ""]
    if doc.filter:
        out += ["## Filter", "", doc.filter, ""]
    for title, header, rows in doc.tables:
        out += [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        out += [_row(row, len(header)) for row in rows]
        out.append("")
    if plots:
        out += (
            ["## Plots", ""]
            + [f"![{name}]({p.relative_to(run_dir).as_posix()})" for name, p in plots.items()]
            + [""]
        )
    return "\n".join(out)


def _row(row: list[str], width: int) -> str:
    """A table row; a row of one cell is a line under the table's rows (the rest empty)."""
    cells = [cell.replace("|", "/") for cell in row] + [""] * (width - len(row))
    return "| " + " | ".join(cells) + " |"
