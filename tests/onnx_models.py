"""Tiny ONNX models for tests, built with onnx.helper (each tunes in seconds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(model: onnx.ModelProto, path: Path, check: bool = True) -> Path:
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def _model(nodes, inputs, outputs, inits, opsets=(("", 17),)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return model


def tiny_cnn(
    path: Path, *, batch: int | str = 1, inits_as_inputs: bool = False, twin_convs: bool = False
) -> Path:
    """x[batch,3,8,8] -> Conv(4) -> Relu [-> Conv(4) -> Relu -> Conv(4) -> Relu] -> GAP -> Gemm(2).

    `batch` may be a name (a dynamic dimension); `inits_as_inputs` lists the weights as graph
    inputs too, as older exporters did; `twin_convs` adds two identical convolutions, so one
    task has call-site weight 2.
    """
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype("float32"), "w1"),
        numpy_helper.from_array((rng.standard_normal((2, 4)) * 0.5).astype("float32"), "wf"),
        numpy_helper.from_array((rng.standard_normal(2) * 0.1).astype("float32"), "bf"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
    ]
    last = "r1"
    if twin_convs:
        for i, w in enumerate(("w2", "w3"), start=2):
            inits.append(
                numpy_helper.from_array(
                    (rng.standard_normal((4, 4, 3, 3)) * 0.3).astype("float32"), w
                )
            )
            nodes += [
                helper.make_node(
                    "Conv", [last, w], [f"c{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
                ),
                helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
            ]
            last = f"r{i}"
    nodes += [
        helper.make_node("GlobalAveragePool", [last], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["y"], transB=1),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])]
    if inits_as_inputs:
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2])]
    return _save(_model(nodes, inputs, outputs, inits), path)


def with_operator(path: Path, op_type: str, domain: str = "") -> Path:
    """x[2,2] -> op -> y: a model whose only node is `domain.op_type`."""
    nodes = [helper.make_node(op_type, ["x"], ["y"], domain=domain)]
    opsets = (("", 17),) if not domain else (("", 17), (domain, 1))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    return _save(_model(nodes, [x], [y], [], opsets), path, check=not domain)


ODD_INPUT = "gpu_0/data_0"


def odd_names(path: Path, *, batch: int | str = "N") -> Path:
    """tiny_cnn's layers under the names real exporters write, none a C identifier.

    Inputs `gpu_0/data_0` [batch,3,8,8] and `1st bias` [1,4,1,1]; weights `conv1/W:0` and
    `fc-1.W`; tensors between nodes `conv1/out:0`, `3`, `ré.lu`, `float`, and both `a/b` and
    `a_b` (which a plain character replacement would merge); node names with spaces and
    dashes; output `prob/ñ-1`.
    """
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(
            (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype("float32"), "conv1/W:0"
        ),
        numpy_helper.from_array((rng.standard_normal((2, 4)) * 0.5).astype("float32"), "fc-1.W"),
    ]
    nodes = [
        helper.make_node(
            "Conv",
            [ODD_INPUT, "conv1/W:0"],
            ["conv1/out:0"],
            name="conv 1",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Add", ["conv1/out:0", "1st bias"], ["3"], name="add-bias"),
        helper.make_node("Relu", ["3"], ["ré.lu"], name="relu/1"),
        helper.make_node("Neg", ["ré.lu"], ["a/b"], name="neg:0"),
        helper.make_node("Neg", ["a/b"], ["a_b"], name="neg:1"),
        helper.make_node("GlobalAveragePool", ["a_b"], ["float"], name="gap"),
        helper.make_node("Flatten", ["float"], ["flat 1"], axis=1),
        helper.make_node("Gemm", ["flat 1", "fc-1.W"], ["prob/ñ-1"], transB=1),
    ]
    inputs = [
        helper.make_tensor_value_info(ODD_INPUT, TensorProto.FLOAT, [batch, 3, 8, 8]),
        helper.make_tensor_value_info("1st bias", TensorProto.FLOAT, [1, 4, 1, 1]),
    ]
    outputs = [helper.make_tensor_value_info("prob/ñ-1", TensorProto.FLOAT, [batch, 2])]
    return _save(_model(nodes, inputs, outputs, inits), path)


def wide_conv(path: Path, *, channels: int = 64, size: int = 32) -> Path:
    """x[1,channels,size,size] -> Conv 3x3 (channels -> channels) -> Relu: one task whose random
    GPU schedules often need more shared memory or threads per block than a GPU has."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype("float32")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    shape = [1, channels, size, size]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    return _save(_model(nodes, [x], [y], [numpy_helper.from_array(w, "w")]), path)


def nan_everywhere(path: Path) -> Path:
    """x[2,4] -> y = Log(-|x| - 1): NaN on every input, in onnxruntime as in TVM."""
    return _of_below_minus_one(path, "Log")


def saturated(path: Path) -> Path:
    """x[2,4] -> y = Relu(-|x| - 1): zero on every input, as a layer that saturates gives."""
    return _of_below_minus_one(path, "Relu")


def _of_below_minus_one(path: Path, op: str) -> Path:
    one = numpy_helper.from_array(np.ones((1,), dtype="float32"), "one")
    nodes = [
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node("Neg", ["a"], ["n"]),
        helper.make_node("Sub", ["n", "one"], ["m"]),
        helper.make_node(op, ["m"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    return _save(_model(nodes, [x], [y], [one]), path)


def identity(path: Path) -> Path:
    """x[1,4] -> Identity: a valid model with no operator to tune."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    return _save(_model([helper.make_node("Identity", ["x"], ["y"])], [x], [y], []), path)


def embedding(path: Path) -> Path:
    """ids int64[1,6] -> Gather(table[50,8], axis 0) -> Relu: an embedding's lookup."""
    table = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32), "table"
    )
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
        helper.make_node("Relu", ["rows"], ["y"]),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8])
    return _save(_model(nodes, [ids], [y], [table]), path)


def token_types(path: Path) -> Path:
    """ids int64[1,6] -> Gather(words[50,8]), types int32[1,6] -> Cast -> Gather(kinds[2,8]),
    their sum: a text model's embeddings, whose token types index 2 rows."""
    rng = np.random.default_rng(0)
    words, kinds = (
        numpy_helper.from_array(rng.standard_normal((rows, 8)).astype(np.float32), name)
        for name, rows in (("words", 50), ("kinds", 2))
    )
    nodes = [
        helper.make_node("Gather", ["words", "ids"], ["w"]),
        helper.make_node("Cast", ["types"], ["t"], to=TensorProto.INT64),
        helper.make_node("Gather", ["kinds", "t"], ["k"], axis=0),
        helper.make_node("Add", ["w", "k"], ["y"]),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6])
    types = helper.make_tensor_value_info("types", TensorProto.INT32, [1, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8])
    return _save(_model(nodes, [ids, types], [y], [words, kinds]), path)


def ids_and_flags(path: Path) -> Path:
    """ids int64[2,8], flags bool[2,8] -> y = where(flags, ids, -ids) as float32."""
    nodes = [
        helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Neg", ["f"], ["g"]),
        helper.make_node("Where", ["flags", "f", "g"], ["y"]),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 8])
    flags = helper.make_tensor_value_info("flags", TensorProto.BOOL, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    return _save(_model(nodes, [ids, flags], [y], []), path)


def data_dependent(path: Path) -> Path:
    """x[4,4] -> NonZero -> Transpose -> GatherND(x) -> Relu: operators after NonZero have
    shapes computed from the input's values (tests/corpus/data_dependent.onnx)."""
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["at"]),
        helper.make_node("GatherND", ["x", "at"], ["picked"]),
        helper.make_node("Relu", ["picked"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    return _save(_model(nodes, [x], [y], []), path)


def sliced_by_input(path: Path) -> Path:
    """w[4,2] -> Slice(0:n) by the input n[1] -> Reshape(-1, 2) + x[1,2]: a reshape of a shape
    the input's values set, which TVM 0.27's importer refuses."""
    nodes = [
        helper.make_node("Slice", ["w", "zero", "n", "zero"], ["s"]),
        helper.make_node("Reshape", ["s", "shape"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.ones((4, 2), np.float32), "w"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([-1, 2], np.int64), "shape"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["k", 2])
    return _save(_model(nodes, [x, n], [y], inits), path)


def half_cnn(path: Path, *, dtype: str = "float16") -> Path:
    """x[1,16,16,16] -> Conv(16) -> Relu -> Conv(16) -> GAP -> MatMul(4), all in `dtype`
    (float16 or bfloat16). TVM's float16 kernels accumulate in float16, onnxruntime's in
    float32, a few 1e-3 apart; onnxruntime's CPU has no bfloat16 Conv or MatMul at all."""
    import ml_dtypes

    rng = np.random.default_rng(0)
    numpy_type = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    half = helper.np_dtype_to_tensor_dtype(np.dtype(numpy_type))
    inits = [
        numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(numpy_type), w)
        for w in ("w1", "w2")
    ]
    inits.append(
        numpy_helper.from_array((rng.standard_normal((16, 4)) * 0.3).astype(numpy_type), "wf")
    )
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c2"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
        helper.make_node("MatMul", ["flat", "wf"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", half, [1, 16, 16, 16])]
    outputs = [helper.make_tensor_value_info("y", half, [1, 4])]
    return _save(_model(nodes, inputs, outputs, inits), path)


def bfloat16_layer_norm(path: Path) -> Path:
    """x[2,8] bfloat16 -> LayerNormalization: TVM 0.27 legalizes layer_norm for float32 and
    float16 only."""
    import ml_dtypes

    scale = numpy_helper.from_array(np.ones(8, dtype=ml_dtypes.bfloat16), "scale")
    nodes = [helper.make_node("LayerNormalization", ["x", "scale"], ["y"], axis=-1)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 8])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 8])]
    return _save(_model(nodes, inputs, outputs, [scale]), path)


def outputs_of_every_kind(path: Path) -> Path:
    """x[1,3,8,8] -> Conv(4) -> its sum (a scalar), where it is positive (bool), its Shape
    (int64, which TVM computes at compile time and returns as a shape) and ArgMax (int64)."""
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w"
    )
    zero = numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("ReduceSum", ["c"], ["total"], keepdims=0),
        helper.make_node("Greater", ["c", "zero"], ["positive"]),
        helper.make_node("Shape", ["c"], ["shape"]),
        helper.make_node("ArgMax", ["c"], ["channel"], axis=1, keepdims=0),
    ]
    outputs = [
        helper.make_tensor_value_info("total", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("positive", TensorProto.BOOL, [1, 4, 8, 8]),
        helper.make_tensor_value_info("shape", TensorProto.INT64, [4]),
        helper.make_tensor_value_info("channel", TensorProto.INT64, [1, 8, 8]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    return _save(_model(nodes, inputs, outputs, [w, zero]), path)


def sequence_output(path: Path) -> Path:
    """x[1,4] -> SplitToSequence: one output, a sequence of four [1,1] tensors; its one task
    (split) has nothing to search."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    seq = helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None)
    nodes = [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1)]
    return _save(_model(nodes, [x], [seq], []), path)


def shared_batch(path: Path) -> Path:
    """a[N,4] + b[N,4] -> z[N,4]: two inputs whose first dimension is the same named one."""
    a, b = (helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4]) for n in "ab")
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 4])
    return _save(_model([helper.make_node("Add", ["a", "b"], ["z"])], [a, b], [z], []), path)


def top_k(path: Path) -> Path:
    """x[1,3,8,8] -> Conv(4) -> Flatten -> TopK(5): values and int64 indices. TVM lowers TopK
    on a CPU to one call of an external sort, a PrimFunc whose only block is not "root"."""
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w"
    )
    k = numpy_helper.from_array(np.array([5], dtype=np.int64), "k")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["c"], ["flat"]),
        helper.make_node("TopK", ["flat", "k"], ["values", "indices"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    outputs = [
        helper.make_tensor_value_info("values", TensorProto.FLOAT, [1, 5]),
        helper.make_tensor_value_info("indices", TensorProto.INT64, [1, 5]),
    ]
    return _save(_model(nodes, inputs, outputs, [w, k]), path)


def shape_arithmetic(path: Path, *, exporter: str = "dynamo") -> Path:
    """x[N,6] -> an op whose operand is computed from x's shape, as torch's exporters write
    it. "dynamo": Shape(start=0, end=1) -> Squeeze -> Mul(3) -> Reshape([1]) -> Concat([2])
    -> Reshape(x), y[3N/2, 2]. "torchscript": Shape -> Gather(1) -> Cast -> Sqrt -> Div(x),
    y[N,6] (x / sqrt(6))."""
    const = {"three": 3, "one": [1], "two": [2], "axis1": 1}
    const = {
        name: numpy_helper.from_array(np.array(v, np.int64), name) for name, v in const.items()
    }
    if exporter == "dynamo":
        nodes = [
            helper.make_node("Shape", ["x"], ["n1"], start=0, end=1),
            helper.make_node("Squeeze", ["n1"], ["n"]),
            helper.make_node("Mul", ["n", "three"], ["n3"]),
            helper.make_node("Reshape", ["n3", "one"], ["n3_1"]),
            helper.make_node("Concat", ["n3_1", "two"], ["to"], axis=0),
            helper.make_node("Reshape", ["x", "to"], ["y"]),
        ]
        inits, out = [const["three"], const["one"], const["two"]], ["M", 2]
    else:
        nodes = [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "axis1"], ["c"], axis=0),
            helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
            helper.make_node("Sqrt", ["cf"], ["root"]),
            helper.make_node("Div", ["x", "root"], ["y"]),
        ]
        inits, out = [const["axis1"]], ["N", 6]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out)
    return _save(_model(nodes, [x], [y], inits, opsets=(("", 18),)), path)


def cumsum(path: Path) -> Path:
    """x[4,16] -> MatMul(w[16,16]) -> CumSum(axis 1): on CUDA TVM dispatches the CumSum to a
    scan kernel of its own, scheduled for any size."""
    w = numpy_helper.from_array(np.eye(16, dtype=np.float32), "w")
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("CumSum", ["mm", "axis"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])
    return _save(_model(nodes, [x], [y], [w, axis]), path)


def outer_sum(path: Path) -> Path:
    """x[2,16] -> Einsum("bi,bj->bij") -> ReduceSum(axis -1): one fused task, a reduction of
    an outer product, on which TVM 0.27's dlight Reduction rule asserts (on CUDA)."""
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    nodes = [
        helper.make_node("Einsum", ["x", "x"], ["outer"], equation="bi,bj->bij"),
        helper.make_node("ReduceSum", ["outer", "axes"], ["y"], keepdims=0),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])
    return _save(_model(nodes, [x], [y], [axes]), path)


def recurrent(
    path: Path,
    op: str = "LSTM",
    *,
    direction: str = "forward",
    layout: int = 0,
    bias: bool = True,
    initial: bool = False,
    reset_after: int = 0,
    steps: int = 5,
    computed: bool = False,
    **attrs,
) -> Path:
    """x[S=steps, B=2, I=3] (layout 1: [B, S, I]) -> one LSTM or GRU of hidden size 4 -> its
    outputs Y, Y_h (and Y_c), with random weights (seed 0); `initial`: initial states as
    model inputs; `computed`: W held in torch's gate order and put in ONNX's by Slices and a
    Concat, as torch's dynamo exporter writes it."""
    rng = np.random.default_rng(0)
    dirs, gates, hidden = 2 if direction == "bidirectional" else 1, 4 if op == "LSTM" else 3, 4
    inits = [
        numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
        for name, shape in (("w", (dirs, gates * hidden, 3)), ("r", (dirs, gates * hidden, 4)))
    ]
    if bias:
        b = rng.standard_normal((dirs, 2 * gates * hidden)).astype(np.float32)
        inits.append(numpy_helper.from_array(b, "b"))
    batch = 2
    state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    states = ["h0", "c0"][: 2 if op == "LSTM" else 1] if initial else []
    inputs = ["x", "w", "r", "b" if bias else "", "", *(states or [])]
    outputs = ["y", "y_h", "y_c"][: 3 if op == "LSTM" else 2]
    if op == "GRU":
        attrs["linear_before_reset"] = reset_after
    nodes = _gates_reordered(inits, gates, hidden) if computed else []
    nodes.append(
        helper.make_node(
            op, inputs, outputs, hidden_size=hidden, direction=direction, layout=layout, **attrs
        )
    )
    shape = [batch, steps, 3] if layout else [steps, batch, 3]
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    x += [helper.make_tensor_value_info(s, TensorProto.FLOAT, state) for s in states]
    ys = [batch, steps, dirs, hidden] if layout else [steps, dirs, batch, hidden]
    shapes = [ys, state, state]
    y = [
        helper.make_tensor_value_info(o, TensorProto.FLOAT, s)
        for o, s in zip(outputs, shapes, strict=False)
    ]
    return _save(_model(nodes, x, y, inits, opsets=(("", 14),)), path)


def _gates_reordered(inits: list, gates: int, hidden: int) -> list:
    """Replace the initializer w (gates in ONNX's order) with w_torch, its gates in torch's
    order (i, f, c, o), and return the nodes that compute w from it again."""
    w = numpy_helper.to_array(inits[0])
    blocks = [w[:, g * hidden : (g + 1) * hidden] for g in range(gates)]  # i, o, f, c
    inits[0] = numpy_helper.from_array(np.concatenate([blocks[i] for i in (0, 2, 3, 1)], 1), "wt")
    nodes, parts = [], []
    for at in range(gates):  # torch's block at of i, f, c, o
        bounds = [np.array([v], np.int64) for v in (at * hidden, (at + 1) * hidden, 1)]
        names = [f"wt_{at}_{k}" for k in ("start", "end", "axis")]
        inits += [numpy_helper.from_array(b, n) for b, n in zip(bounds, names, strict=True)]
        nodes.append(helper.make_node("Slice", ["wt", *names], [f"wt_{at}"]))
        parts.append(f"wt_{at}")
    nodes.append(helper.make_node("Concat", [parts[i] for i in (0, 3, 1, 2)], ["w"], axis=1))
    return nodes


def function_op(path: Path, op: str) -> Path:
    """A model around one operator ONNX defines by a body of others and TVM 0.27 lacks: Celu
    (a body built from its input's type, at opset 12, in an opset-22 model), Swish (a body
    holding a Constant's value_float), HannWindow (an attribute left to its default),
    RotaryEmbedding (4-D), CenterCropPad (a Pad whose pads follow from a Shape), Bernoulli
    (a body that draws at random)."""
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    def value(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    x, y, opset = value("x", [2, 8]), value("y", [2, 8]), 17
    mm = helper.make_node("MatMul", ["x", "w"], ["h"])
    inits = [weight("w", 8, 8)]
    if op in ("Celu", "Swish", "Bernoulli"):
        opset = {"Celu": 22, "Swish": 24, "Bernoulli": 22}[op]
        head = {"Celu": {"alpha": 0.7}, "Swish": {"alpha": 1.3}}.get(op, {})
        nodes = [mm, helper.make_node(op, ["h"], ["y"], **head)]
    elif op == "SwiGLU":  # gate h, value x
        opset, nodes = 28, [mm, helper.make_node(op, ["h", "x"], ["y"], alpha=1.5)]
    elif op == "HannWindow":
        inits.append(numpy_helper.from_array(np.array(8, np.int64), "n"))
        nodes = [
            mm,
            helper.make_node(op, ["n"], ["win"]),
            helper.make_node("Mul", ["h", "win"], ["y"]),
        ]
    elif op == "RotaryEmbedding":  # x[1,2,4,8]: batch, heads, sequence, head size
        x, y, opset = value("x", [1, 2, 4, 8]), value("y", [1, 2, 4, 8]), 23
        inits += [weight("cos", 1, 4, 4), weight("sin", 1, 4, 4)]
        nodes = [mm, helper.make_node(op, ["h", "cos", "sin"], ["y"])]
    else:  # CenterCropPad to 4 rows (a crop) and 12 columns (a pad)
        y, opset = value("y", [4, 12]), 18
        inits.append(numpy_helper.from_array(np.array([4, 12], np.int64), "size"))
        nodes = [mm, helper.make_node(op, ["h", "size"], ["y"])]
    return _save(_model(nodes, [x], [y], inits, opsets=(("", opset),)), path)


def local_functions(path: Path) -> Path:
    """x[1,3,8,8] -> the model's own function local.Block(alpha=0.2) (Conv, then the function
    local.Act: LeakyRelu by the caller's alpha, at opset 16 in an opset-17 model) twice ->
    GlobalAveragePool, as torch.onnx.export(export_modules_as_functions=...) writes modules."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((3, 3, 3, 3)) * 0.4).astype("float32"), w)
        for w in ("w1", "w2")
    ]
    leaky = helper.make_node("LeakyRelu", ["a"], ["o"])
    leaky.attribute.add().CopyFrom(helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT))
    act = helper.make_function(
        "local", "Act", ["a"], ["o"], [leaky], [helper.make_opsetid("", 16)], ["alpha"]
    )
    call_act = helper.make_node("Act", ["c"], ["o"], domain="local")
    call_act.attribute.add().CopyFrom(helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT))
    block = helper.make_function(
        "local",
        "Block",
        ["a", "w"],
        ["o"],
        [helper.make_node("Conv", ["a", "w"], ["c"], pads=[1, 1, 1, 1]), call_act],
        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        ["alpha"],
    )
    nodes = [
        helper.make_node("Block", ["x", "w1"], ["b1"], domain="local", alpha=0.2),
        helper.make_node("Block", ["b1", "w2"], ["b2"], domain="local", alpha=0.2),
        helper.make_node("GlobalAveragePool", ["b2"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 1, 1])
    model = _model(nodes, [x], [y], inits, opsets=(("", 17), ("local", 1)))
    model.functions.extend([act, block])
    return _save(model, path)


def training_mode(path: Path, op: str, *, training: bool = True) -> Path:
    """x[2,4,3,3] -> BatchNormalization (training_mode as `training`), or Dropout(0.5) told
    `training` by a Constant, as torch.onnx.export(training=TrainingMode.TRAINING) writes them."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.random(4) + 0.5).astype("float32"), name)
        for name in ("s", "b", "m", "v")
    ]
    if op == "BatchNormalization":
        nodes = [
            helper.make_node(
                op, ["x", "s", "b", "m", "v"], ["y", "rm", "rv"][: 1 + 2 * training],
                training_mode=int(training),
            )
        ]  # fmt: skip
    else:
        flag = helper.make_tensor("flag", TensorProto.BOOL, [], [training])
        ratio = helper.make_tensor("ratio", TensorProto.FLOAT, [], [0.5])
        nodes = [
            helper.make_node("Constant", [], ["r"], value=ratio),
            helper.make_node("Constant", [], ["t"], value=flag),
            helper.make_node(op, ["x", "r", "t"], ["y"]),
        ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3, 3])
    return _save(_model(nodes, [x], [y], inits), path)


def out_of_order(path: Path, *, cycle: bool = False, shapeless: str = "") -> Path:
    """tiny_cnn's graph with its nodes reversed (onnx's checker refuses it, onnxruntime runs
    it); `cycle` makes its first convolution read the model's output; `shapeless` ("input",
    "output") declares that one without a shape."""
    model = onnx.load(tiny_cnn(path))
    nodes = list(model.graph.node)[::-1]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    if cycle:
        model.graph.node[-1].input[0] = "y"
    for value in {"input": model.graph.input, "output": model.graph.output}.get(shapeless, []):
        value.type.tensor_type.ClearField("shape")
    return _save(model, path, check=False)


def constant_forms(path: Path) -> Path:
    """x[2,3] * Constant(value_floats [3]) + Constant(value_float) -> Reshape by
    Constant(value_ints)."""
    nodes = [
        helper.make_node("Constant", [], ["scale"], value_floats=[0.5, 2.0, -1.0]),
        helper.make_node("Constant", [], ["shift"], value_float=0.25),
        helper.make_node("Constant", [], ["shape"], value_ints=[3, 2]),
        helper.make_node("Mul", ["x", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "shift"], ["shifted"]),
        helper.make_node("Reshape", ["shifted", "shape"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])
    return _save(_model(nodes, [x], [y], []), path)


def padded_blocks(path: Path, blocks: int, *, from_shape: bool = True) -> Path:
    """x[1,2,5,7] -> `blocks` x (Pad H and W up to a multiple of 3 -> Relu), the pads computed as
    TorchScript writes a Swin window's: Concat(0.., Mod(3 - Mod(size, 3), 3)), `size` read by
    Shape from the block's input (each block's shape is known only once the previous block's
    pads are folded) or, `from_shape` False, held by Constant nodes (Python's own arithmetic)."""

    def const(name, values):
        tensor = numpy_helper.from_array(np.array(values, np.int64), name)
        return helper.make_node("Constant", [], [name], value=tensor)

    nodes = [const("three", [3]), const("zeros", [0, 0, 0, 0, 0, 0])]
    if from_shape:
        nodes += [const("hw_start", [2]), const("hw_end", [4])]
    h = "x"
    for b in range(blocks):
        if from_shape:
            nodes += [
                helper.make_node("Shape", [h], [f"shape{b}"]),
                helper.make_node("Slice", [f"shape{b}", "hw_start", "hw_end"], [f"hw{b}"]),
            ]
        else:
            nodes.append(const(f"hw{b}", [5, 7]))
        nodes += [
            helper.make_node("Mod", [f"hw{b}", "three"], [f"rem{b}"]),
            helper.make_node("Sub", ["three", f"rem{b}"], [f"short{b}"]),
            helper.make_node("Mod", [f"short{b}", "three"], [f"add{b}"]),
            helper.make_node("Concat", ["zeros", f"add{b}"], [f"pads{b}"], axis=0),
            helper.make_node("Pad", [h, f"pads{b}"], [f"padded{b}"]),
            helper.make_node("Relu", [f"padded{b}"], [f"h{b}"]),
        ]
        h = f"h{b}"
    nodes[-1].output[0] = "y"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 7])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, "H", "W"])
    return _save(_model(nodes, [x], [y], []), path)


def conv_integer(path: Path, *, dims: int = 2, per_channel: bool = False) -> Path:
    """x[1,4,6(,6)] -> DynamicQuantizeLinear -> ConvInteger(w uint8, 2 groups, padding 1) ->
    Cast -> Mul(scale): what onnxruntime's quantize_dynamic makes of a Conv, 1-D or 2-D. w's
    zero point is one for all, or one per output channel (which onnxruntime cannot run)."""
    rng = np.random.default_rng(0)
    spatial = [6] * dims
    w = rng.integers(0, 255, (6, 2, *[3] * dims), dtype=np.uint8)
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(
            np.array([120, 128, 131, 90, 200, 7] if per_channel else 131, np.uint8), "w_zero"
        ),
        numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
    ]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zero"]),
        helper.make_node(
            "ConvInteger", ["xq", "w", "x_zero", "w_zero"], ["acc"], group=2, pads=[1] * 2 * dims
        ),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x_scale", "w_scale"], ["scale"]),
        helper.make_node("Mul", ["accf", "scale"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, *spatial])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, *spatial])
    return _save(_model(nodes, [x], [y], inits), path)


def old_opset(path: Path, op: str) -> Path:
    """x[1,2,4,4] -> Conv(2, 3x3, pad 1) -> one operator in its old form, weights listed as
    inputs (IR 3), as the ONNX model zoo and older exporters wrote them: Upsample at opset 7
    (scales as an attribute), Upsample at 9 (linear, by 1.5 and 2.5), Slice at 7 (starts and
    ends as attributes), BatchNormalization at 6 (older than onnxruntime runs)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((2, 2, 3, 3)).astype(np.float32), "w")
    inits, opset = [w], 7
    conv = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    if op == "Upsample":
        last, shape = helper.make_node(op, ["c"], ["y"], scales=[1.0, 1.0, 2.0, 2.0]), [8, 8]
    elif op == "Upsample9":
        opset, shape = 9, [6, 10]
        scales = numpy_helper.from_array(np.array([1, 1, 1.5, 2.5], np.float32), "scales")
        inits.append(scales)
        last = helper.make_node("Upsample", ["c", "scales"], ["y"], mode="linear")
    elif op == "Slice":
        last = helper.make_node(op, ["c"], ["y"], starts=[1, 0], ends=[3, 4], axes=[2, 3])
        shape = [2, 4]
    else:  # BatchNormalization
        opset, shape = 6, [4, 4]
        for name in ("scale", "bias", "mean"):
            inits.append(numpy_helper.from_array(rng.standard_normal(2).astype(np.float32), name))
        inits.append(numpy_helper.from_array(np.array([0.5, 2.0], np.float32), "var"))
        last = helper.make_node(op, ["c", "scale", "bias", "mean", "var"], ["y"], is_test=1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, *shape])
    weights = [helper.make_tensor_value_info(i.name, i.data_type, i.dims) for i in inits]
    model = _model([conv, last], [x, *weights], [y], inits, opsets=(("", opset),))
    model.ir_version = 3
    return _save(model, path)


def resize(path: Path, *, mode: str, factor: float | tuple, rank: int = 4, **attrs) -> Path:
    """x[1,2,(9,)11] -> Conv(1x1) -> Resize of the spatial axes by `factor` (one for each, or
    one for all; as scales, or as sizes where attrs holds antialias), mode and other
    attributes as given; opset 18."""
    spatial = [9, 11][-(rank - 2) :]
    factors = factor if isinstance(factor, tuple) else (factor,) * (rank - 2)
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(
        rng.standard_normal((2, 2, *[1] * (rank - 2))).astype(np.float32), "w"
    )
    out = [int(np.floor(d * f)) for d, f in zip(spatial, factors, strict=True)]
    if attrs.get("antialias"):
        how = numpy_helper.from_array(np.array([1, 2, *out], np.int64), "sizes")
        inputs = ["c", "", "", "sizes"]
    else:
        how = numpy_helper.from_array(np.array([1, 1, *factors], np.float32), "scales")
        inputs = ["c", "", "scales"]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Resize", inputs, ["y"], mode=mode, **attrs),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, *spatial])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, *out])
    return _save(_model(nodes, [x], [y], [w, how], opsets=(("", 18),)), path)


def attention(path: Path, *, causal: bool = False, kv_heads: int = 4) -> Path:
    """q[1,4,6,8], k and v [1,kv_heads,6,8] -> Attention (opset 23; grouped-query where
    kv_heads < 4), as torch's exporter writes scaled_dot_product_attention at that opset."""
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 4, 6, 8])
    kv = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, kv_heads, 6, 8]) for n in "kv"]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 8])
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=int(causal))
    return _save(_model([node], [q, *kv], [y], [], opsets=(("", 23),)), path)


def scalar_axes(path: Path) -> Path:
    """x[2,3] -> Unsqueeze -> Unsqueeze, each by one axis held in a 0-d tensor (an initializer,
    a Constant), as torch's exporter writes them."""
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero_axis")
    nodes = [
        helper.make_node("Unsqueeze", ["x", "one"], ["u"]),
        helper.make_node("Constant", [], ["zero"], value=zero),
        helper.make_node("Unsqueeze", ["u", "zero"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 1, 3])
    return _save(_model(nodes, [x], [y], [one], opsets=(("", 18),)), path)


def same_lower_pool(path: Path, op: str, *, size: int, stride: int, kernel: int = 3) -> Path:
    """x[1,2,size,size+1] -> `op` (a pool) with auto_pad SAME_LOWER."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, size, size + 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node(
        op, ["x"], ["y"], auto_pad="SAME_LOWER", kernel_shape=[kernel] * 2, strides=[stride] * 2
    )
    model = _model([node], [x], [y], [])
    return _save(onnx.shape_inference.infer_shapes(model), path)


def counted_loop(
    path: Path, *, steps: int = 5, until_data: bool = False, sequence: bool = False
) -> Path:
    """A recurrence written as a Loop, as tf2onnx writes Keras 3's SimpleRNN: x[1,steps,4],
    carried time step (int32) and h[1,3], h = Tanh(x_t W + h U + b) each step, the condition
    time < steps (`until_data`: sum(h) < 100 too, known only from the data); outputs the last
    h and every step's h [steps,1,3]. `sequence`: the body also makes a sequence of h, as
    TorchScript's list appends do."""
    rng = np.random.default_rng(5)
    f32 = TensorProto.FLOAT
    w, u, b = (rng.standard_normal(s).astype("float32") for s in ((4, 3), (3, 3), (3,)))
    body_nodes = [
        helper.make_node("Add", ["time", "one"], ["time_next"]),
        helper.make_node("Gather", ["xs", "time"], ["x_t"], axis=0),
        helper.make_node("MatMul", ["x_t", "W"], ["xw"]),
        helper.make_node("MatMul", ["h", "U"], ["hu"]),
        helper.make_node("Add", ["xw", "hu"], ["pre"]),
        helper.make_node("Add", ["pre", "B"], ["pre_b"]),
        helper.make_node("Tanh", ["pre_b"], ["h_next"]),
        helper.make_node("Identity", ["h_next"], ["h_row"]),
        helper.make_node("Less", ["time_next", "bound"], ["more" if until_data else "go"]),
    ]
    if sequence:
        body_nodes.append(helper.make_node("SequenceConstruct", ["h_next"], ["listed"]))
    if until_data:
        body_nodes += [
            helper.make_node("ReduceSum", ["h_next"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "hundred"], ["small"]),
            helper.make_node("And", ["more", "small"], ["go"]),
        ]
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("time", TensorProto.INT32, []),
            helper.make_tensor_value_info("h", f32, [1, 3]),
        ],
        [
            helper.make_tensor_value_info("go", TensorProto.BOOL, []),
            helper.make_tensor_value_info("time_next", TensorProto.INT32, []),
            helper.make_tensor_value_info("h_next", f32, [1, 3]),
            helper.make_tensor_value_info("h_row", f32, [1, 3]),
        ],
        [
            numpy_helper.from_array(np.asarray(1, np.int32), "one"),
            numpy_helper.from_array(np.asarray(steps, np.int32), "bound"),
            numpy_helper.from_array(np.asarray(100.0, np.float32), "hundred"),
        ],
    )
    nodes = [
        helper.make_node("Transpose", ["x"], ["xs"], perm=[1, 0, 2]),
        helper.make_node("Less", ["zero", "bound_outer"], ["start"]),
        helper.make_node(
            "Loop", ["trips", "start", "zero", "h0"], ["time_end", "h_last", "hs"], body=body
        ),
    ]
    inits = [
        numpy_helper.from_array(np.asarray(steps, np.int64), "trips"),
        numpy_helper.from_array(np.asarray(0, np.int32), "zero"),
        numpy_helper.from_array(np.asarray(steps, np.int32), "bound_outer"),
        numpy_helper.from_array(np.zeros((1, 3), np.float32), "h0"),
        numpy_helper.from_array(w, "W"),
        numpy_helper.from_array(u, "U"),
        numpy_helper.from_array(b, "B"),
    ]
    return _save(
        _model(
            nodes,
            [helper.make_tensor_value_info("x", f32, [1, steps, 4])],
            [
                helper.make_tensor_value_info("h_last", f32, [1, 3]),
                helper.make_tensor_value_info("hs", f32, [steps, 1, 3]),
            ],
            inits,
        ),
        path,
    )


def reversed_sequences(path: Path, *, lengths: list[int] | None = None) -> Path:
    """x[2,5,3] -> ReverseSequence (batch axis 0, time axis 1) -> Relu; the lengths constant,
    or (None) the time axis's size for each row, read from x's shape as tf2onnx writes it for
    a Keras Bidirectional layer."""
    nodes, inits = [], []
    if lengths is None:
        nodes += [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "one"], ["steps"], axis=0),
            helper.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
            helper.make_node("Expand", ["steps", "rows"], ["lens"]),
        ]
        inits += [
            numpy_helper.from_array(np.asarray([1], np.int64), "one"),
            numpy_helper.from_array(np.asarray([0], np.int64), "zero"),
        ]
    else:
        inits.append(numpy_helper.from_array(np.asarray(lengths, np.int64), "lens"))
    nodes += [
        helper.make_node("ReverseSequence", ["x", "lens"], ["r"], batch_axis=0, time_axis=1),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    f32 = TensorProto.FLOAT
    return _save(
        _model(
            nodes,
            [helper.make_tensor_value_info("x", f32, [2, 5, 3])],
            [helper.make_tensor_value_info("y", f32, [2, 5, 3])],
            inits,
        ),
        path,
    )
