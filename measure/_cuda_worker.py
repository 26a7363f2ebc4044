"""Runs inside a CUDA measuring worker (one process, one CUDA context, one GPU).

Inputs are allocated once per workload with cupy and handed to TVM through DLPack; kernels are
timed on the device with CUDA events around `number` launches, after a warm-up, optionally
writing a buffer larger than L2 between repeats (cold cache). Host-side work (loading the
module, allocating) happens outside the timed section; when timed sections must not overlap
with other workers', they take an exclusive file lock per GPU.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
from typing import Any

ArgSpec = tuple[str, tuple[int, ...]]

_MAX_CACHED_WORKLOADS = 8
_arguments: collections.OrderedDict[
    tuple[int, tuple[ArgSpec, ...]], tuple[list[Any], list[Any]]
] = collections.OrderedDict()
_flush: dict[int, Any] = {}


def warm_up(device_index: int) -> None:
    """Create this worker's CUDA context on its GPU before the first candidate."""
    import cupy

    with cupy.cuda.Device(device_index):
        cupy.zeros(1).sum()
    import tvm  # noqa: F401


def measure(
    artifact: str,
    device_index: int,
    args: tuple[ArgSpec, ...],
    number: int,
    repeat: int,
    min_repeat_ms: float,
    flush_l2: bool,
    timing_lock: str | None,
) -> tuple[list[float], bool]:
    """Seconds per launch for each repeat, and whether all float arguments stayed finite."""
    import cupy
    import tvm

    with cupy.cuda.Device(device_index):
        module = tvm.runtime.load_module(artifact)
        kernel = module[module.entry_name]
        arrays, tensors = _inputs(device_index, args)
        kernel(*tensors)  # warm-up: loads (and JIT-compiles) the device code
        cupy.cuda.Device(device_index).synchronize()
        stream = cupy.cuda.Stream.null  # TVM launches on the default stream
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        with _exclusive(timing_lock):
            number = max(number, _launches_for(kernel, tensors, stream, start, end, min_repeat_ms))
            run_secs = []
            for r in range(repeat):
                if flush_l2:  # write twice the L2 so the next repeat starts cold
                    _flush_buffer(device_index).fill(r % 251)
                start.record(stream)
                for _ in range(number):
                    kernel(*tensors)
                end.record(stream)
                end.synchronize()
                run_secs.append(cupy.cuda.get_elapsed_time(start, end) / 1e3 / number)
        finite = all(bool(cupy.isfinite(a).all()) for a in arrays if a.dtype.kind == "f")
    return run_secs, finite


def _launches_for(
    kernel: Any, tensors: list[Any], stream: Any, start: Any, end: Any, min_ms: float
) -> int:
    """Launches per repeat so that a repeat lasts at least `min_ms` (timed once)."""
    import cupy

    start.record(stream)
    kernel(*tensors)
    end.record(stream)
    end.synchronize()
    once_ms = max(cupy.cuda.get_elapsed_time(start, end), 1e-4)
    return max(1, int(min_ms / once_ms) + 1) if min_ms > 0 else 1


def _inputs(device_index: int, args: tuple[ArgSpec, ...]) -> tuple[list[Any], list[Any]]:
    key = (device_index, args)
    if key in _arguments:
        _arguments.move_to_end(key)
        return _arguments[key]
    import cupy

    arrays = []
    for dtype, shape in args:
        if dtype.startswith("float"):
            arrays.append(
                cupy.random.default_rng(0).standard_normal(shape, dtype="float32").astype(dtype)
            )
        else:  # zeros are a valid index for any gather / take
            arrays.append(cupy.zeros(shape, dtype=dtype))
    tensors = [_to_tvm(a) for a in arrays]
    _arguments[key] = (arrays, tensors)
    while len(_arguments) > _MAX_CACHED_WORKLOADS:
        _arguments.popitem(last=False)
    return arrays, tensors


def _to_tvm(array: Any) -> Any:
    """Zero-copy hand-over through DLPack."""
    import tvm

    from_dlpack = getattr(tvm.runtime, "from_dlpack", None)
    if from_dlpack is None:
        import tvm_ffi

        from_dlpack = tvm_ffi.from_dlpack
    return from_dlpack(array)


def _flush_buffer(device_index: int) -> Any:
    import cupy

    if device_index not in _flush:
        l2 = cupy.cuda.runtime.getDeviceProperties(device_index)["l2CacheSize"]
        _flush[device_index] = cupy.empty(2 * max(l2, 1 << 20), dtype=cupy.uint8)
    return _flush[device_index]


@contextlib.contextmanager
def _exclusive(lock_path: str | None):
    if lock_path is None:
        yield
        return
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
