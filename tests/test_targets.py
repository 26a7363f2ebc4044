import platform

import pytest

from devices import GPU
from tune_orchestrator.errors import InputError
from tune_orchestrator.host import host_cores
from tune_orchestrator.model.targets import cores_text, resolve_target


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


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a", "sm_100f"])
def test_gpu_architectures_tvm_reads_are_taken(arch):
    resolved = resolve_target(f"cuda -arch={arch}", build_only=True)
    assert str(resolved.target.attrs["arch"]) == arch


@pytest.mark.parametrize(
    "arch, fix",
    [("sm_909", "did you mean sm_90?"), ("sm_91", "did you mean sm_90?"),
     ("sm_85", "did you mean sm_86?"), ("sm_999", "e.g. sm_90 for an H100 (9.0)")],
)  # fmt: skip
def test_a_gpu_architecture_no_nvidia_gpu_has_is_refused(arch, fix, monkeypatch):
    """`-arch=sm_909` compiled, shipped kernels no GPU could load, unchecked ("nvcc cannot
    compile for sm_909"), and exited 0. An architecture the nvcc here knows is a newer GPU's."""
    from tune_orchestrator.deploy import kernels

    with pytest.raises(InputError) as info:
        resolve_target(f"cuda -arch={arch}", build_only=True)
    assert f"names GPU architecture {arch}, which no NVIDIA GPU has (sm_20 to sm_121" in str(
        info.value
    )
    assert str(info.value).endswith(fix)
    monkeypatch.setattr(kernels, "nvcc_archs", lambda: [arch[3:]])
    assert str(resolve_target(f"cuda -arch={arch}", build_only=True).target.attrs["arch"]) == arch


@pytest.fixture
def on_an_a100(monkeypatch):
    """This host's GPU as an A100 (compute capability 8.0)."""
    from tune_orchestrator.model import targets

    monkeypatch.setattr(targets, "gpu_visible", lambda: True)
    monkeypatch.setattr(targets, "_compute_version_here", lambda: "8.0")
    monkeypatch.setattr(targets, "_device_name", lambda kind, present: "NVIDIA A100")


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a", "sm_86", "sm_75", "sm_100f"])
def test_a_gpu_architecture_whose_kernels_this_gpu_cannot_run_is_only_compiled_for(
    on_an_a100, arch
):
    # TVM compiles each kernel to a cubin for the named architecture alone: every candidate
    # would fail on this GPU, and the run would end with nothing tuned.
    with pytest.raises(InputError) as info:
        resolve_target(f"cuda -arch={arch}")
    assert f"compiles for {arch}, whose kernels the GPU here (NVIDIA A100, sm_80)" in str(
        info.value
    )
    assert "add --build-only" in str(info.value)
    resolved = resolve_target(f"cuda -arch={arch}", build_only=True)
    assert not resolved.device_present and resolved.device_name == f"no {arch} GPU on this host"


@pytest.mark.parametrize("arch", ["sm_80", "sm_80f"])
def test_a_gpu_architecture_this_gpu_runs_is_measured_here(on_an_a100, arch):
    resolved = resolve_target(f"cuda -arch={arch}")
    assert resolved.device_present and resolved.device_name == "NVIDIA A100"


def test_json_dicts_are_taken_as_given():
    resolved = resolve_target('{"kind": "llvm", "num-cores": 1}')
    assert resolved.target.attrs["num-cores"] == 1
    assert resolved.to_json()["kind"] == "llvm"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("foo", "unknown target 'foo'; use auto, llvm, cuda, a TVM tag"),
        # a tag typed short or misspelt: the tags that name that GPU
        ("nvidia/h100", "unknown target 'nvidia/h100' (did you mean nvidia/nvidia-h100?); use"),
        ("rtx4090", "unknown target 'rtx4090' (did you mean nvidia/geforce-rtx-4090?); use"),
        ("nvidia/nvidia-a100x", "'nvidia/nvidia-a100x' (did you mean nvidia/nvidia-a100?)"),
        ('{"kind": "llvm"', "is not valid JSON"),
        ('{"kind": "nope"}', "unknown target"),
        ('{"kind": "opencl"}', "compiles for opencl; tune-orchestrator tunes llvm (CPU) and cuda"),
        # TVM's ValueError at the first build: "The arch is not expected sm_9"
        ("cuda -arch=sm_9", "names GPU architecture 'sm_9', which TVM cannot read; write sm_"),
    ],
)
def test_unknown_targets_list_the_accepted_forms(spec, message):
    with pytest.raises(InputError) as info:
        resolve_target(spec)
    assert message in str(info.value)


def test_the_string_form_tvm_users_type_is_read_as_its_json_dict():
    """TVM 0.27 refuses "llvm -mcpu=..."; its users still type it."""
    resolved = resolve_target("llvm -mcpu=haswell -mattr=+avx2,+fma -num-cores=1")
    attrs = resolved.target.attrs
    assert (str(attrs["mcpu"]), list(attrs["mattr"]), attrs["num-cores"]) == (
        "haswell",
        ["+avx2", "+fma"],
        1,
    )
    with pytest.raises(InputError) as info:
        resolve_target("llvm -mcpu=haswell -bogus=3")
    said = str(info.value)
    assert 'as one, {"kind": "llvm", "mcpu": "haswell", "bogus": 3}, it is refused' in said
    assert "Unknown config option 'bogus'" in said and "\n" not in said


def test_an_llvm_target_that_does_not_count_cores_gets_this_hosts():
    """Without num-cores every task's search failed ("physical core number must be
    defined"), and the run ended as 'budget too small'."""
    resolved = resolve_target('{"kind": "llvm", "mcpu": "haswell"}')
    assert resolved.target.attrs["num-cores"] == host_cores()
    with pytest.raises(InputError, match='add "num-cores": N to the JSON target'):
        resolve_target('{"kind": "llvm"}', remote=lambda: {})  # an RPC fleet's cores: unknown


def test_an_llvm_target_for_another_architecture_is_refused():
    """Its objects failed to link at the first build, with a linker traceback."""
    for spec in (
        '{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}',
        "llvm -mtriple=aarch64-linux-gnu",
    ):
        with pytest.raises(InputError, match="compiles for aarch64-linux-gnu, but this host is"):
            resolve_target(spec, build_only=True)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 CPU names")
@pytest.mark.parametrize(
    ("spec", "fix"),
    [
        ("llvm -mcpu=znver99", "; did you mean znver5? Or leave -mcpu out to tune for this "),
        ('{"kind": "llvm", "mcpu": "skylake-avx521"}', "; did you mean skylake-avx512? Or leave"),
        ("llvm -mcpu=apple-m4", "; leave -mcpu out to tune for this host's CPU ("),  # an Arm CPU
    ],
)
def test_a_cpu_llvm_does_not_know_is_refused_not_built_for_a_generic_one(spec, fix, capfd):
    """LLVM logged an "Error", compiled for a generic CPU (SSE2 on x86-64), and the run
    tuned and shipped that, where the user had meant their own CPU or a named one."""
    named = spec.split("mcpu")[1].strip('=": }')
    with pytest.raises(InputError) as info:
        resolve_target(spec, build_only=True)
    said = str(info.value)
    assert said.startswith(f"--target {spec!r} names CPU {named!r}, which LLVM ")
    assert "does not know for x86_64: it would compile for a generic x86_64 CPU" in said
    assert fix in said and "\n" not in said
    assert "Error" not in capfd.readouterr().err  # LLVM's own line is not printed first
    assert resolve_target("llvm -mcpu=x86-64-v3").device_present  # a name LLVM has


def test_native_is_this_hosts_cpu_as_clang_reads_it(capfd):
    """LLVM's Target does not know the word: it compiled for a generic CPU."""
    from tvm.target import codegen

    host = str(codegen.llvm_get_system_cpu())
    resolved = resolve_target("llvm -mcpu=native -num-cores=1")
    assert str(resolved.target.attrs.get("mcpu", "generic")) == host
    assert resolved.target.attrs["num-cores"] == 1 and resolved.device_present
    assert "Error" not in capfd.readouterr().err
    with pytest.raises(InputError, match="-mcpu=native names this host's CPU, not the RPC"):
        resolve_target("llvm -mcpu=native -num-cores=4", remote=lambda: {})


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 feature names")
def test_a_feature_llvm_does_not_know_is_refused_not_ignored(capfd):
    """LLVM wrote "'+AVX2' is not a recognized feature for this target (ignoring feature)" at
    every build, and the run tuned without it."""
    from tvm.target import codegen

    with pytest.raises(InputError) as info:
        resolve_target("llvm -mattr=+AVX2,+fma")
    assert str(info.value) == (
        f"--target 'llvm -mattr=+AVX2,+fma' adds +AVX2, which LLVM {codegen.llvm_version_major()} "
        "does not know for x86_64: it would be ignored; did you mean +avx2? Or leave it out"
    )
    assert capfd.readouterr().err == ""  # nor LLVM's line before it
    assert resolve_target("llvm -mcpu=haswell -mattr=+avx2,+fma,-avx512f").device_present
    # Taken away as LLVM does not spell it, AVX-512 stayed in the code of a CPU that has it.
    with pytest.raises(InputError) as info:
        resolve_target("llvm -mattr=-AVX512F", build_only=True)
    assert "takes away -AVX512F, which LLVM" in str(info.value)
    assert str(info.value).endswith("it would be ignored; did you mean -avx512f? Or leave it out")
    assert capfd.readouterr().err == ""
    resolve_target("llvm -mattr=-retpoline", build_only=True)  # known, on no CPU by default


@pytest.fixture
def on_haswell(monkeypatch):
    """This host's CPU, as LLVM names it, is a Haswell: no AVX-512."""
    from tvm.target import codegen

    monkeypatch.setattr(codegen, "llvm_get_system_cpu", lambda: "haswell")


def test_a_cpu_with_instructions_this_host_lacks_is_only_compiled_for(on_haswell):
    """Code for it died of an illegal instruction in the output check (exit 132, no word)."""
    with pytest.raises(InputError) as info:
        resolve_target("llvm -mcpu=skylake-avx512")
    assert "instructions this host's CPU lacks (" in str(info.value)
    assert "avx512f," in str(info.value)
    assert "add --build-only to only compile for it" in str(info.value)
    resolved = resolve_target("llvm -mcpu=skylake-avx512", build_only=True)
    assert not resolved.device_present and resolved.device_type == "cpu"
    assert resolve_target("llvm -mcpu=haswell").device_present  # this host's own
    assert resolve_target("llvm -mcpu=sandybridge").device_present  # older: runs here


def test_build_only_for_a_cpu_this_host_lacks_ships_unchecked(on_haswell, tmp_path, tiny_model):
    from click.testing import CliRunner

    from tune_orchestrator.cli.commands import main

    out = tmp_path / "run"
    args = ["--build-only", "--target", "llvm -mcpu=skylake-avx512", "--out", str(out)]
    result = CliRunner().invoke(main, [*args, str(tiny_model)])
    assert result.exit_code == 0, result.output
    assert (out / "model.so").is_file()
    assert "UNCHECKED" in result.output and "which this host's CPU lacks" in result.output


def test_a_target_for_another_cpu_or_more_cores_says_whose_schedules_the_run_picks(
    on_haswell, tmp_path, tiny_model, fast_config
):
    """Candidates are measured on this host: a user tuning for a 64-core server from a laptop
    was told nothing, the report's target saying 64 cores."""
    from click.testing import CliRunner

    from cli_args import tune_args
    from tune_orchestrator.cli.commands import main

    target = '{"kind": "llvm", "mcpu": "sandybridge", "num-cores": 4096}'
    args = tune_args(tiny_model, tmp_path / "run", fast_config, "--no-library", target=target)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "the schedules are chosen" in line]
    assert warnings == [
        "warning: the target names CPU sandybridge, but candidates are measured on this host's, "
        "haswell: the schedules are chosen for haswell",
        f"warning: the target gives 4096 cores, but candidates are measured on this host's "
        f"{host_cores()}: the schedules are chosen for {cores_text(host_cores())}",
    ]
    for cores in (0, -3):
        with pytest.raises(InputError, match=f"gives num-cores {cores}; it must be 1 or more"):
            resolve_target(f'{{"kind": "llvm", "num-cores": {cores}}}')
