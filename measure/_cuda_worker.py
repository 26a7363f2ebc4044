"""Runs inside a CUDA measuring worker (one process, one CUDA context, one GPU).

A job loads the candidate's module, allocates its inputs once per workload (cupy, handed to
TVM through DLPack) and warms up: the first launch loads the device code and writes the
outputs, which are checked for NaN / Inf right there, on the host (a candidate that writes
them is not timed at all); a second launch, timed, sizes a repeat (_timing.TimingPlan.
launches), and the repeat's back-to-back launches are captured in a CUDA graph, so that a
kernel of a few microseconds is timed without the host's launch overhead (plain launches if
capture fails, or one launch per repeat when a kernel fills one alone). Then the job takes
the GPU's timed window alone and times repeats with CUDA events until the rule in _timing.py
stops it. Its device work outside the window holds the window shared, so it never lands inside
another worker's timing (_window.py); all of it comes before the timing, in one hold, so a job
never waits for the window again after its timing (a waiting timer closes the window to shared
holders). Everything runs on this worker's own stream.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from ._pool import RESTART
from ._timing import RACED, TimingPlan, step, verdict
from ._window import DeviceWindow, WindowBusy
from .base import floating, short_error

ArgSpec = tuple[str, tuple[int, ...]]

_MAX_CACHED_WORKLOADS = 8
# Outputs up to this size are checked for NaN / Inf on the host: a copy costs well under a
# millisecond, where cupy compiles its check kernels in each new process (seconds, and tens of
# seconds on a host busy building: 278 ms a candidate on the H100 run of 2026-11-27).
_HOST_CHECK_BYTES = 32 << 20
_MAX_LAUNCHES = 10_000  # per repeat: bounds a graph's size for the fastest kernels
_arguments: collections.OrderedDict[
    tuple[int, tuple[ArgSpec, ...]], tuple[list[Any], list[Any]]
] = collections.OrderedDict()
_flush: dict[int, Any] = {}
_streams: dict[int, Any] = {}


def warm_up(device_index: int) -> None:
    """Create this worker's CUDA context on its GPU before the first candidate (an allocation;
    nothing that cupy would compile), so that no candidate's steps pay for it."""
    import cupy

    with cupy.cuda.Device(device_index):
        cupy.zeros(1, dtype="float32")
    import tvm  # noqa: F401
    import tvm_ffi  # noqa: F401


def measure(
    artifact: str,
    device_index: int,
    args: tuple[ArgSpec, ...],
    plan: TimingPlan,
    best_s: float | None,
    window_path: str | None,
    wait_s: float,
) -> dict[str, Any]:
    """Time one candidate; a dict with run_secs (seconds per launch, one per repeat), finite,
    raced, steps (seconds: load, allocate, warm_up, wait, timed, check) and window (when the
    timed section held the GPU, time.monotonic()); or error; or busy (never got the window).
    `window_path` None: time without the window (overlapping timings)."""
    import cupy

    steps: dict[str, float] = {}
    window = DeviceWindow(window_path) if window_path else None
    until = time.monotonic() + wait_s  # every wait for the window ends by then
    result: dict[str, Any] = {"steps": steps}
    try:
        with cupy.cuda.Device(device_index):
            stream = _stream(device_index)
            first_s, ready = _ready(
                artifact, device_index, args, plan, stream, window, until, steps
            )
            if ready is None:  # wrong already: not worth a timing
                result.update(run_secs=[first_s], finite=False, raced=False, window=None)
                return result
            launch, launches, replay, mode = ready
            with stream, _held(window, until, steps) as held:
                if not plan.flush_l2:
                    launch(1)  # the caches hold this candidate's data, as in every repeat
                samples, reason = _time(replay, launches, stream, plan, best_s, device_index)
        result.update(
            run_secs=samples,
            finite=True,
            raced=reason == RACED,
            window=held,
            launches=launches,
            replay=mode,
        )
    except WindowBusy as exc:
        result.update(busy=True, error=str(exc))
    except Exception as exc:  # this candidate's failure: data; a broken context: a new worker
        result.update(error=f"measurement failed: {short_error(exc)}")
        result[RESTART] = not _context_alive(device_index)
    finally:
        steps["wait"] = window.waited_s if window else 0.0
    return result


def _ready(
    artifact: str,
    device_index: int,
    args: tuple[ArgSpec, ...],
    plan: TimingPlan,
    stream: Any,
    window: DeviceWindow | None,
    until: float,
    steps: dict[str, float],
) -> tuple[float, Any]:
    """Load the candidate, draw its inputs, launch it once and check its outputs, all out of
    other workers' timed windows: (the first launch's seconds, what times it), the second None
    where the outputs are not finite."""
    import tvm

    with step(steps, "load"):
        module = tvm.runtime.load_module(artifact)
        kernel = module[module.entry_name]
    with stream, _quiet(window, until):
        with step(steps, "allocate"):
            arrays, tensors = _inputs(device_index, args)
        with step(steps, "warm_up"):
            first_s = _first_launch(kernel, tensors, device_index, stream)
        with step(steps, "check"):
            finite = _finite(arrays, [dtype for dtype, _ in args])
        if not finite:
            _arguments.pop((device_index, args), None)  # the next one gets fresh inputs
            return first_s, None
        with step(steps, "warm_up"):
            return first_s, _prepare(kernel, tensors, device_index, stream, plan)


def _quiet(window: DeviceWindow | None, until: float) -> Any:
    """Device work that must stay out of other workers' timed windows."""
    if window is None:
        return contextlib.nullcontext()
    return window.shared(until - time.monotonic())


@contextlib.contextmanager
def _held(window: DeviceWindow | None, until: float, steps: dict[str, float]) -> Iterator[list]:
    """Hold the timed window (or, without one, just stamp the timed section); yields a list
    that holds [acquired, released] afterwards."""
    held: list[float] = []
    with window.timed(until - time.monotonic()) if window else contextlib.nullcontext():
        held.append(time.monotonic())
        try:
            yield held
        finally:
            held.append(time.monotonic())
    steps["timed"] = held[1] - held[0]


def _launcher(
    kernel: Any, tensors: list[Any], device_index: int, stream: Any
) -> Callable[[int], None]:
    """launch(n): n back-to-back launches of the candidate on the worker's stream."""

    def launch(n: int) -> None:
        import tvm_ffi

        with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", device_index), stream.ptr):
            for _ in range(n):
                kernel(*tensors)

    return launch


def _first_launch(kernel: Any, tensors: list[Any], device_index: int, stream: Any) -> float:
    """The first launch, which loads the device code and writes the outputs; its seconds
    (load included: a first guess of the latency, for a candidate never timed)."""
    started = time.monotonic()
    _launcher(kernel, tensors, device_index, stream)(1)
    stream.synchronize()
    return time.monotonic() - started


def _finite(arrays: list[Any], dtypes: list[str]) -> bool:
    """No NaN or Inf in any floating-point array (the outputs, after a launch): on the host,
    or on the GPU for arrays over _HOST_CHECK_BYTES (flat views: one kernel for every shape)."""
    import cupy
    import numpy as np

    def finite(a: Any, dtype: str) -> bool:
        xp, a = (np, a.get()) if a.nbytes <= _HOST_CHECK_BYTES else (cupy, a.ravel())
        return bool(finite_values(xp, a, dtype).all())  # .get(): a blocking copy

    pairs = zip(arrays, dtypes, strict=True)
    return all(finite(a, dtype) for a, dtype in pairs if floating(dtype))


def finite_values(xp: Any, a: Any, dtype: str) -> Any:
    """Which values of `a` (numpy or cupy, `xp`) are finite; bfloat16 is held as its 16-bit
    patterns, in which Inf and NaN are those with every exponent bit set."""
    if dtype == "bfloat16":
        return (a & 0x7F80) != 0x7F80
    return xp.isfinite(a)


def _prepare(
    kernel: Any, tensors: list[Any], device_index: int, stream: Any, plan: TimingPlan
) -> tuple[Callable[[int], None], int, Callable[[], None], str]:
    """After the first launch: size a repeat, capture it; (launch(n) on the stream, launches
    per repeat, a function launching one repeat, "graph", "single" or "loop")."""
    import cupy

    launch = _launcher(kernel, tensors, device_index, stream)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    launch(1)
    end.record(stream)
    end.synchronize()
    launches = min(_MAX_LAUNCHES, plan.launches(cupy.cuda.get_elapsed_time(start, end) / 1e3))
    if launches == 1:  # one launch fills a repeat: a graph would save nothing
        return launch, 1, lambda: launch(1), "single"
    try:
        stream.begin_capture()
        try:
            launch(launches)
        finally:
            graph = stream.end_capture()
        graph.upload(stream)
        stream.synchronize()
        return launch, launches, lambda: graph.launch(stream), "graph"
    except Exception:  # something TVM does cannot be captured: launch from the host
        stream.synchronize()
        return launch, launches, lambda: launch(launches), "loop"


def _time(
    replay: Callable[[], None],
    launches: int,
    stream: Any,
    plan: TimingPlan,
    best_s: float | None,
    device_index: int,
) -> tuple[list[float], str]:
    """Repeats until the plan stops them: seconds per launch of each, and why it stopped."""
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    samples: list[float] = []
    while True:
        if plan.flush_l2:  # write twice the L2 so the next repeat starts cold
            _flush_buffer(device_index).fill(len(samples) % 251)
        start.record(stream)
        replay()
        end.record(stream)
        end.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, end) / 1e3 / launches)
        reason = verdict(samples, plan, best_s)
        if reason is not None:
            return samples, reason


def _stream(device_index: int) -> Any:
    import cupy

    if device_index not in _streams:
        _streams[device_index] = cupy.cuda.Stream(non_blocking=True)
    return _streams[device_index]


def _inputs(device_index: int, args: tuple[ArgSpec, ...]) -> tuple[list[Any], list[Any]]:
    """Random inputs, allocated once per workload (on the current stream) and reused."""
    key = (device_index, args)
    if key in _arguments:
        _arguments.move_to_end(key)
        return _arguments[key]
    import cupy
    import numpy as np

    arrays = []
    for dtype, shape in args:
        # Floats drawn on the host: cupy's generators compile on first use.
        if floating(dtype):
            drawn = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
            arrays.append(cupy.asarray(_held_as(drawn.astype(dtype))))
        else:  # zeros are a valid index for any gather / take
            arrays.append(cupy.zeros(shape, dtype=dtype))
    cupy.cuda.get_current_stream().synchronize()
    tensors = [_to_tvm(a, dtype) for a, (dtype, _) in zip(arrays, args, strict=True)]
    _arguments[key] = (arrays, tensors)
    while len(_arguments) > _MAX_CACHED_WORKLOADS:
        _arguments.popitem(last=False)
    return arrays, tensors


def _held_as(host: Any) -> Any:
    """A host array as cupy can hold it: bfloat16, which cupy lacks, as its 16-bit patterns."""
    import numpy as np

    return host.view(np.uint16) if host.dtype.name == "bfloat16" else host


def _to_tvm(array: Any, dtype: str) -> Any:
    """Zero-copy hand-over through DLPack, as a tensor of `dtype` (bfloat16 from its bits)."""
    import tvm

    from_dlpack = getattr(tvm.runtime, "from_dlpack", None)
    if from_dlpack is None:
        import tvm_ffi

        from_dlpack = tvm_ffi.from_dlpack
    tensor = from_dlpack(array)
    if str(tensor.dtype) != dtype:
        tensor = tensor._create_view(tuple(tensor.shape), dtype)
    return tensor


def _flush_buffer(device_index: int) -> Any:
    import cupy

    if device_index not in _flush:
        l2 = cupy.cuda.runtime.getDeviceProperties(device_index)["l2CacheSize"]
        _flush[device_index] = cupy.empty(2 * max(l2, 1 << 20), dtype=cupy.uint8)
    return _flush[device_index]


def _context_alive(device_index: int) -> bool:
    """False after a sticky CUDA error (e.g. an illegal address): the context is unusable."""
    try:
        import cupy

        with cupy.cuda.Device(device_index):
            cupy.cuda.runtime.deviceSynchronize()
            return bool(cupy.zeros(1).sum().item() == 0)
    except Exception:
        return False
