"""bfloat16 models: taken as input, measured on real values, checked against onnxruntime on a
float32 copy (its CPU kernels lack bfloat16 Conv, MatMul and Gemm), shipped (the last in
test_output_check.py, with float16)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import onnx_models
from tune_orchestrator.cli.commands import main
from tune_orchestrator.config import Settings
from tune_orchestrator.deploy import samples, upcast
from tune_orchestrator.deploy.check import DIFFERS, MATCHED, Checker
from tune_orchestrator.errors import InputError
from tune_orchestrator.measure import _cuda_worker, _worker
from tune_orchestrator.model.loading import load_model


def _checker(model):
    drawn = samples.random_samples(model, seed=0, int_range=(0, 9))
    return Checker.for_model(model, samples=drawn, settings=Settings.load().check)


def test_bfloat16_inside_a_float32_model_has_a_reference_and_a_wrong_build_is_caught(tmp_path):
    """A Cast to bfloat16 before the classifier: onnxruntime has no bfloat16 Gemm, so the model
    was "not checkable" and shipped nothing."""
    proto = onnx.load(onnx_models.tiny_cnn(tmp_path / "tiny.onnx"))
    graph = proto.graph
    gemm = graph.node.pop()  # the last node; its inputs and output go through bfloat16
    low = [
        helper.make_node("Cast", [name], [f"{name}_bf16"], to=TensorProto.BFLOAT16)
        for name in gemm.input
    ]
    gemm.input[:] = [f"{name}_bf16" for name in gemm.input]
    back = helper.make_node("Cast", ["y_bf16"], [gemm.output[0]], to=TensorProto.FLOAT)
    gemm.output[0] = "y_bf16"
    graph.node.extend([*low, gemm, back])
    onnx.save(proto, tmp_path / "inside.onnx")
    model = load_model(tmp_path / "inside.onnx")
    assert model.bfloat16 and model.half_precision
    checker = _checker(model)
    reference = checker._references()
    assert reference is not None, checker._no_reference
    assert checker.compare(reference).status == MATCHED
    off = [[np.asarray(reference[0][0]) * 1.1]] + reference[1:]
    found = checker.compare(off)
    assert found.status == DIFFERS and "> rtol_half 0.05" in found.reason


def test_a_float32_copy_past_protobufs_limit_is_read_from_files(tmp_path, monkeypatch):
    """A bfloat16 model whose float32 copy passes 2 GB (its weights doubled) could not be
    serialized for onnxruntime ("EncodeError: Failed to serialize proto"): no reference,
    nothing shipped (exit 5). The copy is written to files, its weights beside it, and read
    from there (protobuf's refusal stood in for on this small model)."""
    from tune_orchestrator.deploy import library

    model = load_model(onnx_models.half_cnn(tmp_path / "bf16.onnx", dtype="bfloat16"))
    written = []
    save = upcast.save_with_weights_beside
    monkeypatch.setattr(library, "serialize", lambda proto: None)
    monkeypatch.setattr(upcast, "save_with_weights_beside", _recording(save, written))
    reference = _checker(model)._references()
    assert reference is not None and written  # from the files, which are gone again
    monkeypatch.undo()
    again = _checker(model)._references()
    assert all(np.array_equal(a, b) for a, b in zip(reference[0], again[0], strict=True))
    assert not any(Path(path).parent.exists() for path in written)


def _recording(save, written):
    def saved(proto, folder):
        path = save(proto, folder)
        written.append(path)
        assert (folder / "weights.bin").stat().st_size > 1000
        return path

    return saved


def test_the_float32_copy_converts_every_bfloat16_value_exactly_and_leaves_the_model(tmp_path):
    path = onnx_models.half_cnn(tmp_path / "bf16.onnx", dtype="bfloat16")
    proto = onnx.load(path)
    # A Constant of bfloat16 and a generator of it, inside an If's branch.
    const = numpy_helper.from_array(np.full((2, 2), 0.5, dtype=ml_dtypes.bfloat16), "half")
    branch = helper.make_graph(
        [
            helper.make_node("Constant", [], ["c"], value=const),
            helper.make_node("EyeLike", ["c"], ["r"], dtype=TensorProto.BFLOAT16),
            helper.make_node("Cast", ["r"], ["b"], to=TensorProto.BFLOAT16),
        ],
        "branch",
        [],
        [helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [2, 2])],
    )
    flag = numpy_helper.from_array(np.array(True), "flag")
    proto.graph.initializer.append(flag)
    proto.graph.node.append(
        helper.make_node("If", ["flag"], ["unused"], then_branch=branch, else_branch=branch)
    )
    copy = upcast.float32_copy(proto)
    onnx.save(copy, tmp_path / "copy.onnx")
    onnx.save(proto, tmp_path / "again.onnx")
    assert not load_model(tmp_path / "copy.onnx").bfloat16
    assert load_model(tmp_path / "again.onnx").bfloat16  # the model itself unchanged
    for before, after in zip(proto.graph.initializer, copy.graph.initializer, strict=True):
        original = numpy_helper.to_array(before)
        if original.dtype == ml_dtypes.bfloat16:
            converted = numpy_helper.to_array(after)
            assert converted.dtype == np.float32
            assert np.array_equal(converted, original.astype(np.float32))
    branch_nodes = copy.graph.node[-1].attribute[0].g.node
    assert numpy_helper.to_array(branch_nodes[0].attribute[0].t).dtype == np.float32
    assert [a.i for n in branch_nodes[1:] for a in n.attribute] == [TensorProto.FLOAT] * 2


def test_bfloat16_check_inputs_are_read_as_numpy_saves_them_or_as_float32(tmp_path):
    model = load_model(onnx_models.half_cnn(tmp_path / "bf16.onnx", dtype="bfloat16"))
    values = np.random.default_rng(0).standard_normal((2, 1, 16, 16, 16)).astype(np.float32)
    for name, array in [("saved", values.astype(ml_dtypes.bfloat16)), ("single", values)]:
        np.savez(tmp_path / f"{name}.npz", x=array)  # bfloat16 is saved as 2-byte raw values
        given = samples.load_samples(tmp_path / f"{name}.npz", model)
        assert len(given.arrays) == 2 and given.arrays[0][0].dtype == ml_dtypes.bfloat16
        assert np.array_equal(given.arrays[1][0], values[1].astype(ml_dtypes.bfloat16))
    np.savez(tmp_path / "double.npz", x=values.astype(np.float64))
    with pytest.raises(InputError, match="is float64 but .* is bfloat16; save it as bfloat16 or"):
        samples.load_samples(tmp_path / "double.npz", model)


def test_an_operator_tvm_cannot_compile_at_its_type_is_one_line_and_exit_2(tmp_path, fast_config):
    """A bfloat16 LayerNormalization (TVM 0.27 legalizes it for float32 and float16 only) was
    "internal error" with a traceback, exit 1."""
    model = onnx_models.bfloat16_layer_norm(tmp_path / "ln.onnx")
    out = tmp_path / "run"
    args = ["--build-only", "--target", "llvm", "--config", str(fast_config), "--out", str(out)]
    result = CliRunner().invoke(main, [*args, str(model)])
    assert result.exit_code == 2, result.output
    assert "error: TVM cannot compile an operator of the model: " in result.stderr
    assert "layer_norm" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


def test_measurements_draw_real_bfloat16_inputs_and_see_its_nan():
    """bfloat16 arguments were zeros, and left out of the check for NaN and Inf."""
    import tvm

    specs = (("bfloat16", (64,)), ("float32", (64,)))
    first, second = _worker._arguments(tvm.cpu(0), "cpu", specs)
    drawn = first.numpy()
    assert drawn.dtype == ml_dtypes.bfloat16 and np.count_nonzero(drawn.astype(np.float32)) > 60
    assert _worker._all_finite([first, second])
    first.copyfrom(np.full(64, np.nan, dtype=ml_dtypes.bfloat16))
    assert not _worker._all_finite([first, second])


def test_on_a_gpu_bfloat16_is_held_as_its_bits_and_handed_to_tvm_as_bfloat16():
    """cupy has no bfloat16: held as uint16 patterns, viewed as bfloat16 by TVM (a numpy array
    stands in for cupy's here, through the same DLPack hand-over)."""
    values = np.array([1.5, -2.0, np.inf, np.nan], dtype=ml_dtypes.bfloat16)
    bits = _cuda_worker._held_as(values)
    assert bits.dtype == np.uint16
    buffer = np.empty(64, dtype=np.uint16)  # DLPack wants 64-byte alignment, as cupy's has
    start = (-buffer.ctypes.data % 64) // 2
    aligned = buffer[start : start + 4]
    aligned[:] = bits
    tensor = _cuda_worker._to_tvm(aligned, "bfloat16")
    assert str(tensor.dtype) == "bfloat16" and tuple(tensor.shape) == (4,)
    assert np.array_equal(tensor.numpy()[:2].astype(np.float32), [1.5, -2.0])
    assert list(_cuda_worker.finite_values(np, bits, "bfloat16")) == [True, True, False, False]
