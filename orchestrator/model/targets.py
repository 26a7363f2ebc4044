"""Compilation targets: `auto`, `llvm`, `cuda`, a TVM tag, or a JSON dict."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tune_orchestrator.measure.base import short_error

from ..errors import InputError
from ..host import host_cores

FORMS = (
    'auto, llvm, cuda, a TVM tag such as nvidia/nvidia-h100, or a JSON dict like {"kind": "llvm"}'
)
_DEVICE_TYPES = {"llvm": "cpu", "cuda": "cuda"}


@dataclasses.dataclass(frozen=True, eq=False)
class ResolvedTarget:
    """A TVM target and where its candidates are measured."""

    target: Any  # tvm.target.Target
    spec: str  # what the user asked for
    device_type: str  # "cpu" or "cuda"
    device_present: bool  # False: can build, cannot measure
    device_name: str
    simulated: bool = False  # timings come from a simulated device (--simulate)

    @property
    def kind(self) -> str:
        return self.target.kind.name

    @property
    def devices(self) -> int:
        """GPUs the run holds (device-hours accrue on these)."""
        return 1 if self.device_type == "cuda" else 0

    def to_json(self) -> dict[str, Any]:
        return json.loads(str(self.target))

    def describe(self) -> str:
        if self.device_type == "cpu":
            cores = self.target.attrs.get("num-cores")
            mcpu = self.target.attrs.get("mcpu")
            extras = ", ".join(
                x for x in (str(mcpu) if mcpu else "", cores_text(int(cores)) if cores else "") if x
            )
            return f"llvm ({extras})" if extras else "llvm"
        name = f"SIMULATED {self.device_name}" if self.simulated else self.device_name
        return f"cuda {self.target.attrs.get('arch', '')} ({name})".strip()


def cores_text(cores: int) -> str:
    """The count with its noun: 1 core, 16 cores."""
    return f"{cores} core" if cores == 1 else f"{cores} cores"


def visible_gpus(limit: int = 64) -> list[int]:
    """Indices of the CUDA devices this process can see."""
    import tvm

    found = []
    try:
        for index in range(limit):
            if not tvm.cuda(index).exist:
                break
            found.append(index)
    except Exception:  # no CUDA runtime in this TVM build or no driver
        return []
    return found


def gpu_visible() -> bool:
    import tvm

    try:
        return bool(tvm.cuda(0).exist)
    except Exception:  # no CUDA runtime in this TVM build or no driver
        return False


def resolve_target(
    spec: str,
    *,
    build_only: bool = False,
    remote: Callable[[], Mapping[str, Any]] | None = None,
    simulate: bool = False,
) -> ResolvedTarget:
    """Turn the user's target string into a TVM target; InputError with the accepted forms.

    `remote` is given when an RPC fleet measures: it returns the attributes of a server's
    first GPU (measure.rpc.remote_cuda), read for `cuda`; a CUDA target is then accepted
    without a GPU here, and the tuned model is not run here (device_present is False).
    `simulate`: a simulated GPU stands in for the target's (default nvidia/nvidia-h100)."""
    if simulate:
        return _simulated(spec)
    import tvm

    spec = (spec or "auto").strip()
    has_gpu = gpu_visible()
    fleet_gpu: Mapping[str, Any] = {}
    if spec == "cuda" and remote is not None:
        fleet_gpu = _remote_gpu(remote)
        target = _cuda_target(fleet_gpu)
    else:
        target = _target_of(spec, has_gpu=has_gpu, build_only=build_only)
    spec_kind = target.kind.name
    if spec_kind not in _DEVICE_TYPES:
        raise InputError(
            f"--target {spec!r} compiles for {spec_kind}; tune-orchestrator tunes llvm (CPU) "
            "and cuda (NVIDIA GPU) targets"
        )
    if _DEVICE_TYPES[spec_kind] == "cpu":
        return _cpu(target, spec, build_only=build_only, fleet=remote is not None)
    if target.host is None:
        target = tvm.target.Target(target, host={"kind": "llvm"})
    _check_arch(target, spec)
    target = _with_block_limits(target)
    if not has_gpu and not build_only and remote is None:
        raise InputError(_no_gpu_message(spec, build_only))
    if remote is not None:
        # Measured on the fleet, whose GPUs this host's may not match: nothing runs here.
        name = str(fleet_gpu.get("device_name") or "a GPU of the RPC fleet")
        return ResolvedTarget(target, spec, "cuda", False, name)
    here = _compute_version_here() if has_gpu else ""
    if here and not _runs_on(str(target.attrs.get("arch", "")), here):
        if not build_only:
            raise InputError(_cannot_run_message(target, spec, here))
        name = f"no {target.attrs['arch']} GPU on this host"
        return ResolvedTarget(target, spec, "cuda", False, name)
    return ResolvedTarget(target, spec, "cuda", has_gpu, _device_name("cuda", has_gpu))


# The compute capabilities of NVIDIA's GPUs, Fermi to Blackwell, as sm_ names them.
_NVIDIA_ARCHS = (
    "20", "21", "30", "32", "35", "37", "50", "52", "53", "60", "61", "62", "70", "72",
    "75", "80", "86", "87", "88", "89", "90", "100", "101", "103", "110", "120", "121",
)  # fmt: skip
_WRITE_ARCH = "write sm_ and the compute capability without its dot, e.g. sm_90 for an H100 (9.0)"


def _check_arch(target: Any, spec: str) -> None:
    """InputError where a CUDA target's architecture is not of the form TVM reads (`sm_90`,
    `sm_90a`): `-arch=sm_9` reached the first build as TVM's ValueError, an internal error;
    or is no NVIDIA GPU's (`sm_909`) and no nvcc here knows it: the run shipped kernels no GPU
    could load, unchecked, with exit 0."""
    import difflib

    from ..deploy.kernels import nvcc_archs

    arch = str(target.attrs.get("arch", ""))
    number = re.fullmatch(r"sm_(\d{2,3})[af]?", arch)
    if arch and not number:
        raise InputError(
            f"--target {spec!r} names GPU architecture {arch!r}, which TVM cannot read; "
            f"{_WRITE_ARCH}"
        )
    if not number or number.group(1) in _NVIDIA_ARCHS or number.group(1) in nvcc_archs():
        return
    given = number.group(1)
    major = [a for a in _NVIDIA_ARCHS if a[:-1] == given[:-1]]  # sm_91: sm_90
    close = [min(major, key=lambda a: abs(int(a) - int(given)))] if major else []
    typed = difflib.get_close_matches(given, _NVIDIA_ARCHS, n=1)
    close = close or [a for a in typed if given.startswith(a)]  # sm_909: sm_90
    raise InputError(
        f"--target {spec!r} names GPU architecture {arch}, which no NVIDIA GPU has (sm_20 to "
        f"sm_121, as of CUDA 13); " + (f"did you mean sm_{close[0]}?" if close else _WRITE_ARCH)
    )


# What a thread block of an NVIDIA GPU may hold, as TVM's nvidia/* tags give it (Fermi's,
# sm_2x, half the registers). MetaSchedule's CUDA rules cannot schedule without these, and a
# target written `cuda -arch=sm_90` or {"kind": "cuda", "arch": "sm_90"} names none: every
# task's search failed ("missing attribute `max_threads_per_block`"), nothing was tuned.
_BLOCK_LIMITS = {
    "max_threads_per_block": 1024,
    "max_shared_memory_per_block": 49152,  # without the opt-in to more
    "registers_per_block": 65536,
    "thread_warp_size": 32,
}


def _with_block_limits(target: Any) -> Any:
    """A CUDA target with the thread block limits it does not give (_BLOCK_LIMITS)."""

    limits = dict(_BLOCK_LIMITS)
    if str(target.attrs.get("arch", "")).startswith("sm_2"):
        limits["registers_per_block"] = 32768
    missing = {k: v for k, v in limits.items() if k not in target.attrs}
    return _with_attrs(target, **missing) if missing else target


def _with_attrs(target: Any, **changes: Any) -> Any:
    """`target` (its host too) with the attributes `changes` names set, or removed for None."""
    import tvm

    config = json.loads(str(target))
    config.update(changes)
    return tvm.target.Target({k: v for k, v in config.items() if v is not None})


def _runs_on(arch: str, here: str) -> bool:
    """Whether code for `arch` ("sm_90a") runs on a GPU of compute capability `here` ("9.0").
    TVM compiles a kernel for its architecture alone (a cubin, no PTX to compile again for
    another GPU), which runs on a GPU of the same major compute capability and no lower minor
    one (`a`: on that one alone); an arch not of that form is left to TVM."""
    match = re.fullmatch(r"sm_(\d+)(\d)([af]?)", arch)
    if not match:
        return True
    major, minor, suffix = int(match[1]), int(match[2]), match[3]
    here_major, here_minor = (int(x) for x in here.split("."))
    return major == here_major and (minor == here_minor or (minor < here_minor and suffix != "a"))


def _cannot_run_message(target: Any, spec: str, here: str) -> str:
    """Every candidate would fail on this GPU: refused, or only compiled for (--build-only)."""
    return (
        f"--target {spec!r} compiles for {target.attrs['arch']}, whose kernels the GPU here "
        f"({_device_name('cuda', True)}, sm_{here.replace('.', '')}) cannot run; leave --target "
        "out to tune for this GPU, tune on such a GPU (or through --rpc servers that have one), "
        "or add --build-only to only compile for it"
    )


def _compute_version_here() -> str:
    """This host's first GPU's compute capability, "9.0" ("" where it cannot be read)."""
    import tvm

    try:
        return str(tvm.cuda(0).compute_version)
    except Exception:  # no CUDA runtime in this TVM build or no driver
        return ""


def _cpu(target: Any, spec: str, *, build_only: bool, fleet: bool) -> ResolvedTarget:
    """An llvm target, run here unless its code needs instructions this host's CPU lacks:
    such code would die here of an illegal instruction, so it is only compiled for."""
    target = _for_this_cpu(target, spec, fleet=fleet)
    target = _native(target, spec, fleet=fleet)
    _check_cpu(target, spec)
    _check_features(target, spec)
    lacks = lacking_instructions(target)
    if not lacks:
        return ResolvedTarget(target, spec, "cpu", True, _device_name("cpu", True))
    if not build_only and not fleet:
        raise InputError(
            f"--target {spec!r} makes code with instructions this host's CPU lacks "
            f"({', '.join(lacks)}), which would crash here; tune on such a CPU (or through "
            "--rpc servers that have one), or add --build-only to only compile for it"
        )
    return ResolvedTarget(target, spec, "cpu", False, f"a CPU with {', '.join(lacks)}")


def _native(target: Any, spec: str, *, fleet: bool) -> Any:
    """`-mcpu=native`, as clang and gcc read it: this host's CPU (LLVM's Target does not know
    the word, and compiled for a generic CPU); on an RPC fleet, whose CPUs this host cannot
    tell, refused."""

    if str(target.attrs.get("mcpu") or "") != "native":
        return target
    if fleet:
        raise InputError(
            f"--target {spec!r}: -mcpu=native names this host's CPU, not the RPC servers'; "
            "name theirs (such as -mcpu=znver4), or leave -mcpu out"
        )
    return _with_attrs(target, mcpu=_host_cpu().get("mcpu"))


def _check_cpu(target: Any, spec: str) -> None:
    """InputError where an llvm target names a CPU LLVM does not know for its architecture
    (a typo, an Arm CPU with the host's x86 triple): LLVM logged an "Error",
    compiled for a generic CPU, without the vector instructions of the one meant, and the run
    went on, tuning and shipping that."""
    import difflib

    import tvm
    from tvm.target import codegen

    named = str(target.attrs.get("mcpu") or "")
    if not named:
        return
    triple = str(target.attrs.get("mtriple") or "")
    plain = {"kind": "llvm", **({"mtriple": triple} if triple else {})}  # no mcpu: no log
    known = {str(cpu) for cpu in codegen.llvm_get_cpu_archlist(tvm.target.Target(plain))}
    if not known or named in known:
        return
    host = str(codegen.llvm_get_system_cpu())
    fix = f"leave -mcpu out to tune for this host's CPU ({host})"
    close = difflib.get_close_matches(named, sorted(known), n=1)
    if close:
        fix = f"did you mean {close[0]}? Or {fix}"
    llvm, arch = _unknown_to(target)
    raise InputError(
        f"--target {spec!r} names CPU {named!r}, which {llvm}: it would compile for a "
        f"generic {arch} CPU; {fix}"
    )


def _check_features(target: Any, spec: str) -> None:
    """InputError where an llvm target's `mattr` adds or takes away a feature LLVM does not
    know (`+AVX2`, `+avx512fx`, `-AVX512F`): LLVM wrote "not a recognized feature (ignoring
    feature)" at every build and the run tuned without it, or with what was to be left out."""
    import difflib

    import tvm
    from tvm.target import codegen

    mattr = [str(a) for a in target.attrs.get("mattr") or [] if str(a)[:1] in ("+", "-")]
    if not mattr:
        return
    # A feature is known where the target given it has it: taken away, it is tried added.
    with _llvm_quiet():  # LLVM writes its own line for each unknown one, to fd 2
        added = _with_attrs(target, mattr=["+" + a[1:] for a in mattr])
        has = {str(f) for f in codegen.llvm_get_cpu_features(added)}
    unknown = [a for a in mattr if a[1:] not in has]
    if not unknown:
        return
    host = {"kind": "llvm", "mcpu": str(codegen.llvm_get_system_cpu())}
    names = sorted(has | {str(f) for f in codegen.llvm_get_cpu_features(tvm.target.Target(host))})
    close = difflib.get_close_matches(unknown[0][1:].lower(), names, n=1)
    sign = "adds" if unknown[0][0] == "+" else "takes away"
    fix = f"did you mean {unknown[0][0]}{close[0]}? Or leave it out" if close else "leave it out"
    llvm, _ = _unknown_to(target)
    raise InputError(
        f"--target {spec!r} {sign} {', '.join(unknown)}, which {llvm}: it would be ignored; {fix}"
    )


def _unknown_to(target: Any) -> tuple[str, str]:
    """("LLVM 22 does not know for x86_64", "x86_64") of an llvm target's architecture."""
    from tvm.target import codegen

    arch = _arch(str(target.attrs.get("mtriple") or codegen.llvm_get_system_triple()))
    return f"LLVM {codegen.llvm_version_major()} does not know for {arch}", arch


@contextlib.contextmanager
def _llvm_quiet() -> Iterator[None]:
    """File descriptor 2 to /dev/null, where LLVM's C++ writes its warnings."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# LLVM's names of instruction-set extensions (x86, then Arm), as opposed to its tuning flags
# (fast-*, slow-*, prefer-*, ...), which change no instruction.
_ISA_PREFIXES = (
    "sse", "ssse", "avx", "amx", "fma", "f16c", "bmi", "popcnt", "lzcnt", "movbe", "adx", "aes",
    "vaes", "pclmul", "vpclmul", "gfni", "sha", "xop", "tbm",
    "neon", "sve", "sme", "fullfp16", "fp16fml", "dotprod", "i8mm", "bf16",
)  # fmt: skip


def more_cores_than_here(target: Any) -> int | None:
    """This host's cores, where an llvm target gives more (None where it gives these or
    fewer): the search sizes its parallel loops by the target's count, the timings run here."""
    cores = host_cores()
    return cores if int(target.attrs.get("num-cores") or 0) > cores else None


def measured_on_other_cpu(target: Any) -> str | None:
    """This host's CPU, where an llvm target names another one (None where it names none,
    or this one)."""
    from tvm.target import codegen

    named = str(target.attrs.get("mcpu") or "")
    host = str(codegen.llvm_get_system_cpu())
    return host if named and named != host else None


def lacking_instructions(target: Any) -> list[str]:
    """The instruction-set extensions an llvm target's code may use that this host's CPU
    lacks, by LLVM's models of the two CPUs ([] where LLVM does not know this host's)."""
    import tvm
    from tvm.target import codegen

    host_cpu = str(codegen.llvm_get_system_cpu())
    if not host_cpu or host_cpu == "generic":
        return []
    host = set(codegen.llvm_get_cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": host_cpu})))
    wanted = set(codegen.llvm_get_cpu_features(target))
    return sorted(f for f in wanted - host if f.startswith(_ISA_PREFIXES))


def _target_of(spec: str, *, has_gpu: bool, build_only: bool) -> Any:
    """The TVM target a spec names on this host (not a fleet's `cuda`)."""
    if spec == "auto":
        return _cuda_from_device() if has_gpu else _llvm_for_host()
    if spec in ("llvm", "cpu"):
        return _llvm_for_host()
    if spec == "cuda":
        if not has_gpu:
            raise InputError(_no_gpu_message(spec, build_only))
        return _cuda_from_device()
    if spec.startswith("{"):
        try:
            config = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"--target {spec!r} is not valid JSON ({exc.msg}); use {FORMS}"
            ) from None
        return _make(config, spec)
    return _make(spec, spec)


def _simulated(spec: str) -> ResolvedTarget:
    """A CUDA target whose timings a simulated GPU gives (orchestrator/simulate.py)."""
    from ..simulate import DEVICE_NAME

    spec = (spec or "auto").strip()
    name = "nvidia/nvidia-h100" if spec == "auto" else spec
    if name == "cuda":
        raise InputError(
            "--simulate cannot tell which GPU to stand in for from --target cuda; name it "
            'with a tag such as nvidia/nvidia-h100 or a JSON dict with "arch"'
        )
    resolved = resolve_target(name, build_only=True)
    if resolved.device_type != "cuda":
        raise InputError(
            f"--simulate stands in for an NVIDIA GPU, but --target {spec!r} is a CPU; give a "
            "CUDA target such as nvidia/nvidia-h100 (or leave --target out)"
        )
    # The landscape stands for an H100; other GPUs are named by their tag (and need --price).
    device = DEVICE_NAME if name == "nvidia/nvidia-h100" else f"GPU of {name}"
    return ResolvedTarget(resolved.target, spec, "cuda", False, device, simulated=True)


def _remote_gpu(remote: Callable[[], Mapping[str, Any]]) -> Mapping[str, Any]:
    """The fleet's GPU for `--target cuda --rpc`, or InputError naming the fix."""
    try:
        gpu = remote()
    except ValueError as exc:
        raise InputError(
            f"--target cuda with --rpc reads the GPU architecture from a server, but {exc}; "
            "name the GPU with a tag such as --target nvidia/nvidia-h100 instead"
        ) from None
    if not gpu.get("exist"):
        raise InputError(
            "--target cuda with --rpc: the servers under --rpc-key have no CUDA GPU to read "
            "the architecture from; start them on GPU hosts, or name the GPU with a tag such as "
            "--target nvidia/nvidia-h100"
        )
    return gpu


def _make(config: Any, spec: str) -> Any:
    import tvm

    try:
        return tvm.target.Target(config)
    except Exception:
        pass
    classic = _from_classic(spec) if isinstance(config, str) else None
    if classic is None:
        raise InputError(f"unknown target {spec!r}{_tag_hint(spec)}; use {FORMS}")
    try:  # the form TVM read before 0.27, which its users still type
        return tvm.target.Target(classic)
    except Exception as exc:
        raise InputError(
            f"--target {spec!r}: TVM reads targets as JSON dicts now, and as one, "
            f"{json.dumps(classic)}, it is refused ({short_error(exc)}); use {FORMS}"
        ) from None


def _tag_hint(spec: str) -> str:
    """The hint `(did you mean nvidia/nvidia-h100?)`, with its leading space, where `spec`
    reads as a TVM tag typed short or misspelt (`nvidia/h100`, `a100`), else ""."""
    import difflib

    import tvm

    if not spec or " " in spec or spec.startswith("{"):
        return ""
    tags = sorted(str(tag) for tag in tvm.target.list_tags())

    def key(name: str) -> str:  # the model's letters and digits: rtx4090 in geforce-rtx-4090
        return re.sub(r"[^a-z0-9]", "", name.rsplit("/", 1)[-1].lower())

    named = [t for t in tags if key(spec) and key(spec) in key(t)]
    close = named if 0 < len(named) <= 3 else difflib.get_close_matches(spec, tags, 1, 0.9)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def _from_classic(spec: str) -> dict[str, Any] | None:
    """`llvm -mcpu=skylake -mattr=+avx2,+fma -num-cores=4` as a JSON dict (lists for the
    comma-joined options, numbers for whole numbers); None for anything else."""
    kind, *options = spec.split()
    if not options or not all(o.startswith("-") and "=" in o for o in options):
        return None
    config: dict[str, Any] = {"kind": kind}
    for option in options:
        key, _, value = option.lstrip("-").partition("=")
        if key in ("mattr", "keys", "libs"):
            config[key] = value.split(",")
        else:
            config[key] = int(value) if value.isdigit() else value
    return config


_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def _arch(triple: str) -> str:
    arch = triple.split("-")[0]
    return _ARCH_ALIASES.get(arch, arch)


def host_arch() -> str:
    """This host's CPU architecture by LLVM's name (x86_64, aarch64)."""
    return _arch(platform.machine().lower())


def _for_this_cpu(target: Any, spec: str, *, fleet: bool) -> Any:
    """An llvm target as this host builds and measures it: refused where it names another
    CPU architecture (its objects would not link here), with this host's cores where it does
    not say (the search sizes its parallel loops by them); on an RPC fleet, whose cores this
    host cannot count, the user says."""
    import tvm

    triple = str(target.attrs.get("mtriple") or "")
    host = str(tvm.target.codegen.llvm_get_system_triple())
    if triple and _arch(triple) != _arch(host):
        raise InputError(
            f"--target {spec!r} compiles for {triple}, but this host is {_arch(host)}: "
            "tune-orchestrator builds every candidate here and does not cross-compile; run "
            f"it on a machine of that architecture ({_arch(triple)})"
        )
    if "num-cores" in target.attrs:
        cores = target.attrs["num-cores"]
        if int(cores) < 1:
            raise InputError(
                f"--target {spec!r} gives num-cores {cores}; it must be 1 or more (leave it "
                f"out for this host's {host_cores()})"
            )
        return target
    if fleet:
        raise InputError(
            f"--target {spec!r} does not say how many cores the RPC servers' CPUs have, which "
            'the search needs; add "num-cores": N to the JSON target'
        )
    return _with_attrs(target, **{"num-cores": host_cores()})


def _llvm_for_host() -> Any:
    import tvm

    return tvm.target.Target({"kind": "llvm", "num-cores": host_cores(), **_host_cpu()})


def _host_cpu() -> dict[str, str]:
    """{"mcpu": this host's CPU as LLVM names it}, or {} where LLVM knows it only as generic."""
    import tvm

    cpu = str(tvm.target.codegen.llvm_get_system_cpu() or "")
    return {"mcpu": cpu} if cpu and cpu != "generic" else {}


def _cuda_from_device() -> Any:
    import tvm

    dev = tvm.cuda(0)
    return _cuda_target({name: getattr(dev, name) for name in _GPU_ATTRIBUTES})


_GPU_ATTRIBUTES = (
    "compute_version",
    "max_threads_per_block",
    "max_shared_memory_per_block",
    "warp_size",
)


def _cuda_target(gpu: Mapping[str, Any]) -> Any:
    """A CUDA target for a GPU described by tvm.cuda(i)'s attributes (here or on a server)."""
    import tvm

    config = {
        "kind": "cuda",
        "arch": "sm_" + str(gpu["compute_version"]).replace(".", ""),
        "max_threads_per_block": int(gpu["max_threads_per_block"]),
        "max_shared_memory_per_block": int(gpu["max_shared_memory_per_block"]),
        "thread_warp_size": int(gpu["warp_size"]),
        "registers_per_block": 65536,
    }
    return tvm.target.Target(config, host={"kind": "llvm"})


def _device_name(device_type: str, present: bool) -> str:
    if device_type == "cpu":
        import platform

        return platform.processor() or platform.machine() or "cpu"
    if not present:
        return "no GPU on this host"
    import tvm

    return str(tvm.cuda(0).device_name)


def _no_gpu_message(spec: str, build_only: bool) -> str:
    if build_only:
        return (
            f"--target {spec!r} with no GPU visible cannot tell the GPU architecture; "
            'name it with a tag such as nvidia/nvidia-h100 or a JSON dict with "arch"'
        )
    return (
        f"--target {spec!r} needs an NVIDIA GPU to measure on, and none is visible; "
        "use --target llvm to tune for this CPU, or add --build-only to only compile for a GPU"
    )
