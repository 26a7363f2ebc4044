"""A finished run asked again: nothing is read back, built or written where it would stop
again at once (it stopped paying and still would, or its trial budget is reached); anything
that could change its answer goes the whole way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from click.testing import CliRunner
from conftest import FAST_CONFIG
from run_files import journal, snapshot

import onnx_models
from cli_args import tune_args
from tune_orchestrator.cli.commands import main
from tune_orchestrator.events import schema as event_schema
from tune_orchestrator.run import rerun
from tune_orchestrator.run import session as session_module
from tune_orchestrator.rundir import RunDir

pytestmark = pytest.mark.slow

# The early stop judges after two rounds, once the two heaviest tasks have 8 trials each, and
# stops unless the last 20% of trials cut latency by 90%: a tiny model stops paying in ~15 s.
STOPS_SOON = FAST_CONFIG + (
    "[stopping]\nmin_gain = 0.9\nmin_rounds = 2\nheavy_trials = 8\nevidence_rounds = 1\n"
)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    base = tmp_path_factory.mktemp("rerun")
    config = base / "stops-soon.toml"
    config.write_text(STOPS_SOON)
    model = onnx_models.tiny_cnn(base / "twins.onnx", twin_convs=True)
    out = base / "run"
    result = CliRunner().invoke(main, tune_args(model, out, config, budget="400trials"))
    assert result.exit_code == 0, result.output
    (last,) = [e for e in journal(out) if e["type"] == "stopped"]
    assert last["code"] == "stopped-paying", last["reason"]
    return SimpleNamespace(model=model, out=out, config=config, trials=last["spend"]["trials"])


def again(stopped, run: Path, budget: str, *options: str):
    return CliRunner().invoke(
        main, tune_args(stopped.model, run, stopped.config, *options, budget=budget)
    )


def _never(*args):
    raise AssertionError("the database was read back")


def unchanged_again(stopped, tmp_path: Path, monkeypatch, budget: str) -> SimpleNamespace:
    """Ask a copy of the run again with `budget`: it must exit 0 without reading the database
    back or changing a file; its printed stop line and its output."""
    run = tmp_path / "run"
    shutil.copytree(stopped.out, run)
    before = snapshot(run)

    monkeypatch.setattr(session_module, "open_database", _never)
    result = again(stopped, run, budget)
    assert result.exit_code == 0, result.output
    assert snapshot(run) == before
    line = next(x for x in result.stdout.splitlines() if x.startswith("stopped: "))
    return SimpleNamespace(line=line, stdout=result.stdout)


# Larger by a tenth: the forecast for the rest grows with the budget. A fixture run that cut
# its latency by a third in its last fifth was forecast +76% at 400trials, +88% at 600trials,
# and over STOPS_SOON's 90% at 800trials, which went on tuning, as the rule says it should.
@pytest.mark.parametrize("budget", ["400trials", "440trials"], ids=["same", "larger"])
def test_asked_again_it_says_it_would_stop_at_once_and_changes_nothing(
    stopped, tmp_path, monkeypatch, budget
):
    said = unchanged_again(stopped, tmp_path, monkeypatch, budget)
    assert "the run already finished and would stop again at once: stopped at " in said.line
    assert f" of {budget.replace('trials', ' trials')}" in said.line  # judged on this budget
    assert "nothing was changed (add --no-early-stop to spend the budget anyway)" in said.line
    assert f"trials              {stopped.trials} in " in said.stdout  # the run's summary
    # Its budget and stop lines are the run's, not this session's: the header says whose.
    assert "), as the finished run's report has it\n" in said.stdout


def test_at_a_trial_budget_it_has_reached_it_says_so_and_changes_nothing(
    stopped, tmp_path, monkeypatch
):
    said = unchanged_again(stopped, tmp_path, monkeypatch, f"{stopped.trials}trials")
    assert f"would stop again at once: trial budget reached: {stopped.trials} of " in said.line
    assert "nothing was changed (give a budget of more trials to tune further)" in said.line


def test_a_warning_as_the_session_begins_does_not_hide_that_the_run_finished(
    stopped, tmp_path, monkeypatch
):
    """An unreadable filter.json is journaled as the session starts, after the last session's
    end: the run was taken for one that had not finished and went the whole way."""
    run = tmp_path / "run"
    shutil.copytree(stopped.out, run)
    (run / "filter.json").write_text("{ torn")
    monkeypatch.setattr(session_module, "open_database", _never)
    result = again(stopped, run, "400trials")
    assert result.exit_code == 0, result.output
    assert "would stop again at once" in result.stdout
    assert "filter.json" in result.stderr
    assert journal(run)[-1]["type"] == "warning"


def test_a_run_that_retired_every_task_says_so_and_changes_nothing(
    tmp_path, monkeypatch, fast_config
):
    """Its only task has nothing to search (tasks-done): asked again, with a larger budget
    too, restore would retire it again and the loop stop before its first round."""
    model = onnx_models.sequence_output(tmp_path / "seq.onnx")
    run = tmp_path / "run"
    first = CliRunner().invoke(main, tune_args(model, run, fast_config))
    assert first.exit_code == 0, first.output
    assert journal(run)[-2]["code"] == "tasks-done"
    before = snapshot(run)
    monkeypatch.setattr(session_module, "open_database", _never)
    result = CliRunner().invoke(main, tune_args(model, run, fast_config, budget="10min"))
    assert result.exit_code == 0, result.output
    assert "would stop again at once: every task is retired: " in result.stdout
    assert "(no task has anything left to search; --fresh starts the run over)" in result.stdout
    assert snapshot(run) == before


def test_a_simulated_run_at_its_trial_budget_says_so_and_changes_nothing(
    tmp_path, monkeypatch, fast_config
):
    """Its report holds no output check (nothing runs a simulated GPU's builds), which was
    taken for one checked on other samples: it went the whole way."""
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    run = tmp_path / "run"
    args = tune_args(model, run, fast_config, "--simulate", budget="8trials", target="auto")
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    before = snapshot(run)
    monkeypatch.setattr(session_module, "open_database", _never)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "would stop again at once: trial budget reached: 8 of 8" in result.stdout
    assert snapshot(run) == before


def test_a_database_short_of_its_records_goes_the_whole_way(stopped, tmp_path):
    """A record line lost after the run ended (its file cut back) is not taken for a run that
    needs nothing: the session reads back, compiles and reports again."""
    run = tmp_path / "run"
    shutil.copytree(stopped.out, run)
    database = run / "database_tuning_record.json"
    lines = database.read_text().splitlines(keepends=True)
    database.write_text("".join(lines[:-1]))
    result = again(stopped, run, "400trials")
    assert result.exit_code == 0, result.output
    assert "would stop again" not in result.output
    assert json.loads((run / "report.json").read_text())["sessions"] == 2


def test_its_events_are_the_stop_and_the_runs_result(stopped, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(stopped.out, run)
    report = json.loads((run / "report.json").read_text())
    result = again(stopped, run, "440trials", "--json")
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    for event in events:
        jsonschema.validate(event, event_schema())
    assert [e["event"] for e in events] == ["stopped", "finished"]
    assert events[0]["stop"] == "stopped-paying" and events[0]["spend"]["trials"] == stopped.trials
    finished = events[-1]
    assert finished["exit_code"] == 0
    assert finished["result"]["tuned_latency_s"] == report["summary"]["tuned_latency_s"]
    assert finished["result"]["run_dir"] == str(run)  # where the run is now, not where it was


def test_without_the_early_stop_it_tunes_on(stopped, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(stopped.out, run)
    budget = f"{stopped.trials + 4}trials"
    result = again(stopped, run, budget, "--no-early-stop")
    assert result.exit_code == 0, result.output
    assert "would stop again" not in result.output
    report = json.loads((run / "report.json").read_text())
    assert report["summary"]["trials"] == stopped.trials + 4 and report["sessions"] == 2


def test_a_resume_without_the_library_the_run_had_is_told_so(stopped, tmp_path, cache_home):
    """Nothing said that a resume read another library than its earlier sessions (or none),
    or measured on this host where they measured on an RPC fleet: their records and timings
    joined the run's unremarked."""
    run = tmp_path / "run"
    shutil.copytree(stopped.out, run)
    result = again(stopped, run, f"{stopped.trials + 4}trials", "--no-early-stop", "--no-library")
    assert result.exit_code == 0, result.output
    warned = [e["message"] for e in journal(run) if e["type"] == "warning"]
    (said,) = [w for w in warned if w.startswith("the run's earlier sessions")]
    library = json.loads((stopped.out / "config.json").read_text())["resumed_with"]["library"]
    assert library.startswith(str(cache_home.parent))  # the fixture's default root
    assert said == (
        f"the run's earlier sessions ran with the library at {library} and this one runs "
        "without the library (--no-library)"
    )
    fleet = {"library": None, "rpc": "head:9190", "rpc_key": "h100"}
    here = {"library": None, "rpc": None, "rpc_key": None}
    assert rerun.moved({"resumed_with": fleet}, {"resumed_with": here}) == [
        "the run's earlier sessions measured on the RPC fleet at head:9190 (key h100) and this "
        "one measures on this host: its timings are compared with theirs as one device's (give "
        "the command they ran to measure where they did)"
    ]
    assert rerun.moved({}, {"resumed_with": here}) == []  # a config.json of an older version


def test_a_run_whose_answer_could_change_is_not_taken_as_done(stopped, tmp_path):
    run = RunDir(tmp_path / "run")
    shutil.copytree(stopped.out, run.path)
    config = run.read_json(RunDir.CONFIG)
    samples = json.loads((run.path / "report.json").read_text())["tuned"]["check"]["inputs"]
    assert rerun.earlier_report(run, samples) is not None
    assert rerun.earlier_report(run, "2 samples from inputs.npz") is None  # checked on others
    assert rerun.same_run(config, {**config, "budget": "1h", "model": {"path": "elsewhere"}})
    assert rerun.same_run(config, {**config, "resumed_with": {"library": False}})
    stricter = json.loads(json.dumps(config))
    stricter["settings"]["check"]["rtol"] /= 10
    assert not rerun.same_run(config, stricter)
    cheaper = {**config, "price": {"usd_per_hour": 0.01, "source": "--price"}}
    assert not rerun.same_run(config, cheaper)
    report = json.loads((run.path / "report.json").read_text())
    report["tuned"]["check"]["ok"] = False  # its check failed: exit code 4
    run.write_json(RunDir.REPORT, report)
    assert rerun.earlier_report(run, samples) is None
    (run.path / "report.json").write_text("{")  # cut short
    assert rerun.earlier_report(run, samples) is None


def test_a_finished_run_with_a_task_whose_search_kept_failing_is_not_answered_but_searched():
    """Restore searches such a task again (what failed it may be mended): the run's answer
    that every task is retired would not be what going on does."""
    from tune_orchestrator.budget import Ledger
    from tune_orchestrator.budget.grammar import parse_budget
    from tune_orchestrator.budget.limits import BudgetLimits

    rule = BudgetLimits(parse_budget("10min"), round_size=8)
    stopped = {"type": "stopped", "code": "tasks-done", "reason": "every task is retired: ..."}
    plateau = {"type": "task_retired", "task": 0, "reason": "plateau: 3 rounds within 0.5%"}
    failed = {"type": "task_retired", "task": 1, "reason": "search failed 3 times in a row: x"}
    answer = rerun.stops_again(rule, Ledger(), [plateau, stopped])
    assert answer is not None and answer.code == "tasks-done"
    assert rerun.stops_again(rule, Ledger(), [plateau, failed, stopped]) is None
    # Searched again in a later session and retired for a plateau then: restore reads that.
    again = {**plateau, "task": 1}
    answer = rerun.stops_again(rule, Ledger(), [plateau, failed, again, stopped])
    assert answer is not None and answer.code == "tasks-done"
