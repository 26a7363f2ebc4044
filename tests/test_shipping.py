"""Which build becomes model.so: each branch forced with a fake device, checker and timings
(no model is compiled or run in those), then one real build-only run through the CLI;
test_rpc.py runs the fleet's branch on real servers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from click.testing import CliRunner

from tune_orchestrator.budget import Ledger
from tune_orchestrator.cli.commands import main
from tune_orchestrator.config import Settings
from tune_orchestrator.deploy import builds, check, devices, library
from tune_orchestrator.deploy.builds import ModelBuilds
from tune_orchestrator.deploy.check import DIFFERS, MATCHED, Check
from tune_orchestrator.deploy.timing import Latency
from tune_orchestrator.events import schema
from tune_orchestrator.run.measuring import Fleet
from tune_orchestrator.rundir import RunDir

FAST = Latency((1.0e-3, 1.1e-3, 1.2e-3))
SLOW = Latency((2.0e-3, 2.1e-3, 2.2e-3))
ABOUT_SLOW = Latency((1.9e-3, 2.05e-3, 2.3e-3))  # overlaps SLOW: no change
HERE = "this host's device"


class FakeDevice:
    """Runs a library by its name: load() gives ("tuned" | "untuned", device)."""

    def __init__(self, *, remote: bool = False, fails: str | None = None) -> None:
        self.remote = remote
        self.where = "a server of the RPC fleet" if remote else "this host"
        self.fails = fails  # a label whose loading fails, as a fleet that went away does
        self.closed = False

    def load(self, path: Path) -> tuple[str, str]:
        label = path.read_text()
        if label == self.fails:
            raise ConnectionError("connection reset by peer")
        return label, "dev"

    def close(self) -> None:
        self.closed = True


class FakeChecker:
    inputs: list = []

    def __init__(self, errors: dict[str, float]) -> None:
        self.errors = errors

    def check(self, vm: str, dev: str) -> Check:
        error = self.errors[vm]
        status = MATCHED if error <= 1e-3 else DIFFERS
        return Check(status=status, max_rel_error=error, rtol=1e-3, outputs=1, samples=3)


@pytest.fixture
def end(tmp_path, monkeypatch):
    """end(untuned_error, tuned_error, untuned_latency, tuned_latency, device=...) runs
    ModelBuilds.finish and returns (shipment, events, run directory)."""

    # A "library" holds the name of its build: compiling with the run's database gives
    # "tuned", with an empty one "untuned".
    monkeypatch.setattr(
        library, "compile_model", lambda mod, target, db: "tuned" if db == "run-db" else "untuned"
    )
    monkeypatch.setattr(library, "export_library", lambda label, path: path.write_text(label))

    def run_end(untuned_error, tuned_error, untuned_s=SLOW, tuned_s=FAST, device=HERE):
        timings = {"untuned": untuned_s, "tuned": tuned_s}
        monkeypatch.setattr(
            builds, "time_models", lambda models, inputs, timing: [timings[m] for m, _ in models]
        )
        events = []
        with RunDir.open(tmp_path / "run", fingerprint={}) as run:
            run.write_json(RunDir.CONFIG, {"fingerprint": {}})  # a later call resumes it
            made = ModelBuilds(
                model=SimpleNamespace(name="m", inputs=[], outputs=("y",)),
                relax_mod=None,
                target=SimpleNamespace(
                    device_type="cpu", device_present=True, target=None, simulated=False
                ),
                settings=Settings.load(env={}),
                run=run,
                emit=lambda kind, **fields: events.append({"event": kind, **fields}),
                device=FakeDevice() if device is HERE else device,
            )
            made.checker = FakeChecker({"untuned": untuned_error, "tuned": tuned_error})
            untuned = made.build("empty-db", Ledger(), "untuned", timed=False)
            shipment = made.finish("run-db", Ledger(), untuned)
        return shipment, events, tmp_path / "run"

    return run_end


def library_of(run: Path) -> str | None:
    path = run / RunDir.LIBRARY
    return path.read_text() if path.is_file() else None


def test_a_faster_tuned_build_whose_outputs_match_ships(end):
    shipment, events, run = end(1e-6, 1e-6, SLOW, FAST)
    assert shipment.shipped == "tuned" and library_of(run) == "tuned"
    assert shipment.comparison["change"] == "faster"
    assert shipment.comparison["speedup"] == pytest.approx(2.1 / 1.1)
    assert shipment.checked_on == "this host" and shipment.unchecked_reason is None
    assert not (run / RunDir.MISMATCH).exists()
    assert [e["event"] for e in events][-2:] == ["compared", "shipped"]


def test_a_slower_tuned_build_leaves_model_so_to_the_untuned_one(end):
    shipment, _, run = end(1e-6, 1e-6, FAST, SLOW)
    assert shipment.comparison["change"] == "slower"
    assert shipment.shipped == shipment.comparison["shipped"] == "untuned"
    assert library_of(run) == "untuned"
    assert (run / "logs" / "untuned.so").is_file()  # kept for the next session's comparison


def test_within_the_spread_the_tuned_build_ships_and_no_speedup_is_claimed(end):
    shipment, _, run = end(1e-6, 1e-6, SLOW, ABOUT_SLOW)
    comparison = shipment.comparison
    assert comparison["change"] == "no change" and library_of(run) == "tuned"
    assert comparison["speedup"] == 1.0
    assert comparison["measured_ratio"] == pytest.approx(2.1 / 2.05)


def test_a_tuned_build_whose_outputs_differ_is_kept_aside_and_the_untuned_one_ships(end):
    shipment, events, run = end(1e-6, 0.5, SLOW, FAST)  # faster, but wrong
    assert shipment.shipped == "untuned" and library_of(run) == "untuned"
    aside = run / "model.tuned-MISMATCH.so"
    assert aside.read_text() == "tuned" and shipment.mismatch_library == str(aside)
    assert shipment.comparison is None  # a wrong model's speed is no result
    assert "compared" not in [e["event"] for e in events]
    shipped = events[-1]
    assert shipped["shipped"] == "untuned" and shipped["shipped_checked"] is True
    assert shipped["tuned_check"]["ok"] is False
    jsonschema.validate(
        {"schema": "tune-orchestrator/event", "version": 1, "time": 0.0, **shipped}, schema()
    )


def test_when_both_builds_differ_nothing_ships(end):
    _, _, run = end(1e-6, 1e-6)
    assert library_of(run) == "tuned"  # an earlier session's model.so
    shipment, _, run = end(0.5, 0.5)
    assert shipment.shipped == "none" and library_of(run) is None
    assert (run / RunDir.MISMATCH).is_file() and shipment.checked_on is None


def test_a_correct_tuned_build_ships_though_slower_when_the_untuned_one_differs(end):
    shipment, _, run = end(0.5, 1e-6, FAST, SLOW)
    assert shipment.comparison["change"] == "slower"
    assert shipment.shipped == "tuned" and library_of(run) == "tuned"


def test_a_later_session_whose_tuned_build_matches_removes_the_one_kept_aside(end):
    end(1e-6, 0.5)
    shipment, _, run = end(1e-6, 1e-6)
    assert shipment.shipped == "tuned" and not (run / RunDir.MISMATCH).exists()


def test_with_no_device_the_tuned_build_ships_marked_unchecked_and_why(end, monkeypatch):
    monkeypatch.setattr(ModelBuilds, "_on_device", None)  # must not be reached
    shipment, events, run = end(1e-6, 1e-6, device=None)
    assert shipment.shipped == "tuned" and library_of(run) == "tuned"
    assert shipment.checked_on is None
    assert shipment.unchecked_reason == "no CPU device here and no RPC fleet (--rpc) to run it on"
    assert events[-1]["shipped_checked"] is False


def test_a_fleet_that_fails_before_the_check_ships_the_tuned_build_unchecked(end):
    shipment, _, run = end(1e-6, 1e-6, device=FakeDevice(remote=True, fails="tuned"))
    assert shipment.shipped == "tuned" and library_of(run) == "tuned"
    assert shipment.unchecked_reason == (
        "the RPC fleet could not run it (ConnectionError: connection reset by peer)"
    )


def test_a_fleet_that_fails_after_the_check_ships_what_it_checked_and_warns(end):
    device = FakeDevice(remote=True, fails="untuned")
    shipment, events, run = end(1e-6, 1e-6, device=device)
    assert shipment.shipped == "tuned" and shipment.checked_on == "a server of the RPC fleet"
    assert shipment.comparison is None and device.closed
    assert any(e["event"] == "warning" and "connection reset" in e["message"] for e in events)


def test_on_this_host_a_failure_to_run_the_model_is_raised(end):
    with pytest.raises(ConnectionError):
        end(1e-6, 1e-6, device=FakeDevice(fails="untuned"))


def test_the_cli_exits_4_and_says_that_the_untuned_build_shipped(tmp_path, monkeypatch, tiny_model):
    """A real build-only run whose tuned build (checked first) is made to differ."""
    real = check.compare
    calls = []

    def tuned_differs(ours, reference, *, rtol, names):
        calls.append(1)
        if len(calls) > 1:
            return real(ours, reference, rtol=rtol, names=names)
        return Check(status=DIFFERS, max_rel_error=0.5, rtol=rtol, outputs=1, samples=3)

    monkeypatch.setattr(check, "compare", tuned_differs)
    out = tmp_path / "run"
    args = ["--build-only", "--target", "llvm", "--out", str(out), str(tiny_model)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 4, result.output
    assert (
        f"it is kept aside as {out / 'model.tuned-MISMATCH.so'}, not to deploy; model.so is the "
        "untuned build, whose outputs match" in result.stderr
    )
    assert (out / "model.so").read_bytes() == (out / "logs" / "untuned.so").read_bytes()
    summary = json.loads((out / "report.json").read_text())["summary"]
    assert summary["check_ok"] is False and summary["shipped"] == "untuned"
    assert summary["shipped_checked"] is True and summary["speedup"] is None


def test_the_end_of_a_run_checks_here_else_on_the_fleet_else_nowhere():
    def target(present, simulated=False):
        return SimpleNamespace(device_type="cuda", device_present=present, simulated=simulated)

    fleet, alone = Fleet(rpc="head:9190", rpc_key="h100", servers=2), Fleet()
    assert isinstance(devices.for_run(target(True), alone, timeout_s=60), devices.LocalDevice)
    on_fleet = devices.for_run(target(False), fleet, timeout_s=60)
    assert isinstance(on_fleet, devices.FleetDevice) and on_fleet.remote
    assert on_fleet.where == "a server of the RPC fleet (key 'h100' at head:9190)"
    assert devices.for_run(target(False), alone, timeout_s=60) is None  # --build-only
    assert devices.for_run(target(False, simulated=True), alone, timeout_s=60) is None
