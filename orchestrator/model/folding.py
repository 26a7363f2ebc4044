"""Shape arithmetic folded into constants before TVM imports a model.

Exporters compute reshape targets and scale factors from `Shape` at run time: torch's dynamo
exporter as Shape(start, end) -> Squeeze -> Mul -> Reshape -> Concat, its TorchScript one as
Shape -> Gather -> Cast -> Sqrt -> Div. TVM 0.27's ONNX importer makes an element of a shape
a scalar PrimValue, which its Reshape and unary and binary operators then refuse ("Reshape
requires the input data to be Tensor", "Binary operators must have the same datatype"): a
transformer exported with dynamic axes did not import at all. Once every input's shape is
fixed, those values are constants: each is evaluated here, one node at a time with onnx's
reference evaluator, and the graph takes it as an initializer instead. TorchScript writes
Python's own arithmetic as operators on Constant nodes (a Swin window's pads as Mod, Sub and
Concat of constants): those are folded too; arithmetic on weights alone is left to TVM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import names

# A shape known only once an earlier fold is a constant (a Pad whose pads follow from a
# Shape, then the Shape of its output) takes another pass of shape inference; passes repeat
# while one folds something (a 2-stage Swin exported by TorchScript takes 6).
_PASSES = 64
SMALL = 4096  # the most elements a value folded (or an initializer read to fold one) may have
# Operators of shape arithmetic: deterministic, cheap, and all a shape passes through.
ARITHMETIC = frozenset(
    "Abs Add And Cast Ceil Concat ConstantOfShape Div Equal Expand Flatten Floor Gather "
    "Greater Identity Less Max Min Mod Mul Neg Not Or Range ReduceProd Reshape Slice Sqrt "
    "Squeeze Sub Tile Transpose Unsqueeze Where".split()
)


def fold_shapes(proto: Any, shapes: Mapping[str, Sequence[int]], *, copy: bool = True) -> Any:
    """`proto` with what its main graph computes from input shapes (`shapes`, by input name)
    held as initializers; `proto` itself when it reads no shape it could fold. With
    `copy=False` a fold changes `proto` in place."""
    for _ in range(_PASSES):
        if not _worth_folding(proto.graph):
            break
        folded, values = _fold(proto, static_shapes(proto, shapes))
        if not folded:
            break
        if copy:
            proto = names.copied(proto)
            copy = False
        _replace(proto.graph, folded, values)
    return proto


def _worth_folding(graph: Any) -> bool:
    """Whether `graph` reads a shape, or computes on Constant nodes' values alone."""
    made = {name for node in graph.node if node.op_type == "Constant" for name in node.output}
    return any(
        node.op_type in ("Shape", "Size")
        or (node.op_type in ARITHMETIC and node.input and made.issuperset(node.input))
        for node in graph.node
    )


def static_shapes(proto: Any, shapes: Mapping[str, Sequence[int]]) -> dict[str, tuple]:
    """{tensor name: its fully known shape}, from `value_types`."""
    fixed = ((name, fixed_shape(t)) for name, t in value_types(proto, shapes).items())
    return {name: shape for name, shape in fixed if shape is not None}


def fixed_shape(value_type: Any) -> tuple[int, ...] | None:
    """A tensor type's shape where every dimension is known, else None."""
    tensor = value_type.tensor_type
    if tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim):
        return tuple(d.dim_value for d in tensor.shape.dim)
    return None


def value_types(proto: Any, shapes: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """{tensor name: its TypeProto} by onnx's shape inference on a copy of the main graph with
    the inputs' shapes fixed (its large weights travel as inputs, without their data); {} when
    shape inference gives up."""
    import onnx
    from onnx import helper

    graph = proto.graph
    light = helper.make_graph(list(graph.node), graph.name, [], list(graph.output))
    for value in graph.input:
        fixed = light.input.add()
        fixed.CopyFrom(value)
        if value.name in shapes and value.type.HasField("tensor_type"):
            dims = fixed.type.tensor_type.shape.dim
            for dim, size in zip(dims, shapes[value.name], strict=False):
                dim.Clear()
                dim.dim_value = size
    declared = {value.name for value in graph.input}
    for init in graph.initializer:
        if _elements(init.dims) <= SMALL:
            light.initializer.append(init)
        elif init.name not in declared:
            light.input.append(helper.make_tensor_value_info(init.name, init.data_type, init.dims))
    model = helper.make_model(
        light,
        opset_imports=proto.opset_import,
        ir_version=proto.ir_version,
        functions=proto.functions,
    )
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception:  # shape inference gave up: TVM imports the graph as it is
        return {}
    types = {
        init.name: helper.make_tensor_type_proto(init.data_type, init.dims)
        for init in graph.initializer
    }
    for value in [*inferred.input, *inferred.value_info, *inferred.output]:
        types.setdefault(value.name, value.type)
    return types


def _fold(proto: Any, static: Mapping[str, tuple]) -> tuple[list[int], dict[str, Any]]:
    """(where in the graph the nodes are whose every output follows from input shapes and
    small constants, each output's value), in graph order. Constant nodes lend their values
    but stay; arithmetic on small weights alone is not folded."""
    from onnx import numpy_helper

    graph = proto.graph
    outputs = {value.name for value in graph.output}
    values = {"": None}
    values.update(
        (init.name, numpy_helper.to_array(init))
        for init in graph.initializer
        if _elements(init.dims) <= SMALL
    )
    folded: list[int] = []
    derived: set[str] = set()  # values that follow from a shape or a Constant node
    for at, node in enumerate(graph.node):
        if any(attr.type in (attr.GRAPH, attr.GRAPHS) for attr in node.attribute):
            continue
        if node.op_type == "Constant":
            result = evaluate(node, values, proto.opset_import)
            if result is not None and all(value.size <= SMALL for value in result):
                values.update(zip(node.output, result, strict=True))
                derived.update(node.output)  # an exporter's Python arithmetic, say
            continue
        if outputs.intersection(node.output):
            continue
        if node.op_type in ("Shape", "Size"):
            result = _read_shape(node, static)
        elif node.op_type in ARITHMETIC and derived.intersection(node.input):
            result = evaluate(node, values, proto.opset_import)
        else:
            continue
        if result is None or any(value.size > SMALL for value in result):
            continue
        values.update(zip(node.output, result, strict=True))
        derived.update(node.output)
        folded.append(at)
    return folded, values


def _read_shape(node: Any, static: Mapping[str, tuple]) -> list[Any] | None:
    """A Shape or Size node's value, where its input's shape is known."""
    import numpy as np

    shape = static.get(node.input[0])
    if shape is None:
        return None
    if node.op_type == "Size":
        return [np.array(int(np.prod(shape)), dtype=np.int64)]
    ints = {attr.name: attr.i for attr in node.attribute}
    return [np.array(shape[ints.get("start", 0) : ints.get("end", len(shape))], dtype=np.int64)]


def evaluate(node: Any, values: Mapping[str, Any], opsets: Any) -> list[Any] | None:
    """What `node` outputs given `values` for its inputs (None where one is not known, or onnx's
    reference evaluator cannot run it)."""
    import numpy as np
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    if not all(name in values for name in node.input):
        return None
    graph = helper.make_graph(
        [node],
        "fold",
        [],
        [helper.make_empty_tensor_value_info(name) for name in node.output],
        [numpy_helper.from_array(values[name], name) for name in set(node.input) if name],
    )
    try:
        model = helper.make_model(graph, opset_imports=opsets)
        return [np.asarray(value) for value in ReferenceEvaluator(model).run(None, {})]
    except Exception:  # an operator or dtype the evaluator lacks: TVM gets the node as it is
        return None


def _replace(graph: Any, folded: Sequence[int], values: Mapping[str, Any]) -> None:
    """Drop the nodes at `folded` from `graph`; what the rest read of them becomes initializers,
    and initializers only the folded nodes read go."""
    from onnx import numpy_helper

    gone_in = {name for at in folded for name in graph.node[at].input}
    gone_out = [name for at in folded for name in graph.node[at].output]
    for at in reversed(folded):
        del graph.node[at]
    read = reads(graph) | {value.name for value in graph.output}
    only_folded = gone_in - read - {value.name for value in graph.input}
    for at in reversed(range(len(graph.initializer))):
        if graph.initializer[at].name in only_folded:
            del graph.initializer[at]
    made = [name for name in gone_out if name in read]
    graph.initializer.extend(numpy_helper.from_array(values[name], name) for name in made)


def reads(graph: Any) -> set[str]:
    """Every name the graph's nodes read, its subgraphs' nodes included."""
    names = {name for node in graph.node for name in node.input}
    for node in graph.node:
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else attr.graphs:
                names |= reads(sub)
    return names


def _elements(dims: Sequence[int]) -> int:
    count = 1
    for dim in dims:
        count *= dim
    return count
