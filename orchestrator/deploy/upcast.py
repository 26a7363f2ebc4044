"""A float32 copy of a bfloat16 model, the output check's reference for it: onnxruntime's CPU
kernels cover few bfloat16 operators (no Conv, MatMul or Gemm), so a model that computes in
bfloat16 anywhere is compared with itself computed in float32, from the same bfloat16 weights
and the same bfloat16 inputs. What it checks is the schedules' arithmetic, within [check]
rtol_half, not bfloat16's rounding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..model.loading import type_attribute


def float32_copy(proto: Any) -> Any:
    """A copy of the model with every bfloat16 value float32 (weights converted exactly, casts
    to bfloat16 made casts to float32); the model itself is not changed."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    _upcast_graph(copy.graph)
    return copy


def save_with_weights_beside(proto: Any, folder: Path) -> str:
    """`proto` saved in `folder` as model.onnx with its weights in weights.bin beside it (the
    form of a model past protobuf's 2 GB); the path of model.onnx."""
    import onnx

    path = folder / "model.onnx"
    onnx.save_model(
        proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
        location="weights.bin",
    )  # fmt: skip
    return str(path)


def float32_feed(array: np.ndarray) -> np.ndarray:
    """A bfloat16 sample array as its float32 copy's input takes it (exactly); others as given."""
    return array.astype(np.float32) if array.dtype.name == "bfloat16" else array


def _upcast_graph(graph: Any) -> None:
    from onnx import TensorProto

    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    for tensor in graph.initializer:
        _upcast_tensor(tensor)
    for node in graph.node:
        for attr in node.attribute:
            if type_attribute(attr) and attr.i == TensorProto.BFLOAT16:
                attr.i = TensorProto.FLOAT
            if attr.HasField("t"):
                _upcast_tensor(attr.t)
            for tensor in attr.tensors:
                _upcast_tensor(tensor)
            if attr.HasField("g"):
                _upcast_graph(attr.g)
            for sub in attr.graphs:
                _upcast_graph(sub)


def _upcast_tensor(tensor: Any) -> None:
    from onnx import TensorProto, numpy_helper

    if tensor.data_type == TensorProto.BFLOAT16:
        values = numpy_helper.to_array(tensor).astype(np.float32)
        tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
