"""The exit codes: exits.py, its HELP text in --help, the README's and docs/report.md's tables
and the `finished` event's schema list the same codes."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from tune_orchestrator import exits
from tune_orchestrator.cli.commands import main
from tune_orchestrator.events import schema

ROOT = Path(__file__).resolve().parents[1]
CODES = {value for name, value in vars(exits).items() if name.isupper() and isinstance(value, int)}


def table_codes(page: Path) -> set[int]:
    """The codes in the table under a page's "## Exit codes" heading."""
    section = page.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)}


def test_the_code_lists_agree_with_exits_py():
    assert CODES == {0, 1, 2, 3, 4, 5, 130}
    listed = re.findall(r"(?:: |; )(\d+) ", exits.HELP)
    assert [int(code) for code in listed] == sorted(CODES)
    assert table_codes(ROOT / "README.md") == CODES
    assert table_codes(ROOT / "docs" / "report.md") == CODES


def test_the_finished_event_carries_every_code_a_run_that_ends_with_a_report_can_have():
    (finished,) = [
        k for k in schema()["oneOf"] if k["properties"]["event"].get("const") == "finished"
    ]
    # 1 also ends a run that ran, but built and ran no candidate (stop "nothing-ran").
    assert set(finished["properties"]["exit_code"]["enum"]) == CODES - {exits.INPUT}


def test_the_help_shows_exits_help():
    shown = CliRunner().invoke(main, ["--help"]).output
    assert " ".join(exits.HELP.split()) in " ".join(shown.split())
