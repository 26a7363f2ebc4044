"""What this host lends the run: the cores it may use, as many threads for TVM's kernels, and
room in memory and in the temporary folder.

A container's CPU limit (a cgroup's CPU quota, as Kubernetes' limits and `docker --cpus` set)
does not show in CPU affinity: a pod limited to 2 CPUs on a 64-core node sees 64. Counting
those started 64 build workers (each a TVM process of a few hundred MB, which a pod's memory
limit kills) and tuned for 64 cores that the kernel's scheduler throttles to 2; and TVM's
runtime, left to itself, runs each kernel on half the node's CPUs, throttled the same way,
which is what every candidate was timed on.
"""

from __future__ import annotations

import errno
import math
import os
import platform
import shutil
import tempfile
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from tune_orchestrator.budget.units import counted

from .errors import InputError

CGROUP_ROOT = Path("/sys/fs/cgroup")
MEMBERSHIP = Path("/proc/self/cgroup")
SMT_ACTIVE = Path("/sys/devices/system/cpu/smt/active")
# What a build worker and the run's own process hold, with room: a worker held 200-250 MB
# building the example model's candidates; the run's process 0.5 GB, more for large models.
BUILD_WORKER_BYTES = 512 << 20
RUN_PROCESS_BYTES = 2 << 30
# What TVM writes in the temporary folder: candidates' builds (the example model's took 0.6 MB
# at most, all its workers together) and the model's, which holds its weights (resnet50ish's
# 102 MB of weights: 100 MB at most, as `orchestrate estimate` compiled it), with room.
TEMP_BYTES = 32 << 20
TEMP_PER_WEIGHT_BYTE = 2


def host_cores() -> int:
    """Cores this process may run on: its CPU affinity, within its cgroup's CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    limit = cgroup_cpus()
    return max(1, min(cores, limit) if limit else cores)


def cgroup_cpus(root: Path = CGROUP_ROOT, membership: Path = MEMBERSHIP) -> int | None:
    """Whole CPUs the CPU quota of this process's cgroup allows (rounded down: a thread more
    than the quota is throttled in every period; at least 1), the lowest along its hierarchy;
    None where there is no quota or none can be read."""
    found = _limits("cpu", ("cpu", "cpu,cpuacct"), _v2_quota, _v1_quota, root, membership)
    return max(1, math.floor(min(found))) if found else None


def memory_limit(root: Path = CGROUP_ROOT, membership: Path = MEMBERSHIP) -> int | None:
    """Bytes the memory limit of this process's cgroup allows, the lowest along its hierarchy;
    None where there is none or none can be read."""
    found = _limits("memory", ("memory",), _v2_memory, _v1_memory, root, membership)
    return int(min(found)) if found else None


Reader = Callable[[Path], float | None]


def _limits(
    controller: str, mounts: tuple[str, ...], v2: Reader, v1: Reader, root: Path, membership: Path
) -> list[float]:
    """Each limit `v2` (cgroup v2) or `v1` (the controller's own v1 mount, one of `mounts`)
    reads in this process's group and those above it."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return []
    found: list[float] = []
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if not controllers:  # cgroup v2: one hierarchy, the limit's file in each group
            found += [x for d in _levels(root, path) if (x := v2(d)) is not None]
        elif controller in controllers.split(","):
            for mount in (root / controllers, *(root / m for m in mounts)):
                if mount.is_dir():
                    found += [x for d in _levels(mount, path) if (x := v1(d)) is not None]
                    break
    return found


def _levels(mount: Path, path: str) -> list[Path]:
    """The group's folder under `mount` and those above it, as far as the mount shows them
    (in a container the mount's root is the container's own group, whatever `path` says)."""
    parts = [p for p in path.strip().strip("/").split("/") if p]
    folders = [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]
    return [f for f in folders if f.is_dir()]


def _v2_quota(folder: Path) -> float | None:
    """CPUs in cpu.max ("200000 100000": 2.0; "max 100000": None)."""
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
        return int(quota) / int(period) if quota != "max" and int(period) > 0 else None
    except (OSError, ValueError):
        return None


def _v1_quota(folder: Path) -> float | None:
    """CPUs in cpu.cfs_quota_us / cpu.cfs_period_us (a quota of -1: None)."""
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def _v2_memory(folder: Path) -> float | None:
    """Bytes in memory.max ("max": None)."""
    try:
        text = (folder / "memory.max").read_text().strip()
        return None if text == "max" else float(int(text))
    except (OSError, ValueError):
        return None


def _v1_memory(folder: Path) -> float | None:
    """Bytes in memory.limit_in_bytes (v1 writes no limit as a number near 2**63: None)."""
    try:
        limit = int((folder / "memory.limit_in_bytes").read_text())
        return float(limit) if 0 < limit < 2**60 else None
    except (OSError, ValueError):
        return None


def workers_that_fit(cores: int, limit: int | None = None) -> int:
    """Build workers for `cores`, as many as fit the memory limit (`limit`, default the
    cgroup's) beside the run's own process: each is a TVM process, and a pod without a CPU
    limit on a many-core node would otherwise start one per core of the node, past what its
    memory limit lets live."""
    limit = memory_limit() if limit is None else limit
    if limit is None:
        return cores
    return max(1, min(cores, (limit - RUN_PROCESS_BYTES) // BUILD_WORKER_BYTES))


def limit_tvm_threads(env: MutableMapping[str, str] = os.environ) -> int | None:
    """Where this process may use fewer cores (host_cores: a cgroup's quota, a cpuset or
    taskset's affinity, as Kubernetes' static CPU manager gives a pod) than TVM's runtime would
    run kernels on (half the online CPUs on x86-64, all of them elsewhere, whatever the
    affinity), TVM_NUM_THREADS = those cores, for this process and the workers it starts; the
    number set, or None (one set by the user, TVM_NUM_THREADS or OMP_NUM_THREADS, is left
    alone)."""
    if _given_threads(env) is not None:
        return None
    cores = host_cores()
    if cores >= _tvm_default_threads():
        return None
    env["TVM_NUM_THREADS"] = str(cores)
    return cores


def tvm_threads(env: Mapping[str, str] = os.environ) -> int:
    """The threads TVM's runtime runs a kernel on, in this process and its workers."""
    return _given_threads(env) or _tvm_default_threads()


def _given_threads(env: Mapping[str, str]) -> int | None:
    """TVM_NUM_THREADS, else OMP_NUM_THREADS, as TVM's runtime reads them (None: neither)."""
    for name in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        if name in env:
            try:
                return max(1, int(env[name]))
            except ValueError:
                return 1  # TVM reads it with atoi: 0, then at least 1
    return None


def _tvm_default_threads() -> int:
    """TVM's runtime's own count: half the online CPUs on x86-64 (taken for hyper-threads,
    whether the CPU has them or not), all of them elsewhere."""
    online = os.cpu_count() or 1
    return max(1, online // 2 if platform.machine() in ("x86_64", "AMD64") else online)


def idle_cores(smt: Path | None = None) -> str | None:
    """Why TVM's runtime runs kernels on fewer threads than the cores this process may use,
    and what to set, where the user did not choose its count: OMP_NUM_THREADS, which TVM reads
    where TVM_NUM_THREADS is not set (container images often set it to 1 for other
    libraries), or TVM's own count, half the online CPUs on x86-64, where the kernel says the
    CPU has no hyper-threads; else None."""
    if "TVM_NUM_THREADS" in os.environ:
        return None
    threads, cores = tvm_threads(), host_cores()
    if threads >= cores:
        return None
    fix = f"TVM_NUM_THREADS={cores} set for the run and where model.so runs"
    if "OMP_NUM_THREADS" in os.environ:
        return (
            f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} has TVM's runtime run each "
            f"kernel on {threads} of the {cores} cores here (TVM reads it where TVM_NUM_THREADS "
            f"is not set); with {fix}, kernels use them all"
        )
    try:
        active = (smt or SMT_ACTIVE).read_text().strip() == "1"
    except OSError:
        return None  # not known: TVM's halving may be right
    if active:
        return None
    return (
        f"TVM's runtime runs each kernel on {threads} of the {cores} cores here: it halves the "
        f"online CPUs on x86-64, for hyper-threads this CPU does not have; with {fix}, kernels "
        "use them all"
    )


def host_memory() -> int:
    """Bytes of memory this process may use: the host's, within its cgroup's limit."""
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    limit = memory_limit()
    return min(physical, limit) if limit else physical


def check_memory_room(
    model: Any, samples: int, *, memory: int | None = None, where: str = "here"
) -> None:
    """InputError where running the model (model.loading.OnnxModel) on `samples` samples at
    once (the output check's) cannot fit `memory` (default: what this process may use; a GPU's,
    `where` naming it): the samples' inputs, its weights and, as an operator holds its input
    and output at once, twice its largest tensor. A batch typed too large ended the run with
    numpy's MemoryError and a traceback, or with the kernel's OOM killer and no word
    (`orchestrate estimate`, running one sample: TVM's internal error)."""
    memory = host_memory() if memory is None else memory
    inputs, weights = model.input_bytes(), model.weight_bytes()
    held = samples * inputs + weights
    if held <= memory // 8:  # no shape inference for the models that fit many times over
        return
    largest = model.largest_value_bytes()
    if held + 2 * largest <= memory:
        return
    shapes = ", ".join(f"{i.name}: {'x'.join(map(str, i.shape))} {i.dtype}" for i in model.inputs)
    fix = (
        "give smaller dynamic dimensions with --input-shape"
        if model.given_shapes
        else "export the model with smaller inputs (a smaller batch)"
    )
    raise InputError(
        f"running the model needs more than the {_size(memory)} of memory {where}: its inputs take "
        f"{_size(inputs)} a sample ({shapes}), {counted(samples, 'sample')} held at once, its "
        f"largest tensor as it runs takes {_size(largest)} and its weights {_size(weights)}; {fix}"
    )


def _size(count: int) -> str:
    """Bytes in TiB, GiB, MiB or KiB, the largest that is one or more."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):.3g} {unit}"
    return f"{count / 1024:.3g} KiB"


def check_temp_room(weight_bytes: int) -> None:
    """InputError where the temporary folder (TMPDIR, else /tmp) has less room than the run
    writes there: TVM builds every candidate and exports the model in it, and LLVM ends the
    whole process when that disk fills ("LLVM ERROR: IO failure on output stream"), which no
    handler can turn into a line and a resume."""
    short = _temp_shortfall(weight_bytes)
    if short is not None:
        folder, free, need = short
        raise InputError(
            f"the temporary folder {folder} has {_size(free)} free and the run writes up to "
            f"~{_size(need)} there (TVM builds every candidate and the model in it); free some "
            "space there, or set TMPDIR to a folder on a disk with room"
        )


def ensure_temp_room(weight_bytes: int) -> None:
    """check_temp_room's test before each compile of the model in a run: the temporary folder
    may have filled since the run started. The run stops with the full disk's OSError (the
    CLI's line: free space and run the same command again, which resumes) rather than with
    LLVM's abort, whose resume is as after a kill."""
    short = _temp_shortfall(weight_bytes)
    if short is not None:
        folder, free, need = short
        raise OSError(
            errno.ENOSPC,
            f"{_size(free)} free where compiling the model writes ~{_size(need)}",
            folder,
        )


def _temp_shortfall(weight_bytes: int) -> tuple[str, int, int] | None:
    """(the temporary folder, its free bytes, the bytes a run writes there) where it has less
    free than that; None where it has room or cannot be looked at."""
    folder = tempfile.gettempdir()
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None  # Python found it usable; what it holds is not ours to judge
    need = TEMP_BYTES + TEMP_PER_WEIGHT_BYTE * weight_bytes
    return (folder, free, need) if free < need else None
