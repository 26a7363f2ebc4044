"""The RPC engine against a real TVM tracker and two servers on 127.0.0.1, started and stopped
by the test."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import tvm
from click.testing import CliRunner
from tvm.s_tir import meta_schedule as ms
from tvm.script import tirx as T

import onnx_models
from cli_args import tune_args
from devices import GPU
from engine_contract import check_engine_contract
from tune_orchestrator import InputError
from tune_orchestrator.budget import Ledger
from tune_orchestrator.budget.report import schema as report_schema
from tune_orchestrator.cli.commands import main
from tune_orchestrator.config import Settings
from tune_orchestrator.deploy.builds import ModelBuilds
from tune_orchestrator.deploy.devices import FleetDevice
from tune_orchestrator.measure import (
    BuildInput,
    BuildPool,
    LocalEngine,
    MeasureInput,
    RpcEngine,
    TimerConfig,
    TimingPlan,
)
from tune_orchestrator.measure.rpc import parse_tracker, tracker_keys
from tune_orchestrator.measure.rpc_build import BuildServerFull, RpcBuilder
from tune_orchestrator.model.importer import import_to_relax
from tune_orchestrator.model.loading import load_model
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.run.measuring import target_and_fleet
from tune_orchestrator.rundir import RunDir

KEY = "test-cpu"
BUILD_KEY = "test-cpu-build"  # measure/build_server.py's servers
BUILD_SERVER = "tune_orchestrator.measure.build_server"
ARGS = (("float32", (4096,)), ("float32", (4096,)))


@T.prim_func(s_tir=True)
def scale(A: T.Buffer((4096,), "float32"), B: T.Buffer((4096,), "float32")):
    for i in range(4096):
        with T.sblock("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] * 2.0 + 1.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    log = open(tmp_path_factory.mktemp("rpc") / "rpc.log", "w")
    port = free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tvm.exec.rpc_tracker",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--port-end",
                str(port + 1),
                "--silent",
            ],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    ]
    try:
        address = f"127.0.0.1:{port}"
        _wait(lambda: tracker_keys("127.0.0.1", port) is not None, procs, log.name)
        # Two measuring servers (TVM's) and two build servers (ours).
        for module, key in [("tvm.exec.rpc_server", KEY), (BUILD_SERVER, BUILD_KEY)] * 2:
            server_port = free_port()
            command = [sys.executable, "-m", module, "--host", "127.0.0.1", "--port"]
            command += [str(server_port), "--port-end", str(server_port + 20)]
            command += ["--tracker", address, "--key", key]
            procs.append(subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True))
        keys = lambda: tracker_keys("127.0.0.1", port)  # noqa: E731
        _wait(lambda: keys().get(KEY, 0) == 2 and keys().get(BUILD_KEY, 0) == 2, procs, log.name)
        yield address
    finally:
        for proc in reversed(procs):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            proc.wait(timeout=20)
        log.close()


def _wait(ready, procs, log_path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(proc.poll() is not None for proc in procs):
            raise RuntimeError(f"an RPC process exited:\n{Path(log_path).read_text()[-2000:]}")
        try:
            if ready():
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise TimeoutError("the RPC tracker or its servers did not come up")


@T.prim_func(s_tir=True)
def writes_nan(A: T.Buffer((4096,), "float32"), B: T.Buffer((4096,), "float32")):
    for i in range(4096):
        with T.sblock("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = T.log(A[vi] - 100.0)  # the inputs are below 100: log of a negative number


LLVM1 = tvm.target.Target({"kind": "llvm", "num-cores": 1})
# What orchestrator.measuring.timing_plan gives a CPU fleet: TVM's repeats, fixed.
CPU_PLAN = TimingPlan(min_repeats=3, max_repeats=3, repeat_ms=20, race=False)


@pytest.mark.slow
def test_a_tracker_that_is_not_there_is_refused_at_once(monkeypatch):
    """TVM's client retried for a minute, a warning on stderr every 5 s, before the one line."""
    monkeypatch.setattr(
        "tvm.rpc.connect_tracker", lambda *_: pytest.fail("TVM's client was asked: it retries")
    )
    with pytest.raises(ConnectionRefusedError):
        tracker_keys("127.0.0.1", free_port())


def test_every_tracker_and_server_the_docs_and_scripts_start_binds_a_private_address():
    """TVM binds its tracker and servers to 0.0.0.0 unless --host says otherwise, and its RPC has
    no authentication: every such command a user may copy names a loopback or private address."""
    root = Path(__file__).resolve().parents[1]
    files = [root / "README.md", *root.glob("docs/*.md"), *root.glob("benchmarks/*.sh")]
    commands = [
        line
        for path in files
        for line in path.read_text().replace("\\\n", " ").splitlines()
        if re.search(r"tvm\.exec\.rpc_(tracker|server)\b|measure\.build_server\b", line)
    ]
    for command in commands:
        host = re.search(r"--host\s+(\S+)", command)
        assert host, f"binds 0.0.0.0 (TVM's default): {command}"
        address = ipaddress.ip_address(host.group(1))
        assert not address.is_unspecified and (address.is_loopback or address.is_private), command
    assert len(commands) >= 8  # the fleets of docs/gpu.md and of benchmarks/gpu_checks.sh


def test_the_fleet_measures_what_the_host_measures(tracker):
    timer = TimerConfig(repeat=3, min_repeat_ms=20)
    with BuildPool(workers=2) as pool:
        builds = pool.build([BuildInput(tvm.IRModule({"main": scale}), LLVM1)] * 3)
        inputs = [MeasureInput(b.artifact, ARGS) for b in builds] + [
            MeasureInput("/no/such.so", ARGS)
        ]
        arrived = []
        with RpcEngine(tracker=tracker, key=KEY, plan=CPU_PLAN) as engine:
            remote = engine.measure(inputs, on_result=lambda i, m: arrived.append(i))
            stats = engine.stats()
        with LocalEngine(timer=timer) as local:
            here = local.measure(inputs[:3])
    assert stats["in_flight"] == 2  # one candidate in flight per registered server
    assert stats["candidates"] == 4 and stats["step_s"]["timed"] > 0 and 0 < stats["busy"] <= 1
    assert sorted(arrived) == [0, 1, 2, 3]
    assert [m.ok for m in remote] == [True, True, True, False]
    assert remote[3].error.startswith("RPC measurement failed")
    assert all(len(m.run_secs) == 3 and m.finite is True for m in remote[:3])
    # The same machine through loopback, but the two servers time their candidates at the same
    # moment on a host that may have only two cores, so a sub-microsecond kernel can read 2-3x
    # slower. What this guards against is a unit slip (ms for s) or the RPC round trip (~100 us
    # here) folded into the timing: each would be off by 100x or more. Medians: on a loaded
    # host one of three repeats read 59 us where the others read 0.4 us.
    for r, h in zip(remote[:3], here, strict=True):
        assert 0.2 < statistics.median(r.run_secs) / statistics.median(h.run_secs) < 5.0


def test_the_fleet_keeps_the_engine_contract_and_checks_for_nan(tracker):
    with BuildPool(workers=2) as pool:
        builds = pool.build(
            [BuildInput(tvm.IRModule({"main": f}), LLVM1) for f in (scale, scale, writes_nan)]
        )
        with RpcEngine(tracker=tracker, key=KEY, plan=CPU_PLAN) as engine:
            good = [MeasureInput(b.artifact, ARGS) for b in builds[:2]]
            check_engine_contract(engine, good, MeasureInput("/no/such.so", ARGS))
            (nan,) = engine.measure([MeasureInput(builds[2].artifact, ARGS)])
    # timed, and flagged: the tuning loop fails it where the untuned kernel stays finite
    assert nan.ok and nan.finite is False


def test_a_gpu_less_head_node_takes_a_cuda_tag_for_the_fleet(tracker):
    resolved, fleet = target_and_fleet("nvidia/nvidia-h100", rpc=tracker, rpc_key=KEY)
    assert resolved.device_type == "cuda" and str(resolved.target.attrs["arch"]).startswith("sm_90")
    assert resolved.device_present is False  # the tuned model is not run on the head node
    assert fleet.rpc == tracker and fleet.servers == 2
    assert fleet.devices("cuda") == 2 and fleet.claims("cuda") == []


@pytest.mark.skipif(GPU, reason="the loopback servers of a GPU host do have a GPU")
def test_cuda_on_a_fleet_without_gpus_is_one_clear_line(tracker):
    with pytest.raises(InputError) as refused:
        target_and_fleet("cuda", rpc=tracker, rpc_key=KEY)
    assert str(refused.value) == (
        "--target cuda with --rpc: the servers under --rpc-key have no CUDA GPU to read the "
        "architecture from; start them on GPU hosts, or name the GPU with a tag such as "
        "--target nvidia/nvidia-h100"
    )
    with pytest.raises(InputError, match="^--gpus picks GPUs of this host"):
        target_and_fleet("nvidia/nvidia-h100", gpus="0", rpc=tracker, rpc_key=KEY)


@pytest.mark.slow
def test_a_wrong_key_or_tracker_is_one_clear_line(tracker, tmp_path, monkeypatch):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    monkeypatch.chdir(tmp_path)  # where the default --out (runs/...) would be made
    wrong_key = CliRunner().invoke(
        main,
        [
            "--budget",
            "8trials",
            "--target",
            "llvm",
            "--rpc",
            tracker,
            "--rpc-key",
            "gpu-farm",
            str(model),
        ],
    )
    assert wrong_key.exit_code == 2
    assert (
        wrong_key.stderr.strip()
        == f"error: no server is registered under key 'gpu-farm' at {tracker} (keys there: "
        f"{KEY}, {BUILD_KEY})"
    )
    closed = f"127.0.0.1:{free_port()}"
    nobody = CliRunner().invoke(
        main,
        ["--budget", "8trials", "--target", "llvm", "--rpc", closed, "--rpc-key", KEY, str(model)],
    )
    assert nobody.exit_code == 2 and nobody.stderr.startswith(
        f"error: cannot reach the RPC tracker at {closed}"
    )
    assert not (tmp_path / "runs").exists()  # no run directory was started


def test_the_fleets_build_servers_build_what_the_host_builds(tracker):
    """Candidates built on the build servers run on the measuring servers as the host's own
    builds do; a candidate that does not build is one failed build, carried as the pool's."""
    inputs = [BuildInput(tvm.IRModule({"main": scale}), LLVM1)] * 3
    arm = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
    inputs.append(BuildInput(tvm.IRModule({"main": scale}), arm))  # the host's g++ cannot link it
    with RpcBuilder(tracker=parse_tracker(tracker), key=BUILD_KEY, servers=2) as remote:
        built = remote.build(inputs)
        stats = remote.stats()["remote"]
        with (
            BuildPool(workers=1) as pool,
            RpcEngine(tracker=tracker, key=KEY, plan=CPU_PLAN) as engine,
        ):
            local = pool.build(inputs[:1])
            measured = engine.measure([MeasureInput(b.artifact, ARGS) for b in built[:3] + local])
        remote.release(built)
        assert [b.ok for b in built] == [True, True, True, False], [b.error for b in built]
        assert not any(Path(b.artifact).exists() for b in built[:3])
    assert [b.ok for b in built] == [True, True, True, False]
    assert built[3].error.startswith("remote build:") and "g++" in built[3].error, built[3]
    assert stats == {
        "key": BUILD_KEY,
        "servers": 2,
        "failed": 1,
        "library_bytes": stats["library_bytes"],
    }
    assert stats["library_bytes"] > 3 * 1000
    assert all(m.ok and m.finite for m in measured)


def test_builds_on_build_servers_need_a_fleet_that_has_them(
    tracker, tmp_path, fast_config, monkeypatch
):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    monkeypatch.setenv("ORCHESTRATE_BUILD_RPC_KEY", "nobody-builds")
    no_fleet = CliRunner().invoke(main, tune_args(model, tmp_path / "a", fast_config))
    assert no_fleet.exit_code == 2
    assert no_fleet.stderr.startswith(
        "error: [build] rpc_key = 'nobody-builds' builds on a fleet's build servers, but this "
        "run has no --rpc"
    )
    args = tune_args(model, tmp_path / "b", fast_config, "--rpc", tracker, "--rpc-key", KEY)
    unknown = CliRunner().invoke(main, args)
    assert unknown.exit_code == 2
    assert unknown.stderr.startswith(
        "error: no build server is registered under [build] rpc_key 'nobody-builds'"
    )


@pytest.mark.slow
def test_a_whole_tune_builds_on_the_fleets_build_servers(
    tracker, tmp_path, fast_config, monkeypatch
):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    out = tmp_path / "run"
    monkeypatch.setenv("ORCHESTRATE_BUILD_RPC_KEY", BUILD_KEY)
    result = CliRunner().invoke(
        main, tune_args(model, out, fast_config, "--rpc", tracker, "--rpc-key", KEY)
    )
    assert result.exit_code == 0, result.output
    report = json.loads((Path(out) / "report.json").read_text())
    jsonschema.validate(report, report_schema())
    remote = report["measurement"]["remote_builds"]
    assert remote["servers"] == 2 and remote["failed"] == 0 and remote["library_bytes"] > 0
    assert "built on 2 build servers under key 'test-cpu-build'" in (out / "report.md").read_text()
    assert report["summary"]["trials"] == 8
    assert sum(t["failures"] for t in report["tasks"]) == 0


FULL_BUILD_KEY = "test-cpu-build-full"
# Loaded by every Python process of a build server started with this folder on PYTHONPATH
# (TVM's RPC server serves from a process of its own): its temporary folder's disk has 1 MiB.
FULL_DISK = """
import shutil
_usage = shutil.disk_usage
shutil.disk_usage = lambda path: _usage(path)._replace(free=1 << 20)
"""


@pytest.fixture
def full_build_server(tracker, tmp_path):
    """A build server under FULL_BUILD_KEY whose temporary folder's disk is full."""
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "sitecustomize.py").write_text(FULL_DISK)
    host, port = tracker.rsplit(":", 1)
    server_port = free_port()
    command = [sys.executable, "-m", BUILD_SERVER, "--host", "127.0.0.1", "--port"]
    command += [str(server_port), "--port-end", str(server_port + 20)]
    command += ["--tracker", tracker, "--key", FULL_BUILD_KEY]
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "full")}
    with open(tmp_path / "server.log", "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=log, env=env, start_new_session=True)
    try:
        keys = lambda: tracker_keys(host, int(port))  # noqa: E731
        _wait(lambda: keys().get(FULL_BUILD_KEY, 0) == 1, [proc], str(tmp_path / "server.log"))
        yield FULL_BUILD_KEY
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


@pytest.mark.slow
def test_a_build_server_whose_disk_is_full_stops_the_run_and_fails_no_candidate(
    tracker, full_build_server, tmp_path, fast_config, monkeypatch
):
    """Its builds failed, each recorded as a failing candidate (in the run and the library):
    LLVM ends the process whose disk fills, which reads as the candidate crashing it."""
    inputs = [BuildInput(tvm.IRModule({"main": scale}), LLVM1)]
    with RpcBuilder(tracker=parse_tracker(tracker), key=full_build_server, servers=1) as remote:
        with pytest.raises(BuildServerFull) as raised:
            remote.build(inputs)
        assert remote.stats()["remote"]["failed"] == 0
    said = f"the temporary folder of build server {socket.gethostname()}, "
    assert raised.value.strerror.startswith(said) and raised.value.strerror.endswith(
        ", is full: 1.0 MiB free"
    )
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    out = tmp_path / "run"
    monkeypatch.setenv("ORCHESTRATE_BUILD_RPC_KEY", full_build_server)
    args = tune_args(model, out, fast_config, "--rpc", tracker, "--rpc-key", KEY)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert result.stderr == (
        f"error: {raised.value.strerror}; free some space there (or start that build server "
        "with TMPDIR on a disk with room) and run the same command again: the run resumes "
        "where it stopped\n"
    )
    journal = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    assert not any(e["type"] == "round" for e in journal)
    monkeypatch.setenv("ORCHESTRATE_BUILD_RPC_KEY", BUILD_KEY)  # servers with room
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["trials"] == 8
    assert sum(t["failures"] for t in report["tasks"]) == 0


@pytest.mark.slow
def test_a_whole_tune_measures_on_the_fleet(tracker, tmp_path, fast_config):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    out = tmp_path / "run"
    result = CliRunner().invoke(
        main,
        tune_args(model, out, fast_config, "--rpc", tracker, "--rpc-key", KEY),
    )
    assert result.exit_code == 0, result.output
    report = json.loads((Path(out) / "report.json").read_text())
    assert report["measurement"]["engine"] == "RpcEngine" and report["summary"]["trials"] == 8
    assert report["measurement"]["in_flight"] == 2
    assert sum(t["failures"] for t in report["tasks"]) == 0


@pytest.mark.slow
def test_the_end_of_a_fleet_run_checks_and_times_both_builds_on_a_server(tracker, tmp_path):
    """What a CUDA run on a fleet does at the end (no GPU here), on the CPU servers."""
    model = load_model(onnx_models.tiny_cnn(tmp_path / "tiny.onnx"))
    device = FleetDevice(tracker=tracker, key=KEY, device_type="cpu", timeout_s=120)
    settings = Settings.load(
        overrides={"check.latency_repeat": 3, "check.latency_min_repeat_ms": 10}, env={}
    )
    events = []
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        builds = ModelBuilds(
            model=model,
            relax_mod=import_to_relax(model),
            target=resolve_target("llvm"),
            settings=settings,
            run=run,
            emit=lambda kind, **fields: events.append(kind),
            device=device,
        )
        shipment = builds.finish(ms.database.MemoryDatabase(), Ledger(), None)
    assert shipment.tuned["check"]["ok"] and shipment.untuned["check"]["ok"]
    assert shipment.comparison["repeats"] == 3 and events[-2:] == ["compared", "shipped"]
    assert shipment.checked_on == f"a server of the RPC fleet (key {KEY!r} at {tracker})"
    assert (tmp_path / "run" / "model.so").is_file() and shipment.unchecked_reason is None
