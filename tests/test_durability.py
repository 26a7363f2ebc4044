"""Crash safety: torn database tails, spend checkpoints, one owner per device, kill -9."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import onnx_models
from cli_args import tune_args
from tune_orchestrator.budget import Spend
from tune_orchestrator.errors import InputError
from tune_orchestrator.rundir import RunDir
from tune_orchestrator.rundir.durability import (
    DeviceClaim,
    Heartbeat,
    checkpointed_spend,
    repair_database,
)

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


def test_the_heartbeat_writes_while_the_run_works(run):
    """spend.json is written by the beating thread, not only when the heartbeat stops."""
    beats, calls = threading.Event(), []

    def snapshot() -> Spend:
        calls.append(len(calls))
        if len(calls) == 2:
            beats.set()
        return Spend(wall_s=float(len(calls)))

    with Heartbeat(run, snapshot, interval_s=0.01):
        assert beats.wait(timeout=30.0), "the heartbeat never wrote while the run worked"
        assert checkpointed_spend(run, Spend()).wall_s >= 1.0


def test_the_heartbeat_checkpoint_wins_over_an_older_journal_spend(run):
    spend = Spend(wall_s=42.0, trials=8, rounds=1, phases={"build": 10.0})
    with Heartbeat(run, lambda: spend, interval_s=3600.0):
        pass  # its last write, as the session ends
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


def test_the_holder_learns_of_a_run_that_came_later_and_is_told_once(tmp_path):
    """The first run's report once said nothing of a second run measuring beside it."""
    told = threading.Event()
    calls = []

    def joined():
        calls.append(1)
        told.set()

    device = "test-device-" + tmp_path.name
    with DeviceClaim(device, on_joined=joined, interval_s=0.05) as first:
        assert not first.joined()
        with DeviceClaim(device) as second:
            assert second.shared_with == str(os.getpid()) and not second.joined()
            assert first.joined()
            assert told.wait(10)
        assert not first.joined()  # it left
    assert calls == [1]


# -- kill -9 at random moments, then resume -------------------------------------------------

KILLS = int(os.environ.get("KILL_TEST_KILLS", "5"))
TRIALS = max(96, 16 * KILLS)  # enough work that the run outlives every kill


def records(run: Path) -> list[str]:
    """Complete lines of the record file (a torn tail is mended on the next start)."""
    path = run / RunDir.RECORD_DB
    if not path.exists():
        return []
    text = path.read_text()
    return text.splitlines()[: text.count("\n")]


def default_records(run: Path) -> int:
    """Tasks whose default schedule the journal says is recorded (no trials, yet records)."""
    entries = [json.loads(line) for line in (run / RunDir.JOURNAL).read_text().splitlines()]
    return len({e["task"] for e in entries if e["type"] == "baseline" and e["record_key"]})


def wait_for_a_round(run: Path, proc: subprocess.Popen, timeout_s: float = 600.0) -> None:
    """Until the journal holds a finished round (complete lines only) or the process ends."""
    deadline = time.monotonic() + timeout_s
    journal = run / RunDir.JOURNAL
    while proc.poll() is None and time.monotonic() < deadline:
        text = journal.read_text() if journal.exists() else ""
        lines = text.splitlines()[: text.count("\n")]
        if any(json.loads(line).get("type") == "round" for line in lines):
            return
        time.sleep(0.1)


def identity(line: str) -> str:
    workload, (trace, *_rest) = json.loads(line)
    return json.dumps([workload, trace])


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_no_record_and_no_spend(tmp_path, fast_config):
    rng = random.Random(int(os.environ.get("KILL_TEST_SEED", "7")))
    model = onnx_models.tiny_cnn(tmp_path / "twins.onnx", twin_convs=True)
    run = tmp_path / "run"
    config = tmp_path / "harness.toml"  # tasks never retire: the run outlives every kill
    config.write_text(fast_config.read_text() + "[stopping]\ntask_patience = 100000\n")
    args = [
        sys.executable,
        "-m",
        "tune_orchestrator",
        *tune_args(model, run, config, "--no-early-stop", budget=f"{TRIALS}trials"),
    ]
    kept: list[str] = []
    lived = []
    for kill in range(KILLS):
        stderr = tmp_path / f"session-{kill}.err"  # a file: a full pipe would stall the run
        with stderr.open("w") as err:
            proc = subprocess.Popen(
                args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
            )
        started = time.monotonic()
        if kill == 0:  # mid-tuning, however slow the machine: after its first round
            wait_for_a_round(run, proc)
        else:
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
    assert lived, f"no session was killed; the first one's stderr: {tmp_path / 'session-0.err'}"
    # The final session measures what is left of TRIALS: on a loaded 2-core host, ~2 s each.
    final = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=max(900, 3 * TRIALS)
    )
    assert final.returncode == 0, final.stderr
    now = records(run)
    report = json.loads((run / "report.json").read_text())
    assert now[: len(kept)] == kept
    # Every record once; the database and the report agree; the budget was never exceeded.
    defaults = default_records(run)
    assert defaults == len(report["tasks"])
    assert len({identity(line) for line in now}) == len(now)
    assert len(now) == report["summary"]["trials"] + defaults
    assert report["summary"]["trials"] <= TRIALS
    assert report["summary"]["check_ok"] is True
    # Killed sessions' spend still counts: each loses at most its interpreter start-up (the
    # ledger counts from the call of tune()) and one heartbeat interval (2 s).
    assert report["spend"]["wall_s"] >= sum(max(0.0, t - 8.0) for t in lived)
    # And stock TVM reads the final database.
    from tvm.s_tir import meta_schedule as ms

    reread = ms.database.JSONDatabase(work_dir=str(run)).get_all_tuning_records()
    assert len(reread) == TRIALS + defaults
    print(
        f"\nkill harness: {len(lived)} kill -9 survived ({', '.join(f'{t:.1f}s' for t in lived)}), "
        f"{report['sessions']} sessions, {len(now)} records, none lost or doubled; "
        f"spend {report['spend']['wall_s']:.1f}s >= {sum(lived):.1f}s lived by killed sessions - 8s each"
    )


# -- records are committed as results arrive, and NaN is judged against the untuned kernel --


class DiesAfter:
    """A real local engine that is killed (KeyboardInterrupt) after `n` results."""

    def __init__(self, engine, n: int) -> None:
        self.engine, self.n = engine, n

    def measure(self, inputs, on_result=None, best_s=None):
        def arrived(i, m):
            on_result(i, m)
            if i + 1 == self.n:
                raise KeyboardInterrupt("killed")

        return self.engine.measure(inputs, on_result=arrived, best_s=best_s)

    def stats(self):
        return self.engine.stats()


@pytest.mark.slow
def test_a_crash_mid_round_keeps_the_records_already_measured(tiny_model, fast_config, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from tune_orchestrator.budget import BudgetLimits, Ledger, parse_budget
    from tune_orchestrator.config import Settings
    from tune_orchestrator.filters import NoFilter
    from tune_orchestrator.measure import BuildPool, LocalEngine, TimerConfig
    from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
    from tune_orchestrator.model.loading import load_model
    from tune_orchestrator.model.targets import resolve_target
    from tune_orchestrator.model.tasks import extract_tasks
    from tune_orchestrator.run.loop import LoopParts, LoopRules, LoopStart, TuningLoop
    from tune_orchestrator.run.scheduler import GainScheduler, TaskState

    target = resolve_target("llvm").target
    tasks = extract_tasks(fuse_for_tuning(import_to_relax(load_model(tiny_model)), target), target)
    conv = next(t for t in tasks if "conv2d" in t.name)
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    settings = Settings.load(fast_config)
    with (
        BuildPool(workers=2) as builder,
        LocalEngine(timer=TimerConfig(repeat=1, min_repeat_ms=1)) as engine,
    ):
        loop = TuningLoop(
            LoopRules(
                target=target,
                settings=settings,
                stopping=BudgetLimits(parse_budget("8trials"), round_size=8),
            ),
            LoopParts(
                database=database,
                cost_model=ms.cost_model.RandomModel(),
                candidate_filter=NoFilter(),
                builder=builder,
                engine=DiesAfter(engine, 3),
                scheduler=GainScheduler(),
            ),
            LoopStart(states=[TaskState(conv, baseline_s=1e-3)], measured={}, rand_state=0),
            ledger=Ledger(),
            journal=lambda entry: None,
            emit=lambda *a, **k: None,
            threads=2,
        )
        with pytest.raises(KeyboardInterrupt):
            loop.run()
    reopened = ms.database.JSONDatabase(work_dir=str(tmp_path))
    assert len(reopened.get_all_tuning_records()) == 3  # measured before the kill: all kept


def test_nan_fails_a_candidate_only_where_the_untuned_kernel_is_finite():
    from tune_orchestrator.measure import Measurement
    from tune_orchestrator.model.tasks import Task
    from tune_orchestrator.run.loop import TuningLoop
    from tune_orchestrator.run.scheduler import TaskState

    task = Task(0, "t", 1, 1.0, None, "0" * 16)
    nan = Measurement((1e-4,), finite=False)
    assert not TuningLoop._checked(TaskState(task, untuned_finite=True), nan).ok
    assert "NaN or Inf" in TuningLoop._checked(TaskState(task, untuned_finite=True), nan).error
    assert TuningLoop._checked(
        TaskState(task, untuned_finite=False), nan
    ).ok  # log(x) of x < 0 anyway
    assert TuningLoop._checked(
        TaskState(task, untuned_finite=True), Measurement((1e-4,), finite=True)
    ).ok
