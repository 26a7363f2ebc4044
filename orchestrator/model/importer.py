"""A loaded model into TVM: imported to Relax (un-fused, as compile_relax wants it), fused for
tuning, its tasks extracted."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import time
import warnings
from typing import Any

from tune_orchestrator.measure.base import short_error

from ..errors import InputError
from . import take
from .loading import OnnxModel
from .tasks import Task, extract_tasks


@dataclasses.dataclass(frozen=True)
class Imported:
    """A model ready to tune: its Relax module (un-fused, as compile_relax wants it), its tasks,
    and the seconds from the run's start to here."""

    relax_mod: Any
    tasks: list[Task]
    import_s: float


def import_for_tuning(model: OnnxModel, target: Any, *, started: float) -> Imported:
    """Import to Relax and extract the tasks for `target` (a TVM target); `started` is the
    run's start, a time.monotonic() reading."""
    relax_mod = import_to_relax(model)
    tasks = extract_tasks(fuse_for_tuning(relax_mod, target), target)
    return Imported(relax_mod, tasks, time.monotonic() - started)


def import_to_relax(model: OnnxModel) -> Any:
    """The Relax module `compile_relax` expects: imported, decomposed for inference, un-fused.

    Weights become constants, so `main` takes only the model's inputs, in `model.inputs` order.
    The graph imported is `model.tvm_proto`, whose names every target can take; its Gathers
    read within their tables (model/take.py).
    """
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    try:
        # TVM's importer prints the failing operator's inputs to stdout, which the --json
        # event stream owns; the error line says what failed.
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            mod = from_onnx(
                model.tvm_proto,
                shape_dict={model.tvm_name(i.name): list(i.shape) for i in model.inputs},
                dtype_dict={model.tvm_name(i.name): i.dtype for i in model.inputs},
            )
    except Exception as exc:
        raise InputError(
            f"TVM cannot import {model.path}: {short_error(exc)}; check the operators' "
            "attributes and opset, or simplify the model before export"
        ) from None
    seq = tvm.transform.Sequential(
        [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
    )
    return seq(take.clipped(mod))


def fuse_for_tuning(mod: Any, target: Any) -> Any:
    """The fused module whose PrimFuncs are the tuning workloads.

    The passes are those `compile_relax` runs before it applies the database, in the same
    order and pass context, so every workload we tune is a key it looks up.
    """
    import tvm
    from tvm import relax
    from tvm.relax import pipeline

    try:
        dispatch = list(pipeline.library_dispatch_passes(target))
    except (ValueError, AttributeError):
        dispatch = []
    fuse = tvm.transform.Sequential(
        [
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )
    with target, tvm.transform.PassContext(opt_level=3):
        mod = tvm.transform.Sequential(dispatch)(mod)
        try:
            mod = relax.transform.LegalizeOps()(mod)
        except Exception as exc:  # TVM has no kernel for an operator at its type or form
            raise InputError(
                f"TVM cannot compile an operator of the model: {short_error(exc)}; export the "
                "model with that operator in a type and form TVM supports"
            ) from None
        return fuse(mod)
