"""docs/cli.md, made from the commands' own --help texts, so the reference cannot drift.

python -m tune_orchestrator.cli.docs            # write docs/cli.md
python -m tune_orchestrator.cli.docs --check    # exit 1 when docs/cli.md is not current
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import click

PROG = "orchestrate"
WIDTH = 100  # fixed, so the text does not depend on the terminal that generates it

HEADER = f"""# Command-line reference

Generated from `{PROG} --help` and each command's `--help` by
`python -m tune_orchestrator.cli.docs`; do not edit by hand (`tests/test_cli_docs.py` fails
when this page and the commands disagree). The tuning command is the default:
`{PROG} --budget 5min model.onnx` is `{PROG} tune --budget 5min model.onnx`.
"""


def _context(command: click.Command, name: str, parent: click.Context | None) -> click.Context:
    """The context `orchestrate ... --help` would make (settings such as -h included)."""
    settings = {**command.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}
    return click.Context(command, info_name=name, parent=parent, **settings)


def render(group: click.Group | None = None) -> str:
    """The Markdown page: the group's help, then every command's, in the order --help lists."""
    if group is None:
        from .commands import main as group
    root = _context(group, PROG, None)
    parts = [HEADER, f"## `{PROG}`\n", "```text", group.get_help(root), "```\n"]
    for name in group.list_commands(root):
        command = group.get_command(root, name)
        if command is None or command.hidden:
            continue
        help_text = command.get_help(_context(command, name, root))
        parts += [f"## `{PROG} {name}`\n", "```text", help_text, "```\n"]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=Path("docs/cli.md"))
    parser.add_argument(
        "--check", action="store_true", help="compare instead of writing; exit 1 if stale"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.path.read_text() if args.path.is_file() else None
        if current != text:
            print(f"{args.path} is not current: run python -m tune_orchestrator.cli.docs")
            return 1
        return 0
    args.path.parent.mkdir(parents=True, exist_ok=True)
    args.path.write_text(text)
    print(f"wrote {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
