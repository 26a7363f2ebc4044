"""Crash safety: torn database tails, spend checkpoints, one owner per device, kill -9."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import onnx_models
from budget import Spend
from orchestrator.durability import DeviceClaim, Heartbeat, checkpointed_spend, repair_database
from orchestrator.errors import InputError
from orchestrator.rundir import RunDir

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = '["h1", "workload-json"]\n'
RECORD = '[0, ["trace", [0.001], "target", []]]\n'


@pytest.fixture
def run(tmp_path):
    with RunDir.open(tmp_path / "run", fingerprint={}) as r:
        (r.path / RunDir.WORKLOAD_DB).write_text(WORKLOAD)
        (r.path / RunDir.RECORD_DB).write_text(RECORD * 2)
        yield r


def test_a_torn_last_record_is_cut_and_kept_aside(run):
    with open(run[RunDir.RECORD_DB], "a") as fh:
        fh.write('[0, ["tra')  # killed mid-write
    assert repair_database(run) == [
        "cut a torn last line (9 bytes) from database_tuning_record.json"
    ]
    assert run[RunDir.RECORD_DB].read_text() == RECORD * 2
    assert '[0, ["tra' in (run[RunDir.LOGS] / "repairs.log").read_text()
    assert repair_database(run) == []  # nothing more to mend


def test_a_whole_last_record_without_its_newline_is_kept(run):
    with open(run[RunDir.RECORD_DB], "a") as fh:
        fh.write(RECORD.strip())
    assert repair_database(run) == ["ended the last line of database_tuning_record.json"]
    assert run[RunDir.RECORD_DB].read_text() == RECORD * 3


@pytest.mark.parametrize(
    "text, message",
    [
        ('[0, ["tra\n' + RECORD, "is corrupt at line 1 (not JSON)"),
        ("[3, []]\n", "refers to a workload"),
    ],
)
def test_damage_before_the_last_line_is_refused_untouched(run, text, message):
    run[RunDir.RECORD_DB].write_text(text)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        repair_database(run)
    assert run[RunDir.RECORD_DB].read_text() == text


def test_the_heartbeat_checkpoint_wins_over_an_older_journal_spend(run):
    spend = Spend(wall_s=42.0, trials=8, rounds=1, phases={"build": 10.0})
    with Heartbeat(run, lambda: spend, interval_s=0.05):
        time.sleep(0.2)
    assert checkpointed_spend(run, Spend(wall_s=30.0)).wall_s == 42.0
    assert checkpointed_spend(run, Spend(wall_s=50.0)).wall_s == 50.0  # the journal is newer
    run["spend.json"].write_text("{not json")
    assert checkpointed_spend(run, Spend(wall_s=30.0)).wall_s == 30.0


def test_a_second_process_on_the_same_device_is_noticed(tmp_path):
    with DeviceClaim("test-device-" + tmp_path.name) as first:
        assert first.shared_with is None
        with DeviceClaim("test-device-" + tmp_path.name) as second:
            assert second.shared_with == str(os.getpid())
    with DeviceClaim("test-device-" + tmp_path.name) as again:
        assert again.shared_with is None  # released


# -- kill -9 at random moments, then resume -------------------------------------------------

KILLS = int(os.environ.get("KILL_TEST_KILLS", "5"))
TRIALS = 96


def records(run: Path) -> list[str]:
    """Complete lines of the record file (a torn tail is mended on the next start)."""
    path = run / RunDir.RECORD_DB
    if not path.exists():
        return []
    text = path.read_text()
    return text.splitlines()[: text.count("\n")]


def identity(line: str) -> str:
    workload, (trace, *_rest) = json.loads(line)
    return json.dumps([workload, trace])


def test_kill_9_at_random_moments_loses_no_record_and_no_spend(tmp_path, fast_config):
    rng = random.Random(int(os.environ.get("KILL_TEST_SEED", "7")))
    model = onnx_models.tiny_cnn(tmp_path / "twins.onnx", twin_convs=True)
    run = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "orchestrator",
        "--budget",
        f"{TRIALS}trials",
        "--no-early-stop",
        "--target",
        "llvm",
        "--config",
        str(fast_config),
        "--out",
        str(run),
        str(model),
    ]
    kept: list[str] = []
    lived = []
    for _ in range(KILLS):
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        started = time.monotonic()
        time.sleep(rng.uniform(1.0, 20.0))  # import, untuned, a round, compiling: anywhere
        if proc.poll() is not None:  # finished before the kill: nothing left to test
            break
        os.killpg(proc.pid, signal.SIGKILL)  # the whole process group: workers too
        proc.wait()
        lived.append(time.monotonic() - started)
        now = records(run)
        assert now[: len(kept)] == kept  # what was in the database stays, unchanged
        assert len({identity(line) for line in now}) == len(now)  # and nothing twice
        kept = now
    final = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert final.returncode == 0, final.stderr
    now = records(run)
    assert now[: len(kept)] == kept
    assert len({identity(line) for line in now}) == len(now) == TRIALS  # exactly the budget
    report = json.loads((run / "report.json").read_text())
    assert report["summary"]["trials"] == TRIALS and report["summary"]["check_ok"] is True
    # Killed sessions' spend still counts: at most a heartbeat (5 s) plus start-up lost each.
    assert report["spend"]["wall_s"] >= sum(max(0.0, t - 12.0) for t in lived)
    # And stock TVM reads the final database.
    from tvm.s_tir import meta_schedule as ms

    assert len(ms.database.JSONDatabase(work_dir=str(run)).get_all_tuning_records()) == TRIALS
