"""Runs in a process of the RPC engine's pool: one candidate measured on a server of a TVM RPC
tracker. The tracker lends a server to one session at a time, so each server is one timed
window. Repeats follow the same rule as on this host (_timing.py's timed_repeats); afterwards
the arguments are copied back and checked for NaN / Inf.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from ._timing import RACED, TimingPlan, step, timed_repeats
from .base import floating

ArgSpec = tuple[str, tuple[int, ...]]


def measure(
    tracker: tuple[str, int],
    key: str,
    session_timeout_s: float,
    artifact: str,
    device_type: str,
    args: tuple[ArgSpec, ...],
    plan: TimingPlan,
    best_s: float | None,
    cpu_cache_flush: bool,
) -> dict[str, Any]:
    """A dict like _cuda_worker.measure's: run_secs, finite, raced, steps, window."""
    import numpy as np
    from tvm import rpc

    steps: dict[str, float] = {}
    with step(steps, "wait"):  # for a free server under the key
        session = rpc.connect_tracker(*tracker).request(
            key, priority=1, session_timeout=int(session_timeout_s)
        )
    remote = os.path.basename(artifact)
    try:
        with step(steps, "load"):
            session.upload(artifact, remote)
            module = session.load_module(remote)
        dev = session.device(device_type, 0)
        with step(steps, "allocate"):
            tensors = _arguments(session, dev, args)
        acquired = time.monotonic()
        samples, reason = timed_repeats(module, dev, tensors, plan, best_s, cpu_cache_flush)
        released = time.monotonic()
        steps["timed"] = released - acquired
        with step(steps, "check"):
            finite = all(
                bool(np.isfinite(t.numpy()).all()) for t in tensors if floating(str(t.dtype))
            )
    finally:
        with contextlib.suppress(Exception):
            session.remove(remote)
    return {
        "run_secs": samples,
        "finite": finite,
        "raced": reason == RACED,
        "steps": steps,
        "window": (acquired, released),
    }


def _arguments(session: Any, dev: Any, args: tuple[ArgSpec, ...]) -> list[Any]:
    """Random floats filled on the server; zeros for integers (a valid index anywhere)."""
    import numpy as np
    import tvm

    fill = session.get_function("tvm.contrib.random.random_fill_for_measure")
    tensors = []
    for dtype, shape in args:
        if floating(dtype):  # bfloat16 gets float16's patterns of 1-10: finite values
            tensor = tvm.runtime.empty(shape, dtype, device=dev)
            fill(tensor)
        else:
            tensor = tvm.runtime.tensor(np.zeros(shape, dtype=dtype), device=dev)
        tensors.append(tensor)
    return tensors
