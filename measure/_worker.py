"""Functions run inside worker processes (TVM's PopenWorker).

They import only what one build or one measurement needs: MetaSchedule's default build
function also imports `tvm.s_tir.tensor_intrin`, ~19 s per fresh worker, which no build of a
MetaSchedule candidate uses (the schedule already holds the tensorized code).
"""

from __future__ import annotations

import collections
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from ._timing import RACED, TimingPlan, timed_repeats
from .base import floating

ArgSpec = tuple[str, tuple[int, ...]]

_MAX_CACHED_WORKLOADS = 8
_arguments_cache: collections.OrderedDict[tuple[str, tuple[ArgSpec, ...]], list[Any]] = (
    collections.OrderedDict()
)


def detached(then: Callable[[], None] | None = None) -> None:
    """Every worker's first job: the signals meant for the run are ignored here (Ctrl-C and a
    closed terminal reach the terminal's whole process group, a service manager's stop every
    process of the service), so that no build or measurement dies of them; the run finishes
    its round and then kills its workers itself. Then `then`, the pool's own initializer."""
    import signal

    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    if then is not None:
        then()


def warm_up() -> None:
    """Import what builds need, once per worker, before the first real job."""
    import tvm.driver  # noqa: F401
    import tvm.s_tir.transform  # noqa: F401


def build(mod: Any, target: Any, out_dir: str) -> tuple[str, float]:
    """Compile `mod` for `target` into a shared library in `out_dir`; (path, seconds)."""
    start = time.perf_counter()
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    # CUDA codegen reads the architecture from the current target: a GPU-less host can build.
    with target:
        rt_mod = tvm_build(mod, target=target)
    fd, path = tempfile.mkstemp(prefix="cand-", suffix=".so", dir=out_dir)
    os.close(fd)
    # TVM's own folders for the objects go there too: a worker that LLVM ends (its disk
    # filled) leaves them in the pool's folder, which the pool removes, not in TMPDIR.
    tempfile.tempdir = out_dir
    # Linking here, in parallel build workers, keeps the measuring process's load cheap.
    rt_mod.export_library(path)
    return path, time.perf_counter() - start


def measure(
    artifact: str,
    device_type: str,
    args: tuple[ArgSpec, ...],
    plan: TimingPlan,
    best_s: float | None,
    cpu_cache_flush: bool,
) -> tuple[list[float], bool, bool]:
    """Seconds per run of the artifact's entry function, one value per repeat (_timing.py's
    rule: cut short when clearly slower than `best_s`); whether every floating-point argument
    is finite afterwards (no NaN or Inf was written); and whether it was cut short."""
    import tvm

    dev = tvm.device(device_type, 0)
    rt_mod = tvm.runtime.load_module(artifact)
    tensors = _arguments(dev, device_type, args)
    dev.sync()
    run_secs, reason = timed_repeats(rt_mod, dev, tensors, plan, best_s, cpu_cache_flush)
    finite = _all_finite(tensors)
    if not finite:  # the next candidate of this workload gets fresh inputs, not these NaNs
        _arguments_cache.pop((device_type, args), None)
    return run_secs, finite, reason == RACED


def _all_finite(tensors: list[Any]) -> bool:
    import numpy as np

    for tensor in tensors:
        if floating(str(tensor.dtype)) and not np.isfinite(tensor.numpy()).all():
            return False
    return True


def _arguments(dev: Any, device_type: str, args: tuple[ArgSpec, ...]) -> list[Any]:
    """Random inputs, allocated once per workload and reused by its candidates."""
    key = (device_type, args)
    if key in _arguments_cache:
        _arguments_cache.move_to_end(key)
        return _arguments_cache[key]
    import numpy as np
    import tvm

    rng = np.random.default_rng(0)
    tensors = []
    for dtype, shape in args:
        if floating(dtype):
            host = rng.standard_normal(shape).astype(dtype)
        else:
            # Zeros are a valid index for any gather / take, so integer inputs stay in bounds.
            host = np.zeros(shape, dtype=dtype)
        tensors.append(tvm.runtime.tensor(host, device=dev))
    _arguments_cache[key] = tensors
    while len(_arguments_cache) > _MAX_CACHED_WORKLOADS:
        _arguments_cache.popitem(last=False)
    return tensors
