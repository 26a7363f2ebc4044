"""--simulate: the GPU loop without a GPU. Search and CUDA builds are real, timings are not,
and nothing it writes can be taken for a real measurement."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import onnx_models
from cli_args import tune_args
from tune_orchestrator.cli.commands import main
from tune_orchestrator.errors import InputError
from tune_orchestrator.forecast.earlier import earlier_runs
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.simulate import Landscape, VirtualClock


def test_the_landscape_is_deterministic_and_never_beats_the_floor():
    land = Landscape(seed=3)
    floor = land.floor_s(2e9)
    tuned = [land.latency(("task-a", 2e9, k)) for k in range(400)]
    assert tuned == [land.latency(("task-a", 2e9, k)) for k in range(400)]
    assert min(tuned) >= floor and min(tuned) < 1.2 * floor  # the best of many comes close
    assert sorted(tuned)[200] > 1.5 * floor  # a typical candidate is well off it
    default = land.latency(("task-a", 2e9, None))
    assert floor * 1.1 <= default <= floor * 7.4
    assert Landscape(seed=4).latency(("task-a", 2e9, 7)) != land.latency(("task-a", 2e9, 7))


def test_the_virtual_clock_adds_device_time_and_takes_off_what_it_hid():
    now = [100.0]
    clock = VirtualClock(lambda: now[0])
    device = [0.0]
    clock.attach(lambda: device[0])
    device[0] = 5.0  # the simulated GPU measured for 5 s in no real time
    now[0] += 1.0  # while 1 s of background search ran for real
    clock.overlapped(1.0)  # ... which a real GPU would have hidden
    assert clock() == pytest.approx(105.0)


def test_simulate_targets_a_named_gpu_and_refuses_what_it_cannot_stand_in_for():
    resolved = resolve_target("auto", simulate=True)
    assert resolved.simulated and resolved.device_type == "cuda"
    assert not resolved.device_present  # nothing is run here
    assert "SIMULATED" in resolved.describe() and "sm_90" in resolved.describe()
    with pytest.raises(InputError, match="cannot tell which GPU"):
        resolve_target("cuda", simulate=True)
    with pytest.raises(InputError, match="is a CPU"):
        resolve_target("llvm", simulate=True)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory, fast_config):
    base = tmp_path_factory.mktemp("simulate")
    model = onnx_models.tiny_cnn(base / "tiny.onnx")
    out = base / "runs" / "sim"
    args = tune_args(model, out, fast_config, "--simulate", budget="8trials", target="auto")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return SimpleNamespace(
        model=model,
        out=out,
        output=result.output,
        report=json.loads((out / "report.json").read_text()),
    )


@pytest.mark.slow
def test_a_simulated_run_tunes_with_real_cuda_builds_and_says_simulated_everywhere(simulated):
    out, report = simulated.out, simulated.report
    assert "SIMULATED" in simulated.output
    assert report["summary"]["trials"] == 8
    sim = report["simulated"]
    assert sim["word"] == "SIMULATED" and sim["device"].startswith("NVIDIA H100")
    # The kernels' time: each task weighted, at its default schedule untuned and at the faster
    # of that and its best tuned one after; 8 trials on the landscape beat some default.
    rows = report["tasks"]
    untuned = sum(t["weight"] * t["untuned_s"] for t in rows)
    tuned = sum(t["weight"] * min(t["untuned_s"], t["best_s"] or math.inf) for t in rows)
    assert sim["untuned_kernels_s"] == pytest.approx(untuned)
    assert sim["tuned_kernels_s"] == pytest.approx(tuned)
    assert tuned < untuned
    assert "SIMULATED" in report["target"]["description"]
    assert any("SIMULATED" in w for w in report["warnings"])
    assert "SIMULATED" in (out / "report.md").read_text()
    # Stock TVM pointed at the folder finds no database; the library says what it is.
    assert not (out / "database_tuning_record.json").exists()
    assert not (out / "model.so").exists()
    records = (out / "SIMULATED_database_tuning_record.json").read_text().splitlines()
    assert 8 <= len(records) <= 8 + len(report["tasks"])  # tuned ones, and default schedules
    assert (out / "model-SIMULATED.so").stat().st_size > 0
    assert report["paths"]["library"].endswith("model-SIMULATED.so")
    # The summary names the file it shipped, not a model.so that is not there.
    assert "\n  model-SIMULATED.so  the " in simulated.output
    assert "model.so" not in simulated.output  # the progress lines too
    assert report["summary"]["shipped_checked"] is False
    assert report["summary"]["unchecked_reason"] == (
        "a simulated GPU gave the timings and no GPU ran the model"
    )
    # The device time is on the run's clock: the measure phase is not zero.
    assert report["phases"]["measure"] > 0


@pytest.mark.slow
def test_a_cuda_target_naming_only_its_architecture_is_tuned(tmp_path, fast_config):
    """`cuda -arch=sm_90` names no thread block limits, which MetaSchedule's CUDA rules read:
    every task's search failed ("missing attribute `max_threads_per_block`"), exit 1."""
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    args = tune_args(model, tmp_path / "run", fast_config, "--simulate", target="cuda -arch=sm_90")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["summary"]["trials"] == 8 and "8 in 1 round;" in result.output


@pytest.mark.slow
def test_stock_tvm_finds_a_simulated_runs_records_for_the_models_own_kernels(simulated):
    # The default (dlight) schedules once rewrote the workloads in place, so every record was
    # filed under an already scheduled kernel that compile_relax never looks up.
    from tvm.s_tir import meta_schedule as ms

    from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
    from tune_orchestrator.model.loading import load_model
    from tune_orchestrator.model.tasks import extract_tasks

    target = resolve_target("auto", simulate=True).target
    tasks = extract_tasks(
        fuse_for_tuning(import_to_relax(load_model(simulated.model)), target), target
    )
    database = ms.database.JSONDatabase(
        path_workload=str(simulated.out / "SIMULATED_database_workload.json"),
        path_tuning_record=str(simulated.out / "SIMULATED_database_tuning_record.json"),
    )
    tuned = [t for t in simulated.report["tasks"] if t["trials"]]
    assert tuned
    for row in tuned:
        task = next(t for t in tasks if t.name == row["name"])
        assert database.query_tuning_record(task.workload, target, task.name) is not None


@pytest.mark.slow
def test_a_simulated_run_is_never_resumed_as_a_real_one(simulated, fast_config):
    # The same GPU target, as on the GPU host the user moves to (build-only runs here).
    args = tune_args(
        simulated.model, simulated.out, fast_config, "--build-only", target="nvidia/nvidia-h100"
    )
    before = sorted(p.name for p in simulated.out.iterdir())
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "holds a SIMULATED run; add --simulate to resume it" in result.output
    assert sorted(p.name for p in simulated.out.iterdir()) == before


@pytest.mark.slow
def test_estimate_learns_nothing_from_simulated_runs(simulated):
    assert earlier_runs(simulated.out.parent) == []


def kernel_sources(sources: list[str]) -> dict[str, str]:
    """Each kernel's CUDA source, by name (a definition after its declaration wins)."""
    from tune_orchestrator.deploy.kernels import _KERNEL

    found: dict[str, str] = {}
    for source in sources:
        starts = list(_KERNEL.finditer(source))
        for m, after in zip(starts, [*starts[1:], None], strict=True):
            found[m.group(1)] = source[m.start() : after.start() if after else len(source)]
    return found


@pytest.mark.slow
def test_a_task_whose_tuned_kernels_do_not_compile_ships_with_its_default_schedule(
    tmp_path, fast_config, monkeypatch
):
    """A simulated run never compiles the CUDA code of what it measures, and TVM 0.27 writes
    some that nvcc rejects (a longlong4 of eight values): the run ended "internal error" with
    no model. Here nvcc "rejects" the first kernel the tuned build changed."""
    from tune_orchestrator.deploy import kernels

    checks: list[dict[str, str]] = []  # each check's kernels: untuned, tuned, tuned again

    def nvcc(module, arch, **_):
        found = kernel_sources(kernels.cuda_sources(module))
        checks.append(found)
        if len(checks) == 2:
            bad = next(name for name, text in found.items() if text != checks[0][name])
            error = "kernels.cu(9): error: too many arguments in function call"
            return kernels.KernelCheck(True, len(found), arch, "nvcc", error, failed=(bad,))
        return kernels.KernelCheck(True, len(found), arch, "nvcc")

    monkeypatch.setattr(kernels, "check_cuda", nvcc)
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    out = tmp_path / "sim"
    args = tune_args(model, out, fast_config, "--simulate", budget="24trials", target="auto")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    untuned, tuned, again = checks
    report = json.loads((out / "report.json").read_text())
    (task,) = report["tuned"]["kernels"]["reverted"]

    def of(found: dict[str, str], mine: bool) -> dict[str, str]:
        return {k: v for k, v in found.items() if k.startswith(f"{task}_kernel") == mine}

    assert of(tuned, True) != of(untuned, True)  # it ran a tuned schedule, which "failed"
    assert of(again, True) == of(untuned, True)  # built again with its default schedule
    assert of(again, False) == of(tuned, False)  # and only that task
    assert next(t for t in report["tasks"] if t["name"] == task)["schedule"] == "default"
    assert task not in report["summary"]["kept_default"]
    assert f"the tuned CUDA kernels of {task} do not compile with nvcc" in result.output
    assert (out / "model-SIMULATED.so").is_file()
