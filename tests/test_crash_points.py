"""A crash at every durable write of a run: the process ends there (os._exit, no clean-up),
then the run is resumed twice. Every measured record is kept exactly once and both resumes
succeed, at each write point in turn (as SQLite fails each write in turn).

CI crashes once at each point, mid-run, alternating a torn write and one just done;
`CRASH_POINTS=full` (benchmarks/crash_points.py) crashes at each point's first, middle and
last write, both ways.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import onnx_models
from cli_args import tune_args
from tune_orchestrator.rundir import RunDir
from tune_orchestrator.rundir.faults import CRASH_EXIT, POINTS

ROOT = Path(__file__).resolve().parent.parent
BUDGET = "16trials"  # two rounds of 8: the loop's writes come more than once
FULL = os.environ.get("CRASH_POINTS") == "full"
# In CI each point once, the way its crash hurts most: appended files torn mid-line, files
# written whole torn (a half-written temporary file left beside them) or cut right after.
CI_WHEN = {
    "journal": "torn",
    "config": "torn",
    "workload": "torn",
    "record": "torn",
    "learned": "torn",
    "spend": "after",
    "waiting": "torn",
    "predictor": "after",
    "filter": "torn",
    "library": "after",
    "model": "torn",
    "report": "after",
}


def orchestrate(args: list[str], env: dict[str, str], log: Path) -> int:
    """The CLI in a fresh process (a crash must end a process of its own); its exit code."""
    with log.open("a") as err:
        return subprocess.run(
            [sys.executable, "-m", "tune_orchestrator", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            timeout=900,
        ).returncode


def record_lines(run: Path) -> list[str]:
    """The record file's complete lines (a torn tail is mended by the next session)."""
    path = run / RunDir.RECORD_DB
    text = path.read_text() if path.exists() else ""
    return text.splitlines()[: text.count("\n")]


def schedule(line: str) -> str:
    """A record's identity: its workload and trace, not its run times."""
    workload, (trace, *_rest) = json.loads(line)
    return json.dumps([workload, trace])


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict:
    """The model, the settings, and how often a clean run reaches each write point."""
    folder = tmp_path_factory.mktemp("crash")
    model = onnx_models.tiny_cnn(folder / "tiny.onnx")
    config = folder / "fast.toml"
    from conftest import FAST_CONFIG

    config.write_text(FAST_CONFIG)
    log = folder / "points.log"
    env = {**os.environ, "TUNE_ORCHESTRATOR_CRASH_LOG": str(log)}
    env["XDG_CACHE_HOME"] = str(folder / "cache")
    args = tune_args(model, folder / "clean", config, "-q", budget=BUDGET)
    assert orchestrate(args, env, folder / "clean.err") == 0, (folder / "clean.err").read_text()
    counts = Counter(log.read_text().split())
    return {"folder": folder, "model": model, "config": config, "counts": counts}


def test_a_clean_run_reaches_every_durable_write_point(setup):
    assert set(setup["counts"]) == set(POINTS), setup["counts"]


def cases() -> list[tuple[str, str, str]]:
    if not FULL:
        return [(point, "middle", CI_WHEN[point]) for point in POINTS]
    return [
        (p, n, w) for p in POINTS for n in ("first", "middle", "last") for w in ("torn", "after")
    ]


@pytest.mark.slow
@pytest.mark.parametrize("point, which, when", cases())
def test_a_crash_at_a_write_loses_nothing_and_resumes_twice(setup, tmp_path, point, which, when):
    reached = setup["counts"][point]
    n = {"first": 1, "middle": (reached + 1) // 2, "last": reached}[which]
    run, log = tmp_path / "run", tmp_path / "stderr.log"
    args = tune_args(setup["model"], run, setup["config"], "-q", budget=BUDGET)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    crash = {**env, "TUNE_ORCHESTRATOR_CRASH_AT": f"{point}:{n}:{when}"}
    assert orchestrate(args, crash, log) == CRASH_EXIT, log.read_text()
    kept = record_lines(run)
    for resume in (1, 2):
        code = orchestrate(args, env, log)
        assert code == 0, (
            f"resume {resume} after {point}:{n}:{when}: exit {code}\n{log.read_text()}"
        )
        now = record_lines(run)
        assert now[: len(kept)] == kept  # what the database held stays, unchanged
        assert len({schedule(line) for line in now}) == len(now)  # and nothing twice
        kept = now
    report = json.loads((run / RunDir.REPORT).read_text())
    journal = [json.loads(line) for line in (run / RunDir.JOURNAL).read_text().splitlines()]
    defaults = {e["task"] for e in journal if e["type"] == "baseline" and e.get("record_key")}
    assert len(kept) == report["summary"]["trials"] + len(defaults)
    assert report["summary"]["trials"] == int(BUDGET.removesuffix("trials"))
    assert report["summary"]["check_ok"] is True
    assert not [p.name for p in run.iterdir() if p.name.startswith(".") and p.name != ".lock"]
