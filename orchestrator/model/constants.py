"""Constant nodes in the one form TVM's ONNX importer reads.

ONNX's Constant holds its value in one of several attributes: `value` (a tensor), or, since
opset 12, `value_float`, `value_floats`, `value_int` or `value_ints`. TVM 0.27 reads `value`
only and refuses the others ("no value in Constant"); operators ONNX defines as functions
(Swish's alpha, say) use them, and so may any exporter. The copy TVM sees holds each as the
same value in a tensor.
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
        import onnx

        proto, original = onnx.ModelProto(), proto
        proto.CopyFrom(original)
    for node in names.all_nodes(proto.graph):
        if _other_form(node):
            _to_tensor(node)
    return proto


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
