"""ConvInteger written as the 32-bit Conv it computes, before TVM imports a model.

onnxruntime's `quantize_dynamic` turns each Conv of a CNN into DynamicQuantizeLinear ->
ConvInteger -> Cast -> Mul; TVM 0.27's importer has DynamicQuantizeLinear and MatMulInteger
but no ConvInteger, so such a model was refused. ConvInteger is, by its definition, a Conv of
the inputs less their zero points, accumulated in int32: that is what the copy TVM sees holds
(padding with zeros after the subtraction is padding with the zero point before it, as
ConvInteger pads). The user's graph, which onnxruntime checks against, keeps the operator.
"""

from __future__ import annotations

from typing import Any

from . import names

OPS = ("ConvInteger",)


def widen(proto: Any, *, copy: bool = True) -> Any:
    """`proto` with each ConvInteger of its main graph written as Casts, Subs and a Conv in
    int32; `proto` itself where it has none. With `copy=False` the change is made in `proto`."""

    if not any(node.op_type in OPS for node in proto.graph.node):
        return proto
    if copy:
        proto = names.copied(proto)
    graph = proto.graph
    nodes = []
    for node in graph.node:
        nodes.extend(_as_conv(node, graph) if node.op_type in OPS else [node])
    del graph.node[:]
    graph.node.extend(nodes)
    return proto


def _as_conv(node: Any, graph: Any) -> list[Any]:
    """The nodes computing `node`'s output: each input in int32 less its zero point, then a
    Conv with `node`'s attributes."""
    from onnx import TensorProto, helper

    x, w, x_zero, w_zero = [*node.input, "", ""][:4]
    stem = f"{node.output[0]}__int32"
    made = []

    def name(part: str) -> str:
        return f"{stem}_{part}"

    def widened(value: str, zero: str, part: str, per_channel: bool) -> str:
        made.append(helper.make_node("Cast", [value], [name(part)], to=TensorProto.INT32))
        if not zero:
            return name(part)
        made.append(helper.make_node("Cast", [zero], [name(f"{part}_zero")], to=TensorProto.INT32))
        zero = name(f"{part}_zero")
        if per_channel:  # w's zero point: one per output channel, or one for all
            shape = name(f"{part}_zero_shape")
            dims = [-1] + [1] * (_weight_rank(node, graph) - 1)
            made.append(
                helper.make_node(
                    "Constant",
                    [],
                    [shape],
                    value=helper.make_tensor(shape, TensorProto.INT64, [len(dims)], dims),
                )
            )
            made.append(helper.make_node("Reshape", [zero, shape], [name(f"{part}_zero_col")]))
            zero = name(f"{part}_zero_col")
        made.append(helper.make_node("Sub", [name(part), zero], [name(f"{part}_less_zero")]))
        return name(f"{part}_less_zero")

    data = widened(x, x_zero, "x", per_channel=False)
    weight = widened(w, w_zero, "w", per_channel=True)
    conv = helper.make_node("Conv", [data, weight], list(node.output), name=node.name)
    conv.attribute.extend(node.attribute)
    return [*made, conv]


def _weight_rank(node: Any, graph: Any) -> int:
    """How many dimensions ConvInteger's weight has: its initializer's, or its kernel's and 2."""
    weight = next((init for init in graph.initializer if init.name == node.input[1]), None)
    if weight is not None:
        return len(weight.dims)
    kernel = next((a.ints for a in node.attribute if a.name == "kernel_shape"), None)
    return len(kernel) + 2 if kernel else 4  # a 2-D convolution, the common case
