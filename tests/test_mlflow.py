"""MLflow logging against a real, local, file-backed tracking store."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from mlflow import MlflowClient
from test_report import synthetic_report

import onnx_models
from cli_args import both_builds, tune_args
from tune_orchestrator.api import Result
from tune_orchestrator.cli.commands import main
from tune_orchestrator.errors import InputError
from tune_orchestrator.mlflow_log import MlflowLogger


@pytest.mark.slow
def test_a_run_logs_params_round_metrics_and_artifacts_to_mlflow(tmp_path, fast_config):
    uri = (tmp_path / "mlruns").as_uri()
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    out = tmp_path / "run"
    with both_builds():  # the speedup, logged, is the comparison's
        result = CliRunner().invoke(
            main,
            tune_args(
                model,
                out,
                fast_config,
                "--mlflow",
                "--mlflow-experiment",
                "pipeline-tests",
                budget="16trials",
            ),
            env={"MLFLOW_TRACKING_URI": uri, "MLFLOW_ALLOW_FILE_STORE": "true"},
        )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("pipeline-tests")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["run_dir"] == str(out)
    params = run.data.params
    assert params["model"] == "tiny" and params["budget"] == "16trials"
    assert params["tune.trials_per_round"] == "8" and params["search.population"] == "64"

    history = client.get_metric_history(run.info.run_id, "model_latency_ms")
    assert [m.step for m in history] == [1, 2]  # one point per round
    rounds = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    latencies = [e["model_latency_s"] * 1e3 for e in rounds if e["type"] == "round"]
    assert [m.value for m in history] == pytest.approx(latencies)
    assert run.data.metrics["tuned_latency_ms"] == pytest.approx(
        report["summary"]["tuned_latency_s"] * 1e3
    )
    assert run.data.metrics["speedup"] == pytest.approx(report["summary"]["speedup"])
    assert run.data.metrics["measured_ratio"] == pytest.approx(report["summary"]["measured_ratio"])

    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {
        "report.json",
        "report.md",
        "report.html",
        "database_tuning_record.json",
        "plots",
    } <= artifacts
    assert {a.path for a in client.list_artifacts(run.info.run_id, "plots")} >= {
        "plots/convergence.png"
    }

    # The same command again: the run already finished at its trial budget, and is answered
    # without a session (run/rerun.py); that answer is logged too, with no warning.
    again = CliRunner().invoke(
        main,
        tune_args(model, out, fast_config, "--mlflow", "--mlflow-experiment", "pipeline-tests",
                  budget="16trials"),
        env={"MLFLOW_TRACKING_URI": uri, "MLFLOW_ALLOW_FILE_STORE": "true"},
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    assert "would stop again at once" in again.stdout and "MLflow" not in again.stderr
    answered = next(r for r in client.search_runs([experiment.experiment_id]) if r != run)
    assert answered.info.status == "FINISHED" and answered.data.tags["run_dir"] == str(out)
    assert answered.data.tags["resumed"] == "true" and answered.data.params["model"] == "tiny"
    assert answered.data.metrics["tuned_latency_ms"] == run.data.metrics["tuned_latency_ms"]

    # Killed before its report, the run is named a command that logs its resume to MLflow.
    (out / "report.json").unlink()
    said = CliRunner().invoke(main, ["report", str(out)]).stderr
    assert f"--mlflow --mlflow-experiment pipeline-tests --out {out} " in said


def test_an_unusable_tracking_uri_is_an_input_error(tmp_path, fast_config, monkeypatch):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    monkeypatch.chdir(tmp_path)  # where the default --out (runs/...) would be made
    result = CliRunner().invoke(
        main,
        [
            "--mlflow-uri",
            "nonsense-scheme://x",
            "--budget",
            "8trials",
            "--target",
            "llvm",
            str(model),
        ],
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: cannot use MLflow at nonsense-scheme://x")
    assert "got unsupported URI 'nonsense-scheme://x'" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "https://" not in result.stderr
    assert not (tmp_path / "runs").exists()  # no run directory was started


def sqlalchemy_missing() -> bool:
    try:
        import sqlalchemy  # noqa: F401
    except ImportError:
        return True
    return False


@pytest.mark.parametrize(
    "store, why",
    [
        ("file", "MLflow refuses its file store unless MLFLOW_ALLOW_FILE_STORE=true is set"),
        pytest.param(
            "sqlite",
            "this mlflow client (mlflow-skinny) cannot store runs in SQLite (pip install mlflow "
            "for that)",
            marks=pytest.mark.skipif(not sqlalchemy_missing(), reason="mlflow, not the skinny"),
        ),
    ],
)
def test_a_store_this_mlflow_refuses_is_named_in_a_clause(tmp_path, monkeypatch, store, why):
    # MLflow's own messages run to a paragraph with migration guides and links.
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    uri = (tmp_path / "mlruns").as_uri() if store == "file" else f"sqlite:///{tmp_path}/m.db"
    with pytest.raises(InputError) as info:
        MlflowLogger(tracking_uri=uri, experiment="e", params={})
    assert str(info.value) == (
        f"cannot use MLflow at {uri}: {why}; give a tracking server you can reach with "
        "--mlflow-uri http://HOST:PORT (or MLFLOW_TRACKING_URI)"
    )


def test_mlflow_gets_the_speedup_claimed_and_the_measured_ratio_apart(tmp_path, monkeypatch):
    """Within the spread of the timings, MLflow's speedup is 1.0, as in the report."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    report = synthetic_report(tmp_path, tuned_s=4.15e-3)  # overlaps the untuned timings
    result = Result.from_report(report).to_dict()
    logger = MlflowLogger(tracking_uri=uri, experiment="verdicts", params={})
    logger(
        {"event": "run_started", "run_dir": str(tmp_path), "model": "m", "target": "cuda",
         "resumed": False, "budget": "2gpu-h"}
    )  # fmt: skip
    logger({"event": "finished", "result": result, "exit_code": 0})
    run = MlflowClient(tracking_uri=uri).get_run(logger.run_id)
    assert run.data.metrics["speedup"] == 1.0 == report["summary"]["speedup"]
    assert run.data.metrics["measured_ratio"] == pytest.approx(4.1e-3 / 4.15e-3)
    assert run.data.tags["model.so"] == "tuned build, checked"


def test_a_tracking_server_gone_mid_run_costs_one_warning_and_no_more_waiting(
    tmp_path, monkeypatch, capsys
):
    """MLflow's own retries took 4 minutes per event against a server that had gone away."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    logger = MlflowLogger(tracking_uri=(tmp_path / "mlruns").as_uri(), experiment="x", params={})
    logger(
        {"event": "run_started", "run_dir": str(tmp_path), "model": "m", "target": "llvm",
         "resumed": False, "budget": "5min"}
    )  # fmt: skip
    tried = []

    def gone(*_args, **_kwargs):
        tried.append(os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES"))
        raise ConnectionError("server gone")

    monkeypatch.setattr(logger._client, "log_batch", gone)
    spend = {"trials": 16, "wall_s": 9.0, "device_h": 0.0, "usd": None, "energy_j": None}
    for n in (1, 2, 3):
        logger(
            {"event": "round", "round": n, "model_latency_s": 1e-3, "spend": spend,
             "budget_used": 0.1 * n}
        )  # fmt: skip
    assert tried == ["2"]  # tried once, with few retries; then left alone
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ  # the user's environment as it was
    err = capsys.readouterr().err
    assert err.count("warning: MLflow logging failed (server gone); the run goes on") == 1
