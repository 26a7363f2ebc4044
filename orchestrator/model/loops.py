"""Loops whose number of iterations the graph fixes, unrolled: TVM 0.27's ONNX importer has no
Loop. Keras 3's LSTM, GRU and SimpleRNN, converted by tf2onnx, become a Loop over the time
steps ("uses operator(s) TVM's ONNX importer does not support: Loop": exit 2).

A Loop is unrolled where its trip count and the condition it carries are computed from
constants alone (a counter against a bound, as exporters write a for-loop): the part of its body
those depend on is run by onnx's reference evaluator, iteration by iteration, until the
condition is false or the trip count reached. Each iteration's body is then copied into the main
graph, its names prefixed, its iteration number and condition as constants; the values it
carries flow from one copy to the next, and each scan output is the concatenation of the
copies' values. A Loop whose condition depends on the data, that runs more than MOST times or
none, whose body holds a subgraph of its own or builds a sequence (a TorchScript list: TVM's
importer never returns from a ConcatFromSequence of what SequenceInserts made), is left to TVM
as it is, which refuses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from . import constants, folding, functions, names

MOST = 256  # iterations: beyond, a copy per iteration costs more than the Loop would save
DEPTH = 16  # nodes: how far back a Loop's trip count and condition are computed from constants


def unroll(proto: Any, *, copy: bool = True) -> Any:
    """`proto` with each Loop of the main graph that runs a number of times its constants fix
    unrolled; `proto` itself where it has none. With `copy=False` the change is made in
    `proto`."""
    trips = {
        i: n
        for i, node in enumerate(proto.graph.node)
        if node.op_type == "Loop" and (n := _trips(proto, node)) is not None
    }
    if not trips:
        return proto
    if copy:
        proto = names.copied(proto)
    graph, opset = proto.graph, functions.opset_of(proto)
    nodes = []
    for i, node in enumerate(graph.node):
        if i in trips:
            nodes += _unrolled(graph, node, trips[i], f"{node.name or node.output[0]}__it", opset)
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return proto


def unrollable(proto: Any, loop: Any) -> bool:
    """Whether unroll() unrolls `loop`, a Loop node of `proto`'s main graph."""
    return _trips(proto, loop) is not None


def _trips(proto: Any, loop: Any) -> int | None:
    """How many times `loop` runs (None: not known from constants, more than MOST, none, or a
    body with subgraphs or sequences)."""
    body = loop.attribute[0].g if loop.attribute and loop.attribute[0].name == "body" else None
    if body is None or any(_has_subgraph(n) or "Sequence" in n.op_type for n in body.node):
        return None
    value = _values(proto)
    bound = value(loop.input[0]) if loop.input[0] else np.asarray(MOST + 1)
    go = value(loop.input[1]) if len(loop.input) > 1 and loop.input[1] else np.asarray(True)
    control = _Control(body, proto.opset_import)
    start = dict(zip((v.name for v in body.input[2:]), loop.input[2:], strict=False))
    state = {name: value(start[name]) for name in control.inputs}
    if bound is None or go is None or any(v is None for v in state.values()):
        return None
    outer = {name: value(name) for name in control.outer}
    if any(v is None for v in outer.values()):
        return None
    count = 0
    while bool(go) and count < min(int(bound), MOST + 1):
        feeds = {**outer, **state, body.input[0].name: np.asarray(count, np.int64)}
        feeds[body.input[1].name] = np.asarray(bool(go))
        found = control.run(feeds)
        if found is None:
            return None
        go, state = found[0], dict(zip(state, found[1:], strict=True))
        count += 1
    return count if 0 < count <= MOST else None


class _Control:
    """The part of a Loop body its condition depends on: the nodes that compute the next
    condition and the carried values those read (`inputs`), and the tensors of the main graph
    they read (`outer`). run() evaluates them with onnx's reference evaluator."""

    def __init__(self, body: Any, opsets: Any) -> None:
        producer = {out: node for node in body.node for out in node.output}
        position = {v.name: k for k, v in enumerate(body.input)}
        local = {init.name for init in body.initializer}
        todo, seen, reads = [body.output[0].name], set(), set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in producer:
                todo += [i for i in producer[name].input if i]
            elif position.get(name, 0) >= 2:  # a carried value: its next value is needed too
                reads.add(name)
                todo.append(body.output[position[name] - 1].name)
        self.nodes = [node for node in body.node if any(out in seen for out in node.output)]
        self.outer = {
            name
            for node in self.nodes
            for name in node.input
            if name and name not in producer and name not in position and name not in local
        }
        self.inputs = [v.name for v in body.input[2:] if v.name in reads]
        self._body, self._opsets = body, opsets
        self._evaluator: Any = None

    def run(self, feeds: Mapping[str, Any]) -> list[Any] | None:
        """(next condition, next value of each carried input it reads) from `feeds` (the
        iteration number, the condition, `inputs` and `outer`); None where the evaluator
        cannot run them."""
        try:
            if self._evaluator is None:
                self._evaluator = self._evaluator_of(feeds)
            return [np.asarray(v) for v in self._evaluator.run(None, dict(feeds))]
        except Exception:  # an operator the evaluator lacks: the Loop is left to TVM
            return None

    def _evaluator_of(self, feeds: Mapping[str, Any]) -> Any:
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        body = self._body
        position = {v.name: k for k, v in enumerate(body.input)}
        wanted = [body.output[0].name]
        wanted += [body.output[position[name] - 1].name for name in self.inputs]
        graph = helper.make_graph(
            self.nodes,
            "control",
            [helper.make_empty_tensor_value_info(name) for name in feeds],
            [helper.make_empty_tensor_value_info(name) for name in wanted],
            list(body.initializer),
        )
        return ReferenceEvaluator(helper.make_model(graph, opset_imports=self._opsets))


def _values(proto: Any) -> Callable[[str], Any]:
    """The value of a main-graph tensor computed from constants alone, through at most DEPTH
    nodes (None where it is not)."""
    graph = proto.graph
    producer = {out: node for node in graph.node for out in node.output}
    known: dict[str, Any] = {}

    def value(name: str, depth: int = 0) -> Any:
        if depth > DEPTH:
            return None
        if name not in known:
            held = constants.held(graph, {name})
            node = producer.get(name)
            if name in held:
                known[name] = held[name]
            elif node is not None and node.op_type != "Constant":
                found = _inputs_known(node, lambda n: value(n, depth + 1))
                outs = found and folding.evaluate(node, found, proto.opset_import)
                known.update(zip(node.output, outs or [None] * len(node.output), strict=True))
            else:
                known[name] = None
        return known.get(name)

    return value


def _inputs_known(node: Any, value: Callable[[str], Any]) -> dict[str, Any] | None:
    found = {name: value(name) for name in node.input if name}
    return None if any(v is None for v in found.values()) else found


def _unrolled(graph: Any, loop: Any, trips: int, prefix: str, opset: int) -> list[Any]:
    """The nodes standing for `loop`: its body copied `trips` times, the carried values
    passed on, the scan outputs concatenated (new constants added to `graph`)."""
    from onnx import helper, numpy_helper

    body = loop.attribute[0].g
    local = {v.name for v in body.input} | {o for n in body.node for o in n.output}
    for init in body.initializer:
        copied = graph.initializer.add()
        copied.CopyFrom(init)
        copied.name = f"{prefix}_{init.name}"
    shared = {init.name: f"{prefix}_{init.name}" for init in body.initializer}
    carried = list(loop.input[2:])
    scans: list[list[str]] = [[] for _ in body.output[1 + len(carried) :]]
    nodes = []
    for t in range(trips):
        step = f"{prefix}{t}_"
        rename = {**shared, **{v: f"{step}{v}" for v in local}}
        counter, cond = f"{step}{body.input[0].name}", f"{step}{body.input[1].name}"
        graph.initializer.append(numpy_helper.from_array(np.asarray(t, np.int64), counter))
        graph.initializer.append(numpy_helper.from_array(np.asarray(True), cond))
        rename.update(dict(zip((v.name for v in body.input[2:]), carried, strict=True)))
        for node in body.node:
            nodes.append(_renamed(node, rename, step))
        outs = [rename.get(v.name, v.name) for v in body.output]
        carried = outs[1 : 1 + len(carried)]
        for k, name in enumerate(outs[1 + len(carried) :]):
            scans[k].append(name)
    outputs = list(loop.output)
    for name, final in zip(outputs, carried, strict=False):
        if name:
            nodes.append(helper.make_node("Identity", [final], [name]))
    for name, values in zip(outputs[len(carried) :], scans, strict=False):
        if name:
            nodes += _stacked(graph, values, name, f"{prefix}_{name}", opset)
    return nodes


def _stacked(graph: Any, values: list[str], out: str, prefix: str, opset: int) -> Iterator[Any]:
    """Nodes writing `out`, `values` stacked along a new first axis (a scan output)."""
    from onnx import helper, numpy_helper

    rows = [f"{prefix}_row{k}" for k in range(len(values))]
    if opset >= 13:
        graph.initializer.append(numpy_helper.from_array(np.asarray([0], np.int64), f"{prefix}_0"))
        for value, row in zip(values, rows, strict=True):
            yield helper.make_node("Unsqueeze", [value, f"{prefix}_0"], [row])
    else:
        for value, row in zip(values, rows, strict=True):
            yield helper.make_node("Unsqueeze", [value], [row], axes=[0])
    yield helper.make_node("Concat", rows, [out], axis=0)


def _renamed(node: Any, rename: Mapping[str, str], step: str) -> Any:
    """A copy of `node` reading and writing the names `rename` gives (others as they are)."""
    from onnx import NodeProto

    copy = NodeProto()
    copy.CopyFrom(node)
    copy.input[:] = [rename.get(name, name) for name in node.input]
    copy.output[:] = [rename.get(name, name) for name in node.output]
    if node.name:
        copy.name = f"{step}{node.name}"
    return copy


def _has_subgraph(node: Any) -> bool:
    return any(attr.HasField("g") or len(attr.graphs) for attr in node.attribute)
