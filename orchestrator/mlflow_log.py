"""Logging a run to MLflow from its events (optional: `pip install 'tune-orchestrator[mlflow]'`).

Parameters when the session starts, metrics after every round (step = round), final metrics,
the report and the database as artifacts when it finishes. A tracking server that fails in
the middle of a run costs a warning, not the tuning.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import InputError


class MlflowLogger:
    """An `on_event` subscriber that mirrors one session into one MLflow run."""

    def __init__(
        self, *, tracking_uri: str | None, experiment: str, params: Mapping[str, Any]
    ) -> None:
        try:
            from mlflow import MlflowClient
        except ImportError:
            raise InputError(
                "--mlflow needs the mlflow client: pip install 'tune-orchestrator[mlflow]'"
            ) from None
        try:
            with _quick_requests():
                self._client = MlflowClient(tracking_uri=tracking_uri)
                found = self._client.get_experiment_by_name(experiment)
                self._experiment = (
                    found.experiment_id if found else self._client.create_experiment(experiment)
                )
        except Exception as exc:
            raise InputError(
                f"cannot use MLflow at {_where(tracking_uri)}: {_why(exc)}; give a tracking "
                "server you can reach with --mlflow-uri http://HOST:PORT (or MLFLOW_TRACKING_URI)"
            ) from None
        self._params = {k: str(v)[:500] for k, v in params.items()}
        self.tracking_uri, self.experiment = tracking_uri, experiment  # as given
        self._run_id: str | None = None
        self._failed = False

    def __call__(self, event: dict[str, Any]) -> None:
        handler = getattr(self, "_on_" + event["event"], None)
        if handler is None or self._failed:
            return
        try:
            with _quick_requests():
                handler(event)
        except Exception as exc:  # the tracking server failing must not end the tuning
            self._failed = True  # nor stall every later round on its retries
            print(
                f"warning: MLflow logging failed ({exc}); the run goes on, no longer logged "
                "to MLflow (its report and database are in the run directory)",
                file=sys.stderr,
            )

    @property
    def run_id(self) -> str | None:
        return self._run_id

    def _on_run_started(self, e: dict[str, Any]) -> None:
        self._create(e, e["resumed"], e["budget"])

    def _create(self, e: dict[str, Any], resumed: bool, budget: str | None) -> None:
        """The MLflow run of this session (`e`: an event or result with the run directory,
        model and target), with the run's parameters."""
        run = self._client.create_run(
            self._experiment,
            run_name=f"{e['model']}-{Path(e['run_dir']).name}",
            tags={
                "run_dir": e["run_dir"],
                "model": e["model"],
                "target": e["target"],
                "resumed": str(resumed).lower(),
            },
        )
        self._run_id = run.info.run_id
        from mlflow.entities import Param

        params = {**self._params, **({"budget": budget} if budget is not None else {})}
        params = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(params), 100):  # the API takes at most 100 per batch
            self._client.log_batch(self._run_id, params=params[start : start + 100])

    def _on_round(self, e: dict[str, Any]) -> None:
        spend = e["spend"]
        metrics = {
            "model_latency_ms": None
            if e["model_latency_s"] is None
            else e["model_latency_s"] * 1e3,
            "trials": spend["trials"],
            "wall_s": spend["wall_s"],
            "device_h": spend["device_h"],
            "usd": spend["usd"],
            "energy_j": spend["energy_j"],
            "budget_used": e["budget_used"],
        }
        self._log(metrics, step=e["round"])

    def _on_task_retired(self, e: dict[str, Any]) -> None:
        self._client.set_tag(self._run_id, f"retired.{e['task']}"[:250], e["reason"][:5000])

    def _on_finished(self, e: dict[str, Any]) -> None:
        result = e["result"]
        if self._run_id is None:  # a finished run asked again answers without a session
            self._create(result, resumed=True, budget=None)
        self._log(
            {
                "untuned_latency_ms": _ms(result["untuned_latency_s"]),
                "tuned_latency_ms": _ms(result["tuned_latency_s"]),
                "speedup": result["speedup"],  # the figure claimed: 1.0 for "no change"
                "measured_ratio": result["measured_ratio"],  # as measured, noise included
                "trials": result["trials"],
                "wall_s": result["wall_s"],
                "device_h": result["device_h"],
                "usd": result["usd"],
            },
            step=None,
        )
        self._client.set_tag(self._run_id, "stop_reason", result["stop_reason"][:5000])
        self._client.set_tag(self._run_id, "stop", result.get("stop", ""))
        checked = "checked" if result["shipped_checked"] else "unchecked"
        self._client.set_tag(self._run_id, "model.so", f"{result['shipped']} build, {checked}")
        paths = result["paths"]
        for key in (
            "report",
            "report_md",
            "report_html",
            "database_workload",
            "database_tuning_record",
        ):
            if key in paths and Path(paths[key]).is_file():
                self._client.log_artifact(self._run_id, paths[key])
        plots = Path(paths["run_dir"]) / "plots"
        if plots.is_dir():
            self._client.log_artifacts(self._run_id, str(plots), artifact_path="plots")
        status = "KILLED" if result["interrupted"] else "FINISHED"
        self._client.set_terminated(self._run_id, status=status)

    def _log(self, metrics: Mapping[str, float | None], step: int | None) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if v is not None]
        self._client.log_batch(self._run_id, metrics=batch)


# MLflow's own defaults try a request to a server that does not answer 8 times over minutes
# (a 120-s timeout each, backoff doubling from 2 s): minutes of the budget for each event.
QUICK = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


@contextlib.contextmanager
def _quick_requests() -> Iterator[None]:
    """MLflow's requests give up within seconds while inside, unless the user set how they
    retry (MLflow reads these variables at each request)."""
    added = {name: value for name, value in QUICK.items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def _where(tracking_uri: str | None) -> str:
    """The tracking URI in use, and where it came from."""
    if tracking_uri:
        return tracking_uri
    import mlflow

    uri = mlflow.get_tracking_uri()
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return f"MLFLOW_TRACKING_URI {uri}"
    return f"MLflow's default tracking URI {uri} (MLFLOW_TRACKING_URI is not set)"


def _why(exc: Exception) -> str:
    """MLflow's refusal in a clause: its messages run to a paragraph with links."""
    text = " ".join(str(exc).split())
    if "unsupported URI" in text and "sqlite" in text:
        # mlflow-skinny, without SQLAlchemy, against MLflow's default store (sqlite) since 3.x
        return (
            "this mlflow client (mlflow-skinny) cannot store runs in SQLite (pip install mlflow "
            "for that)"
        )
    if "MLFLOW_ALLOW_FILE_STORE" in text:
        return "MLflow refuses its file store unless MLFLOW_ALLOW_FILE_STORE=true is set"
    first = re.split(r"(?<=\.)\s", text, maxsplit=1)[0].rstrip(".")
    return first if len(first) <= 300 else first[:297] + "..."


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3
