"""Compile with the database, export, load, check against onnxruntime, time end to end."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..model.importer import OnnxModel
from ..rundir.atomic import install
from .timing import Latency, Timing, time_models


@dataclasses.dataclass(frozen=True)
class Check:
    """How far the compiled model's outputs are from onnxruntime's on the same input."""

    max_rel_error: float
    rtol: float
    outputs: int

    @property
    def ok(self) -> bool:
        return self.max_rel_error <= self.rtol

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_rel_error": self.max_rel_error,
            "rtol": self.rtol,
            "outputs": self.outputs,
            "ok": self.ok,
        }


def compile_model(relax_mod: Any, target: Any, database: Any) -> Any:
    """Stock `compile_relax`: the un-fused module, records looked up in `database`."""
    from tvm.s_tir.meta_schedule.relax_integration import compile_relax

    return compile_relax(database, relax_mod, target, params=None)


def export_library(executable: Any, path: Path) -> Path:
    """Export to a shared library, replacing `path` only once the new file is complete."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.so")
    try:
        executable.export_library(str(tmp))
        install(tmp, path, point="model")
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_vm(library: Path, device_type: str) -> tuple[Any, Any]:
    """(VirtualMachine, device) for an exported library."""
    import tvm
    from tvm import relax

    dev = tvm.device(device_type, 0)
    return relax.VirtualMachine(tvm.runtime.load_module(str(library)), dev), dev


def random_inputs(model: OnnxModel, seed: int) -> list[np.ndarray]:
    """One input per model input, in order: normal floats, zero integers and booleans."""
    rng = np.random.default_rng(seed)
    arrays = []
    for item in model.inputs:
        if item.dtype.startswith("float"):
            arrays.append(rng.standard_normal(item.shape).astype(item.dtype))
        else:
            arrays.append(np.zeros(item.shape, dtype=item.dtype))
    return arrays


def run_vm(vm: Any, dev: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    import tvm

    result = vm["main"](*[tvm.runtime.tensor(a, device=dev) for a in inputs])
    return [np.asarray(t.numpy()) for t in _flatten(result)]


def run_onnxruntime(model: OnnxModel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {item.name: array for item, array in zip(model.inputs, inputs, strict=True)}
    return [np.asarray(x) for x in session.run(list(model.outputs), feeds)]


def compare(ours: Sequence[np.ndarray], reference: Sequence[np.ndarray], rtol: float) -> Check:
    """Max over outputs of max|ours - ref| / max|ref| (NaN or a shape mismatch counts as inf)."""
    if len(ours) != len(reference):
        return Check(float("inf"), rtol, len(reference))
    worst = 0.0
    for a, b in zip(ours, reference, strict=True):
        if a.shape != b.shape:
            return Check(float("inf"), rtol, len(reference))
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        if not np.all(np.isfinite(a64) == np.isfinite(b64)):
            return Check(float("inf"), rtol, len(reference))
        finite = np.isfinite(b64)
        if not finite.any():
            continue
        scale = max(float(np.max(np.abs(b64[finite]))), 1e-12)
        worst = max(worst, float(np.max(np.abs(a64[finite] - b64[finite]))) / scale)
    return Check(worst, rtol, len(reference))


class Checker:
    """The model's random inputs, onnxruntime's outputs for them (computed once), and the
    comparison of a compiled model against them."""

    def __init__(self, model: OnnxModel, *, seed: int, rtol: float) -> None:
        self.model = model
        self.inputs = random_inputs(model, seed)
        self.rtol = rtol
        self._reference: list[np.ndarray] | None = None

    def check(self, vm: Any, dev: Any) -> Check:
        if self._reference is None:
            self._reference = run_onnxruntime(self.model, self.inputs)
        return compare(run_vm(vm, dev, self.inputs), self._reference, self.rtol)


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


def _flatten(value: Any) -> list[Any]:
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return [value]
    return [t for item in value for t in _flatten(item)]
