"""Writing the cost report into a run directory: JSON, Markdown, HTML, plots, rounds.csv."""

from __future__ import annotations

import csv
import io
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tune_orchestrator.budget import render
from tune_orchestrator.budget.report import schema
from tune_orchestrator.budget.units import counted, fmt_duration, fmt_latency

from ..config import Settings, env_name, env_text
from ..errors import InputError
from ..options import Options
from ..rundir import RunDir, RunInUse
from ..rundir.durability import checkpointed_spend
from ..rundir.restore import spend_so_far


def write_report(run: RunDir, report: Mapping[str, Any]) -> dict[str, Path]:
    """Write report.json, the plots, report.md, report.html and rounds.csv (each replaced
    atomically)."""
    plots = render.write_plots(report, run[RunDir.PLOTS])
    doc = render.document(report)  # the text both report.md and report.html show
    written = {
        "json": run.write_json(RunDir.REPORT, report),
        "markdown": run.write_text(RunDir.REPORT_MD, render.markdown(doc, plots, run.path)),
        "html": run.write_text(RunDir.REPORT_HTML, render.to_html(doc, plots, run.path)),
        "rounds": run.write_text(RunDir.ROUNDS_CSV, rounds_csv(run.journal(), report["tasks"])),
    }
    return {**written, **{f"plot_{name}": path for name, path in plots.items()}}


# rounds.csv's columns: the round's own figures, then spend so far (all sessions).
ROUND_COLUMNS = (
    "round",
    "task",
    "task_index",
    "trials",
    "measured",
    "failed",
    "best_s",
    "round_best_s",
    "model_latency_s",
    "round_s",
    "wall_s",
    "trials_so_far",
    "device_h",
    "usd",
    "energy_j",
    "early_stop_waits",
)


def rounds_csv(journal: Sequence[Mapping[str, Any]], tasks: Sequence[Mapping[str, Any]]) -> str:
    """One line per round from the journal's "round" entries; an unknown value is empty."""
    names = {t["index"]: t["name"] for t in tasks}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(ROUND_COLUMNS)
    for e in journal:
        if e.get("type") != "round":
            continue
        spend = e.get("spend") or {}
        row = {
            **{k: e.get(k) for k in ("round", "trials", "measured", "failed", "best_s")},
            **{k: e.get(k) for k in ("round_best_s", "model_latency_s")},
            "task": names.get(e.get("task"), e.get("task_key")),
            "task_index": e.get("task"),
            "round_s": e.get("seconds"),
            **{k: spend.get(k) for k in ("wall_s", "device_h", "usd", "energy_j")},
            "trials_so_far": spend.get("trials"),
            "early_stop_waits": e.get("early_stop_waits"),
        }
        writer.writerow(["" if row[c] is None else row[c] for c in ROUND_COLUMNS])
    return out.getvalue()


def rerender(path: str | Path) -> dict[str, Path]:
    """`orchestrate report RUN`: render the report of a finished session again (a run still
    working in RUN has none to render: InputError with its progress so far)."""
    try:
        opened = RunDir.open_existing(path)
    except RunInUse as busy:
        raise InputError(still_running(RunDir(Path(path)), busy.owner)) from None
    with opened as run:
        if not run[RunDir.REPORT].exists():
            raise InputError(never_reported(run))
        path = run[RunDir.REPORT]
        again = (
            f"{resume_command(run, '--build-only')} writes it again from the run's records (it "
            "compiles and checks the model again and tunes nothing)"
        )
        report = run.read_json(RunDir.REPORT, fix=f"it was cut short or edited; {again}")
        problem = foreign_report(report)
        if problem is not None:
            raise InputError(f"{path} {problem}")
        try:
            return write_report(run, report)
        except KeyError as exc:  # a report of this version has every field the renderer reads
            raise InputError(f"{path} lacks {exc}: it was edited or cut short; {again}") from None


def foreign_report(report: Any) -> str | None:
    """Why `report` (report.json, parsed) is not one this version renders; None if it is."""
    known = schema()["properties"]
    if not isinstance(report, dict) or report.get("schema") != known["schema"]["const"]:
        return "is not a tune-orchestrator report"
    if report.get("version") != known["version"]["const"]:
        return (
            f"is a report of version {report.get('version')!r}; this tune-orchestrator "
            f"renders version {known['version']['const']}: use the version that wrote it"
        )
    return None


def still_running(run: RunDir, owner: str) -> str:
    """A run that `owner` (a pid) is still working in, with its progress so far."""
    who = "this process" if owner == str(os.getpid()) else f"pid {owner}"
    return (
        f"{run.path} is still being tuned ({who}): {_progress(run)} so far; its report is "
        "written when the run stops (SIGINT or SIGTERM stop it after the current round, with "
        "the report)"
    )


def never_reported(run: RunDir) -> str:
    """A run no session of which finished (killed, or its machine went down): what it did,
    and the command that resumes it, as its config.json has the model and the budget."""
    return (
        f"{run.path} has no report yet: its session stopped before writing one (killed, or "
        f"its machine went down) after {_progress(run)}; resume it with the command that "
        f"started it ({resume_command(run)}) to finish it and write one"
    )


def resume_command(run: RunDir, *options: str) -> str:
    """The command that resumes the run, with `options`: its budget, target, settings and
    model as its config.json has them (MODEL where it cannot tell)."""
    try:
        config = run.read_json(RunDir.CONFIG)
    except InputError:  # damaged: the command without what it would have said
        config = None
    config = config if isinstance(config, dict) else {}
    model, target = _field(config, "model", "path"), _field(config, "target", "spec")
    command = ["orchestrate"]
    if isinstance(config.get("budget"), str):
        command += ["--budget", config["budget"]]
    if isinstance(target, str) and target != "auto":
        command += ["--target", target]
    if _field(config, "fingerprint", "simulated"):
        command.append("--simulate")
    variables, flags = _settings_given(config.get("settings"))
    command += [*flags, *_inputs_given(config), *_measured_with(config), *options]
    command += ["--out", str(run.path)]
    command.append(model if isinstance(model, str) else "MODEL")
    return " ".join([*variables, shlex.join(command)])


def _inputs_given(config: Mapping[str, Any]) -> list[str]:
    """The --input-shape, --check-inputs and --price options the run was given, as its
    config.json has them (a dynamic model is refused without its shapes)."""
    options = []
    shapes = _field(config, "model", "input_shapes")
    for name, shape in shapes.items() if isinstance(shapes, dict) else ():
        options += ["--input-shape", f"{name}:{'x'.join(str(d) for d in shape)}"]
    if isinstance(config.get("check_inputs"), str):
        options += ["--check-inputs", config["check_inputs"]]
    price = re.match(r"--price (\S+)", str(_field(config, "price", "source") or ""))
    if price:  # prices.run_price's source of a price given
        options += ["--price", price.group(1)]
    return options


def _measured_with(config: Mapping[str, Any]) -> list[str]:
    """The library, GPU, parallelism, RPC, warm-start and MLflow options the run was given, as
    its config.json has them (prepare.resumed_with): a resume without them would read another
    library, or none, measure elsewhere, or log nowhere. A default library root, asked for by a
    process with another $XDG_CACHE_HOME, is named with --library."""
    from ..library.files import default_root

    given = config.get("resumed_with")
    given = given if isinstance(given, dict) else {}
    options = []
    if given.get("library") is False:
        options.append("--no-library")
    elif isinstance(given.get("library"), str) and given["library"] != str(default_root()):
        options += ["--library", given["library"]]
    if isinstance(given.get("gpus"), list):
        options += ["--gpus", ",".join(str(g) for g in given["gpus"])]
    for key in ("parallelism", "rpc", "rpc_key", "warm_start"):
        if isinstance(given.get(key), (int, str)) and not isinstance(given[key], bool):
            options += [f"--{key.replace('_', '-')}", str(given[key])]
    return options + _logged_to(given.get("mlflow"))


def _logged_to(mlflow: Any) -> list[str]:
    """--mlflow (or --mlflow-uri) and --mlflow-experiment where the run logged to MLflow."""
    if not isinstance(mlflow, dict):
        return []
    uri, experiment = mlflow.get("uri"), mlflow.get("experiment")
    options = ["--mlflow-uri", uri] if isinstance(uri, str) else ["--mlflow"]
    if isinstance(experiment, str) and experiment != Options().mlflow_experiment:
        options += ["--mlflow-experiment", experiment]
    return options


def _settings_given(recorded: Any) -> tuple[list[str], list[str]]:
    """The settings a run's config.json has that the packaged defaults do not (from a
    --config file, ORCHESTRATE_* variables or options), for a command that gives them again
    without the file: [tune]'s as their options (budget and target aside: the command names
    them), the rest as `ORCHESTRATE_<SECTION>_<KEY>=value` before it."""
    if not isinstance(recorded, dict):
        return [], []
    defaults = Settings.load(env={}).to_dict()
    variables: list[str] = []
    flags: list[str] = []
    for section, values in recorded.items():
        known = defaults.get(section, {})
        for key, value in values.items() if isinstance(values, dict) else ():
            if key not in known or value == known[key]:  # a setting of another version: left
                continue
            if section != "tune":
                variables.append(f"{env_name(section, key)}={shlex.quote(env_text(value))}")
            elif key not in ("budget", "target"):
                flags += [f"--{key.replace('_', '-')}", env_text(value)]
    return variables, flags


def _field(config: Mapping[str, Any], key: str, name: str) -> Any:
    """config.json's `key`.`name`, or None where it has no such dict."""
    value = config.get(key)
    return value.get(name) if isinstance(value, dict) else None


def _progress(run: RunDir) -> str:
    """Rounds, trials, spend and the model's latency by its tasks' best, from the journal and
    the spend checkpoint (both read without the lock: whole lines, whole files)."""
    try:
        journal = run.journal()
    except (InputError, OSError):
        journal = []
    spend = checkpointed_spend(run, spend_so_far(journal))
    rounds = [e for e in journal if e.get("type") == "round"]
    model = next((e["model_latency_s"] for e in reversed(rounds) if e.get("model_latency_s")), None)
    spent = fmt_duration(spend.wall_s)
    progress = (
        f"{counted(len(rounds), 'round')}, {counted(spend.trials, 'trial')} and {spent} spent"
    )
    if model:
        progress += f", the model ~{fmt_latency(model)} by its tasks' best"
    return progress
