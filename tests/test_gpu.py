"""Real-GPU tests: they run wherever TVM sees an NVIDIA GPU and are skipped elsewhere (the
simulated-device tests cover the same logic without one). Where a GPU is visible but cupy cannot
use it they fail, naming the extra to install (`pip install ".[gpu-test]"`), rather than skip.
Telemetry without NVML is checked everywhere."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tvm
from click.testing import CliRunner
from tvm.script import tirx as T

import onnx_models
from cli_args import tune_args
from devices import GPU
from engine_contract import check_engine_contract
from tune_orchestrator.cli.commands import main
from tune_orchestrator.measure import (
    BuildInput,
    BuildPool,
    CudaEngine,
    DopConfig,
    DopController,
    LocalEngine,
    MeasureInput,
    TimerConfig,
    TimingPlan,
    cuda_available,
    telemetry,
)
from tune_orchestrator.measure.telemetry import (
    GpuTelemetry,
    energy_meter,
    nvml_handle,
    physical_gpu,
    visible_entry,
)

needs_gpu = pytest.mark.skipif(not GPU, reason="needs a visible NVIDIA GPU")
pytestmark = pytest.mark.gpu if GPU else []


@pytest.fixture(autouse=True)
def cupy_on_a_gpu_host():
    """On a GPU host the engine needs cupy: missing, it is an install mistake, not a skip."""
    if GPU and not cuda_available():
        pytest.fail(
            "a GPU is visible but cupy cannot use it; install the GPU test extra: "
            "pip install '.[gpu-test]' (or '.[gpu-cuda12-test]' for CUDA 12 drivers)"
        )


# 64 MiB a buffer: streamed from memory (past the L2) for tens of microseconds, so that TVM's
# timer, which launches from the host (a few microseconds a launch), times the kernel too. At
# 4 MiB the H100 ran it in 2.9 us, and TVM's timer read the launches' pace, 4.2 us.
N = 1 << 24
ARGS = (("float32", (N,)), ("float32", (N,)))


@T.prim_func(s_tir=True)
def add_one(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32")):
    for bx in T.thread_binding(N // 1024, thread="blockIdx.x"):
        for tx in T.thread_binding(1024, thread="threadIdx.x"):
            with T.sblock("B"):
                vi = T.axis.spatial(N, bx * 1024 + tx)
                B[vi] = A[vi] + 1.0


@T.prim_func(s_tir=True)
def never_ends(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32")):
    for bx in T.thread_binding(N // 1024, thread="blockIdx.x"):
        for tx in T.thread_binding(1024, thread="threadIdx.x"):
            for k in range(1 << 30):
                with T.sblock("B"):
                    vi = T.axis.spatial(N, bx * 1024 + tx)
                    vk = T.axis.reduce(1 << 30, k)
                    B[vi] = B[vi] * 1.0001 + A[(vi + vk) % N]


@T.prim_func(s_tir=True)
def writes_nan(A: T.Buffer((N,), "float32"), B: T.Buffer((N,), "float32")):
    for bx in T.thread_binding(N // 1024, thread="blockIdx.x"):
        for tx in T.thread_binding(1024, thread="threadIdx.x"):
            with T.sblock("B"):
                vi = T.axis.spatial(N, bx * 1024 + tx)
                B[vi] = T.sqrt(A[vi] * T.float32(0) - T.float32(1))


def target():
    from tune_orchestrator.model.targets import resolve_target

    return resolve_target("cuda").target


def test_telemetry_without_nvml_is_unknown_not_an_error():
    telemetry = GpuTelemetry([0])
    sample = telemetry.sample()
    assert len(sample) == 1 and sample[0]["index"] == 0
    if not telemetry.available:
        assert sample[0]["sm_clock_mhz"] is None and sample[0]["pids"] == []
        assert energy_meter("cuda") is None
    batch = GpuTelemetry.batch(sample, telemetry.sample(), candidates=4, dop=2)
    summary = GpuTelemetry.summary([batch])
    assert summary["batches"] == 1 and isinstance(summary["warnings"], list)
    telemetry.close()


class FakeNvml:
    """NVML of a host with four GPUs, for the CUDA-index-to-NVML mapping."""

    def __init__(self) -> None:
        self.energy = {i: 1000 * (i + 1) for i in range(4)}  # millijoules

    def nvmlDeviceGetCount(self) -> int:
        return 4

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if not 0 <= i < 4:
            raise ValueError(i)
        return i

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}abc-{handle}"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return self.energy[handle]


@pytest.fixture
def no_pci_ids(monkeypatch):
    """Map through CUDA_VISIBLE_DEVICES, as where no driver answers for PCI bus ids."""
    monkeypatch.setattr(telemetry, "_pci_bus_id", lambda index: None)


def test_cuda_indices_map_to_nvml_devices_through_cuda_visible_devices(no_pci_ids):
    nvml = FakeNvml()
    assert visible_entry(1, {}) is None
    assert visible_entry(1, {"CUDA_VISIBLE_DEVICES": "3, 2"}) == "2"
    assert nvml_handle(nvml, 1, {}) == 1
    assert nvml_handle(nvml, 0, {"CUDA_VISIBLE_DEVICES": "3,2"}) == 3
    assert nvml_handle(nvml, 0, {"CUDA_VISIBLE_DEVICES": "GPU-2abc"}) == 2  # a UUID prefix
    with pytest.raises(LookupError):  # CUDA sees two GPUs only
        nvml_handle(nvml, 2, {"CUDA_VISIBLE_DEVICES": "3,2"})
    assert physical_gpu(1, {"CUDA_VISIBLE_DEVICES": "3,2"}) == "2"
    assert physical_gpu(1, {}) == "1"


def test_energy_is_metered_over_the_chosen_gpus(no_pci_ids, monkeypatch):
    nvml = FakeNvml()
    monkeypatch.setattr(telemetry, "_nvml", lambda: nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    meter = energy_meter("cuda", [1, 3])
    assert meter is not None and meter() == pytest.approx((2000 + 4000) / 1e3)
    assert energy_meter("cpu", [0]) is None


def test_telemetry_is_kept_per_gpu():
    def sample(index: int, energy: float, clock: int, slowdown: list[str]) -> dict:
        return {
            "index": index,
            "energy_j": energy,
            "sm_clock_mhz": clock,
            "temperature_c": 60 + index,
            "power_w": 300.0,
            "slowdown": slowdown,
            "pids": [],
        }

    before = [sample(0, 100.0, 1980, []), sample(1, 200.0, 1980, [])]
    after = [sample(0, 130.0, 1980, []), sample(1, 260.0, 1400, ["thermal (software)"])]
    batch = GpuTelemetry.batch(before, after, candidates=9, dop=3)
    assert batch["energy_per_candidate_j"] == pytest.approx(90.0 / 9)
    assert [g["energy_j"] for g in batch["gpus"]] == pytest.approx([30.0, 60.0])
    summary = GpuTelemetry.summary([batch])
    assert [g["index"] for g in summary["per_gpu"]] == [0, 1]
    assert summary["per_gpu"][1]["throttled_batches"] == 1
    assert summary["per_gpu"][1]["min_sm_clock_mhz"] == 1400
    assert summary["warnings"] == [
        "GPU 1 was slowed down (thermal (software)) during 1 of 1 batches"
    ]


@needs_gpu
def test_the_cuda_engine_keeps_the_engine_contract():
    with BuildPool(workers=2) as pool:
        builds = pool.build([BuildInput(tvm.IRModule({"main": add_one}), target())] * 2)
        with CudaEngine(controller=DopController(DopConfig(max_dop=2))) as engine:
            good = [MeasureInput(b.artifact, ARGS) for b in builds]
            check_engine_contract(engine, good, MeasureInput("/no/such/file.so", ARGS))


@needs_gpu
def test_the_cuda_engine_times_on_the_device_like_tvms_timer():
    with BuildPool(workers=2) as pool:
        builds = pool.build([BuildInput(tvm.IRModule({"main": add_one}), target())] * 8)
        inputs = [MeasureInput(b.artifact, ARGS) for b in builds]
        engine = CudaEngine(
            controller=DopController(DopConfig(max_dop=4)),
            plan=TimingPlan(min_repeats=5, race=False),
        )
        try:
            ours = engine.measure(inputs)
            stats = engine.stats()
        finally:
            engine.close()
        with LocalEngine(
            device_type="cuda", timer=TimerConfig(repeat=5, min_repeat_ms=10)
        ) as local:
            tvms = local.measure(inputs[:2])
    assert all(m.ok and m.finite for m in ours)
    reference = np.median([m.mean_s for m in tvms])
    assert 0.7 < np.median([m.mean_s for m in ours]) / reference < 1.3
    assert stats["telemetry"]["batches"] >= 1 and stats["gpus"] == [0]
    assert stats["mode"] == "exclusive" and 0 < stats["busy"] <= 1
    assert all(stats["step_s"][step] > 0 for step in ("load", "warm_up", "timed", "check"))


@needs_gpu
def test_a_hanging_gpu_kernel_costs_one_result_and_the_worker_is_replaced():
    with BuildPool(workers=2) as pool:
        builds = pool.build(
            [BuildInput(tvm.IRModule({"main": f}), target()) for f in (never_ends, add_one)]
        )
        engine = CudaEngine(fixed_dop=1, plan=TimingPlan(min_repeats=2), timeout_s=10)
        try:
            hung, fine = engine.measure([MeasureInput(b.artifact, ARGS) for b in builds])
        finally:
            engine.close()
    assert hung.error == "measurement timed out after 10 s"
    assert fine.ok


@needs_gpu
def test_a_kernel_that_writes_nan_is_reported_and_not_timed():
    with BuildPool(workers=2) as pool:
        builds = pool.build(
            [BuildInput(tvm.IRModule({"main": f}), target()) for f in (writes_nan, add_one)]
        )
        engine = CudaEngine(fixed_dop=1, plan=TimingPlan(min_repeats=3, race=False))
        try:
            nan, fine = engine.measure([MeasureInput(b.artifact, ARGS) for b in builds])
        finally:
            engine.close()
    assert nan.ok and nan.finite is False and len(nan.run_secs) == 1  # its first launch only
    assert fine.finite is True and len(fine.run_secs) >= 3


@needs_gpu
def test_a_batch_too_large_for_the_gpu_is_refused_before_any_work(
    tmp_path, fast_config, monkeypatch
):
    """One sample of x at a batch of 60 million (43 GiB) and twice its convolution's output
    (57 GiB), fit neither an H100 nor an H200: every candidate's run and the final check
    would fail on the GPU."""
    from tune_orchestrator import host

    monkeypatch.setattr(host, "host_memory", lambda: 1 << 50)  # the host's check passes
    model = onnx_models.tiny_cnn(tmp_path / "dyn.onnx", batch="N")
    shape = ["--input-shape", "x:60000000x3x8x8"]
    args = tune_args(model, tmp_path / "run", fast_config, *shape, target="cuda")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "running the model needs more than the" in result.stderr
    assert "of memory on GPU 0: its inputs take 42.9 GiB a sample" in result.stderr
    assert not (tmp_path / "run").exists()


@needs_gpu
def test_a_whole_tune_on_the_gpu(tmp_path, fast_config):
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    out = tmp_path / "run"
    result = CliRunner().invoke(
        main,
        tune_args(model, out, fast_config, budget="16trials", target="cuda"),
        env={**os.environ},
    )
    assert result.exit_code == 0, result.output
    report = json.loads((Path(out) / "report.json").read_text())
    assert report["measurement"]["engine"] == "CudaEngine"
    assert report["summary"]["check_ok"] is True and report["summary"]["device_h"] > 0
    assert report["measurement"]["telemetry"]["batches"] >= 1


@pytest.fixture
def gpu_fleet(tmp_path):
    """A TVM RPC tracker and one server that sees the GPU, on 127.0.0.1."""
    import signal
    import subprocess
    import sys

    from test_rpc import _wait, free_port, tracker_keys

    log = open(tmp_path / "rpc.log", "w")
    port, server = free_port(), free_port()
    address = f"127.0.0.1:{port}"
    commands = [
        ["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
         "--port-end", str(port + 1), "--silent"],
        ["tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(server),
         "--port-end", str(server + 20), "--tracker", address, "--key", "gpu"],
    ]  # fmt: skip
    procs = []
    try:
        for command in commands:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", *command], stdout=log, stderr=log, start_new_session=True
                )  # fmt: skip
            )
            if len(procs) == 1:
                _wait(lambda: tracker_keys("127.0.0.1", port) is not None, procs, log.name)
        _wait(lambda: tracker_keys("127.0.0.1", port).get("gpu", 0) == 1, procs, log.name)
        yield address
    finally:
        for proc in reversed(procs):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        log.close()


@needs_gpu
def test_a_head_node_without_a_gpu_tunes_on_a_gpu_fleet(tmp_path, fast_config, gpu_fleet):
    """CUDA measured over TVM RPC: the head process sees no GPU (CUDA_VISIBLE_DEVICES=), the
    server measures, the end of the run checks and times both builds on it."""
    import subprocess
    import sys

    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    out = tmp_path / "run"
    args = tune_args(
        model, out, fast_config, "--rpc", gpu_fleet, "--rpc-key", "gpu",
        budget="16trials", target="nvidia/nvidia-h100",
    )  # fmt: skip
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-m", "tune_orchestrator", *map(str, args)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["measurement"]["engine"] == "RpcEngine"
    summary = report["summary"]
    assert summary["trials"] == 16 and summary["shipped_checked"] is True, summary[
        "unchecked_reason"
    ]
