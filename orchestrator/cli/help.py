"""How the command line explains itself: `tune`'s options in groups with their defaults, and a
mistyped command named rather than taken for a model file."""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from .. import configs

# tune's options by what a user reaches for: the few every run sets first.
TUNE_GROUPS = {
    "Essentials": ["budget", "target", "out", "json_events", "quiet", "fresh"],
    "Run control": [
        "trials_per_round", "seed", "filter_name", "min_gain", "no_early_stop",
        "build_only", "input_shapes", "check_inputs", "no_check", "config_file", "price",
    ],
    "What earlier runs learned": ["warm_start", "library", "no_library"],
    "Devices and fleet": ["gpus", "parallelism", "rpc", "rpc_key", "simulate"],
    "Output": ["mlflow_on", "mlflow_uri", "mlflow_experiment"],
}  # fmt: skip


class GroupedCommand(click.Command):
    """A command whose --help lists its options under TUNE_GROUPS' headings."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        options = {p.name: p for p in self.get_params(ctx) if isinstance(p, click.Option)}
        shown: set[str] = set()
        for title, names in TUNE_GROUPS.items():
            rows = [options[n].get_help_record(ctx) for n in names if n in options]
            _section(formatter, title, rows)
            shown.update(names)
        rest = [p.get_help_record(ctx) for name, p in options.items() if name not in shown]
        _section(formatter, "Other options", rest)


def _section(formatter: click.HelpFormatter, title: str, rows: Iterable[Any]) -> None:
    rows = [row for row in rows if row]
    if rows:
        with formatter.section(title):
            formatter.write_dl(rows)


@functools.cache
def _defaults() -> dict[str, Any]:
    return tomllib.loads(configs.read_text("default.toml"))


def default_of(key: str) -> str:
    """The packaged default of a setting ("tune.budget" -> "10min"), for help texts."""
    section, name = key.split(".")
    value = _defaults()[section][name]
    return str(value).lower() if isinstance(value, bool) else str(value)


def near_command(word: str, commands: Iterable[str]) -> str | None:
    """The command `word` is a typo of (edit distance 2 at most), unless it is a file: then it
    is the model, for the default command."""
    if Path(word).exists() or word.startswith("-"):
        return None
    close = [(_distance(word, c), c) for c in commands]
    best = min(close, default=(3, None))
    return best[1] if best[0] <= 2 else None


def _distance(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions, substitutions."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, start=1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]
