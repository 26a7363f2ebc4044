"""docs/cli.md is generated from the commands' --help texts; a stale page fails here."""

from pathlib import Path

import click
from click.testing import CliRunner

from tune_orchestrator.cli import docs as cli_docs
from tune_orchestrator.cli.commands import main

CLI_MD = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_docs_cli_md_is_what_the_generator_writes_now(tmp_path):
    fresh = tmp_path / "cli.md"
    assert cli_docs.main([str(fresh)]) == 0
    assert CLI_MD.read_text() == fresh.read_text(), (
        "docs/cli.md is not current: run python -m tune_orchestrator.cli.docs"
    )


def test_check_mode_reports_a_stale_page(tmp_path):
    stale = tmp_path / "cli.md"
    stale.write_text(cli_docs.render().replace("--budget", "--bugdet"))
    assert cli_docs.main(["--check", str(stale)]) == 1
    assert cli_docs.main(["--check", str(tmp_path / "missing.md")]) == 1
    stale.write_text(cli_docs.render())
    assert cli_docs.main(["--check", str(stale)]) == 0


def test_every_command_and_its_help_is_on_the_page():
    page = cli_docs.render()
    ctx = click.Context(main, info_name="orchestrate")
    for name in main.list_commands(ctx):
        assert f"## `orchestrate {name}`" in page
        result = CliRunner().invoke(
            main, [name, "--help"], prog_name="orchestrate", terminal_width=cli_docs.WIDTH
        )
        assert result.exit_code == 0
        assert result.output.strip() in page
