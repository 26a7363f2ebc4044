"""LSTM and GRU nodes unrolled over their (fixed) sequence into operators TVM imports.

TVM 0.27's ONNX importer has no LSTM or GRU, which torch exports for nn.LSTM and nn.GRU: such
a model was refused. Once the inputs' shapes are fixed, a recurrence over S steps is S copies
of one step's MatMuls, Adds and activations (the ONNX operator's own equations, with its
default activations); each gate's input product is taken for the whole sequence at once. The
copies share shapes, so MetaSchedule tunes each kernel once, weighted by how often it runs.

Unrolled here: every direction, with or without biases and initial states. Refused with the
reason: other activations, `clip`, batch-first `layout` 1 (onnxruntime, whose outputs the
tuned model is checked against, has no kernel for it), LSTM's `input_forget` and peepholes, a
`sequence_lens` input, and weights the graph computes from anything but held values (torch's
dynamo exporter reorders the gates by Slice and Concat of the weights it holds: those are
computed here, and the nodes that computed them dropped).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from ..errors import InputError
from . import constants, folding, names

OPS = ("LSTM", "GRU")
_GATES = {"LSTM": 4, "GRU": 3}  # W's rows: i, o, f, c for LSTM; z, r, h for GRU
_EMPTY_INPUTS = {"LSTM": (4, 7), "GRU": (4,)}  # sequence_lens, and LSTM's peepholes P


# What a graph may compute its weights with: rearranging and arithmetic, no input read.
_WEIGHT_OPS = folding.ARITHMETIC | {"Split"}


def held_or_computed(graph: Any) -> set[str]:
    """The names of the values `graph` holds (initializers, Constants) or computes from those
    alone by _WEIGHT_OPS; its nodes in topological order (normal_form)."""
    known = {init.name for init in graph.initializer}
    known |= {node.output[0] for node in graph.node if node.op_type == "Constant"}
    for node in graph.node:
        if node.op_type in _WEIGHT_OPS and all(not name or name in known for name in node.input):
            known.update(node.output)
    return known


def refusal(node: Any, held: Collection[str]) -> str | None:
    """Why `node` (an LSTM or GRU) cannot be unrolled here, or None; `held`: the names of
    the values its graph holds or computes from those (held_or_computed)."""
    attrs = {attr.name for attr in node.attribute}
    if "activations" in attrs or "activation_alpha" in attrs or "activation_beta" in attrs:
        return "activations other than the defaults"
    if "clip" in attrs:
        return "clip"
    if any(a.name == "layout" and a.i for a in node.attribute):
        return "layout 1"  # onnxruntime, which checks the outputs, cannot run it either
    if any(a.name == "input_forget" and a.i for a in node.attribute):
        return "input_forget"
    for at in _EMPTY_INPUTS[node.op_type]:
        if len(node.input) > at and node.input[at]:
            return "a sequence_lens input" if at == 4 else "peepholes"
    if not all(name in held for name in node.input[1:4] if name):
        return "weights computed in the graph"
    return None


def unroll(proto: Any, shapes: Mapping[str, tuple], *, copy: bool = True) -> Any:
    """`proto` with its main graph's LSTM and GRU nodes unrolled (each `refusal`-free, its
    input's shape in `shapes`); `proto` itself where it has none."""
    graph = proto.graph
    if not any(node.op_type in OPS for node in graph.node):
        return proto
    if copy:
        proto = names.copied(proto)
        graph = proto.graph
    weights = _Weights(graph, proto.opset_import)
    taken = {name for node in graph.node for name in (*node.input, *node.output)}
    taken |= {init.name for init in graph.initializer} | {v.name for v in graph.input}
    nodes: list[Any] = []
    for number, node in enumerate(graph.node):
        if node.op_type not in OPS:
            nodes.append(node)
            continue
        if node.input[0] not in shapes:
            raise InputError(
                f"cannot unroll {node.op_type} node {node.name!r}: its input's shape is not "
                "known; give every input's shape with --input-shape"
            )
        arrays = {n: weights.value(n, node) for n in node.input[1:4] if n}
        opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
        step = _Emitter(f"rnn{number}_", taken, opset)
        _unrolled(step, node, arrays, shapes[node.input[0]])
        nodes.extend(step.nodes)
        graph.initializer.extend(step.constants)
    del graph.node[:]
    graph.node.extend(nodes)
    weights.drop_unread()
    return proto


class _Weights:
    """The values of an LSTM's or GRU's weights, held by the graph or computed from held
    values (held_or_computed) with onnx's reference evaluator."""

    def __init__(self, graph: Any, opsets: Any) -> None:
        self.graph, self.opsets = graph, opsets
        self.producers = {out: node for node in graph.node for out in node.output}
        self.values: dict[str, np.ndarray] = {}
        self.computed: set[str] = set()  # outputs of the nodes evaluated here

    def value(self, name: str, user: Any) -> np.ndarray:
        if name not in self.values:
            held = constants.held(self.graph, {name})
            self.values[name] = held[name] if name in held else self._computed(name, user)
        return self.values[name]

    def _computed(self, name: str, user: Any) -> np.ndarray:
        node = self.producers[name]
        inputs = {i: self.value(i, user) for i in node.input if i}
        outputs = folding.evaluate(node, inputs, self.opsets)
        if outputs is None:
            raise InputError(
                f"cannot unroll {user.op_type} node {user.name!r}: its weight {name!r} is "
                f"computed by a {node.op_type} that could not be evaluated; export the model "
                "with its weights held as initializers"
            )
        self.values.update(zip(node.output, outputs, strict=True))
        self.computed.update(node.output)
        return self.values[name]

    def drop_unread(self) -> None:
        """Drop the nodes that computed weights and nothing reads any more, and the
        initializers only they read."""
        graph, dropped = self.graph, set()
        while True:
            read = folding.reads(graph) | {value.name for value in graph.output}
            unread = [
                at
                for at, node in enumerate(graph.node)
                if set(node.output) <= self.computed and not set(node.output) & read
            ]
            if not unread:
                break
            for at in reversed(unread):
                dropped.update(graph.node[at].input)
                del graph.node[at]
        for at in reversed(range(len(graph.initializer))):
            if graph.initializer[at].name in dropped - read:
                del graph.initializer[at]


class _Emitter:
    """Nodes and constants of one unrolled recurrence, under names no other tensor has."""

    def __init__(self, prefix: str, taken: set[str], opset: int) -> None:
        self.prefix, self.taken, self.opset = prefix, taken, opset
        self.nodes: list[Any] = []
        self.constants: list[Any] = []

    def _name(self) -> str:
        name = f"{self.prefix}{len(self.nodes) + len(self.constants)}"
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        out = out or self._name()
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def rows(self, name: str, count: int) -> list[str]:
        """`name` split into its `count` rows along the first axis, each kept [1, ...]. One
        Split: TVM imports a Gather of one index with shape arithmetic that FoldConstant
        compiles a kernel for each time (a minute for an LSTM of 16 steps), and a Slice per row
        makes a kernel per row."""
        from onnx import helper

        outs = [self._name() for _ in range(count)]
        if self.opset < 13:  # the sizes were an attribute then
            node = helper.make_node("Split", [name], outs, axis=0, split=[1] * count)
        else:
            node = helper.make_node("Split", [name, self.const(np.ones(count, np.int64))], outs)
        self.nodes.append(node)
        return outs

    def const(self, array: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self._name()
        self.constants.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name


def _unrolled(emit: _Emitter, node: Any, arrays: Mapping[str, np.ndarray], shape: tuple) -> None:
    """Emit the nodes that compute `node`'s outputs from its inputs."""
    attrs = {a.name: a for a in node.attribute}
    hidden = attrs["hidden_size"].i
    direction = attrs["direction"].s.decode() if "direction" in attrs else "forward"
    steps, batch = shape[0], shape[1]
    inputs = [*node.input, *[""] * 8]
    w, r = arrays[inputs[1]], arrays[inputs[2]]
    gates = _GATES[node.op_type]
    bias = arrays[inputs[3]] if inputs[3] else np.zeros((w.shape[0], 2 * gates * hidden), w.dtype)
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    ys, finals, cells = [], [], []
    step_shape = emit.const(np.array([1, 1, batch, hidden]))
    zeros = emit.const(np.zeros((1, batch, hidden), w.dtype))
    h0s = emit.rows(inputs[5], len(dirs)) if inputs[5] else [zeros] * len(dirs)
    c0s = emit.rows(inputs[6], len(dirs)) if inputs[6] else [zeros] * len(dirs)
    for d, way in enumerate(dirs):
        h, c = h0s[d], c0s[d] if gates == 4 else ""
        recur = _Step(emit, node, w[d], r[d], bias[d], hidden, inputs[0], steps)
        outs: list[str] = [""] * steps
        for t in range(steps) if way == "forward" else reversed(range(steps)):
            h, c = recur(h, c, t)
            outs[t] = emit.op("Reshape", h, step_shape)
        ys.append(emit.op("Concat", *outs, axis=0))
        finals.append(h)
        cells.append(c)
    wanted = [*node.output, "", "", ""]  # Y [steps, dirs, batch, hidden], Y_h, Y_c
    for parts, out, axis in ((ys, wanted[0], 1), (finals, wanted[1], 0), (cells, wanted[2], 0)):
        if out and all(parts):
            emit.op("Concat", *parts, axis=axis, out=out)


class _Step:
    """One step of an LSTM or GRU direction: (h, c) at t-1 -> (h, c) at t, each [1, batch,
    hidden] (c "" for GRU)."""

    def __init__(
        self, emit: _Emitter, node: Any, w: Any, r: Any, bias: Any, hidden: int, x: str, steps: int
    ) -> None:
        gates = _GATES[node.op_type]
        self.emit, self.kind = emit, node.op_type
        self.reset_after = any(a.name == "linear_before_reset" and a.i for a in node.attribute)
        wb, rb = bias[: gates * hidden], bias[gates * hidden :]
        self.r = [emit.const(r[g * hidden : (g + 1) * hidden].T) for g in range(gates)]
        if self.kind == "GRU":  # its h gate adds its recurrent bias where the reset says
            self.rb, self.one = emit.const(rb[2 * hidden :]), emit.const(np.ones((), w.dtype))
        self.xw = []  # each gate's input product over the sequence, split into its steps
        for g in range(gates):
            add = wb[g * hidden : (g + 1) * hidden]
            if not (self.kind == "GRU" and g == gates - 1):
                add = add + rb[g * hidden : (g + 1) * hidden]
            product = emit.op("MatMul", x, emit.const(w[g * hidden : (g + 1) * hidden].T))
            self.xw.append(emit.rows(emit.op("Add", product, emit.const(add)), steps))

    def _x(self, gate: int, t: int) -> str:
        return self.xw[gate][t]

    def _gate(self, gate: int, t: int, h: str, activation: str) -> str:
        pre = self.emit.op("Add", self._x(gate, t), self.emit.op("MatMul", h, self.r[gate]))
        return self.emit.op(activation, pre)

    def __call__(self, h: str, c: str, t: int) -> tuple[str, str]:
        op = self.emit.op
        if self.kind == "LSTM":
            i, o, f = (self._gate(g, t, h, "Sigmoid") for g in range(3))
            cell = op("Add", op("Mul", f, c), op("Mul", i, self._gate(3, t, h, "Tanh")))
            return op("Mul", o, op("Tanh", cell)), cell
        z, reset = (self._gate(g, t, h, "Sigmoid") for g in range(2))
        if self.reset_after:
            recurrent = op("Mul", reset, op("Add", op("MatMul", h, self.r[2]), self.rb))
        else:
            recurrent = op("Add", op("MatMul", op("Mul", reset, h), self.r[2]), self.rb)
        candidate = op("Tanh", op("Add", self._x(2, t), recurrent))
        keep = op("Mul", z, h)
        return op("Add", op("Mul", op("Sub", self.one, z), candidate), keep), ""
