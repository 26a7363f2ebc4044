"""`orchestrate`: the command line. It parses and prints; the work is in `orchestrator.api`."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tune_orchestrator.budget import BudgetError, parse_budget
from tune_orchestrator.budget.base import UNTUNED_DIFFERS

from .. import exits
from ..config import MAX_SEED
from ..errors import Aborted, BudgetTooSmall, InputError
from .help import GroupedCommand, default_of, near_command

if TYPE_CHECKING:
    from ..api import Result


class BudgetType(click.ParamType):
    name = "BUDGET"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return str(parse_budget(str(value)))
        except BudgetError as exc:
            self.fail(str(exc), param, ctx)


class PathType(click.Path):
    """click.Path, refusing an empty path (an unset shell variable: `--library "$LIB"`), which
    it would take as the current directory, and one starting with a ~ no shell expanded."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value:
            self.fail("an empty path (an unset variable?); give a path", param, ctx)
        from ..model.loading import unexpanded_tilde

        expanded = unexpanded_tilde(Path(value)) if isinstance(value, str) else None
        if expanded is not None:
            self.fail(
                f"{value}: ~ is a shell's, not expanded inside quotes; give {expanded}", param, ctx
            )
        return super().convert(value, param, ctx)


class Fraction(click.FloatRange):
    """A number in (0, 1); click.FloatRange lets nan through (it compares false both ways)."""

    def __init__(self) -> None:
        super().__init__(0, 1, min_open=True, max_open=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value} is not a number in (0, 1); give e.g. 0.01", param, ctx)
        return number


class DefaultGroup(click.Group):
    """A group whose default command is `tune`: `orchestrate --budget 5min model.onnx`.

    Every usage error and InputError becomes one line on stderr and exit code 2; anything
    unexpected is an internal error (exit 1) with its traceback on stderr.
    """

    default_command = "tune"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            near = near_command(args[0], self.commands)
            if near is not None:
                raise click.UsageError(f"No such command {args[0]!r}. Did you mean {near!r}?", ctx)
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
        # A real command line (args from sys.argv) is metered from its process's start.
        # The report's provenance names the command line that started the run.
        command = list(sys.argv) if args is None else ["orchestrate", *args]
        if args is None:
            _open_closed_streams()
        extra.setdefault(
            "obj", {"started": process_started() if args is None else None, "command": command}
        )
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = code if isinstance(code, int) else exits.OK
        except click.exceptions.Exit as exc:
            code = exc.exit_code
        except click.exceptions.NoArgsIsHelpError as exc:  # plain `orchestrate`: show the help
            click.echo(exc.ctx.get_help())
            code = exits.OK
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
            click.echo(f"error: {exc.format_message()}{hint}", err=True)
            if exc.ctx is not None and exc.ctx.command.name == "tune" and "--json" in command:
                _usage_error_event(f"{exc.format_message()}{hint}")
            code = exits.INPUT
        except InputError as exc:
            click.echo(f"error: {exc}", err=True)
            code = exits.INPUT
        except BudgetTooSmall as exc:
            click.echo(f"error: {exc}", err=True)
            code = exits.BUDGET_TOO_SMALL
        except (click.Abort, KeyboardInterrupt) as exc:
            click.echo(aborted(exc), err=True)
            code = exits.INTERRUPTED
        except Exception as exc:  # a bug or a broken environment
            said = _in_words(exc)
            if said is None:
                click.echo(internal_error(exc), err=True)
                click.echo(traceback.format_exc(), err=True, nl=False)
            else:  # the environment, in one line: no traceback to read
                click.echo(f"error: {said}", err=True)
            code = exits.INTERNAL
        if standalone_mode:
            sys.exit(code)
        return code


def _open_closed_streams() -> None:
    """A command started with stdin, stdout or stderr closed (`>&-`, some service managers):
    Python leaves sys.stdout None (the printer failed on it), and the next file opened would
    take the descriptor, so that build workers' output landed in it. /dev/null takes each."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))


def _usage_error_event(reason: str) -> None:
    """With tune's --json, a value click refused before the run began (a budget's unit, an
    option's type) ends the event stream as any bad input does: one `error` event."""
    from ..events import JsonLines, onto_stdout

    _bad_input_event(onto_stdout(JsonLines(sys.stdout)), reason)


def _bad_input_event(sink: Any, reason: str) -> None:
    """The `error` event that ends a --json stream on bad input (exit 2)."""
    from ..events import Emitter

    Emitter(sink)("error", reason=reason, exit_code=exits.INPUT)


def aborted(exc: BaseException) -> str:
    """Ctrl-C or a signal that stopped a command at once, in words: a run aborted mid-round by
    a second signal can be resumed; before a run began, or in another command, nothing was
    kept. Click turns KeyboardInterrupt into Abort, with the interrupt as its cause."""
    cause = exc.__cause__ if isinstance(exc, click.Abort) else exc
    if isinstance(cause, Aborted):
        return "aborted; resume the run with the same --out"
    return "aborted"


def internal_error(exc: BaseException) -> str:
    """An unexpected exception (a bug) in one line; its traceback follows on stderr."""
    return f"internal error: {type(exc).__name__}: {exc}"


def disk_full(exc: BaseException) -> str | None:
    """What to do, where `exc` or an exception it arose from is a full disk or quota; None
    where none is. The run's files are written in whole steps, so the run resumes."""
    from ..measure.rpc_build import BuildServerFull

    for seen in _chain(exc):
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            again = "run the same command again: the run resumes where it stopped"
            said = seen.strerror or os.strerror(seen.errno)
            if isinstance(seen, BuildServerFull):
                return (
                    f"{said}; free some space there (or start that build server with TMPDIR "
                    f"on a disk with room) and {again}"
                )
            if seen.filename == tempfile.gettempdir():  # compiling or building, by the run
                return (
                    f"{said} in the temporary folder {seen.filename}; free some space there (or "
                    f"set TMPDIR to a folder on a disk with room) and {again}"
                )
            if seen.filename:
                return (
                    f"{said} writing {seen.filename}; free some space (or "
                    f"give --out on another disk) and {again}"
                )
            return (  # a compiler's or linker's words: the run directory's or TMPDIR's disk
                f"{said} on the disk of the run directory or of the temporary "
                f"folder {tempfile.gettempdir()}; free some space there (or give --out, or "
                f"TMPDIR, on another disk) and {again}"
            )
    return None


def folder_removed(exc: BaseException) -> str | None:
    """In words, where `exc` or an exception it arose from is a file missing from a folder
    that is gone (the run directory removed as the run wrote it: `rm -rf`, a cleanup job)."""
    for seen in _chain(exc):
        if isinstance(seen, FileNotFoundError) and seen.filename:
            gone = Path(os.fsdecode(seen.filename)).parent
            if gone.exists():
                continue
            while not gone.parent.exists():
                gone = gone.parent
            return (
                f"{gone} was removed while this command was writing {seen.filename}; run the "
                "command again"
            )
    return None


def _in_words(exc: BaseException) -> str | None:
    """A broken environment said in one line, with no traceback to read; None for a bug."""
    return disk_full(exc) or folder_removed(exc)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


MAIN_HELP = f"""Tune an ONNX model with TVM MetaSchedule within a budget, then compile and check it.

\b
  orchestrate --budget 5min model.onnx      tune (the default command)
  orchestrate estimate model.onnx           tasks, untuned latency, spend forecast
  orchestrate report runs/<run>             render the cost report again
  orchestrate config                        print the resolved configuration

\b
Tuning's essential options (orchestrate tune --help lists them all):
  --budget BUDGET   limits, first reached wins: 5min, 2gpu-h, $5, 500trials
  --target TARGET   auto (CUDA when a GPU is visible), llvm, cuda, a TVM tag
  --out DIR         the run directory; an existing one is resumed (--fresh: start over)
  --json            one JSON event per line on stdout, for pipelines
  --simulate        no GPU here: CUDA search and builds, timings from a simulated GPU

Settings: the packaged defaults (orchestrate config prints them), then --config FILE (or
$ORCHESTRATE_CONFIG), then ORCHESTRATE_<SECTION>_<KEY> variables (e.g.
ORCHESTRATE_TUNE_BUDGET=5min), then options.

{exits.HELP}
"""


@click.group(
    cls=DefaultGroup, help=MAIN_HELP, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(
    package_name="tune-orchestrator", prog_name="orchestrate", message="%(prog)s %(version)s"
)
def main() -> None:
    """The `orchestrate` group (its help is MAIN_HELP)."""


# Options several commands share, declared once.
TARGET = click.option(
    "--target",
    help="auto (CUDA when a GPU is visible, else this CPU), llvm, cuda, a TVM tag "
    "(nvidia/nvidia-h100), a JSON dict, or TVM's older string form (llvm -mcpu=skylake).  "
    f"[default: {default_of('tune.target')}]",
)
INPUT_SHAPE = click.option(
    "--input-shape",
    "input_shapes",
    multiple=True,
    metavar="NAME:DIMS",
    help=(
        "Shape of an input with dynamic dimensions, e.g. input:1x3x224x224 (repeatable); a "
        "named dimension (N) takes the same size in every input that shares it, and one named "
        "by arithmetic on others (past_sequence_length + sequence_length) follows from them."
    ),
)
CONFIG = click.option(
    "--config",
    "config_file",
    type=PathType(path_type=Path, dir_okay=False),
    help="TOML file layered over the packaged defaults (orchestrate config prints them).",
)
PRICE = click.option(
    "--price",
    type=float,
    metavar="USD_PER_HOUR",
    help="Price of an hour, per GPU on GPU runs and per machine on CPU runs.  [default: the "
    "packaged price list, by device]",
)


@main.command("tune", cls=GroupedCommand)
@click.argument("model", type=PathType(path_type=Path, dir_okay=True, exists=False))
@click.option(
    "--budget",
    type=BudgetType(),
    help="Limits, first reached wins: 45min, 1h30min, 500trials, 2gpu-h, $5, 100Wh (several "
    f"joined with commas).  [default: {default_of('tune.budget')}]",
)
@TARGET
@click.option(
    "--out",
    type=PathType(path_type=Path, file_okay=False),
    help="Run directory; an existing one is resumed.  [default: runs/<model>-<time>]",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Start over even where --out holds a run: it is moved aside to <out>.<time>, not deleted.",
)
@INPUT_SHAPE
@click.option(
    "--check-inputs",
    type=PathType(path_type=Path, dir_okay=False),
    metavar="FILE.npz",
    help="Real samples for the output check instead of three random ones: an .npz file with "
    "one array per model input, named after it, of its dtype and shape (or N samples of it, "
    "(N, *shape)). Checked before any work.",
)
@click.option(
    "--trials-per-round",
    type=click.IntRange(min=1),
    help="The most candidates one task's round may have; rounds start smaller.  "
    f"[default: {default_of('tune.trials_per_round')}]",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0, max=MAX_SEED),
    help="Random seed of the search. Runs with one seed still differ: 1% of timing noise "
    f"changes which candidates their rounds take.  [default: {default_of('tune.seed')}]",
)
@click.option(
    "--filter",
    "filter_name",
    help="Candidate filter: xgb (the Trimmer predictor, audited) or none (build and measure "
    f"everything).  [default: {default_of('tune.filter')}]",
)
@click.option(
    "--gpus", metavar="all|0,1", help="GPUs to measure on: all (the default) or their indices."
)
@click.option(
    "--parallelism",
    default="auto",
    show_default=True,
    metavar="auto|N",
    help="Workers preparing candidates per GPU while one at a time is timed: auto (paced by how busy the timed window is) or a fixed number; with [dop] overlap_timing, candidates timed at once.",
)
@click.option("--rpc", metavar="HOST:PORT", help="Measure on the servers of this TVM RPC tracker.")
@click.option("--rpc-key", metavar="KEY", help="The key the RPC servers registered with.")
@click.option(
    "--warm-start",
    type=PathType(path_type=Path, exists=False),
    help="An earlier run directory (any model) or a saved predictor.json to start the learned "
    "model (the search's and the xgb filter's) from. A run directory's records train it with "
    "the library's; a predictor.json replaces what the library trained until the first refit.",
)
@click.option(
    "--library",
    type=PathType(path_type=Path, file_okay=False),
    help="Root of the tuning libraries, one stock MetaSchedule database per target under it: "
    "before the first round each task it knows gets its fastest records measured and the "
    "learned model its records; a run whose tuned model passes its check adds its records "
    "(a library this user may not write is only read). "
    "Default: $XDG_CACHE_HOME/tune-orchestrator/library (else ~/.cache/...).",
)
@click.option(
    "--no-library",
    is_flag=True,
    help="Leave the tuning library alone: neither read nor add to it.",
)
@CONFIG
@PRICE
@click.option(
    "--min-gain",
    type=Fraction(),
    help="Stop early when the last 20% of spend cut latency by less than this share and the "
    f"forecast agrees.  [default: {default_of('stopping.min_gain')}]",
)
@click.option(
    "--no-early-stop",
    is_flag=True,
    help="Spend the whole budget: never stop on diminishing returns.",
)
@click.option(
    "--no-check",
    is_flag=True,
    help="Run and time the builds without comparing their outputs with onnxruntime's; model.so "
    "ships unchecked. For a model onnxruntime cannot run, which is otherwise refused up front.",
)
@click.option(
    "--build-only",
    is_flag=True,
    help="Do not tune: compile the model with the run directory's records (works for a GPU target on a host without one).",
)
@click.option(
    "--simulate",
    is_flag=True,
    help="No GPU here: search and build for a CUDA target (default nvidia/nvidia-h100) for real, with timings from a simulated GPU. Everything it writes says SIMULATED.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the closing summary.")
@click.option(
    "--json",
    "json_events",
    is_flag=True,
    help="Write one JSON event per line on stdout and nothing else (schema: the package's events.schema.json, see docs/report.md).",
)
@click.option(
    "--mlflow",
    "mlflow_on",
    is_flag=True,
    help="Log parameters, per-round metrics and the report to MLflow (tracking URI from MLFLOW_TRACKING_URI or --mlflow-uri).",
)
@click.option("--mlflow-uri", metavar="URI", help="MLflow tracking URI (implies --mlflow).")
@click.option(
    "--mlflow-experiment",
    default="tune-orchestrator",
    show_default=True,
    help="MLflow experiment to log to.",
)
def tune_command(
    model: Path,
    budget: str | None,
    target: str | None,
    out: Path | None,
    quiet: bool,
    json_events: bool,
    **given: Any,
) -> int:
    """Tune MODEL (an ONNX file) and leave a run directory with the tuned library, a stock TVM
    tuning database, a journal and the cost report. Run again with the same --out to resume."""
    from ..api import run
    from ..events import JsonLines, onto_stdout
    from .printer import Printer

    printer = None if json_events else Printer(quiet=quiet)
    context = click.get_current_context().obj or {}
    sink = onto_stdout(JsonLines(sys.stdout) if json_events else printer)
    with _error_event(sink if json_events else None):
        result = run(
            model,
            budget,
            target=target,
            out=out,
            options=_options(**given),
            on_event=sink,
            started=context.get("started"),
            command=context.get("command"),
        )
    if printer is not None:
        printer.summary(result)
    code = result.exit_code
    _explain_exit(code, result)
    return code


@contextlib.contextmanager
def _error_event(sink: Any) -> Iterator[None]:
    """With --json, a run that ends in an error ends its event stream with an `error` event:
    the line stderr gets and the exit code (2 bad input, where it is the only event; 1 an
    internal error). A refused budget has its own `refused` event; an interrupt, none."""
    from ..events import Emitter

    try:
        yield
    except InputError as exc:
        if sink is not None:
            _bad_input_event(sink, str(exc))
        raise
    except BudgetTooSmall:
        raise
    except Exception as exc:
        if sink is not None:
            why = _in_words(exc) or internal_error(exc)
            Emitter(sink)("error", reason=why, exit_code=exits.INTERNAL)
        raise


def _options(
    *,
    library: Path | None,
    no_library: bool,
    no_early_stop: bool,
    no_check: bool,
    filter_name: str | None,
    config_file: Path | None,
    mlflow_on: bool,
    mlflow_uri: str | None,
    **fields: Any,
) -> Any:
    """The tune command's options as the API's Options: the flags that turn something off,
    and the names the command line spells otherwise, mapped; the rest as they are."""
    from ..options import Options

    if library is not None and no_library:
        raise click.UsageError("give --library DIR or --no-library, not both")
    return Options(
        **fields,
        library=False if no_library else library,
        early_stop=False if no_early_stop else None,
        output_check=False if no_check else None,
        candidate_filter=filter_name,
        config=config_file,
        mlflow=mlflow_uri or mlflow_on,
    )


def _explain_exit(code: int, result: Result) -> None:
    """On stderr, what an exit code other than 0 means for the run and what to do next."""
    if code == exits.INTERRUPTED:
        click.echo(
            f"{result.stop_reason}: the report is written; resume with the same command and "
            f"--out {result.run_dir}",
            err=True,
        )
    elif code == exits.BUDGET_TOO_SMALL:
        click.echo(
            f"budget too small to tune anything ({result.stop_reason}); give a larger --budget "
            f"and the same --out {result.run_dir} to go on",
            err=True,
        )
    elif code in (exits.CHECK_FAILED, exits.UNCHECKED):
        click.echo(check_failed_message(result), err=True)
    elif code == exits.INTERNAL:  # the run ended, but no candidate built and ran
        click.echo(nothing_ran_message(result), err=True)


# What an exit code other than 0 says where no build passed its output check.
NO_MODEL = "no model.so was written: no build passed its output check"


def nothing_ran_message(result: Result) -> str:
    """Exit code 1 for a run that ended: tuning ran nothing (stop "nothing-ran")."""
    if result.shipped == "none":
        shipped = NO_MODEL
    elif result.shipped == "untuned" or result.report["summary"].get("default_schedules"):
        shipped = "model.so is the untuned build"
    else:
        shipped = "model.so is the build of what earlier sessions tuned"
    return (
        f"tuning ran nothing: {result.stop_reason}; {shipped}. A broken compiler or device, or "
        f"a bug of ours: see {result.paths['report_md']}; once mended, run the same command "
        "to go on"
    )


def check_failed_message(result: Result) -> str:
    """Exit code 4 or 5 in words: why the tuned build did not ship, and what model.so is."""
    if result.stop == UNTUNED_DIFFERS and result.shipped == "none":  # the reason has the fixes
        return f"{result.stop_reason}; {NO_MODEL}; see {result.paths['report_md']}"
    shipped = (
        "model.so is the untuned build, whose outputs match"
        if result.shipped == "untuned"
        else NO_MODEL
    )
    failed = "failed its output check" if result.check_ok is False else "could not be checked"
    again = (
        "; once the fleet answers, --build-only with the same --rpc, --rpc-key and --out "
        f"{result.run_dir} checks and ships it"
        if result.check_status == "unchecked"
        else ""
    )
    return (
        f"the tuned model {failed} and was not shipped: {result.tuned_not_shipped}; {shipped}"
        f"{again}; see {result.paths['report_md']}"
    )


@main.command("estimate")
@click.argument("model", type=PathType(path_type=Path))
@TARGET
@INPUT_SHAPE
@CONFIG
@click.option(
    "--runs-dir",
    type=PathType(path_type=Path, file_okay=False),
    default=Path("runs"),
    show_default=True,
    help="Earlier runs to learn the tuning curve and round costs from.",
)
@PRICE
@click.option(
    "--budget",
    "budgets",
    type=BudgetType(),
    multiple=True,
    help="Forecast a run under this budget, phase by phase (repeatable; default 5min, 15min, 1h).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the estimate as one JSON object.")
def estimate_command(
    model: Path,
    target: str | None,
    input_shapes: tuple[str, ...],
    config_file: Path | None,
    runs_dir: Path,
    price: float | None,
    budgets: tuple[str, ...],
    as_json: bool,
) -> int:
    """Tasks, FLOPs, untuned latency, the spend likely needed to reach 90/95/99% of the
    attainable gain, and what a run would spend, phase by phase, and reach at a few budgets."""
    from .._tvm import check_home

    check_home()  # before the first module that imports TVM
    from ..forecast.estimate import DEFAULT_BUDGETS, estimate
    from .printer import print_estimate

    result = estimate(
        model,
        target=target,
        input_shapes=input_shapes,
        config=config_file,
        runs_dir=runs_dir,
        price=price,
        budgets=budgets or DEFAULT_BUDGETS,
        started=(click.get_current_context().obj or {}).get("started"),
    )
    if as_json:
        click.echo(json.dumps(result))
    else:
        print_estimate(result)
    return exits.OK


@main.command("report")
@click.argument("run_dir", type=PathType(path_type=Path, file_okay=False))
def report_command(run_dir: Path) -> int:
    """Render the cost report of RUN_DIR again: report.json, report.md, report.html, plots."""
    from ..run.reporting import rerender

    for kind, path in rerender(run_dir).items():
        click.echo(f"{kind:<18}{path}")
    return exits.OK


@main.command("config")
@CONFIG
def config_command(config_file: Path | None) -> int:
    """Print the resolved configuration as TOML, each value with where it came from: the
    packaged defaults, a --config file, an ORCHESTRATE_* variable."""
    from ..config import Settings
    from ..run.prepare import checked_budget

    settings = Settings.load(config_file, env=os.environ)
    sources = Settings.sources(config_file, env=os.environ)
    checked_budget(settings, sources)  # what tune would refuse of the budget and filter
    for section, values in settings.to_dict().items():
        click.echo(f"[{section}]")
        rows = [
            (f"{key} = {_toml_value(value)}", sources[f"{section}.{key}"])
            for key, value in values.items()
        ]
        width = max(len(text) for text, _ in rows)
        for text, source in rows:
            click.echo(f"{text:<{width}}  # {source}")
        click.echo()
    return exits.OK


# An interpreter imports this package within a second or two of starting; a process that
# started longer before was something else first (`bash -c 'pip install . && orchestrate'`
# execs orchestrate in the shell's own process), and its age would bill the user's other work.
_INTERPRETER_START_S = 5.0


def process_started() -> float:
    """When this command started, on the `time.monotonic()` clock: the budget covers the
    command from start to exit, interpreter start and imports included."""
    import time

    import psutil

    from .. import IMPORTED

    age = max(0.0, time.time() - psutil.Process().create_time())
    created = time.monotonic() - age
    return created if IMPORTED - created <= _INTERPRETER_START_S else IMPORTED


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


__all__ = ["main"]
