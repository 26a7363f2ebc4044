"""`orchestrate`: the command line. It parses and prints; the work is in `orchestrator.api`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from budget import BudgetError, parse_budget

from .errors import InputError

EXIT_OK, EXIT_INPUT = 0, 2


class BudgetType(click.ParamType):
    name = "BUDGET"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return str(parse_budget(str(value)))
        except BudgetError as exc:
            self.fail(str(exc), param, ctx)


class DefaultGroup(click.Group):
    """A group whose default command is `tune`: `orchestrate --budget 5min model.onnx`.

    Every usage error and InputError becomes one line on stderr and exit code 2.
    """

    default_command = "tune"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = code if isinstance(code, int) else EXIT_OK
        except click.exceptions.Exit as exc:
            code = exc.exit_code
        except click.exceptions.NoArgsIsHelpError as exc:  # plain `orchestrate`: show the help
            click.echo(exc.ctx.get_help())
            code = EXIT_OK
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
            click.echo(f"error: {exc.format_message()}{hint}", err=True)
            code = EXIT_INPUT
        except InputError as exc:
            click.echo(f"error: {exc}", err=True)
            code = EXIT_INPUT
        except click.Abort:
            click.echo("interrupted", err=True)
            code = 130
        if standalone_mode:
            sys.exit(code)
        return code


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Tune an ONNX model with TVM MetaSchedule within a budget, then compile and check it.

    \b
      orchestrate --budget 5min model.onnx      tune (the default command)
      orchestrate estimate model.onnx           tasks, untuned latency, spend forecast
      orchestrate report runs/<run>             render the cost report again
      orchestrate config                        print the resolved configuration

    Exit codes: 0 done, 2 bad input or configuration (one line on stderr).
    """


@main.command("tune")
@click.argument("model", type=click.Path(path_type=Path, dir_okay=True, exists=False))
@click.option(
    "--budget",
    type=BudgetType(),
    help="Limits, first reached wins: 45min, 1.5h, 500trials, 2gpu-h (several joined with commas). Default: [tune] budget of the config.",
)
@click.option(
    "--target",
    help="auto, llvm, cuda, a TVM tag (nvidia/nvidia-h100) or a JSON dict. Default: auto (CUDA when a GPU is visible).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    help="Run directory; an existing one is resumed. Default: runs/<model>-<time>.",
)
@click.option(
    "--input-shape",
    "input_shapes",
    multiple=True,
    metavar="NAME:DIMS",
    help="Shape of an input with dynamic dimensions, e.g. input:1x3x224x224 (repeatable).",
)
@click.option(
    "--trials-per-round", type=click.IntRange(min=1), help="Candidates per round (default 64)."
)
@click.option("--seed", type=click.IntRange(min=0), help="Random seed of the search.")
@click.option("--filter", "filter_name", help="Candidate filter: none (default).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="TOML file layered over configs/default.toml.",
)
@click.option(
    "--price",
    type=float,
    metavar="USD_PER_HOUR",
    help="Price of an hour, per GPU on GPU runs and per machine on CPU runs (default: configs/prices.toml).",
)
@click.option(
    "--min-gain",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Stop early when the last 20% of spend cut latency by less than this share and the forecast agrees (default 0.01).",
)
@click.option(
    "--no-early-stop",
    is_flag=True,
    help="Spend the whole budget: never stop on diminishing returns.",
)
@click.option(
    "--build-only",
    is_flag=True,
    help="Do not tune: compile the model with the run directory's records (works for a GPU target on a host without one).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the closing summary.")
def tune_command(
    model: Path,
    budget: str | None,
    target: str | None,
    out: Path | None,
    input_shapes: tuple[str, ...],
    trials_per_round: int | None,
    seed: int | None,
    filter_name: str | None,
    config_file: Path | None,
    price: float | None,
    min_gain: float | None,
    no_early_stop: bool,
    build_only: bool,
    quiet: bool,
) -> int:
    """Tune MODEL (an ONNX file) and leave a run directory with the tuned library, a stock TVM
    tuning database, a journal and report.json. Run again with the same --out to resume."""
    from .api import tune
    from .printer import Printer

    printer = Printer(quiet=quiet)
    result = tune(
        model,
        budget=budget,
        target=target,
        out=out,
        input_shapes=input_shapes,
        config=config_file,
        trials_per_round=trials_per_round,
        seed=seed,
        filter=filter_name,
        price=price,
        min_gain=min_gain,
        early_stop=False if no_early_stop else None,
        build_only=build_only,
        on_event=printer,
    )
    printer.summary(result)
    return EXIT_OK


@main.command("estimate")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--target", help="As for tuning; default auto.")
@click.option(
    "--input-shape",
    "input_shapes",
    multiple=True,
    metavar="NAME:DIMS",
    help="Shape of an input with dynamic dimensions (repeatable).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="TOML file layered over configs/default.toml.",
)
@click.option(
    "--runs-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("runs"),
    show_default=True,
    help="Earlier runs to learn the tuning curve and round costs from.",
)
@click.option(
    "--price", type=float, metavar="USD_PER_HOUR", help="Price of an hour, as for tuning."
)
def estimate_command(
    model: Path,
    target: str | None,
    input_shapes: tuple[str, ...],
    config_file: Path | None,
    runs_dir: Path,
    price: float | None,
) -> int:
    """Tasks, FLOPs, untuned latency, and the spend likely needed to reach 90/95/99% of the
    attainable gain."""
    from .estimate import estimate
    from .printer import print_estimate

    print_estimate(
        estimate(
            model,
            target=target,
            input_shapes=input_shapes,
            config=config_file,
            runs_dir=runs_dir,
            price=price,
        )
    )
    return EXIT_OK


@main.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path, file_okay=False))
def report_command(run_dir: Path) -> int:
    """Render the cost report of RUN_DIR again: report.json, report.md, report.html, plots."""
    from .reporting import rerender

    for kind, path in rerender(run_dir).items():
        click.echo(f"{kind:<18}{path}")
    return EXIT_OK


@main.command("config")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="TOML file layered over configs/default.toml.",
)
def config_command(config_file: Path | None) -> int:
    """Print the resolved configuration as TOML."""
    from .config import Settings

    settings = Settings.load(config_file)
    for section, values in settings.to_dict().items():
        click.echo(f"[{section}]")
        for key, value in values.items():
            click.echo(f"{key} = {_toml_value(value)}")
        click.echo()
    return EXIT_OK


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


__all__ = ["main"]
