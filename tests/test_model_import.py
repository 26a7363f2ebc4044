import dataclasses

import numpy as np
import onnx
import pytest

import onnx_models
from tune_orchestrator.deploy.library import run_onnxruntime
from tune_orchestrator.errors import InputError
from tune_orchestrator.model import functions
from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
from tune_orchestrator.model.loading import load_model, parse_input_shape, safe_name
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import _static, extract_tasks


@pytest.fixture(scope="module")
def llvm():
    return resolve_target("llvm")


def test_a_good_model_gives_its_inputs_outputs_and_hash(tiny_model):
    model = load_model(tiny_model)
    assert [(i.name, i.shape, i.dtype) for i in model.inputs] == [("x", (1, 3, 8, 8), "float32")]
    assert model.outputs == ("y",)
    assert model.name == "tiny" and len(model.sha256) == 64


def test_weights_listed_as_graph_inputs_are_not_model_inputs(tmp_path, llvm):
    path = onnx_models.tiny_cnn(tmp_path / "old_exporter.onnx", inits_as_inputs=True)
    model = load_model(path)
    assert [i.name for i in model.inputs] == ["x"]
    mod = import_to_relax(model)
    assert len(mod["main"].params) == 1  # weights became constants
    assert extract_tasks(fuse_for_tuning(mod, llvm.target), llvm.target)


def test_dynamic_dimensions_need_a_shape_and_take_one(tmp_path):
    path = onnx_models.tiny_cnn(tmp_path / "dyn.onnx", batch="batch")
    with pytest.raises(
        InputError,
        match=r"dynamic dimensions \(batch x 3 x 8 x 8\); give them with --input-shape x:1x3x8x8$",
    ):
        load_model(path)
    model = load_model(path, {"x": (2, 3, 8, 8)})
    assert model.inputs[0].shape == (2, 3, 8, 8)


def test_the_shape_suggested_leaves_the_sizes_past_the_batch_to_the_user(tmp_path):
    """A dynamic YOLO export was told to give images:1x3x1x1: a 1x1 image, another model."""
    import onnx
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, "height", "seq len"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [value], [])
    graph.output.extend([helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph), tmp_path / "dyn.onnx")
    with pytest.raises(InputError, match=r"x:1x3xHEIGHTxSEQ_LEN, the sizes it will run at$"):
        load_model(tmp_path / "dyn.onnx")


def _decoder_step(path, inputs):
    """A model of `inputs` (name -> declared shape), each passed through, as an LLM export's
    decoder step declares them."""
    import onnx
    from onnx import TensorProto, helper

    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
    nodes = [helper.make_node("Identity", [n], [f"{n}_out"]) for n in inputs]
    outputs = [helper.make_tensor_value_info(f"{n}_out", TensorProto.FLOAT, None) for n in inputs]
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", values, outputs)), path)
    return path


STEP = {  # optimum's names: the mask spans the cache and the new tokens
    "input_ids": ["batch_size", "sequence_length"],
    "attention_mask": ["batch_size", "past_sequence_length + sequence_length"],
    "key": ["batch_size", 2, "past_sequence_length", 8],
    "value": ["batch_size", 2, "past_sequence_length", 8],
}


def test_a_dimension_named_by_arithmetic_follows_from_the_others(tmp_path):
    path = _decoder_step(tmp_path / "step.onnx", STEP)
    model = load_model(path, {"input_ids": (1, 1), "key": (1, 2, 32, 8)})
    assert [i.shape for i in model.inputs] == [(1, 1), (1, 33), (1, 2, 32, 8), (1, 2, 32, 8)]
    with pytest.raises(
        InputError,
        match=r"dimension 'past_sequence_length \+ sequence_length' of 'attention_mask' the size "
        r"40, but by the sizes given \(past_sequence_length 32, sequence_length 1\) it is 33$",
    ):
        load_model(path, {"input_ids": (1, 1), "key": (1, 2, 32, 8), "attention_mask": (1, 40)})


def test_every_input_left_is_asked_for_at_once_with_the_fewest_options(tmp_path):
    """A decoder step was refused one input at a time: three runs to learn four shapes."""
    path = _decoder_step(tmp_path / "step.onnx", STEP)
    with pytest.raises(InputError) as refused:
        load_model(path)
    assert str(refused.value) == (
        "inputs 'input_ids' (batch_size x sequence_length), 'attention_mask' (batch_size x "
        "past_sequence_length + sequence_length), 'key' (batch_size x 2 x past_sequence_length x "
        "8) and 1 more have dynamic dimensions; give them with --input-shape "
        "input_ids:1xSEQUENCE_LENGTH --input-shape key:1x2xPAST_SEQUENCE_LENGTHx8, the sizes it "
        "will run at (inputs that share a dimension's name share its size)"
    )
    with pytest.raises(InputError, match=r"give them with --input-shape key:1x2xPAST_SEQUENCE_LE"):
        load_model(path, {"input_ids": (1, 1)})  # the batch is known, the cache is not


def test_one_shape_sets_a_named_dimension_for_every_input_that_shares_it(tmp_path):
    """--input-shape a:2x4 then asked for b's shape, suggesting b:1x4, though both are Nx4."""
    path = onnx_models.shared_batch(tmp_path / "shared.onnx")
    model = load_model(path, {"a": (2, 4)})
    assert [i.shape for i in model.inputs] == [(2, 4), (2, 4)]
    assert [i.shape for i in load_model(path, {"a": (3, 4), "b": (3, 4)}).inputs] == [(3, 4)] * 2
    with pytest.raises(InputError, match=r"dimension 'N' two sizes: 2 for 'a', 3 for 'b'; input"):
        load_model(path, {"a": (2, 4), "b": (3, 4)})


@pytest.mark.parametrize(
    "shapes, message",
    [
        ({"y": (1, 3, 8, 8)}, "names y, which the model does not have; its inputs are: x"),
        ({"x": (1, 3, 8)}, "has 3 dimensions but the model's input has 4"),
        ({"x": (1, 4, 8, 8)}, "contradicts the model's fixed shape batch x 3 x 8 x 8"),
    ],
)
def test_wrong_input_shapes_are_named(tmp_path, shapes, message):
    path = onnx_models.tiny_cnn(tmp_path / "dyn.onnx", batch="batch")
    with pytest.raises(InputError) as info:
        load_model(path, shapes)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "text, parsed",
    [("x:1x3x224x224", ("x", (1, 3, 224, 224))), ("input:0:1,3", ("input:0", (1, 3)))],
)
def test_input_shape_syntax(text, parsed):
    assert parse_input_shape(text) == parsed


@pytest.mark.parametrize("text", ["x", "x:", ":1x3", "x:1xax3", "x:0x3", "x=1x3"])
def test_malformed_input_shapes_show_the_form(text):
    with pytest.raises(InputError, match="input:1x3x224x224|like"):
        parse_input_shape(text)


def test_missing_empty_truncated_and_foreign_files(tmp_path, tiny_model):
    with pytest.raises(InputError, match="does not exist; check the path"):
        load_model(tmp_path / "nope.onnx")
    # A link `ls` lists, that leads nowhere: said so, not "does not exist".
    (tmp_path / "moved.onnx").symlink_to(tmp_path / "gone" / "model.onnx")
    (tmp_path / "a.onnx").symlink_to(tmp_path / "b.onnx")
    (tmp_path / "b.onnx").symlink_to(tmp_path / "a.onnx")
    for link in ("moved.onnx", "a.onnx"):
        with pytest.raises(InputError, match="is a symbolic link to .*, which cannot be followed"):
            load_model(tmp_path / link)
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(InputError, match=r"is empty \(0 bytes\)"):
        load_model(tmp_path / "empty.onnx")
    data = tiny_model.read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(
        InputError, match="not an ONNX model or is truncated|not a valid ONNX model"
    ):
        load_model(tmp_path / "cut.onnx")
    (tmp_path / "notes.onnx").write_text("these are my notes, not a model\n")
    with pytest.raises(InputError, match="not an ONNX model"):
        load_model(tmp_path / "notes.onnx")
    with pytest.raises(InputError, match="is a directory"):
        load_model(tmp_path)


def test_weights_in_a_file_beside_the_model_are_found_through_a_link_or_named_missing(
    tmp_path, tiny_model
):
    """Both were "not an ONNX model or is truncated ... export it again"."""
    import onnx

    (tmp_path / "models").mkdir()
    saved = tmp_path / "models" / "big.onnx"
    onnx.save(
        onnx.load(tiny_model),
        saved,
        save_as_external_data=True,
        location="big.weights",
        size_threshold=0,
    )
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "elsewhere" / "link.onnx"
    link.symlink_to(saved)
    linked = load_model(link)
    assert linked.inputs == load_model(tiny_model).inputs and linked.external_weights

    class PastTwoGigabytes:  # protobuf's refusal to hold such a model as one message
        def SerializeToString(self):
            raise ValueError("Message onnx.ModelProto exceeds maximum protobuf size of 2GB")

    sample = [np.ones((1, 3, 8, 8), "float32")]
    expected = run_onnxruntime(load_model(tiny_model), sample)
    found = run_onnxruntime(dataclasses.replace(linked, proto=PastTwoGigabytes()), sample)
    np.testing.assert_array_equal(found[0], expected[0])
    alone = tmp_path / "elsewhere" / "copy.onnx"
    alone.write_bytes(saved.read_bytes())
    with pytest.raises(InputError) as info:
        load_model(alone)
    assert str(info.value) == (
        f"{alone}: its weights are in big.weights, missing from {alone.parent}; keep the "
        "weight files beside the model"
    )


def test_unsupported_operators_are_named(tmp_path):
    path = onnx_models.with_operator(tmp_path / "det.onnx", "Det")
    with pytest.raises(InputError, match=r"does not support: Det \(node"):
        load_model(path)


def test_custom_domain_operators_are_named(tmp_path):
    path = onnx_models.with_operator(tmp_path / "custom.onnx", "MyOp", domain="com.example")
    with pytest.raises(InputError, match="custom domains that TVM cannot import: com.example.MyOp"):
        load_model(path)


def test_tasks_carry_weights_and_flops(tmp_path, llvm):
    model = load_model(onnx_models.tiny_cnn(tmp_path / "twins.onnx", twin_convs=True))
    tasks = extract_tasks(fuse_for_tuning(import_to_relax(model), llvm.target), llvm.target)
    by_name = {t.name: t for t in tasks}
    twins = [t for t in tasks if t.weight == 2]
    assert len(twins) == 1 and "conv2d" in twins[0].name  # the two identical convolutions
    assert all(t.flops >= 1 for t in tasks)
    # conv 4->4, 3x3 on 8x8: 2 * 8*8*4 * 4*3*3 multiply-adds, plus the fused ReLU
    assert twins[0].flops >= 2 * 8 * 8 * 4 * 4 * 9
    # heaviest first, and keys are stable hex strings
    assert [t.index for t in tasks] == list(range(len(tasks)))
    assert tasks[0].weight * tasks[0].flops == max(t.weight * t.flops for t in tasks)
    assert len({t.key for t in tasks}) == len(tasks) == len(by_name)


def test_relax_import_computes_what_onnxruntime_computes(tiny_model, llvm):
    import onnxruntime as ort
    import tvm
    from tvm import relax

    model = load_model(tiny_model)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype("float32")
    ex = tvm.compile(import_to_relax(model), target=llvm.target)
    ours = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = ort.InferenceSession(str(tiny_model), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_a_gather_reads_within_its_table_and_tvm_does_not_warn_of_segfaults(tmp_path, llvm, capfd):
    import onnxruntime as ort
    import tvm
    from tvm import relax

    path = onnx_models.embedding(tmp_path / "embedding.onnx")
    ids = np.array([[0, 3, 49, -1, -50, 7]], dtype="int64")  # ONNX counts negatives from the end
    capfd.readouterr()
    ex = tvm.compile(import_to_relax(load_model(path)), target=llvm.target)
    assert "segfault" not in capfd.readouterr().err
    ours = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(ids)).numpy()
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"ids": ids}
    )[0]
    np.testing.assert_allclose(ours, ref)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("resnet50", "resnet50"),
        ("../../etc/passwd", "etc_passwd"),
        ("my model (v2)", "my_model_v2"),
        ("...", "model"),
    ],
)
def test_model_names_become_safe_path_components(text, expected):
    assert safe_name(text) == expected


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_what_a_graph_computes_from_its_input_shapes_imports_as_constants(tmp_path, llvm, exporter):
    # TVM's importer refused both ("Reshape requires the input data to be Tensor"; a unary
    # operator on a scalar): torch's exporters write models with dynamic axes so.
    import onnxruntime as ort
    import tvm
    from tvm import relax

    path = onnx_models.shape_arithmetic(tmp_path / f"{exporter}.onnx", exporter=exporter)
    model = load_model(path, {"x": (4, 6)})
    assert "Shape" not in {node.op_type for node in model.tvm_proto.graph.node}
    assert "Shape" in {node.op_type for node in model.proto.graph.node}  # the user's, as it was
    x = np.random.default_rng(0).standard_normal((4, 6)).astype("float32")
    expected = x.reshape(12, 2) if exporter == "dynamo" else x / np.sqrt(6)
    for proto in (model.proto, model.tvm_proto):
        session = ort.InferenceSession(
            proto.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-6)
    ex = tvm.compile(import_to_relax(model), target=llvm.target)
    ours = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-6)


def test_a_graph_without_shape_arithmetic_is_imported_as_it_is(tmp_path):
    model = load_model(onnx_models.data_dependent(tmp_path / "nz.onnx"))
    assert model.tvm_proto is model.proto


def test_a_kernel_tvm_schedules_for_any_size_is_no_task_and_values_still_refuse(tmp_path):
    # CumSum on CUDA was refused as if its shapes came from the input's values (exit 2).
    import tvm

    target = tvm.target.Target("nvidia/nvidia-h100")
    model = load_model(onnx_models.cumsum(tmp_path / "cumsum.onnx"))
    tasks = extract_tasks(fuse_for_tuning(import_to_relax(model), target), target)
    assert [task.name for task in tasks] == ["matmul"]
    nonzero = load_model(onnx_models.data_dependent(tmp_path / "nz.onnx"))
    with pytest.raises(InputError, match="shapes computed from the input's values"):
        extract_tasks(fuse_for_tuning(import_to_relax(nonzero), target), target)


def _onnxruntime_agrees(model, feed):
    """Run the user's graph and the one TVM imports in onnxruntime: the same outputs."""
    import onnxruntime as ort

    expected, got = (
        ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            list(model.outputs), feed
        )
        for proto in (model.proto, model.tvm_proto)
    )
    for want, have in zip(expected, got, strict=True):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)


def _compiled_and_onnxruntime(path, model, target, feed):
    """(the model's first output compiled by TVM for `target`, onnxruntime's on the file)."""
    import onnxruntime as ort
    import tvm
    from tvm import relax

    ex = tvm.compile(import_to_relax(model), target=target)
    args = [tvm.runtime.tensor(feed[i.name]) for i in model.inputs]
    ours = relax.VirtualMachine(ex, tvm.cpu())["main"](*args).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return ours, session.run(None, feed)[0]


RECURRENT = [
    ("LSTM", {}),
    ("LSTM", {"direction": "bidirectional", "initial": True}),
    ("LSTM", {"direction": "reverse", "bias": False}),
    ("LSTM", {"direction": "bidirectional", "computed": True}),  # as torch's dynamo exports it
    ("GRU", {"reset_after": 1, "initial": True}),
    ("GRU", {"direction": "bidirectional"}),
    ("GRU", {"direction": "reverse", "bias": False, "reset_after": 0}),
]


@pytest.mark.parametrize("op, variant", RECURRENT)
def test_lstm_and_gru_are_unrolled_into_what_tvm_imports(tmp_path, op, variant):
    # TVM's importer has neither: nn.LSTM and nn.GRU exported by torch were refused (exit 2).
    model = load_model(onnx_models.recurrent(tmp_path / "rnn.onnx", op, **variant))
    assert op not in {node.op_type for node in model.tvm_proto.graph.node}
    graph = model.tvm_proto.graph  # the nodes that computed weights, and what they read, gone
    assert all("wt" not in node.input for node in graph.node)
    assert "wt" not in {init.name for init in graph.initializer}
    rng = np.random.default_rng(1)
    _onnxruntime_agrees(
        model, {i.name: rng.standard_normal(i.shape).astype("float32") for i in model.inputs}
    )


def test_an_unrolled_gru_compiles_and_computes_what_onnxruntime_does(tmp_path, llvm):
    import onnxruntime as ort
    import tvm
    from tvm import relax

    path = onnx_models.recurrent(tmp_path / "gru.onnx", "GRU", direction="bidirectional")
    model = load_model(path)
    x = np.random.default_rng(2).standard_normal((5, 2, 3)).astype("float32")
    ex = tvm.compile(import_to_relax(model), target=llvm.target)
    ours = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for want, have in zip(session.run(None, {"x": x}), ours, strict=True):
        np.testing.assert_allclose(have.numpy(), want, rtol=1e-5, atol=1e-6)


def test_an_unrolled_recurrence_has_as_many_tasks_whatever_its_length(tmp_path, llvm):
    # One kernel per step (a Slice per row) or a minute of FoldConstant for 16 steps (a Gather
    # per row) made long sequences untunable.
    counts = []
    for steps in (3, 12):
        path = onnx_models.recurrent(tmp_path / f"lstm{steps}.onnx", "LSTM", steps=steps)
        mod = fuse_for_tuning(import_to_relax(load_model(path)), llvm.target)
        counts.append(len(extract_tasks(mod, llvm.target)))
    assert counts[0] == counts[1]


@pytest.mark.parametrize(
    "attrs, reason",
    [
        ({"clip": 1.0}, "clip"),
        ({"activations": ["Relu", "Tanh", "Tanh"]}, "activations"),
        ({"layout": 1}, "layout 1"),
    ],
)
def test_a_recurrence_that_cannot_be_unrolled_is_named_with_the_reason(tmp_path, attrs, reason):
    path = onnx_models.recurrent(tmp_path / "odd.onnx", "LSTM", **attrs)
    with pytest.raises(InputError, match=rf"does not support: LSTM with {reason}"):
        load_model(path)


def test_a_loop_its_constants_count_is_unrolled_and_computes_what_onnxruntime_does(tmp_path, llvm):
    """Keras 3's LSTM, GRU and SimpleRNN, converted by tf2onnx, are Loops over the time steps,
    which TVM's importer lacks: refused (exit 2)."""
    path = onnx_models.counted_loop(tmp_path / "loop.onnx", steps=5)
    model = load_model(path)
    assert "Loop" not in {node.op_type for node in model.tvm_proto.graph.node}
    assert "Loop" in {node.op_type for node in model.proto.graph.node}  # the user's keeps it
    feed = {"x": np.random.default_rng(4).standard_normal((1, 5, 4)).astype("float32")}
    _onnxruntime_agrees(model, feed)
    import onnxruntime as ort
    import tvm
    from tvm import relax

    ex = tvm.compile(import_to_relax(model), target=llvm.target)
    ours = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(feed["x"]))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for want, have in zip(session.run(None, feed), ours, strict=True):
        np.testing.assert_allclose(have.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("variant", [{"until_data": True}, {"sequence": True}])
def test_a_loop_that_cannot_be_unrolled_is_refused_by_name(tmp_path, variant):
    """Its condition known from the data only, or a body that builds a sequence (unrolled,
    TVM's importer never returned from the ConcatFromSequence of a TorchScript loop's list
    appends)."""
    path = onnx_models.counted_loop(tmp_path / "loop.onnx", **variant)
    with pytest.raises(InputError, match=r"does not support: Loop \(node"):
        load_model(path)


@pytest.mark.parametrize("lengths", [None, [5, 5]])
def test_a_reverse_sequence_over_whole_sequences_is_a_slice(tmp_path, llvm, lengths):
    """tf2onnx writes the backward half of a Keras Bidirectional layer so, its lengths read from
    the input's shape; TVM's importer has no ReverseSequence: refused (exit 2)."""
    path = onnx_models.reversed_sequences(tmp_path / "r.onnx", lengths=lengths)
    model = load_model(path)
    assert "ReverseSequence" not in {node.op_type for node in model.tvm_proto.graph.node}
    feed = {"x": np.random.default_rng(6).standard_normal((2, 5, 3)).astype("float32")}
    _onnxruntime_agrees(model, feed)
    ours, want = _compiled_and_onnxruntime(path, model, llvm.target, feed)
    np.testing.assert_allclose(ours, want, rtol=1e-6)


def test_a_reverse_sequence_over_shorter_sequences_is_refused_by_name(tmp_path):
    path = onnx_models.reversed_sequences(tmp_path / "r.onnx", lengths=[5, 3])
    with pytest.raises(InputError, match=r"ReverseSequence with lengths other than its whole"):
        load_model(path)


@pytest.mark.parametrize("op", ["Celu", "Swish", "HannWindow", "RotaryEmbedding", "CenterCropPad"])
def test_operators_defined_as_functions_are_expanded_into_their_bodies(tmp_path, op):
    # TVM's importer lacks them: a model with nn.CELU was refused (exit 2).
    model = load_model(onnx_models.function_op(tmp_path / "f.onnx", op))
    ops = {node.op_type for node in model.tvm_proto.graph.node}
    assert op not in ops and not ops & {"Shape", "Size"}  # CenterCropPad's shapes fold too
    assert ops <= set(functions.importable())
    assert op in {node.op_type for node in model.proto.graph.node}  # the user's graph keeps it
    x = np.random.default_rng(3).standard_normal(model.inputs[0].shape).astype("float32")
    _onnxruntime_agrees(model, {"x": x})


def test_an_expanded_operator_compiles_and_computes_what_onnxruntime_does(tmp_path, llvm):
    path = onnx_models.function_op(tmp_path / "celu.onnx", "Celu")
    x = np.random.default_rng(4).standard_normal((2, 8)).astype("float32")
    ours, want = _compiled_and_onnxruntime(path, load_model(path), llvm.target, {"x": x})
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


def test_a_body_holding_an_operator_defined_as_a_function_is_expanded_in_turn(tmp_path, llvm):
    # SwiGLU's body holds Swish, whose body is written for opset 24 (in an opset-28 model).
    import tvm
    from tvm import relax

    model = load_model(onnx_models.function_op(tmp_path / "glu.onnx", "SwiGLU"))
    assert {node.op_type for node in model.tvm_proto.graph.node} <= set(functions.importable())
    x = np.random.default_rng(5).standard_normal((2, 8)).astype("float32")
    ex = tvm.compile(import_to_relax(model), target=llvm.target)
    ours = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    w = onnx.numpy_helper.to_array(model.proto.graph.initializer[0])
    gate = x @ w
    want = gate / (1 + np.exp(-1.5 * gate)) * x
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


def test_a_body_holding_operators_tvm_lacks_is_refused_with_their_names(tmp_path):
    path = onnx_models.function_op(tmp_path / "coin.onnx", "Bernoulli")
    with pytest.raises(
        InputError, match="expand to operator.* does not support: RandomUniformLike"
    ):
        load_model(path)


def test_local_functions_are_inlined_and_compute_what_onnxruntime_does(tmp_path, llvm):
    # A module exported as a function was refused as an operator of a custom domain (exit 2).
    path = onnx_models.local_functions(tmp_path / "blocks.onnx")
    model = load_model(path)
    assert not model.proto.functions
    ops = {n.op_type for n in model.tvm_proto.graph.node}
    assert ops == {"Conv", "LeakyRelu", "GlobalAveragePool"}
    x = np.random.default_rng(6).standard_normal((1, 3, 8, 8)).astype("float32")
    ours, want = _compiled_and_onnxruntime(path, model, llvm.target, {"x": x})
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)
    # The output check runs the file as written, not as inlined here.
    as_written = dataclasses.replace(model, proto=onnx.ModelProto())
    np.testing.assert_allclose(run_onnxruntime(as_written, [x])[0], want, rtol=1e-6)


def test_nodes_out_of_order_are_sorted_and_compute_what_onnxruntime_does(tmp_path, llvm):
    # onnx's checker refused the graph onnxruntime runs: "not a valid ONNX model" (exit 2).
    path = onnx_models.out_of_order(tmp_path / "reversed.onnx")
    model = load_model(path)
    ops = [n.op_type for n in model.proto.graph.node]
    assert ops == "Conv Relu GlobalAveragePool Flatten Gemm".split()
    x = np.random.default_rng(7).standard_normal((1, 3, 8, 8)).astype("float32")
    ours, want = _compiled_and_onnxruntime(path, model, llvm.target, {"x": x})
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


def test_a_cycle_is_refused_naming_its_nodes(tmp_path):
    with pytest.raises(InputError, match=r"in a cycle; none of Gemm \('y'\), Flatten"):
        load_model(onnx_models.out_of_order(tmp_path / "cycle.onnx", cycle=True))


def test_an_input_or_output_without_a_shape_takes_one(tmp_path):
    path = onnx_models.out_of_order(tmp_path / "no_input_shape.onnx", shapeless="input")
    with pytest.raises(InputError, match=r"input 'x' has no shape.*--input-shape x:"):
        load_model(path)
    assert load_model(path, {"x": (2, 3, 8, 8)}).inputs[0].shape == (2, 3, 8, 8)
    model = load_model(onnx_models.out_of_order(tmp_path / "no_out.onnx", shapeless="output"))
    assert [d.dim_value for d in model.proto.graph.output[0].type.tensor_type.shape.dim] == [1, 2]


@pytest.mark.parametrize("op", ["BatchNormalization", "Dropout"])
def test_a_model_exported_for_training_is_refused_with_the_fix(tmp_path, op):
    # onnxruntime drops at random, or normalizes by the batch: a run tuned its whole budget
    # and shipped nothing (exit 4).
    with pytest.raises(InputError, match=rf"computes as in training: {op} \(node 'y'\)"):
        load_model(onnx_models.training_mode(tmp_path / "train.onnx", op))
    assert load_model(onnx_models.training_mode(tmp_path / "eval.onnx", op, training=False))


def test_constants_in_every_attribute_form_import(tmp_path, llvm):
    # TVM reads a Constant's `value` only: value_float(s) and value_int(s) were refused.
    import tvm
    from tvm import relax

    model = load_model(onnx_models.constant_forms(tmp_path / "consts.onnx"))
    x = np.arange(6, dtype="float32").reshape(2, 3)
    _onnxruntime_agrees(model, {"x": x})
    ex = tvm.compile(import_to_relax(model), target=llvm.target)
    ours = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = (x * np.array([0.5, 2.0, -1.0], "float32") + 0.25).reshape(3, 2)
    np.testing.assert_allclose(ours, want, rtol=1e-6)


@pytest.mark.parametrize("blocks, from_shape", [(6, True), (2, False)])
def test_pads_computed_from_shapes_or_constants_fold_block_after_block(
    tmp_path, llvm, blocks, from_shape
):
    # TorchScript's Swin: each window's pads are Mod/Sub/Concat of a Shape read after the last
    # Pad, or of Python's constants; TVM refused them ("Dynamic pads are not supported yet").
    path = onnx_models.padded_blocks(tmp_path / "pads.onnx", blocks, from_shape=from_shape)
    model = load_model(path)
    x = np.random.default_rng(6).standard_normal((1, 2, 5, 7)).astype("float32")
    ours, want = _compiled_and_onnxruntime(path, model, llvm.target, {"x": x})
    np.testing.assert_array_equal(ours, want)


def test_a_kernel_whose_size_is_a_parameter_counts_as_dynamic():
    # TVM raises ValueError, not TypeError, for a size passed as a scalar parameter: a Swin
    # exported by TorchScript ended "internal error" (exit 1) instead of being named.
    import tvm
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def main(a: T.Buffer((2, 2), "float32"), n: T.int64, b_handle: T.handle):
        b = T.match_buffer(b_handle, (n, 4), "float32")
        for i, j in T.grid(n, 4):
            with T.sblock("b"):
                vi, vj = T.axis.remap("SS", [i, j])
                b[vi, vj] = a[vi % 2, vj % 2]

    assert not _static(tvm.IRModule({"main": main}))


@pytest.mark.parametrize("dims", [1, 2])
def test_an_integer_convolution_compiles_and_computes_what_onnxruntime_does(tmp_path, llvm, dims):
    # onnxruntime's quantize_dynamic makes ConvInteger of a CNN's Conv; TVM lacks it (exit 2).
    path = onnx_models.conv_integer(tmp_path / "qconv.onnx", dims=dims)
    model = load_model(path)
    assert "ConvInteger" not in {node.op_type for node in model.tvm_proto.graph.node}
    x = np.random.default_rng(7).standard_normal(model.inputs[0].shape).astype("float32")
    ours, want = _compiled_and_onnxruntime(path, model, llvm.target, {"x": x})
    np.testing.assert_allclose(ours, want, rtol=1e-6)


def test_an_integer_convolution_with_a_zero_point_per_channel_computes_its_definition(
    tmp_path, llvm
):
    import tvm
    from tvm import relax

    path = onnx_models.conv_integer(tmp_path / "qconv.onnx", dims=1, per_channel=True)
    model = load_model(path)
    x = np.random.default_rng(8).standard_normal((1, 4, 6)).astype("float32")
    ex = tvm.compile(import_to_relax(model), target=llvm.target)
    ours = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    # DynamicQuantizeLinear, then the grouped, padded 1-D convolution of the zero-free values
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.proto.graph.initializer}
    scale = (max(x.max(), 0) - min(x.min(), 0)) / 255
    zero = np.clip(np.round(-min(x.min(), 0) / scale), 0, 255)
    xq = np.pad(np.clip(np.round(x / scale) + zero, 0, 255) - zero, ((0, 0), (0, 0), (1, 1)))
    w = weights["w"].astype(np.int64) - weights["w_zero"].astype(np.int64)[:, None, None]
    want = np.zeros((1, 6, 6))
    for out in range(6):
        group = out // 3
        for at in range(6):
            want[0, out, at] = np.sum(xq[0, 2 * group : 2 * group + 2, at : at + 3] * w[out])
    np.testing.assert_allclose(ours, want * scale * weights["w_scale"], rtol=1e-5)


@pytest.mark.parametrize("op", ["Upsample", "Upsample9", "Slice"])
def test_a_model_of_an_old_opset_is_upgraded_for_tvm(tmp_path, llvm, op):
    # TVM computed an opset-7 Upsample wrongly (1.4 relative error) and could not import an
    # opset-7 Slice; onnx's converter made an opset-9 linear Upsample a half-pixel Resize.
    import tvm
    from tvm import relax

    model = load_model(onnx_models.old_opset(tmp_path / "old.onnx", op))
    assert functions.opset_of(model.tvm_proto) == 11
    assert functions.opset_of(model.proto) < 11  # the user's graph, which onnxruntime checks
    x = np.random.default_rng(9).standard_normal((1, 2, 4, 4)).astype("float32")
    ex = tvm.compile(import_to_relax(model), target=llvm.target)
    ours = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    (want,) = run_onnxruntime(model, [x])
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


def test_a_model_older_than_onnxruntime_runs_is_not_converted(tmp_path):
    # Nothing could check a conversion below opset 7, and onnx's 6 -> 7 adapters can change
    # what a model computes (a bias unsqueezed on the wrong axes).
    model = load_model(onnx_models.old_opset(tmp_path / "old.onnx", "BatchNormalization"))
    assert model.tvm_proto is model.proto


RESIZES = [
    {"mode": "linear", "factor": 1.7},  # torch's bilinear scale_factor=1.7: was 0.19 off
    {"mode": "linear", "factor": 0.37, "coordinate_transformation_mode": "pytorch_half_pixel"},
    {"mode": "cubic", "factor": 1.3},
    {"mode": "nearest", "factor": 1.6, "coordinate_transformation_mode": "asymmetric"},
    {"mode": "linear", "factor": 2.5, "rank": 3},
    {"mode": "linear", "factor": (1.7, 1.0)},  # the height alone
    {"mode": "linear", "factor": 0.5, "antialias": 1},  # torch's antialias=True: was 0.69 off
    {"mode": "cubic", "factor": 0.6, "antialias": 1},
]


@pytest.mark.parametrize("attrs", RESIZES, ids=lambda a: "-".join(map(str, a.values())))
def test_a_resize_tvm_would_get_wrong_computes_what_onnxruntime_does(tmp_path, llvm, attrs):
    # TVM interpolates by the sizes' ratio where ONNX maps by the scale, and ignores antialias.
    path = onnx_models.resize(tmp_path / "resize.onnx", **attrs)
    model = load_model(path)
    assert "Resize" not in {node.op_type for node in model.tvm_proto.graph.node}
    x = np.random.default_rng(10).standard_normal(model.inputs[0].shape).astype("float32")
    ours, want = _compiled_and_onnxruntime(path, model, llvm.target, {"x": x})
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5)


def test_a_resize_tvm_gets_right_is_left_to_it(tmp_path):
    path = onnx_models.resize(tmp_path / "resize.onnx", mode="linear", factor=2.0)
    assert "Resize" in {node.op_type for node in load_model(path).tvm_proto.graph.node}


@pytest.mark.parametrize("causal, kv_heads", [(False, 4), (True, 4), (False, 2)])
def test_opset_23_attention_is_expanded_not_read_as_microsofts(tmp_path, llvm, causal, kv_heads):
    # TVM's importer converts any Attention as com.microsoft's: "TVM cannot import ...:
    # 'num_heads'" for torch's scaled_dot_product_attention exported at opset 23.
    path = onnx_models.attention(tmp_path / "att.onnx", causal=causal, kv_heads=kv_heads)
    model = load_model(path)
    assert "Attention" not in {node.op_type for node in model.tvm_proto.graph.node}
    rng = np.random.default_rng(11)
    feed = {i.name: rng.standard_normal(i.shape).astype("float32") for i in model.inputs}
    ours, want = _compiled_and_onnxruntime(path, model, llvm.target, feed)
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)


def test_one_axis_in_a_0d_tensor_imports(tmp_path, llvm):
    # torch's grouped-query attention at opset 18: "'int' object is not iterable".
    path = onnx_models.scalar_axes(tmp_path / "axes.onnx")
    x = np.arange(6, dtype="float32").reshape(2, 3)
    ours, want = _compiled_and_onnxruntime(path, load_model(path), llvm.target, {"x": x})
    np.testing.assert_array_equal(ours, want)


@pytest.mark.parametrize("size, stride, kernel", [(9, 2, 3), (10, 3, 3), (7, 1, 4)])
def test_a_same_lower_max_pool_has_the_shape_and_values_onnx_gives(
    tmp_path, llvm, size, stride, kernel
):
    # TVM made a 3x3 max pool by 2 over 9x9 4x4 where onnxruntime made 5x5.
    path = onnx_models.same_lower_pool(
        tmp_path / "pool.onnx", "MaxPool", size=size, stride=stride, kernel=kernel
    )
    x = np.random.default_rng(12).standard_normal((1, 2, size, size + 1)).astype("float32")
    ours, want = _compiled_and_onnxruntime(path, load_model(path), llvm.target, {"x": x})
    assert ours.shape == want.shape
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)
