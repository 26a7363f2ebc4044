"""Constant values in the forms TVM's ONNX importer reads.

ONNX's Constant holds its value in one of several attributes: `value` (a tensor), or, since
opset 12, `value_float`, `value_floats`, `value_int` or `value_ints`. TVM 0.27 reads `value`
only and refuses the others ("no value in Constant"); operators ONNX defines as functions
(Swish's alpha, say) use them, and so may any exporter. The copy TVM sees holds each as the
same value in a tensor.

Unsqueeze's axes: torch's exporter writes one axis as a 0-d tensor, which onnxruntime takes
and TVM does not ("'int' object is not iterable": a grouped-query attention did not import);
the copy TVM sees reads it as a list of one.
"""

from __future__ import annotations

from typing import Any

from . import names

_FORMS = {"value_float": 1, "value_floats": 1, "value_int": 7, "value_ints": 7}  # FLOAT, INT64


def as_tensors(proto: Any, *, copy: bool = True) -> Any:
    """`proto` with every Constant's value held in `value`; `proto` itself where each is
    already. With `copy=False` the change is made in `proto`."""
    if not any(_other_form(node) for node in names.all_nodes(proto.graph)):
        return proto
    if copy:
        proto = names.copied(proto)
    for node in names.all_nodes(proto.graph):
        if _other_form(node):
            _to_tensor(node)
    return proto


def axes_as_lists(proto: Any, *, copy: bool = True) -> Any:
    """`proto` with each 0-d constant `axes` input of its main graph's Unsqueezes read as a
    1-D one; `proto` itself where there is none. With `copy=False` the change is in `proto`."""
    from onnx import numpy_helper

    scalars = _scalar_axes(proto.graph)
    if not scalars:
        return proto
    if copy:
        proto = names.copied(proto)
    graph = proto.graph
    for name, value in scalars.items():
        graph.initializer.append(numpy_helper.from_array(value.reshape(1), f"{name}__as_list"))
    for node in graph.node:
        if _takes_axes(node) and node.input[1] in scalars:
            node.input[1] = f"{node.input[1]}__as_list"
    return proto


def _takes_axes(node: Any) -> bool:
    return node.op_type == "Unsqueeze" and len(node.input) > 1


def held(graph: Any, wanted: set[str]) -> dict[str, Any]:
    """{name: value} of the `wanted` tensors the graph holds: initializers, and Constant nodes
    whose value is a tensor (`as_tensors` makes every one so)."""
    from onnx import numpy_helper

    tensors = {init.name: init for init in graph.initializer if init.name in wanted}
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] in wanted and node.attribute:
            if node.attribute[0].name == "value":
                tensors[node.output[0]] = node.attribute[0].t
    return {name: numpy_helper.to_array(tensor) for name, tensor in tensors.items()}


def _scalar_axes(graph: Any) -> dict[str, Any]:
    """{name: value} of the 0-d initializers and Constant values read as `axes`."""
    read = {node.input[1] for node in graph.node if _takes_axes(node)}
    return {name: value for name, value in held(graph, read).items() if value.ndim == 0}


def _other_form(node: Any) -> bool:
    return node.op_type == "Constant" and any(a.name in _FORMS for a in node.attribute)


def _to_tensor(node: Any) -> None:
    from onnx import helper

    (attr,) = node.attribute  # Constant takes exactly one
    value = helper.get_attribute_value(attr)
    dims = [len(value)] if attr.name.endswith("s") else []
    vals = list(value) if attr.name.endswith("s") else [value]
    tensor = helper.make_tensor("value", _FORMS[attr.name], dims, vals)
    del node.attribute[:]
    node.attribute.append(helper.make_attribute("value", tensor))
