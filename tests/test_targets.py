import pytest

from devices import GPU
from tune_orchestrator.errors import InputError
from tune_orchestrator.model.targets import host_cores, resolve_target


def test_llvm_gets_the_host_core_count():
    resolved = resolve_target("llvm")
    assert resolved.kind == "llvm" and resolved.device_type == "cpu"
    assert resolved.target.attrs["num-cores"] == host_cores()
    assert resolved.devices == 0 and resolved.device_present


@pytest.mark.skipif(GPU, reason="auto picks CUDA where a GPU is visible")
def test_auto_is_llvm_without_a_gpu():
    assert resolve_target("auto").kind == "llvm"


@pytest.mark.skipif(GPU, reason="checks the behaviour on a host without a GPU")
def test_cuda_without_a_gpu_is_a_clear_error_unless_only_building():
    with pytest.raises(InputError, match="needs an NVIDIA GPU to measure on, and none is visible"):
        resolve_target("cuda")
    with pytest.raises(InputError, match="cannot tell the GPU architecture"):
        resolve_target("cuda", build_only=True)
    with pytest.raises(InputError, match="add --build-only"):
        resolve_target("nvidia/nvidia-h100")
    resolved = resolve_target("nvidia/nvidia-h100", build_only=True)
    assert resolved.kind == "cuda" and not resolved.device_present
    assert resolved.target.host is not None and resolved.devices == 1


def test_json_dicts_are_taken_as_given():
    resolved = resolve_target('{"kind": "llvm", "num-cores": 1}')
    assert resolved.target.attrs["num-cores"] == 1
    assert resolved.to_json()["kind"] == "llvm"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("foo", "unknown target 'foo'; use auto, llvm, cuda, a TVM tag"),
        ('{"kind": "llvm"', "is not valid JSON"),
        ('{"kind": "nope"}', "unknown target"),
        ('{"kind": "opencl"}', "compiles for opencl; tune-orchestrator tunes llvm (CPU) and cuda"),
    ],
)
def test_unknown_targets_list_the_accepted_forms(spec, message):
    with pytest.raises(InputError) as info:
        resolve_target(spec)
    assert message in str(info.value)
