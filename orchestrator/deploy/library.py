"""Compile with the database, export, load, run (ours and onnxruntime), time end to end."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._ort import onnxruntime
from ..model.loading import OnnxModel
from ..rundir.atomic import install
from . import upcast
from .timing import Latency, Timing, time_models


def compile_model(relax_mod: Any, target: Any, database: Any) -> Any:
    """Stock `compile_relax`: the un-fused module, records looked up in `database`."""
    from tvm.s_tir.meta_schedule.relax_integration import compile_relax

    from ..model.defaults import tolerate_failing_rules

    tolerate_failing_rules()
    return compile_relax(database, relax_mod, target, params=None)


def export_library(executable: Any, path: Path) -> Path:
    """Export to a shared library, replacing `path` only once the new file is complete. A full
    disk or quota, which TVM reports as the compiler's failure in its words, is the OSError
    it was (the CLI's one line: free space and run again)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.so")
    try:
        executable.export_library(str(tmp))
        install(tmp, path, point="model")
    except RuntimeError as error:  # "Compilation error: ... ld: ... No space left on device"
        code = next((c for c in (errno.ENOSPC, errno.EDQUOT) if os.strerror(c) in str(error)), 0)
        if not code:
            raise
        raise OSError(code, os.strerror(code)) from error
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_vm(library: Path, device_type: str) -> tuple[Any, Any]:
    """(VirtualMachine, device) for an exported library."""
    import tvm
    from tvm import relax

    dev = tvm.device(device_type, 0)
    return relax.VirtualMachine(tvm.runtime.load_module(str(library)), dev), dev


def run_vm(vm: Any, dev: Any, inputs: Sequence[np.ndarray], outputs: int = 1) -> list[Any]:
    """The model's `outputs` on `inputs`: an array each, a list of arrays for a sequence."""
    import tvm

    result = vm["main"](*[tvm.runtime.tensor(a, device=dev) for a in inputs])
    return [_output(value) for value in ([result] if outputs == 1 else result)]


def onnxruntime_session(model: OnnxModel) -> Any:
    """An onnxruntime CPU session of the model: of its float32 copy where it computes in
    bfloat16 (upcast.py), from its file where its weights sit beside it (past protobuf's 2 GB
    a model cannot be held as one message) or it defines local functions (which onnxruntime
    runs itself, not as inlined for TVM), else from memory.

    It runs the graph as written: onnxruntime's graph optimizations rewrite it into something
    else, notably a quantized model's DequantizeLinear -> Conv -> QuantizeLinear into integer
    kernels that requantize otherwise (a TFLite int8 MobileNet-V2: 0.12 and 0.21 from its own
    unoptimized outputs on 2 of 6 random inputs, which TVM's build matched exactly)."""
    ort = onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL

    def session(source: Any) -> Any:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])

    if model.bfloat16:
        copy = upcast.float32_copy(model.proto)
        serialized = serialize(copy)
        if serialized is not None:
            return session(serialized)
        # Twice the bfloat16 weights, past protobuf's 2 GB: read from files written for it.
        with tempfile.TemporaryDirectory(prefix="orchestrate-float32-") as folder:
            return session(upcast.save_with_weights_beside(copy, Path(folder)))
    if model.external_weights or model.inlined_functions:
        return session(str(model.path.resolve()))
    return session(model.proto.SerializeToString())


def serialize(proto: Any) -> bytes | None:
    """The message's bytes; None past protobuf's 2 GB, which it refuses to serialize (or to
    size)."""
    from google.protobuf.message import EncodeError

    try:
        return proto.SerializeToString()
    except (EncodeError, ValueError):
        return None


def run_onnxruntime(
    model: OnnxModel, inputs: Sequence[np.ndarray], *, session: Any = None
) -> list[np.ndarray]:
    """The model's outputs on `inputs` by onnxruntime (`session`: one made before)."""
    if session is None:
        session = onnxruntime_session(model)
    feed = upcast.float32_feed if model.bfloat16 else np.asarray
    feeds = {item.name: feed(array) for item, array in zip(model.inputs, inputs, strict=True)}
    found = session.run(list(model.outputs), feeds)
    return [[np.asarray(e) for e in x] if isinstance(x, list) else np.asarray(x) for x in found]


def time_model(
    vm: Any,
    dev: Any,
    inputs: Sequence[np.ndarray],
    *,
    repeat: int,
    min_repeat_ms: float,
    min_repeat: int | None = None,
    max_s: float = float("inf"),
) -> Latency:
    """`repeat` timings of the model (fewer past `max_s`, never fewer than `min_repeat`)."""
    timing = Timing(
        repeat=repeat,
        min_repeat=repeat if min_repeat is None else min_repeat,
        max_s=max_s,
        min_repeat_ms=min_repeat_ms,
    )
    return time_models([(vm, dev)], inputs, timing)[0]


def _output(value: Any) -> Any:
    """One output as onnxruntime gives it: a tensor as an array, a shape (an ONNX Shape output
    TVM computed at compile time) as int64 and a scalar as arrays, a sequence (a tuple) as a
    list of those."""
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return np.asarray(value.numpy())
    if isinstance(value, tvm.runtime.ShapeTuple):
        return np.array(list(value), dtype=np.int64)
    if isinstance(value, int | float | bool):
        return np.asarray(value)
    return [_output(item) for item in value]
