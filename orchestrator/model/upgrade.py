"""Models of an old opset, upgraded by onnx's version converter before TVM imports them.

TVM 0.27's importer mishandles the operators' older forms: an opset-7 Upsample (scales as an
attribute) imported and computed the wrong values; Upsample-9, Resize-10, Slice-1 and
Reshape-1 (attributes where inputs came later) did not import. Models of the ONNX model zoo
and of older exporters are of opsets 7 to 10. The copy TVM sees is converted to `TARGET`, at
which those operators take today's forms; a model onnx cannot convert is imported as it is.

Only from opset 7, the oldest onnxruntime runs: the output check then compares TVM's build of
the conversion with onnxruntime on the user's own graph, so a conversion that changed what the
model computes cannot ship. onnx 1.23's converter does, twice: its Upsample and Resize-10 ->
Resize-11 adapter leaves Resize-11's default half-pixel coordinates where the older operators
computed asymmetric ones with floor rounding (up to 3.4 from onnxruntime on the original; fixed
here), and its opset 6 -> 7 broadcast adapter unsqueezes a bias on the wrong axes.
"""

from __future__ import annotations

from typing import Any

from . import functions

TARGET = 11  # Resize and Slice as TVM reads them, before Softmax and Split changed meaning
OLDEST = 7  # the oldest opset onnxruntime runs, and so checks a conversion against


def upgrade(proto: Any) -> Any:
    """`proto` converted to opset TARGET where it is of opsets OLDEST to TARGET - 1 and onnx
    can convert it, else `proto` itself (never changed in place)."""
    if not OLDEST <= functions.opset_of(proto) < TARGET:
        return proto
    from onnx import helper, version_converter

    try:
        converted = version_converter.convert_version(proto, TARGET)
    except Exception:  # an operator onnx has no adapter for: TVM gets the model as it is
        return proto
    # IR 3 wants every initializer listed as an input; the converter adds some that are not.
    converted.ir_version = max(converted.ir_version, 4)
    del converted.graph.value_info[:]  # hints only, and the converter leaves some untyped
    for node in converted.graph.node:
        given = {attr.name for attr in node.attribute}
        if node.op_type == "Resize" and "coordinate_transformation_mode" not in given:
            node.attribute.append(
                helper.make_attribute("coordinate_transformation_mode", "asymmetric")
            )
            node.attribute.append(helper.make_attribute("nearest_mode", "floor"))
    return converted
