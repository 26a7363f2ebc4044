"""MaxPool with `auto_pad=SAME_LOWER`, written with the explicit pads it means.

ONNX's SAME padding makes an output of ceil(size / stride) either way, the odd pixel of
padding at the end (SAME_UPPER) or at the start (SAME_LOWER). TVM 0.27's importer gives
MaxPool floor(size / stride) for SAME_LOWER: a 3x3 max pool by 2 over 9x9 made 4x4 where
onnxruntime made 5x5, and the output check refused every build. The copy TVM sees holds the
pads SAME_LOWER stands for (AveragePool, LpPool and Conv, which TVM pads right, are left
alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import folding, names

OPS = ("MaxPool",)


def explicit(proto: Any, shapes: Mapping[str, Sequence[int]], *, copy: bool = True) -> Any:
    """`proto` with each SAME_LOWER MaxPool of its main graph given explicit pads; `proto`
    itself where there is none. With `copy=False` the change is made in `proto`."""
    if not any(_same_lower(node) for node in proto.graph.node):
        return proto
    static = folding.static_shapes(proto, shapes)
    if copy:
        proto = names.copied(proto)
    for node in proto.graph.node:
        size = static.get(node.input[0]) if _same_lower(node) else None
        if size is not None:
            _set_pads(node, size[2:])
    return proto


def _same_lower(node: Any) -> bool:
    return node.op_type in OPS and any(
        a.name == "auto_pad" and a.s == b"SAME_LOWER" for a in node.attribute
    )


def _set_pads(node: Any, spatial: Sequence[int]) -> None:
    """Replace `node`'s auto_pad by the pads it stands for over `spatial` input sizes."""
    from onnx import helper

    ints = {a.name: list(a.ints) for a in node.attribute}
    kernel = ints["kernel_shape"]
    strides = ints.get("strides") or [1] * len(kernel)
    dilations = ints.get("dilations") or [1] * len(kernel)
    begins, ends = [], []
    for size, k, stride, dilation in zip(spatial, kernel, strides, dilations, strict=True):
        out = -(-size // stride)  # ceil
        total = max(0, (out - 1) * stride + (k - 1) * dilation + 1 - size)
        begins.append(total - total // 2)  # the odd pixel at the start
        ends.append(total // 2)
    kept = [a for a in node.attribute if a.name not in ("auto_pad", "pads")]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.append(helper.make_attribute("pads", begins + ends))
