"""ONNX names that are no C identifiers: renamed once at import, for TVM only; the user's
names stay in everything the user sees."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import onnx_models
from cli_args import tune_args
from tune_orchestrator.cli.commands import main
from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
from tune_orchestrator.model.loading import load_model
from tune_orchestrator.model.names import for_tvm, is_c_identifier, safe_names
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import extract_tasks

SHAPE = f"{onnx_models.ODD_INPUT}:1x3x8x8"


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    return onnx_models.odd_names(tmp_path_factory.mktemp("names") / "odd.onnx")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=12))
def test_any_names_become_distinct_c_identifiers_and_valid_ones_stay(names):
    renamed = safe_names(names)
    final = {n: renamed.get(n, n) for n in names if n}
    assert all(is_c_identifier(v) for v in final.values())
    assert len(set(final.values())) == len(final)  # no two names merge
    assert all(n not in renamed for n in final if is_c_identifier(n))
    assert safe_names(names) == renamed  # the same names always give the same result


@pytest.mark.parametrize(
    "name, expected",
    [
        ("gpu_0/data_0", "gpu_0_data_0"),
        ("1st bias", "t_1st_bias"),
        ("conv1/W:0", "conv1_W_0"),
        ("ré.lu", "r_lu"),
        ("float", "float_"),
        ("x", None),
        ("_ok_1", None),
    ],
)
def test_what_a_name_becomes(name, expected):
    assert safe_names([name]).get(name) == expected


def test_a_renamed_name_never_takes_one_the_graph_has():
    assert safe_names(["a_b", "a/b", "a-b"]) == {"a/b": "a_b_1", "a-b": "a_b_2"}
    assert safe_names(["a/b", "a_b"]) == {"a/b": "a_b_1"}  # a valid name keeps itself


def test_every_name_tvm_gets_is_an_identifier_and_the_user_keeps_theirs(odd):
    model = load_model(odd, {onnx_models.ODD_INPUT: (1, 3, 8, 8)})
    assert [i.name for i in model.inputs] == [onnx_models.ODD_INPUT, "1st bias"]
    assert model.outputs == ("prob/ñ-1",) and model.proto.graph.input[0].name == "gpu_0/data_0"
    assert model.describe()["inputs"][0]["name"] == "gpu_0/data_0"
    graph = model.tvm_proto.graph
    names = [
        *(v.name for v in (*graph.input, *graph.output, *graph.value_info)),
        *(t.name for t in graph.initializer),
        *(n for node in graph.node for n in (*node.input, *node.output, node.name) if n),
    ]
    assert names and all(is_c_identifier(n) for n in names)
    assert len(model.tvm_names) == model.describe()["renamed_for_tvm"] == 11
    params = [str(p.name) for p in import_to_relax(model)["main"].params]
    assert params == [model.tvm_names["gpu_0/data_0"], model.tvm_names["1st bias"]]


def test_a_model_with_good_names_is_not_copied(tiny_model):
    model = load_model(tiny_model)
    assert model.tvm_proto is model.proto and model.tvm_names == {}


def test_names_are_renamed_in_subgraphs_too():
    from onnx import TensorProto, helper

    branch = helper.make_graph(
        [helper.make_node("Neg", ["in/x"], ["then:out"])],
        "then",
        [],
        [helper.make_tensor_value_info("then:out", TensorProto.FLOAT, [2])],
    )
    other = helper.make_graph(
        [helper.make_node("Abs", ["in/x"], ["else:out"])],
        "else",
        [],
        [helper.make_tensor_value_info("else:out", TensorProto.FLOAT, [2])],
    )
    node = helper.make_node(
        "If", ["cond 0"], ["out/y"], then_branch=branch, else_branch=other, name="if 1"
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("cond 0", TensorProto.BOOL, []),
            helper.make_tensor_value_info("in/x", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("out/y", TensorProto.FLOAT, [2])],
    )
    renamed, names = for_tvm(helper.make_model(graph))
    sub = renamed.graph.node[0].attribute
    inner = {a.name: a.g for a in sub}
    assert inner["then_branch"].node[0].input == [names["in/x"]] == ["in_x"]
    assert inner["else_branch"].output[0].name == names["else:out"] == "else_out"
    assert renamed.graph.node[0].name == "if_1"


def test_relax_import_of_renamed_graph_computes_what_onnxruntime_computes(odd):
    import onnxruntime as ort
    import tvm
    from tvm import relax

    model = load_model(odd, {onnx_models.ODD_INPUT: (1, 3, 8, 8)})
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 8, 8)).astype("float32")
    bias = rng.standard_normal((1, 4, 1, 1)).astype("float32")
    vm = relax.VirtualMachine(
        tvm.compile(import_to_relax(model), target=resolve_target("llvm").target), tvm.cpu()
    )
    ours = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(bias)).numpy()
    session = ort.InferenceSession(str(odd), providers=["CPUExecutionProvider"])
    ref = session.run(None, {"gpu_0/data_0": x, "1st bias": bias})[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_renaming_keeps_the_tasks_and_their_keys(odd):
    """Records of a run resume, and a user's own import of the file finds them."""
    target = resolve_target("llvm").target
    model = load_model(odd, {onnx_models.ODD_INPUT: (1, 3, 8, 8)})
    as_named = dataclasses.replace(model, tvm_proto=model.proto, tvm_names={})
    keys = [
        [t.key for t in extract_tasks(fuse_for_tuning(import_to_relax(m), target), target)]
        for m in (model, as_named)
    ]
    assert keys[0] == keys[1] and keys[0]


@pytest.mark.slow
def test_a_cpu_tune_takes_and_reports_the_users_names(odd, tmp_path, fast_config):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        main, tune_args(odd, out, fast_config, "--input-shape", SHAPE, budget="8trials")
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert [i["name"] for i in report["model"]["inputs"]] == ["gpu_0/data_0", "1st bias"]
    assert report["model"]["outputs"] == ["prob/ñ-1"]
    assert report["summary"]["check_ok"] is True  # against onnxruntime on the original file
    config = json.loads((out / "config.json").read_text())
    assert config["fingerprint"]["inputs"][0][0] == "gpu_0/data_0"
