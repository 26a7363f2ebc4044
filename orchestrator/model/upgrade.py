"""Models of an old opset, upgraded by onnx's version converter before TVM imports them.

TVM 0.27's importer mishandles the operators' older forms: an opset-7 Upsample (scales as an
attribute) imported and computed the wrong values; Upsample-9, Resize-10, Slice-1 and
Reshape-1 (attributes where inputs came later) did not import. Models of the ONNX model zoo
and of older exporters are of opsets 7 to 10. The copy TVM sees is converted to `TARGET`, at
which those operators take today's forms; a model onnx cannot convert is imported as it is.
onnxruntime runs nothing below opset 7: such a model is checked against onnxruntime on its
converted copy (`for_onnxruntime`), the same graph in the forms it runs.
"""

from __future__ import annotations

from typing import Any

from . import functions

TARGET = 11  # Resize and Slice as TVM reads them, before Softmax and Split changed meaning
ONNXRUNTIME_OLDEST = 7  # the oldest opset onnxruntime runs


def upgrade(proto: Any) -> Any:
    """`proto` converted to opset TARGET where it is older and onnx can convert it, else
    `proto` itself (never changed in place)."""
    if functions.opset_of(proto) >= TARGET:
        return proto
    from onnx import version_converter

    try:
        converted = version_converter.convert_version(proto, TARGET)
    except Exception:  # an operator onnx has no adapter for: TVM gets the model as it is
        return proto
    # IR 3 wants every initializer listed as an input; the converter adds some that are not.
    converted.ir_version = max(converted.ir_version, 4)
    return converted


def for_onnxruntime(proto: Any) -> Any:
    """What onnxruntime runs to check the model: `proto`, or its upgrade below the oldest
    opset onnxruntime runs."""
    return upgrade(proto) if functions.opset_of(proto) < ONNXRUNTIME_OLDEST else proto
