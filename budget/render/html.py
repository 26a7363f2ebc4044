"""report.html, from the report's document (document.py) and its plots."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path

from .document import Document

_STYLE = (
    "<style>body{font-family:sans-serif;max-width:64rem;margin:2rem auto;padding:0 1rem}"
    "table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;"
    "text-align:right}td:first-child,th:first-child{text-align:left}img{max-width:100%}</style>"
)


def to_html(doc: Document, plots: Mapping[str, Path], run_dir: Path) -> str:
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>Tuning report: {esc(doc.title)}'
        f"</title>{_STYLE}</head><body>",
        "<h1>Tuning report</h1>",
        *(f"<p>{esc(line).replace('**', '')}</p>" for line in doc.headline),
    ]
    if doc.provenance:
        parts.append(f"<p><small>{esc(doc.provenance)}</small></p>")
    for title, header, rows in doc.tables:
        heads = "".join(f"<th>{esc(h)}</th>" for h in header)
        parts += [f"<h2>{esc(title)}</h2><table><tr>{heads}</tr>"]
        parts += [_row(row, len(header)) for row in rows]
        parts.append("</table>")
    if doc.measurement:
        items = "".join(f"<li>{esc(x)}</li>" for x in doc.measurement)
        parts.append(f"<h2>Measurement</h2><ul>{items}</ul>")
    if doc.filter:
        parts.append(f"<h2>Filter</h2><p>{esc(doc.filter)}</p>")
    for name, path in plots.items():
        src = esc(path.relative_to(run_dir).as_posix())
        parts.append(f'<h2>{esc(name.capitalize())}</h2><img src="{src}" alt="{esc(name)}">')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _row(row: list[str], width: int) -> str:
    """A table row; a row of one cell spans the table."""
    if len(row) == 1 < width:
        return f'<tr><td colspan="{width}" style="text-align:left">{html.escape(row[0])}</td></tr>'
    return "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
