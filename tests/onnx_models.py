"""Tiny ONNX models for tests, built with onnx.helper (each tunes in seconds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(model: onnx.ModelProto, path: Path, check: bool = True) -> Path:
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _model(nodes, inputs, outputs, inits, opsets=(("", 17),)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return model


def tiny_cnn(
    path: Path, *, batch: int | str = 1, inits_as_inputs: bool = False, twin_convs: bool = False
) -> Path:
    """x[batch,3,8,8] -> Conv(4) -> Relu [-> Conv(4) -> Relu -> Conv(4) -> Relu] -> GAP -> Gemm(2).

    `batch` may be a name (a dynamic dimension); `inits_as_inputs` lists the weights as graph
    inputs too, as older exporters did; `twin_convs` adds two identical convolutions, so one
    task has call-site weight 2.
    """
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype("float32"), "w1"),
        numpy_helper.from_array((rng.standard_normal((2, 4)) * 0.5).astype("float32"), "wf"),
        numpy_helper.from_array((rng.standard_normal(2) * 0.1).astype("float32"), "bf"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
    ]
    last = "r1"
    if twin_convs:
        for i, w in enumerate(("w2", "w3"), start=2):
            inits.append(
                numpy_helper.from_array(
                    (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype("float32"), w
                )
            )
            nodes += [
                helper.make_node(
                    "Conv", [last, w], [f"c{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
                ),
                helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
            ]
            last = f"r{i}"
    nodes += [
        helper.make_node("GlobalAveragePool", [last], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["y"], transB=1),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])]
    if inits_as_inputs:
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2])]
    return _save(_model(nodes, inputs, outputs, inits), path)


def with_operator(path: Path, op_type: str, domain: str = "") -> Path:
    """x[2,2] -> op -> y: a model whose only node is `domain.op_type`."""
    nodes = [helper.make_node(op_type, ["x"], ["y"], domain=domain)]
    opsets = (("", 17),) if not domain else (("", 17), (domain, 1))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    return _save(_model(nodes, [x], [y], [], opsets), path, check=not domain)
