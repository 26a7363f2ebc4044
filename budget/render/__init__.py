"""The cost report for people: report.md and report.html from one document built from
report.json (document.py), their plots, and the words the printed summary shares with them."""

from .document import Document, document
from .html import to_html
from .markdown import markdown
from .plots import PLOTS, end_to_end_scale, write_plots
from .words import (
    background_work,
    describe_change,
    describe_check,
    describe_coverage,
    describe_kernels,
    describe_library,
    describe_shipped,
    describe_simulated,
    library_rounds,
)
from .workings import describe_filter, describe_measurement, describe_search

__all__ = [
    "PLOTS",
    "Document",
    "background_work",
    "describe_change",
    "describe_check",
    "describe_coverage",
    "describe_filter",
    "describe_kernels",
    "describe_library",
    "describe_measurement",
    "describe_search",
    "describe_shipped",
    "describe_simulated",
    "document",
    "end_to_end_scale",
    "library_rounds",
    "markdown",
    "to_html",
    "write_plots",
]
