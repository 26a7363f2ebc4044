"""Graphs onnxruntime runs in a form onnx's checker or TVM's importer refuses, put in the form
they take before the model is checked and imported.

- Nodes out of topological order (graph surgery tools leave them so): onnxruntime sorts
  them, onnx's checker refuses the model. They are sorted, the given order kept where it is
  one already.
- A graph input or output declared without a shape: onnxruntime runs it, the checker refuses
  it. An input takes its shape from --input-shape (which it then needs); an output the one
  onnx's shape inference gives it.
- Model-local functions (a node calling a FunctionProto the model defines, as
  `export_modules_as_functions` and onnxscript write): onnxruntime runs them, TVM's importer
  knows no such operator. They are inlined at the model's opset; the output check runs the
  file as written in onnxruntime, so a wrong inlining cannot pass it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tune_orchestrator.measure.base import short_error

from ..errors import InputError
from . import names


def checkable(path: Path, proto: Any, shapes: Mapping[str, Sequence[int]]) -> None:
    """Sort `proto`'s nodes and give its shape-less inputs and outputs a shape, in place.
    `shapes` are the shapes --input-shape gives, by input name."""
    _sort(path, proto.graph)
    _shape_inputs(proto.graph, shapes)
    _shape_outputs(path, proto)


def inlined(path: Path, proto: Any) -> Any:
    """`proto` with its local functions' calls replaced by their bodies (a copy); `proto`
    itself where it defines none."""
    if not proto.functions:
        return proto
    import onnx.inliner

    try:
        # A body written for another opset is converted to the model's, which takes its
        # values' types: shape inference gives them.
        typed = onnx.shape_inference.infer_shapes(proto)
        return onnx.inliner.inline_local_functions(typed, convert_version=True)
    except Exception as exc:
        called = ", ".join(sorted({f"{f.domain}.{f.name}" for f in proto.functions}))
        raise InputError(
            f"{path}: cannot inline its local functions ({called}): {short_error(exc)}; "
            "export the model without functions (e.g. torch.onnx.export's default)"
        ) from None


def _sort(path: Path, graph: Any) -> None:
    """Order `graph`'s nodes (and its subgraphs') so each comes after the nodes it reads;
    InputError where they read each other in a cycle."""
    for node in graph.node:
        for sub in names.subgraphs(node):
            _sort(path, sub)
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    needs = [
        {producer[name] for name in _reads(node) if name in producer} - {i}
        for i, node in enumerate(graph.node)
    ]
    if all(all(j < i for j in need) for i, need in enumerate(needs)):
        return
    order = _order(needs)
    if len(order) < len(needs):
        placed = set(order)
        stuck = [node for i, node in enumerate(graph.node) if i not in placed]
        listed = ", ".join(f"{n.op_type} ({n.name or n.output[0]!r})" for n in stuck[:4])
        more = f" and {len(stuck) - 4} more" if len(stuck) > 4 else ""
        raise InputError(
            f"{path} is not a valid ONNX model: its nodes read each other's outputs in a "
            f"cycle; none of {listed}{more} can run first; export the model again"
        )
    nodes = [type(graph.node[i])() for i in order]
    for copy, i in zip(nodes, order, strict=True):
        copy.CopyFrom(graph.node[i])
    del graph.node[:]
    graph.node.extend(nodes)


def _order(needs: Sequence[set[int]]) -> list[int]:
    """The nodes in an order that runs each after those it `needs` (by index), the earliest
    given first among those ready; short of some where they need each other in a cycle."""
    readers: list[list[int]] = [[] for _ in needs]
    for i, need in enumerate(needs):
        for j in need:
            readers[j].append(i)
    waiting = [len(need) for need in needs]
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for reader in readers[i]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    return order


def _reads(node: Any) -> Iterator[str]:
    """The tensor names `node` reads: its inputs and those its subgraphs read (from the outer
    graph, or from within; the latter no node outside produces)."""
    yield from node.input
    for sub in names.subgraphs(node):
        for inner in names.all_nodes(sub):
            yield from inner.input
        yield from (v.name for v in sub.output)


def _shape_inputs(graph: Any, shapes: Mapping[str, Sequence[int]]) -> None:
    weights = {t.name for t in graph.initializer}
    for value in graph.input:
        tensor = value.type.tensor_type
        if value.name in weights or not value.type.HasField("tensor_type"):
            continue
        if tensor.HasField("shape"):
            continue
        given = shapes.get(value.name)
        if given is None:
            raise InputError(
                f"input {value.name!r} has no shape in the model; give it with "
                f"--input-shape {value.name}:1x3x224x224"
            )
        for size in given:
            tensor.shape.dim.add().dim_value = int(size)


def _shape_outputs(path: Path, proto: Any) -> None:
    shapeless = [
        v
        for v in proto.graph.output
        if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape")
    ]
    if not shapeless:
        return
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # the checker, next, names what is wrong with the model
        return
    found = {
        v.name: v.type.tensor_type.shape
        for v in (*inferred.output, *inferred.value_info)
        if v.type.tensor_type.HasField("shape")
    }
    for value in shapeless:
        if value.name not in found:
            raise InputError(
                f"{path}: output {value.name!r} has no shape in the model, nor can onnx infer "
                "one; export it with output shapes"
            )
        value.type.tensor_type.shape.CopyFrom(found[value.name])
