"""Which build becomes model.so: each branch forced with a fake device, checker and timings
(no model is compiled or run in those), then one real build-only run through the CLI;
test_rpc.py runs the fleet's branch on real servers."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from click.testing import CliRunner

from cli_args import both_builds
from tune_orchestrator.budget import Ledger
from tune_orchestrator.cli.commands import disk_full, main
from tune_orchestrator.config import Settings
from tune_orchestrator.deploy import builds, check, devices, library
from tune_orchestrator.deploy.builds import ModelBuilds
from tune_orchestrator.deploy.check import (
    DIFFERS,
    FAILED,
    MATCHED,
    OFF,
    SKIPPED,
    UNCHECKED,
    Check,
    Checker,
)
from tune_orchestrator.deploy.samples import Samples
from tune_orchestrator.deploy.timing import Latency
from tune_orchestrator.events import schema
from tune_orchestrator.run.measuring import Fleet
from tune_orchestrator.rundir import RunDir

FAST = Latency((1.0e-3, 1.1e-3, 1.2e-3))
SLOW = Latency((2.0e-3, 2.1e-3, 2.2e-3))
ABOUT_SLOW = Latency((1.9e-3, 2.05e-3, 2.3e-3))  # overlaps SLOW: no change
HERE = "this host's device"


class FakeDevice:
    """Runs a library by its name: load() gives ("tuned" | "untuned", device). `crashes` names
    a build whose loading fails as one that takes its server down does; `unreachable`: no
    session can be had (from the start, or `after` the build that crashed was run)."""

    def __init__(
        self,
        *,
        remote: bool = False,
        crashes: str | None = None,
        unreachable: bool = False,
        after: bool = False,
    ) -> None:
        self.remote = remote
        self.where = "a server of the RPC fleet" if remote else "this host"
        self.crashes, self.unreachable, self.after = crashes, unreachable and not after, after
        self.loads: list[str] = []
        self.resets = 0
        self.closed = False

    def load(self, path: Path) -> tuple[str, str]:
        if self.unreachable:
            raise devices.Unreachable(
                "head:9190: the tracker lent no server under key 'k' within 60 s"
            )
        label = path.read_text()
        self.loads.append(label)
        if label == self.crashes:
            self.unreachable = self.after
            raise ConnectionError("connection reset by peer")
        return label, "dev"

    def reset(self) -> None:
        self.resets += 1

    def close(self) -> None:
        self.closed = True


class FakeChecker(Checker):
    """Runs nothing: a build's outputs are its label, its error the one given for it (None:
    the comparison is turned off)."""

    def __init__(self, errors: dict[str, float | None]) -> None:
        model = SimpleNamespace(outputs=("y",))
        super().__init__(model, samples=Samples(arrays=((),), source="fake"), rtol=1e-3)
        self.errors = errors

    def outputs(self, vm: str, dev: str) -> str:
        return vm

    def compare(self, outputs: str) -> Check:
        error = self.errors[outputs]
        if error is None:
            return self.verdict(SKIPPED, OFF)
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

        def time_models(models, inputs, timing):
            if any(timings[m] is None for m, _ in models):
                raise ConnectionError("the server went away while timing")
            return [timings[m] for m, _ in models]

        monkeypatch.setattr(builds, "time_models", time_models)
        events = []
        with RunDir.open(tmp_path / "run", fingerprint={}) as run:
            run.write_json(RunDir.CONFIG, {"fingerprint": {}})  # a later call resumes it
            made = ModelBuilds(
                model=SimpleNamespace(
                    name="m",
                    inputs=[],
                    outputs=("y",),
                    half_precision=False,
                    quantized=False,
                    weight_bytes=lambda: 0,
                ),
                relax_mod=None,
                target=SimpleNamespace(
                    device_type="cpu",
                    device_present=device is not None,
                    device_name="a CPU with avx512fp16",
                    target=None,
                    simulated=False,
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


@pytest.mark.parametrize("faster", [True, False])
def test_with_the_comparison_off_the_faster_build_ships_unchecked(end, faster):
    """--no-check: both builds ran and were timed; nothing says their outputs are right."""
    shipment, events, run = end(None, None, SLOW if faster else FAST, FAST if faster else SLOW)
    assert shipment.comparison["change"] == ("faster" if faster else "slower")
    assert shipment.shipped == library_of(run) == ("tuned" if faster else "untuned")
    assert shipment.checked_on is None and shipment.unchecked_reason == OFF
    assert (shipment.tuned_not_shipped is None) == faster
    assert faster or "the untuned build is faster" in shipment.tuned_not_shipped
    shipped = events[-1]
    assert shipped["shipped_checked"] is False and shipped["check_status"] == SKIPPED
    jsonschema.validate(
        {"schema": "tune-orchestrator/event", "version": 1, "time": 0.0, **shipped}, schema()
    )


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
    assert shipment.unchecked_reason == (
        "the target is a CPU with avx512fp16, which this host's CPU lacks, and no RPC fleet "
        "(--rpc) runs it"
    )
    assert events[-1]["shipped_checked"] is False


def test_an_unreachable_fleet_ships_nothing_unchecked_and_says_why(end):
    """Once a fleet run shipped its tuned build unchecked with exit 0: now nothing ships."""
    end(1e-6, 1e-6)  # an earlier session's model.so, checked then
    device = FakeDevice(remote=True, unreachable=True)
    shipment, events, run = end(1e-6, 1e-6, device=device)
    assert shipment.shipped == "none" and library_of(run) is None
    assert (run / "logs" / "tuned.so").read_text() == "tuned"  # kept, not deployed
    assert shipment.tuned["check"]["status"] == shipment.untuned["check"]["status"] == UNCHECKED
    assert shipment.tuned_not_shipped == (
        "its outputs could not be checked: the RPC fleet is unreachable (head:9190: the tracker "
        f"lent no server under key 'k' within 60 s); it stays in {run / 'logs' / 'tuned.so'}, "
        "unchecked"
    )
    shipped = events[-1]
    assert shipped["check_status"] == UNCHECKED and shipped["shipped_checked"] is False
    assert shipped["unchecked_reason"] is None  # model.so does not ship unchecked: it is absent
    jsonschema.validate(
        {"schema": "tune-orchestrator/event", "version": 1, "time": 0.0, **shipped}, schema()
    )


def test_a_tuned_build_that_crashes_the_fleets_server_fails_and_the_untuned_one_ships(end):
    device = FakeDevice(remote=True, crashes="tuned")
    shipment, events, run = end(1e-6, 1e-6, device=device)
    assert device.loads == ["untuned", "tuned", "tuned"]  # tried again on a new session
    assert shipment.tuned["check"]["status"] == FAILED and shipment.tuned["check"]["ok"] is False
    assert shipment.shipped == "untuned" and library_of(run) == "untuned"
    assert shipment.checked_on == "a server of the RPC fleet" and shipment.comparison is None
    assert shipment.tuned_not_shipped.startswith(
        "it failed when run: the tuned build failed on the RPC fleet twice, the second time on "
        "a new session: it crashed its server or raised there (ConnectionError: connection "
        "reset by peer)"
    )
    assert events[-1]["check_status"] == FAILED


def test_a_fleet_lost_after_the_tuned_build_ran_leaves_it_unchecked_not_blamed(end):
    """The untuned build, checked first, ships; the tuned one is not called broken."""
    device = FakeDevice(remote=True, crashes="tuned", unreachable=True, after=True)
    shipment, _, run = end(1e-6, 1e-6, device=device)
    assert shipment.shipped == "untuned" and library_of(run) == "untuned"
    assert shipment.untuned["check"]["status"] == MATCHED
    assert shipment.tuned["check"]["status"] == UNCHECKED
    assert shipment.tuned["check"]["reason"] == (
        "the RPC fleet became unreachable after the tuned build failed on its server "
        "(ConnectionError: connection reset by peer), so the build may have crashed it; then: "
        "head:9190: the tracker lent no server under key 'k' within 60 s"
    )


def test_a_fleet_that_fails_while_timing_ships_what_it_checked_and_warns(end):
    device = FakeDevice(remote=True)
    shipment, events, run = end(1e-6, 1e-6, tuned_s=None, device=device)
    assert shipment.shipped == "tuned" and shipment.checked_on == "a server of the RPC fleet"
    assert shipment.comparison is None and device.closed
    assert any(e["event"] == "warning" and "went away while timing" in e["message"] for e in events)


def test_on_this_host_a_build_that_fails_when_run_fails_its_check_too(end):
    """The same rule as on a fleet, tried once: the untuned build ships, the report says why."""
    device = FakeDevice(crashes="tuned")
    shipment, _, run = end(1e-6, 1e-6, device=device)
    assert device.loads.count("tuned") == 1
    assert shipment.tuned["check"]["status"] == FAILED
    assert shipment.shipped == "untuned" and library_of(run) == "untuned"
    assert shipment.tuned_not_shipped.startswith(
        "it failed when run: the tuned build failed when run on this host (ConnectionError"
    )


def test_on_this_host_a_failure_to_time_the_model_is_raised(end):
    with pytest.raises(ConnectionError):
        end(1e-6, 1e-6, tuned_s=None)


@pytest.fixture
def runs_tuned():
    """A build-only run on a new --out builds both models, as one with tuned schedules does."""
    with both_builds():
        yield


def test_a_model_whose_tasks_all_keep_their_defaults_is_built_once(tmp_path, tiny_model):
    """Its tuned build is the untuned one: it was compiled, checked and timed twice, and the
    two compared ("7.84 ms -> 7.96 ms, no change")."""
    out = tmp_path / "run"
    args = ["--build-only", "--target", "llvm", "--out", str(out), str(tiny_model)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["comparison"] is None and not (out / "logs" / "untuned.so").exists()
    assert report["tuned"]["check"]["status"] == MATCHED and report["summary"]["tuned_latency_s"]
    assert report["summary"]["shipped"] == "tuned" and (out / "model.so").is_file()
    # It was called "the tuned build".
    assert report["summary"]["default_schedules"] is True
    assert "model.so            the build with TVM's default schedules (" in result.output
    assert result.output.count("model: ") == 1  # one build checked, one line
    assert "  end-to-end latency  " in result.output and "untuned ->" not in result.output
    assert ": no schedule was tuned." in (out / "report.md").read_text()


def test_the_cli_exits_4_and_says_that_the_untuned_build_shipped(
    tmp_path, monkeypatch, tiny_model, runs_tuned
):
    """A real build-only run whose tuned build (checked first) is made to differ."""
    real = check.compare
    calls = []

    def tuned_differs(ours, reference, *, rtol, names, rtol_name, first=0):
        calls.append(1)
        if len(calls) > 1:
            return real(ours, reference, rtol=rtol, names=names, rtol_name=rtol_name, first=first)
        why = "max relative error 5.00e-01 > rtol 0.001 (output 'y', sample 1)"
        return Check(status=DIFFERS, max_rel_error=0.5, rtol=rtol, outputs=1, samples=3, reason=why)

    monkeypatch.setattr(check, "compare", tuned_differs)
    out = tmp_path / "run"
    args = ["--build-only", "--target", "llvm", "--out", str(out), str(tiny_model)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 4, result.output
    assert (
        "the tuned model failed its output check and was not shipped: its outputs differ from "
        "onnxruntime's (max relative error 5.00e-01 > rtol 0.001 (output 'y', sample 1)); kept "
        f"aside as {out / 'model.tuned-MISMATCH.so'}, not to deploy; model.so is the untuned "
        "build, whose outputs match" in result.stderr
    )
    assert (out / "model.so").read_bytes() == (out / "logs" / "untuned.so").read_bytes()
    summary = json.loads((out / "report.json").read_text())["summary"]
    assert summary["default_schedules"] is False
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


class PosingFleet(devices.LocalDevice):
    """This host's CPU posing as a fleet's server: `lost` (nothing can be reached), or
    `crashes` (the build whose run takes the server down)."""

    remote = True

    def __init__(self, *, lost: bool = False, crashes: str | None = None) -> None:
        super().__init__("cpu")
        self.where = "a server of the RPC fleet"
        self.lost, self.crashes = lost, crashes

    def load(self, library: Path) -> tuple:
        if self.lost:
            raise devices.Unreachable("127.0.0.1:9190: ConnectionRefusedError: [Errno 111]")
        if library.stem == self.crashes:
            raise ConnectionError("connection reset by peer")
        return super().load(library)


def run_on(fleet, tmp_path, monkeypatch, model):
    """A real build-only run whose end checks on `fleet`; (CLI result, events, run dir)."""
    monkeypatch.setattr(devices, "for_run", lambda target, given, timeout_s: fleet)
    out = tmp_path / "run"
    args = ["--json", "--build-only", "--target", "llvm", "--out", str(out), str(model)]
    result = CliRunner().invoke(main, args)
    return result, [json.loads(line) for line in result.stdout.splitlines()], out


def test_an_unreachable_fleet_ends_the_run_with_exit_5_and_no_model_so(
    tmp_path, monkeypatch, tiny_model
):
    result, events, out = run_on(PosingFleet(lost=True), tmp_path, monkeypatch, tiny_model)
    assert result.exit_code == 5, result.output
    assert not (out / "model.so").exists() and (out / "logs" / "tuned.so").is_file()
    finished = events[-1]
    jsonschema.validate(finished, schema())
    assert finished["exit_code"] == 5 and finished["result"]["check_status"] == UNCHECKED
    assert result.stderr.splitlines()[-1].startswith(
        "the tuned model could not be checked and was not shipped: its outputs could not be "
        "checked: the RPC fleet is unreachable (127.0.0.1:9190: ConnectionRefusedError"
    )
    assert "no model.so was written: no build passed its output check" in result.stderr
    summary = json.loads((out / "report.json").read_text())["summary"]
    assert summary["shipped"] == "none" and summary["tuned_not_shipped"].startswith(
        "its outputs could not be checked: the RPC fleet is unreachable"
    )


def test_a_tuned_build_that_crashes_the_server_exits_4_with_the_untuned_build_shipped(
    tmp_path, monkeypatch, tiny_model, runs_tuned
):
    result, events, out = run_on(PosingFleet(crashes="tuned"), tmp_path, monkeypatch, tiny_model)
    assert result.exit_code == 4, result.output
    assert (out / "model.so").read_bytes() == (out / "logs" / "untuned.so").read_bytes()
    assert events[-1]["exit_code"] == 4 and events[-1]["result"]["check_status"] == FAILED
    assert (
        "the tuned model failed its output check and was not shipped: it failed when run: the "
        "tuned build failed on the RPC fleet twice" in result.stderr
    )


def test_a_real_fleet_address_nobody_answers_is_unreachable_not_a_failed_build(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    fleet = devices.FleetDevice(
        tracker=f"127.0.0.1:{port}", key="k", device_type="cpu", timeout_s=60, request_s=0.2
    )
    library = tmp_path / "tuned.so"
    library.write_text("never uploaded")
    checker = FakeChecker({})
    found = devices.check_on(fleet, library, checker, "tuned")
    assert found.status == UNCHECKED and found.reason == (
        f"the RPC fleet is unreachable (127.0.0.1:{port}: the tracker lent no server under key "
        "'k' within 0.2 s)"
    )
    with pytest.raises(devices.Unreachable):  # asked once: the end of the run does not wait again
        fleet.load(library)


@pytest.mark.parametrize(
    "says, full",
    [
        ("/usr/bin/ld: final link failed: No space left on device", True),
        ("/usr/bin/ld: cannot find -lfoo", False),
    ],
)
def test_a_full_disk_met_by_the_compiler_is_one_line_not_a_traceback(tmp_path, says, full):
    """TVM reports a full disk at export as the compiler's failure, a RuntimeError: it was an
    internal error with a traceback; a compiler failure of another kind still is."""

    class Executable:
        def export_library(self, name):
            Path(name).write_bytes(b"\x7fELF")  # the linker's partial output
            raise RuntimeError(f"Compilation error:\n{says}\ncollect2: error: ld returned 1")

    (tmp_path / "model.so").write_bytes(b"the model shipped before")
    with pytest.raises(Exception) as raised:
        library.export_library(Executable(), tmp_path / "model.so")
    assert (disk_full(raised.value) is not None) == full
    assert isinstance(raised.value, OSError) == full
    assert [p.name for p in tmp_path.iterdir()] == ["model.so"]  # no partial file left
    assert (tmp_path / "model.so").read_bytes() == b"the model shipped before"
