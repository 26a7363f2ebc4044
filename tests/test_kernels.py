"""CUDA kernels built on a host without a GPU are compiled by nvcc before they ship: in CI
(the model whose names broke NVRTC), and in `--build-only` for a CUDA target."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest
from click.testing import CliRunner
from tvm.s_tir import meta_schedule as ms

import onnx_models
from devices import GPU
from tune_orchestrator import deploy
from tune_orchestrator.cli.commands import main
from tune_orchestrator.deploy.kernels import (
    check_cuda,
    cuda_sources,
    failing_kernels,
    find_nvcc,
    kernel_names,
)
from tune_orchestrator.model import names as onnx_names
from tune_orchestrator.model.importer import import_to_relax
from tune_orchestrator.model.loading import load_model
from tune_orchestrator.model.targets import resolve_target

NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no CUDA compiler (nvcc) on this host")
# With a GPU the library is loaded and run on it instead; these tests are of GPU-less hosts.
no_gpu = pytest.mark.skipif(GPU, reason="a GPU is visible: the build is run, not only compiled")
H100 = "nvidia/nvidia-h100"
SHAPE = f"{onnx_models.ODD_INPUT}:1x3x8x8"


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    return onnx_models.odd_names(tmp_path_factory.mktemp("kernels") / "odd.onnx")


def cuda_source(model) -> str:
    target = resolve_target(H100, build_only=True).target
    executable = deploy.compile_model(import_to_relax(model), target, ms.database.MemoryDatabase())
    (source,) = cuda_sources(executable)
    return source


def build_for_h100(model, out):
    """`orchestrate --target nvidia/nvidia-h100 --build-only --input-shape ... MODEL`."""
    args = ["--target", H100, "--build-only", "--out", out, "--input-shape", SHAPE, model]
    return CliRunner().invoke(main, [str(a) for a in args])


def nvcc_compiles(source: str, folder) -> subprocess.CompletedProcess:
    src = folder / "kernels.cu"
    src.write_text(source)
    return subprocess.run(
        [NVCC, "-arch=sm_90a", "-cubin", "-w", "-o", str(folder / "k.cubin"), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )


@needs_nvcc
def test_kernels_of_a_model_named_like_the_model_zoo_compile_for_an_h100(odd, tmp_path):
    source = cuda_source(load_model(odd, {onnx_models.ODD_INPUT: (1, 3, 8, 8)}))
    assert "gpu_0/data_0" not in source and "gpu_0_data_0_ptr" in source
    done = nvcc_compiles(source, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]


@needs_nvcc
def test_without_renaming_the_same_kernels_do_not_compile(odd, tmp_path):
    """What this guards against: the names as the file has them break the CUDA source."""
    model = load_model(odd, {onnx_models.ODD_INPUT: (1, 3, 8, 8)})
    source = cuda_source(dataclasses.replace(model, tvm_proto=model.proto, tvm_names={}))
    assert "gpu_0/data_0_ptr" in source
    done = nvcc_compiles(source, tmp_path)
    assert done.returncode != 0 and "error" in done.stderr
    failed = check_cuda(
        deploy.compile_model(
            import_to_relax(dataclasses.replace(model, tvm_proto=model.proto, tvm_names={})),
            resolve_target(H100, build_only=True).target,
            ms.database.MemoryDatabase(),
        ),
        "sm_90a",
    )
    assert failed.checked and not failed.ok and "error" in failed.error


@needs_nvcc
def test_an_architecture_nvcc_does_not_know_is_no_kernel_error(odd):
    model = load_model(odd, {onnx_models.ODD_INPUT: (1, 3, 8, 8)})
    target = resolve_target(H100, build_only=True).target
    executable = deploy.compile_model(import_to_relax(model), target, ms.database.MemoryDatabase())
    unknown = check_cuda(executable, "sm_999")
    assert not unknown.checked and unknown.error is None
    assert unknown.reason == f"{unknown.compiler} cannot compile for sm_999"


def test_kernel_names_are_read_from_the_source():
    source = (
        'extern "C" __global__ void __launch_bounds__(128) conv_kernel(float* x);\n'
        'extern "C" __global__ void __launch_bounds__(128) conv_kernel(float* x) {}\n'
        'extern "C" __global__ void mean_kernel(float* x) {}\n'
    )
    assert kernel_names(source) == ["conv_kernel", "mean_kernel"]


@no_gpu
def test_the_compilers_errors_name_the_kernels_they_point_into():
    source = "\n".join(
        [
            'extern "C" __global__ void __launch_bounds__(32) conv_kernel(float* x);',  # 1
            'extern "C" __global__ void mean_kernel(float* x);',  # 2
            'extern "C" __global__ void __launch_bounds__(32) conv_kernel(float* x) {',  # 3
            "  longlong4 v = make_longlong4(1, 2, 3, 4, 5, 6, 7, 8);",  # 4
            "}",
            'extern "C" __global__ void mean_kernel(float* x) {',  # 6
            "  x[0] = y;",  # 7
            "}",
        ]
    )
    output = (
        "k.cu(4): error: too many arguments in function call\n"
        'k.cu(7): error: identifier "y" is undefined\nk.cu(4): error: again\n'
    )
    assert failing_kernels(output, source) == ("conv_kernel", "mean_kernel")
    assert failing_kernels("k.cu(7): error: x", source) == ("mean_kernel",)
    assert failing_kernels("nvcc fatal: no input", source) == ()


@needs_nvcc
def test_build_only_for_a_gpu_compiles_the_kernels_before_reporting_success(odd, tmp_path):
    out = tmp_path / "run"
    result = build_for_h100(odd, out)
    assert result.exit_code == 0, result.output
    assert "kernels compile with nvcc" in result.stdout and "for sm_90a" in result.stdout
    kernels = json.loads((out / "report.json").read_text())["tuned"]["kernels"]
    assert kernels["ok"] and kernels["checked"] and kernels["kernels"] >= 4
    assert (out / "model.so").is_file()


@no_gpu
def test_without_a_cuda_compiler_the_output_says_the_kernels_were_not_checked(
    odd, tmp_path, monkeypatch
):
    monkeypatch.setattr("tune_orchestrator.deploy.kernels.find_nvcc", lambda: None)
    out = tmp_path / "run"
    result = build_for_h100(odd, out)
    assert result.exit_code == 0, result.output
    assert "CUDA kernels        NOT CHECKED: no CUDA compiler here" in result.stdout
    kernels = json.loads((out / "report.json").read_text())["tuned"]["kernels"]
    assert kernels["checked"] is False and kernels["ok"] is False
    assert "nvcc not on PATH" in kernels["reason"]
    # Nothing here can run the model, and the summary says so beside the library.
    assert (
        "model.so            the build with TVM's default schedules (no task runs a tuned one), "
        "UNCHECKED, its outputs were never compared with onnxruntime's: no CUDA device here and "
        "no RPC fleet (--rpc) to run it on"
    ) in result.stdout
    summary = json.loads((out / "report.json").read_text())["summary"]
    assert summary["shipped_checked"] is False and (out / "model.so").is_file()


@no_gpu
@needs_nvcc
def test_kernels_that_do_not_compile_are_our_bug_exit_1_and_no_library(odd, tmp_path, monkeypatch):
    """Provoked for real: the renaming switched off, the model's names reach the kernels."""
    monkeypatch.setattr(onnx_names, "for_tvm", lambda proto: (proto, {}))
    out = tmp_path / "run"
    result = build_for_h100(odd, out)
    assert result.exit_code == 1, result.output
    assert "the CUDA kernels TVM generated for odd do not compile (nvcc" in result.stderr
    assert (
        "model.so was not written" in result.stderr and "bug in tune-orchestrator" in result.stderr
    )
    assert not (out / "model.so").exists() and not (out / "logs" / "tuned.so").exists()
    assert "gpu_0/data_0_ptr" in (out / "logs" / "kernels.cu").read_text()


def test_a_dlight_rule_that_raises_leaves_the_kernel_to_the_next_rule(tmp_path):
    # Reduction's assertion on a summed outer product failed the whole CUDA compile (exit 1).
    from tune_orchestrator.model.defaults import default_schedule
    from tune_orchestrator.model.importer import fuse_for_tuning
    from tune_orchestrator.model.tasks import extract_tasks

    model = load_model(onnx_models.outer_sum(tmp_path / "outer.onnx"))
    resolved = resolve_target(H100, build_only=True)
    relax_mod = import_to_relax(model)
    (task,) = extract_tasks(fuse_for_tuning(relax_mod, resolved.target), resolved.target)
    assert default_schedule(task, resolved).mod is not None
    executable = deploy.compile_model(relax_mod, resolved.target, ms.database.MemoryDatabase())
    (source,) = cuda_sources(executable)
    assert "__global__" in source
