"""Embedding in pipelines: the Python API, the JSON event stream, exit codes, config layers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

import onnx_models
from cli_args import both_builds, tune_args
from tune_orchestrator import InputError, tune
from tune_orchestrator.budget.grammar import parse_budget
from tune_orchestrator.cli.commands import main
from tune_orchestrator.cli.printer import Printer
from tune_orchestrator.config import Settings
from tune_orchestrator.events import schema as event_schema

ROOT = Path(__file__).resolve().parent.parent


def orchestrate_process(*args, env=None, **popen) -> subprocess.Popen:
    """The real CLI in its own process (as a pipeline runs it)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "tune_orchestrator", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=full_env,
        **popen,
    )


# -- the Python API ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api_run(tmp_path_factory, fast_config):
    base = tmp_path_factory.mktemp("api")
    model = onnx_models.tiny_cnn(base / "tiny.onnx")
    events: list[dict] = []
    with both_builds():  # these tests read the comparison of the two
        result = tune(
            model,
            budget="12trials",
            target="llvm",
            config=fast_config,
            out=base / "run",
            on_event=events.append,
        )
    return result, events


@pytest.mark.slow
def test_api_result_agrees_with_report_json(api_run):
    result, _ = api_run
    report = json.loads(result.paths["report"].read_text())
    summary = report["summary"]
    assert result.trials == summary["trials"] == 12
    assert result.stop == summary["stop"] == "trials"  # a code to branch on, not words
    assert (
        result.tuned_latency_s
        == summary["tuned_latency_s"]
        == report["tuned"]["latency"]["median_s"]
    )
    assert result.untuned_latency_s == report["untuned"]["latency"]["median_s"]
    assert result.measured_ratio == pytest.approx(result.untuned_latency_s / result.tuned_latency_s)
    assert result.speedup == (1.0 if result.change == "no change" else result.measured_ratio)
    assert result.shipped_checked and result.checked_on == "this host"
    assert (result.wall_s, result.device_h, result.usd, result.energy_j) == (
        summary["wall_s"],
        summary["device_h"],
        summary["usd"],
        summary["energy_j"],
    )
    assert result.usd is not None and result.energy_j is None  # CPU run: priced, no NVML
    assert result.stop_reason == summary["stop_reason"] == "trial budget reached: 12 of 12"
    assert [t.name for t in result.tasks] == [t["name"] for t in report["tasks"]]
    assert result.check_ok is True and result.exit_code == 0
    assert not result.interrupted and not result.budget_too_small
    assert all(path.exists() for path in result.paths.values())
    assert report["provenance"]["command"] == "python API"
    assert json.loads(json.dumps(result.to_dict()))["paths"]["library"].endswith("model.so")


@pytest.mark.slow
def test_every_event_reaches_the_callback_and_validates(api_run):
    result, events = api_run
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["run_started", "tasks"]
    # the tuned model after tuning, timed in turn with the untuned one
    assert kinds[-5:] == ["stopped", "compiled", "compared", "shipped", "finished"]
    assert {"untuned_tasks", "compiled", "round"} <= set(kinds)
    assert kinds.count("round") == 2  # 12 trials in rounds of 8
    for event in events:
        jsonschema.validate(event, event_schema())
    finished = events[-1]
    assert finished["exit_code"] == 0 and finished["result"] == json.loads(
        json.dumps(result.to_dict())
    )
    rounds = [e for e in events if e["event"] == "round"]
    assert rounds[-1]["spend"]["trials"] == 12 and rounds[-1]["budget_used"] == pytest.approx(1.0)


def test_api_raises_input_error_before_touching_anything(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        tune(tmp_path / "nope.onnx", budget="1min", out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


# -- the JSON event stream from a real CLI process -------------------------------------------


@pytest.mark.slow
def test_json_stream_has_one_valid_event_per_line_and_nothing_else(tmp_path, fast_config):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    proc = orchestrate_process(*tune_args(model, tmp_path / "run", fast_config, "--json"))
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr
    lines = stdout.splitlines()
    events = [json.loads(line) for line in lines]  # every line is JSON
    for event in events:
        jsonschema.validate(event, event_schema())
    assert [e["event"] for e in events][0] == "run_started"
    assert events[-1]["event"] == "finished" and events[-1]["exit_code"] == 0
    assert any(e["event"] == "round" for e in events)


# -- exit codes, provoked for real ----------------------------------------------------------


def test_exit_2_for_bad_input_from_a_real_process(tmp_path):
    proc = orchestrate_process("--budget", "5min", tmp_path / "missing.onnx")
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert stderr.strip().splitlines() == [
        f"error: model file {tmp_path / 'missing.onnx'} does not exist; check the path"
    ]


def test_exit_3_up_front_when_the_budget_cannot_cover_compiling_and_checking(
    tmp_path, fast_config, two_cores
):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    result = CliRunner().invoke(
        main,
        tune_args(model, tmp_path / "run", fast_config, budget="2s"),
    )
    assert result.exit_code == 3, result.output
    (line,) = result.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith("error: budget 2s is too small for tiny: the untuned baseline")
    assert "give --budget 1min or more" in line
    assert not (tmp_path / "run").exists()  # refused before any work: nothing left behind


def test_exit_3_up_front_when_the_budget_cannot_cover_a_first_round_and_the_final_phase(
    tmp_path, fast_config, two_cores
):
    """A CUDA first round's search is forecast at over half a minute before any round was
    timed: a budget that covers the fixed phases but not that is refused before any work,
    not after the baseline has been paid for."""
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    args = tune_args(
        model, tmp_path / "run", fast_config, "--simulate", budget="30s", target="auto"
    )
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 3, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: budget 30s is too small for tiny: the untuned baseline, a first")
    assert " to search, build and measure 2 candidates on 2 cores for cuda), compiling and " in line
    assert "give --budget 1min or more (nothing was tuned)" in line
    assert not (tmp_path / "run").exists()


def test_build_only_needs_no_budget(tmp_path, fast_config):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    result = CliRunner().invoke(
        main,
        tune_args(model, tmp_path / "run", fast_config, "--build-only", budget="1s"),
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "model.so").is_file()


def test_a_command_started_with_stdout_closed_ships(tmp_path, fast_config):
    """`orchestrate ... >&-` (some service managers start jobs so): Python leaves sys.stdout
    None, and the printer failed on it, exit 1, before any work."""
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    args = tune_args(model, tmp_path / "run", fast_config, "--build-only", budget="1s")
    process = orchestrate_process(*args, preexec_fn=lambda: os.close(1))
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert (tmp_path / "run" / "model.so").is_file()


@pytest.mark.slow
def test_a_wall_budget_ends_on_time_and_reports_its_longest_step(tmp_path, fast_config):
    """The API meters from the call: measured around it, the run ends within max(5%, 10 s)."""
    import time

    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    started = time.monotonic()
    result = tune(
        model,
        budget="60s",
        target="llvm",
        config=fast_config,
        out=tmp_path / "run",
        early_stop=False,
        handle_signals=False,
    )
    elapsed = time.monotonic() - started
    assert elapsed <= 60.0 + 10.0, (elapsed, result.phases)
    (limit,) = result.report["budget"]["limits"]
    assert limit["spent"] == pytest.approx(result.wall_s)
    assert limit["overshoot"] <= 10.0
    step = result.report["budget"]["longest_step"]
    assert step["seconds"] > 0 and step["phase"] in result.phases
    assert result.phases["report"] > 0  # writing the report is inside the meter


@pytest.mark.slow
def test_exit_4_before_tuning_when_the_untuned_outputs_differ_and_a_resume_rechecks(
    tmp_path, fast_config
):
    """Once a run whose untuned build already differed tuned its whole budget, then ended
    exit 4 with nothing to ship: schedules cannot change what the model computes."""
    strict = tmp_path / "strict.toml"  # a tolerance no float32 computation can meet
    strict.write_text(fast_config.read_text().replace("[check]\n", "[check]\nrtol = 1e-15\n"))
    model, run = onnx_models.tiny_cnn(tmp_path / "tiny.onnx"), tmp_path / "run"
    result = CliRunner().invoke(main, tune_args(model, run, strict, "--json"))
    assert result.exit_code == 4, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    stopped = next(e for e in events if e["event"] == "stopped")
    assert stopped["stop"] == "untuned-differs" and stopped["spend"]["trials"] == 0
    assert result.stderr.startswith("the untuned build's outputs differ from onnxruntime's (max ")
    assert "loosen the [check] tolerance it names" in result.stderr
    assert "no model.so was written: no build passed its output check" in result.stderr
    assert not (run / "model.so").exists()
    assert (run / "model.tuned-MISMATCH.so").is_file()
    # The same settings again: checked again, refused again, nothing tuned.
    again = CliRunner().invoke(main, tune_args(model, run, strict, "--json"))
    assert again.exit_code == 4 and "untuned-differs" in again.stdout
    # The tolerance mended, the same run directory: the earlier untuned build passes, tuned.
    mended = CliRunner().invoke(main, tune_args(model, run, fast_config))
    assert mended.exit_code == 0, mended.output
    report = json.loads((run / "report.json").read_text())
    assert report["summary"]["trials"] > 0 and (run / "model.so").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP])
def test_exit_130_on_sigterm_after_the_round_with_the_report_written(tmp_path, fast_config, number):
    """SIGHUP (a closed terminal) once ended the run at once, without its report."""
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx", twin_convs=True)
    run = tmp_path / "run"
    proc = orchestrate_process(
        *tune_args(model, run, fast_config, "--json", "--no-early-stop", budget="30min"),
        # As from a terminal: a test suite run under nohup would pass SIGHUP on ignored.
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    for line in proc.stdout:  # wait for the first round to finish, then ask to stop
        if json.loads(line)["event"] == "round":
            proc.send_signal(number)
            break
    rest, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 130, stderr
    events = [json.loads(line) for line in rest.splitlines()]
    stopped = next(e for e in events if e["event"] == "stopped")
    assert stopped["interrupted"] is True
    assert stopped["reason"] == f"interrupted by {signal.Signals(number).name}"
    assert events[-1]["event"] == "finished" and events[-1]["exit_code"] == 130
    assert f"resume with the same command and --out {run}" in stderr
    report = json.loads((run / "report.json").read_text())
    assert report["summary"]["interrupted"] is True and report["summary"]["rounds"] <= 2


@pytest.mark.slow
def test_a_json_reader_that_goes_away_stops_the_run_as_sigterm_would(tmp_path, fast_config):
    """`orchestrate --json ... | head -1`: the run once died at its next event with exit 1 and
    no word, mid-phase, with no report."""
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    run = tmp_path / "run"
    proc = orchestrate_process(*tune_args(model, run, fast_config, "--json", budget="30min"))
    assert json.loads(proc.stdout.readline())["event"] == "run_started"
    proc.stdout.close()  # the reader is gone: the next event meets a broken pipe
    assert proc.wait(timeout=600) == 130
    stderr = proc.stderr.read()
    assert "the reader of the event stream went away (broken pipe): the report is written" in (
        stderr
    )
    assert "Traceback" not in stderr and "Exception ignored" not in stderr
    summary = json.loads((run / "report.json").read_text())["summary"]
    assert summary["interrupted"] is True and summary["rounds"] <= 1


def test_a_subscriber_with_a_broken_pipe_is_dropped_and_the_others_go_on():
    from tune_orchestrator.events import Emitter

    gone, seen, calls = [], [], []

    def closed(event):
        calls.append(event["event"])
        raise BrokenPipeError(32, "Broken pipe")

    emit = Emitter(closed, seen.append, on_gone=gone.append)
    emit("run_started")
    emit("round")
    assert calls == ["run_started"]  # no more writes to a closed stream
    assert [e["event"] for e in seen] == ["run_started", "round"]
    assert gone == [Emitter.GONE]


def test_exit_1_for_an_internal_error_with_its_traceback(tmp_path):
    """A broken environment: the TVM on the path fails while it loads its library."""
    broken = tmp_path / "site" / "tvm"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        'raise OSError("libtvm.so: cannot open shared object file: No such file or directory")\n'
    )
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    pythonpath = os.pathsep.join(filter(None, [str(broken.parent), os.environ.get("PYTHONPATH")]))
    proc = orchestrate_process(
        "--budget", "1min", "--out", tmp_path / "run", model, env={"PYTHONPATH": pythonpath}
    )
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stderr
    assert "\ninternal error: " in "\n" + stderr and "Traceback (most recent call last)" in stderr
    assert "libtvm.so: cannot open shared object file" in stderr


# -- configuration layers ------------------------------------------------------------------


def test_defaults_then_file_then_environment_then_options(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[tune]\nbudget = "3min"\nseed = 7\ntrials_per_round = 16\n')
    env = {
        "ORCHESTRATE_TUNE_SEED": "8",
        "ORCHESTRATE_TUNE_TRIALS_PER_ROUND": "32",
        "ORCHESTRATE_MEASURE_CPU_CACHE_FLUSH": "yes",
        "HOME": "/root",
    }
    settings = Settings.load(path, {"tune.trials_per_round": 48}, env=env)
    assert settings.tune.budget == "3min"  # file over default
    assert settings.tune.seed == 8  # environment over file
    assert settings.tune.trials_per_round == 48  # option over environment
    assert settings.measure.cpu_cache_flush is True
    assert Settings.load(env={"ORCHESTRATE_CONFIG": str(path)}).tune.budget == "3min"


@pytest.mark.parametrize(
    "env, message",
    [
        ({"ORCHESTRATE_TUNE_BUDGETT": "5min"}, "ORCHESTRATE_TUNE_BUDGETT is not a setting"),
        (
            {"ORCHESTRATE_SEARCH_POPULATION": "many"},
            "ORCHESTRATE_SEARCH_POPULATION must be a whole number but is 'many'",
        ),
        ({"ORCHESTRATE_STOPPING_EARLY_STOP": "maybe"}, "must be true or false (or 1/0"),
    ],
)
def test_bad_environment_variables_are_named(env, message):
    with pytest.raises(InputError) as info:
        Settings.load(env=env)
    assert message in str(info.value)


def test_config_command_shows_each_value_and_where_it_came_from(tmp_path):
    import tomllib

    (tmp_path / "my.toml").write_text("[search]\npopulation = 128\n")
    result = CliRunner().invoke(
        main, ["config", "--config", str(tmp_path / "my.toml")],
        env={"ORCHESTRATE_TUNE_BUDGET": "42min"},
    )  # fmt: skip
    assert result.exit_code == 0
    lines = {
        line.split("#")[0].strip(): line.split("# ")[1]
        for line in result.stdout.splitlines()
        if "#" in line
    }
    assert lines['budget = "42min"'] == "environment: ORCHESTRATE_TUNE_BUDGET"
    assert lines["population = 128"] == str(tmp_path / "my.toml")
    assert lines['target = "auto"'] == "defaults"
    assert tomllib.loads(result.stdout)["tune"]["budget"] == "42min"  # still TOML


# -- progress for people -------------------------------------------------------------------


def round_event(n: int, used: float) -> dict:
    return {
        "event": "round",
        "round": n,
        "task": "conv",
        "task_index": 0,
        "tasks": 2,
        "measured": 8,
        "failed": 0,
        "best_s": 1e-4,
        "model_latency_s": 3e-4,
        "budget_used": used,
        "spend": {
            "wall_s": 60.0 * n,
            "device_h": 0.0,
            "usd": 0.01 * n,
            "energy_j": None,
            "trials": 8 * n,
        },
    }


def test_a_terminal_gets_a_progress_bar_and_a_log_gets_plain_lines(capsys):
    tty = Printer(tty=True)
    tty(round_event(1, 0.25))
    tty(round_event(2, 0.5))
    out = capsys.readouterr().out
    assert "\r[######..................]  25% of budget" in out
    assert "\r[############............]  50% of budget  2m00s, $0.02  best model ~300 us" in out
    plain = Printer(tty=False)
    plain(round_event(1, 0.25))
    out = capsys.readouterr().out
    assert "\r" not in out and out.startswith("round   1  conv [1/2]  8 measured")
    assert "early stop" not in out


def test_a_round_the_early_stop_waited_for_says_so(capsys):
    Printer(tty=False)({**round_event(3, 0.75), "early_stop_waits": True})
    out = capsys.readouterr().out
    assert out.startswith("round   3  conv") and out.rstrip().endswith(
        "24 trials  (the early stop waits for this task)"
    )


@pytest.mark.slow
def test_the_pipeline_example_runs_and_exits_with_the_code(tmp_path, fast_config):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    out = tmp_path / "runs" / "step"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "pipeline_step.py"),
            str(model),
            "--budget",
            "8trials",
            "--out",
            str(out),
            "--config",
            str(fast_config),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "ORCHESTRATE_TUNE_TARGET": "llvm"},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "runs" / "step.result.json").read_text())
    assert result["trials"] == 8 and result["check_ok"] is True
    events = [
        json.loads(line)
        for line in (tmp_path / "runs" / "step.events.jsonl").read_text().splitlines()
    ]
    assert events[-1]["event"] == "finished"


def test_a_budget_refused_up_front_ends_the_json_stream_with_a_refused_event(tmp_path, fast_config):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    args = tune_args(model, tmp_path / "run", fast_config, "--json", budget="2s")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 3, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    (refused,) = events  # nothing ran: the refusal is the whole stream
    jsonschema.validate(refused, event_schema())
    assert refused["event"] == "refused" and refused["exit_code"] == 3
    assert refused["reason"] in result.stderr
    assert f"give --budget {refused['minimum']} or more" in refused["reason"]
    assert 2 < refused["needed_s"] <= parse_budget(refused["minimum"]).limits[0].amount


@pytest.mark.slow
def test_the_pipeline_example_ends_a_refused_budget_with_one_line_and_exit_3(tmp_path, fast_config):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "pipeline_step.py"), str(model), "--budget",
         "2s", "--out", str(tmp_path / "runs" / "step"), "--config", str(fast_config)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "ORCHESTRATE_TUNE_TARGET": "llvm"},
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    (line,) = done.stderr.strip().splitlines()  # no traceback
    assert line.startswith("error: budget 2s is too small for tiny:") and "give --budget" in line


def test_sighup_ignored_when_the_run_starts_stays_ignored():
    """Under nohup, SIGHUP is ignored: the run goes on to its end, as the user asked."""
    from tune_orchestrator.run.interrupt import Interrupt, on_signals

    interrupt = Interrupt()
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with on_signals(interrupt):
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGHUP)
        assert not interrupt.requested
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_ctrl_c_before_the_run_began_does_not_speak_of_resuming(
    tmp_path, fast_config, tiny_model, monkeypatch
):
    """It said "aborted; resume the run with the same --out" where there was no run."""
    from tune_orchestrator.run import prepare

    def pressed(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare, "describe", pressed)
    run = tmp_path / "run"
    result = CliRunner().invoke(main, tune_args(tiny_model, run, fast_config))
    assert result.exit_code == 130 and result.stderr.splitlines()[-1] == "aborted"
    assert not run.exists()


def test_a_second_signal_aborts_the_run_at_once_and_says_how_to_resume(
    tmp_path, fast_config, tiny_model, monkeypatch
):
    from tune_orchestrator.model import importer
    from tune_orchestrator.run import interrupt

    monkeypatch.setattr(interrupt, "SAME_REQUEST_S", 0.0)  # the second comes later

    def pressed_twice(*_args, **_kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # stop after the round
        os.kill(os.getpid(), signal.SIGINT)  # now
        raise AssertionError("not aborted")

    monkeypatch.setattr(importer, "import_for_tuning", pressed_twice)
    run = tmp_path / "run"
    result = CliRunner().invoke(main, tune_args(tiny_model, run, fast_config))
    assert result.exit_code == 130, result.output
    assert result.stderr.endswith("aborted; resume the run with the same --out\n")
    assert run.is_dir()  # the run directory stays, to resume


def test_a_signal_after_tuning_stopped_lets_the_run_finish_and_end_as_it_would_have(
    tmp_path, fast_config, tiny_model, monkeypatch
):
    """Ctrl-C as the model compiled, after a trial budget had stopped the tuning: the run
    finished and shipped, then exited 130 saying "trial budget reached: the report is
    written; resume with the same command", which would have done nothing."""
    from tune_orchestrator.deploy import builds

    real = builds.ModelBuilds.finish

    def pressed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(builds.ModelBuilds, "finish", pressed)
    run = tmp_path / "run"
    result = CliRunner().invoke(main, tune_args(tiny_model, run, fast_config))
    assert result.exit_code == 0, result.output
    assert "resume" not in result.stderr
    assert (  # not "stopping after the current round"
        "SIGINT: tuning is over: the model is compiled, checked and shipped, and the report "
        "written; send it again to abort at once\n" in result.stderr
    )
    summary = json.loads((run / "report.json").read_text())["summary"]
    assert summary["stop"] == "trials" and summary["interrupted"] is False
    assert (run / "model.so").is_file()


def test_one_signal_delivered_twice_at_once_stops_the_run_with_its_report(
    tmp_path, fast_config, tiny_model, monkeypatch
):
    """`timeout 1h orchestrate ...` signals the command and then its process group: one run
    in three took the pair for a second signal and aborted without its report."""
    from tune_orchestrator.model import importer

    real = importer.import_for_tuning

    def timed_out(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # to the command
        os.kill(os.getpid(), signal.SIGTERM)  # to its process group
        return real(*args, **kwargs)

    monkeypatch.setattr(importer, "import_for_tuning", timed_out)
    run = tmp_path / "run"
    result = CliRunner().invoke(main, tune_args(tiny_model, run, fast_config))
    assert result.exit_code == 130, result.output
    assert "aborted" not in result.stderr
    assert f"resume with the same command and --out {run}" in result.stderr
    assert json.loads((run / "report.json").read_text())["summary"]["interrupted"] is True
