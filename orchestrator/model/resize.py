"""Resize nodes TVM would compute wrongly, written as the matrix products they are.

TVM 0.27's importer turns a Resize's `scales` into output sizes and then interpolates by the
sizes' ratio, where ONNX maps coordinates by the scale itself: torch's
`F.interpolate(scale_factor=1.7, mode="bilinear")` (16 -> 27 pixels, a ratio of 1.6875) came
out 0.19 from onnxruntime, a downscale by 0.37 1.2. It also ignores `antialias` (0.69 for
torch's `antialias=True`). Each such resize of the last two axes is linear and separable: a
matrix along each resized axis, Y = A_H . X . A_W^T. The matrices are what onnxruntime's own
Resize, with the node's attributes, makes of unit vectors, so the copy TVM sees computes what
the user's graph computes; the user's graph keeps the Resize. Resizes TVM gets right (integral
scales, sizes without antialias) are left to it: its kernels are cheaper than the products.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import constants, folding, functions, names

_SCALED = frozenset({"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "asymmetric"})


def as_matmuls(proto: Any, shapes: Mapping[str, Sequence[int]], *, copy: bool = True) -> Any:
    """`proto` with each Resize of its main graph that TVM would compute wrongly replaced by
    MatMuls; `proto` itself where there is none. With `copy=False` the change is in `proto`."""

    if not any(node.op_type == "Resize" for node in proto.graph.node):
        return proto
    types = folding.value_types(proto, shapes)
    graph, opset = proto.graph, functions.opset_of(proto)
    values = constants.held(
        graph, {n for node in graph.node if node.op_type == "Resize" for n in node.input[2:4]}
    )
    matrices = {}
    for at, node in enumerate(graph.node):
        plan = _plan(node, types, values) if node.op_type == "Resize" else None
        if plan is not None:
            rank, axes = plan
            try:
                matrices[at] = (
                    rank,
                    {axis: _matrix(node, opset, rank, *axes[axis]) for axis in axes},
                )
            except Exception:  # onnxruntime would not resize so: the Resize is left to TVM
                continue
    if not matrices:
        return proto
    if copy:
        proto = names.copied(proto)
    _replace(proto.graph, matrices)
    return proto


def _plan(node: Any, types: Mapping[str, Any], values: Mapping[str, Any]) -> tuple | None:
    """(the input's rank, {axis: (the axis, its size in and out, the node's scale or None)})
    for a float32 Resize of spatial axes (2 and 3 of NCHW, 2 of NCW) TVM would get wrong,
    else None."""
    attrs = {a.name: _attribute(a) for a in node.attribute}
    shape = _float32_shape(types.get(node.input[0]))
    inputs = [*node.input, "", "", ""]
    scales, sizes = values.get(inputs[2]), values.get(inputs[3])
    if shape is None or len(shape) not in (3, 4) or "axes" in attrs:
        return None
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    if (
        coord == "tf_crop_and_resize"
        or attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch"
    ):
        return None
    if scales is not None and len(scales) == len(shape):
        out = [math.floor(d * s) for d, s in zip(shape, scales, strict=True)]
    elif sizes is not None and len(sizes) == len(shape):
        out, scales = [int(s) for s in sizes], None
    else:
        return None
    moved = [i for i, (a, b) in enumerate(zip(shape, out, strict=True)) if a != b]
    if not moved or min(moved) < 2:
        return None  # batch or channels resized, or nothing
    antialias = attrs.get("antialias", 0) and any(out[i] < shape[i] for i in moved)
    off_ratio = (
        scales is not None
        and coord in _SCALED
        and any(out[i] != shape[i] * scales[i] for i in range(len(shape)))
    )
    if not (antialias or off_ratio):
        return None
    scale = [None] * len(shape) if scales is None else [float(s) for s in scales]
    return len(shape), {i: (i, shape[i], out[i], scale[i]) for i in moved}


def _replace(graph: Any, matrices: Mapping[int, tuple]) -> None:
    """The Resize at each key of `matrices` becomes MatMul(X, A_W^T) and/or MatMul(A_H, .),
    by its (input rank, {axis: matrix}), the matrices initializers."""
    from onnx import helper, numpy_helper

    nodes = []
    for at, node in enumerate(graph.node):
        if at not in matrices:
            nodes.append(node)
            continue
        rank, by_axis = matrices[at]
        current = node.input[0]
        for axis in sorted(by_axis, reverse=True):  # the last axis first: X @ A^T
            matrix = by_axis[axis]
            name = f"{node.output[0]}__resize_axis{axis}"
            out = node.output[0] if axis == min(by_axis) else f"{name}_out"
            if axis == rank - 1:
                graph.initializer.append(numpy_helper.from_array(matrix.T.copy(), name))
                nodes.append(helper.make_node("MatMul", [current, name], [out]))
            else:
                graph.initializer.append(numpy_helper.from_array(matrix, name))
                nodes.append(helper.make_node("MatMul", [name, current], [out]))
            current = out
    del graph.node[:]
    graph.node.extend(nodes)


def _matrix(node: Any, opset: int, rank: int, axis: int, size: int, out: int, scale) -> Any:
    """[out, size]: the node's Resize of the unit vectors along `axis`, by onnxruntime."""
    from onnx import TensorProto, helper, numpy_helper

    from .._ort import onnxruntime

    ort = onnxruntime()

    probe_shape = [1] * rank
    probe_shape[1], probe_shape[axis] = size, size
    eye = np.eye(size, dtype=np.float32).reshape(probe_shape)
    inits = [numpy_helper.from_array(np.zeros(0, np.float32), "roi")]
    if scale is not None:
        factors = [1.0] * rank
        factors[axis] = scale
        inits.append(numpy_helper.from_array(np.array(factors, np.float32), "scales"))
        inputs = ["x", "roi", "scales"]
    else:
        target = list(probe_shape)
        target[axis] = out
        inits.append(numpy_helper.from_array(np.array(target, np.int64), "sizes"))
        inputs = ["x", "roi", "", "sizes"]
    resize = helper.make_node("Resize", inputs, ["y"])
    resize.attribute.extend(node.attribute)
    graph = helper.make_graph(
        [resize],
        "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, probe_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (resized,) = session.run(None, {"x": eye})
    # row j of the product: unit vector j, resized (to onnxruntime's size, should it differ)
    return resized.reshape(size, -1).T.astype(np.float32)


def _float32_shape(value_type: Any) -> tuple[int, ...] | None:
    """The fixed shape of a float32 tensor's type, else None."""
    if value_type is None or value_type.tensor_type.elem_type != 1:  # FLOAT
        return None
    return folding.fixed_shape(value_type)


def _attribute(attr: Any) -> Any:
    from onnx import helper

    value = helper.get_attribute_value(attr)
    return value.decode() if isinstance(value, bytes) else value
