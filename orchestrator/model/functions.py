"""ONNX operators defined as functions, expanded into their bodies before TVM imports a model.

ONNX defines some operators by a body of simpler ones (Celu, Swish, SwiGLU, RotaryEmbedding,
CenterCropPad, the window functions, opset 23's Attention...): a runtime that lacks one runs
its body instead. TVM 0.27's importer lacks them and stops at the first (a model with nn.CELU
was refused), or, for Attention, reads them as com.microsoft's operator of the name.
Each such node of the main graph whose operator TVM lacks is replaced by its body, at the
model's opset, in the copy TVM sees; the user's graph, which onnxruntime checks against, keeps
the operator. A body built from the node's input types (a "context-dependent" function) takes
them from onnx's shape inference.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from tune_orchestrator.measure.base import short_error

from ..errors import InputError
from . import folding, names

_DOMAIN = "tune_orchestrator.expanded"  # the bodies' private domain until they are inlined
_ROUNDS = 4  # a body may hold an operator defined as a function in turn
# Standard operators TVM's importer converts as another operator of the same name: its
# Attention is com.microsoft's (it wants num_heads), not opset 23's.
_READ_OTHERWISE = frozenset({"Attention"})


@functools.cache
def importable() -> frozenset[str]:
    """The standard operators TVM's ONNX importer converts."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    return frozenset(_get_convert_map()) | {"If", "Constant"}


def opset_of(proto: Any) -> int:
    """The model's version of the standard ONNX operator set."""
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)


def expandable(node: Any, opset: int) -> bool:
    """Whether `node`, a node of the main graph, is an operator TVM lacks (or reads as another)
    and ONNX defines by a body at `opset`."""
    missing = node.op_type not in importable() or node.op_type in _READ_OTHERWISE
    return missing and _body_version(node, opset) is not None


def expand(proto: Any, shapes: Mapping[str, Sequence[int]], *, copy: bool = True) -> Any:
    """`proto` with each `expandable` node of its main graph replaced by its body; `proto`
    itself where it has none. `shapes` fixes the inputs' shapes, by input name. Raises
    InputError naming the operator where its body cannot be built or holds operators TVM
    lacks."""

    opset = opset_of(proto)
    if not any(expandable(node, opset) for node in proto.graph.node):
        return proto
    if copy:
        proto = names.copied(proto)
    before = {node.op_type for node in proto.graph.node}
    for _ in range(_ROUNDS):
        nodes = [node for node in proto.graph.node if expandable(node, opset)]
        if not nodes:
            break
        proto = _inline(proto, nodes, opset, shapes)
    _check_expanded(proto, before)
    return proto


def _inline(proto: Any, nodes: Sequence[Any], opset: int, shapes: Mapping) -> Any:
    """`proto` with `nodes` (of its main graph) calling their bodies as local functions, then
    those functions inlined."""
    import onnx.inliner
    from onnx import helper

    types = folding.value_types(proto, shapes)
    for node in nodes:
        _with_defaults(node, _schema(node, opset))
    bodies = [_body(node, opset, types) for node in nodes]
    _declare_types(proto.graph, nodes, types)
    named = ", ".join(sorted({node.op_type for node in nodes}))
    for index, (node, body) in enumerate(zip(nodes, bodies, strict=True)):
        body.domain, body.name = _DOMAIN, f"{node.op_type}_{index}"
        proto.functions.append(body)
        node.domain, node.op_type = _DOMAIN, body.name
    proto.opset_import.append(helper.make_opsetid(_DOMAIN, 1))
    try:
        inlined = onnx.inliner.inline_local_functions(proto, convert_version=True)
    except Exception as exc:
        raise InputError(
            f"cannot expand {named} for TVM: {short_error(exc)}; replace it in the exporter "
            "with the operators it is made of"
        ) from None
    kept = [o for o in inlined.opset_import if o.domain != _DOMAIN]  # now unused
    del inlined.opset_import[:]
    inlined.opset_import.extend(kept)
    return inlined


def _with_defaults(node: Any, schema: Any) -> None:
    """Give `node` each attribute it leaves to its default: a body reads them by reference,
    and the inliner drops a reference the call does not fill."""
    given = {attr.name for attr in node.attribute}
    for name, attr in schema.attributes.items():
        if name not in given and attr.default_value.type:  # type 0: no default
            node.attribute.append(attr.default_value)
            node.attribute[-1].name = name


def _declare_types(graph: Any, nodes: Sequence[Any], types: Mapping[str, Any]) -> None:
    """Record the known types of `nodes`' inputs and outputs: the inliner's conversion of a
    body written for an older opset reads them."""
    declared = {v.name for v in [*graph.input, *graph.output, *graph.value_info]}
    declared |= {init.name for init in graph.initializer}
    for name in dict.fromkeys(n for node in nodes for n in [*node.input, *node.output] if n):
        if name in types and name not in declared:
            graph.value_info.add(name=name).type.CopyFrom(types[name])


def _body(node: Any, opset: int, types: Mapping[str, Any]) -> Any:
    """The FunctionProto defining `node` at `opset`."""
    import onnx

    schema, version = _schema(node, opset), _body_version(node, opset)
    try:
        if version in schema.function_opset_versions:
            data = schema.get_function_with_opset_version(version)
        else:
            missing = [name for name in node.input if name and name not in types]
            if missing:
                raise ValueError(f"the type of input {missing[0]!r} is unknown")
            data = schema.get_context_dependent_function_with_opset_version(
                version,
                node.SerializeToString(),
                [types[name].SerializeToString() if name else b"" for name in node.input],
            )
    except Exception as exc:
        raise InputError(
            f"cannot expand {node.op_type} (node {node.name or 'unnamed'!r}) for TVM: its "
            f"body could not be built ({short_error(exc)}); replace it in the exporter with "
            "the operators it is made of"
        ) from None
    body = onnx.FunctionProto()
    body.ParseFromString(data)
    return body


def _check_expanded(proto: Any, before: set[str]) -> None:
    """Refuse bodies that brought operators TVM lacks (one drawing at random, say)."""
    left = sorted({n.op_type for n in proto.graph.node} - before - importable())
    if left:
        raise InputError(
            f"the model's operators defined as functions expand to operator(s) TVM's ONNX "
            f"importer does not support: {', '.join(left)}; replace them in the exporter"
        )


def _schema(node: Any, opset: int) -> Any:
    import onnx.defs

    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:  # no such operator at this opset
        return None


def _body_version(node: Any, opset: int) -> int | None:
    """The latest opset <= `opset` at which ONNX defines `node`'s operator by a body."""
    if node.domain not in ("", "ai.onnx"):
        return None
    schema = _schema(node, opset)
    if schema is None:
        return None
    versions = [v for v in schema.all_function_opset_versions if v <= opset]
    return max(versions, default=None)
