"""ReverseSequence over whole sequences, written as the Slice it then is.

TVM 0.27's importer has no ReverseSequence, which tf2onnx writes for the backward half of a
Keras Bidirectional layer (and for tf.reverse along time): exit 2. Where every sequence length
is the full length of the time axis (constants once the shapes are folded), reversing each
sequence is reversing the axis: a Slice by step -1. Shorter sequences stay ReverseSequence,
and the model is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import constants, folding, names

OPS = ("ReverseSequence",)


def as_slices(proto: Any, shapes: Mapping[str, Sequence[int]], *, copy: bool = True) -> Any:
    """`proto` with each ReverseSequence of its main graph over whole sequences a Slice;
    `proto` itself where there is none. With `copy=False` the change is made in `proto`."""
    graph = proto.graph
    if not any(node.op_type in OPS for node in graph.node):
        return proto
    static = folding.static_shapes(proto, shapes)
    lengths = constants.held(graph, {n.input[1] for n in graph.node if n.op_type in OPS})
    whole = [k for k, node in enumerate(graph.node) if _whole(node, static, lengths)]
    if not whole:
        return proto
    if copy:
        proto = names.copied(proto)
    for k in whole:
        _to_slice(proto.graph, proto.graph.node[k])
    return proto


def _whole(node: Any, static: Mapping[str, tuple], lengths: Mapping[str, Any]) -> bool:
    """Whether `node` is a ReverseSequence every sequence of which is as long as its axis."""
    if node.op_type not in OPS or node.input[1] not in lengths:
        return False
    shape = static.get(node.input[0])
    return shape is not None and bool(np.all(lengths[node.input[1]] == shape[_time_axis(node)]))


def _to_slice(graph: Any, node: Any) -> None:
    """Make `node` the Slice reversing its input along its time axis."""
    from onnx import numpy_helper

    stem = node.output[0]
    ends = np.iinfo(np.int64).min
    bounds = {"starts": -1, "ends": ends, "axes": _time_axis(node), "steps": -1}
    for part, value in bounds.items():
        graph.initializer.append(
            numpy_helper.from_array(np.asarray([value], np.int64), f"{stem}__{part}")
        )
    node.op_type = "Slice"
    node.input[:] = [node.input[0], *(f"{stem}__{part}" for part in bounds)]
    del node.attribute[:]


def _time_axis(node: Any) -> int:
    return next((a.i for a in node.attribute if a.name == "time_axis"), 0)


def left(proto: Any) -> str | None:
    """The ReverseSequences as_slices() could not write as a Slice, named as the refusal names
    operators (None: none)."""
    nodes = [node for node in proto.graph.node if node.op_type in OPS]
    if not nodes:
        return None
    name = nodes[0].name or "unnamed"
    return f"ReverseSequence with lengths other than its whole time axis (node {name!r})"
