"""The output check: NaN and Inf matched by place, an all-NaN output not checkable rather than
passed, several samples, integers and booleans drawn as [check] says."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import onnx_models
from cli_args import tune_args
from tune_orchestrator.cli.commands import main
from tune_orchestrator.config import Settings
from tune_orchestrator.deploy import check, samples
from tune_orchestrator.deploy.check import (
    DIFFERS,
    MATCHED,
    NOT_CHECKABLE,
    NUDGE,
    NUDGES,
    SKIPPED,
    Checker,
    compare,
)
from tune_orchestrator.errors import InputError
from tune_orchestrator.model.loading import load_model

NAN, INF = float("nan"), float("inf")


def verdict(ours, reference, rtol=1e-3):
    """compare() on one sample of one output."""
    a, b = np.array(ours, dtype="float32"), np.array(reference, dtype="float32")
    return compare([[a]], [[b]], rtol=rtol, names=["y"])


def test_nan_matches_only_nan_at_the_same_place():
    assert verdict([1.0, NAN, 3.0], [1.0, NAN, 3.0]).status == MATCHED
    assert verdict([1.0, 2.0, NAN], [1.0, NAN, 3.0]).status == DIFFERS  # moved
    assert verdict([1.0, NAN, 3.0], [1.0, 2.0, 3.0]).status == DIFFERS  # ours only
    assert verdict([1.0, 2.0, 3.0], [1.0, NAN, 3.0]).status == DIFFERS  # theirs only
    assert "NaN at 2 place(s)" in verdict([1.0, 2.0, NAN], [1.0, NAN, 3.0]).reason


def test_inf_matches_only_inf_of_the_same_sign_at_the_same_place():
    assert verdict([INF, -INF, 1.0], [INF, -INF, 1.0]).status == MATCHED
    assert verdict([-INF, 1.0], [INF, 1.0]).status == DIFFERS
    assert verdict([NAN, 1.0], [INF, 1.0]).status == DIFFERS
    assert verdict([5.0, 1.0], [INF, 1.0]).status == DIFFERS


def test_a_shape_mismatch_differs_whatever_the_tolerance():
    result = compare(
        [[np.zeros((2, 3), "float32")]], [[np.zeros((3, 2), "float32")]], rtol=0.999, names=["y"]
    )
    assert result.status == DIFFERS and result.ok is False
    assert result.reason == "output 'y', sample 0: shape (2, 3) where onnxruntime's is (3, 2)"


def test_the_relative_error_decides_the_finite_places():
    assert verdict([1.0, NAN, 2.001], [1.0, NAN, 2.0]).status == MATCHED
    far = verdict([1.0, NAN, 2.1], [1.0, NAN, 2.0])
    assert far.status == DIFFERS and far.max_rel_error == pytest.approx(0.05, rel=1e-3)


def test_an_output_nan_everywhere_on_every_sample_is_not_checkable_not_passed():
    blank = np.full(3, NAN, "float32")
    result = compare([[blank], [blank]], [[blank], [blank]], rtol=1e-3, names=["y"])
    assert result.status == NOT_CHECKABLE and result.ok is None
    assert "output 'y' as NaN everywhere on every sample" in result.reason
    # ... unless the build gives numbers there: then it differs.
    numbers = np.ones(3, "float32")
    assert compare([[numbers]], [[blank]], rtol=1e-3).status == DIFFERS
    # NaN everywhere on one sample only: the others compare it.
    some = np.array([1.0, 2.0, 3.0], "float32")
    assert compare([[blank], [some]], [[blank], [some]], rtol=1e-3).status == MATCHED


def test_every_sample_is_compared(tmp_path, monkeypatch):
    """A build right on the first two samples and wrong on the third differs."""
    model = load_model(onnx_models.tiny_cnn(tmp_path / "tiny.onnx"))
    given = samples.random_samples(model, seed=0, int_range=(0, 9))
    checker = Checker(model, samples=given, rtol=1e-3)
    runs = iter(range(3))

    def build(vm, dev, sample, outputs):
        (y,) = check.run_onnxruntime(model, sample)
        return [y + (1.0 if next(runs) == 2 else 0.0)]

    monkeypatch.setattr(check, "run_vm", build)
    result = checker.check(None, None)
    assert result.status == DIFFERS and result.samples == 3
    assert result.reason.endswith("> rtol 0.001 (output 'y', sample 2)")


def test_three_random_samples_with_integers_in_the_range_and_booleans_both_ways(tmp_path):
    model = load_model(onnx_models.ids_and_flags(tmp_path / "ids.onnx"))
    settings = Settings.load(
        env={"ORCHESTRATE_CHECK_INT_MIN": "3", "ORCHESTRATE_CHECK_INT_MAX": "5"}
    )
    drawn = samples.for_run(model, settings)
    assert len(drawn.arrays) == 3
    ids = np.stack([ids for ids, _ in drawn.arrays])
    flags = np.stack([flags for _, flags in drawn.arrays])
    assert ids.dtype == np.int64 and set(np.unique(ids)) == {3, 4, 5}
    assert flags.dtype == np.bool_ and set(np.unique(flags)) == {False, True}
    assert not np.array_equal(drawn.arrays[0][0], drawn.arrays[1][0])  # three seeds
    assert drawn.source == "3 random samples (seeds 0-2, integers 3..5)"


def test_integers_that_index_a_table_stay_within_its_rows(tmp_path):
    # A BERT's token_type_ids index 2 rows: integers 0..9 made onnxruntime refuse every
    # sample, and the run refused the model (exit 2) until [check] int_max was set.
    model = load_model(onnx_models.token_types(tmp_path / "text.onnx"))
    drawn = samples.random_samples(model, seed=0, int_range=(0, 9))
    ids, types = (np.stack([sample[i] for sample in drawn.arrays]) for i in range(2))
    assert ids.max() > 1 and set(np.unique(types)) == {0, 1}
    assert drawn.source.endswith("integers 0..9, types 0..1 to index its table's 2 rows)")
    assert Checker(model, samples=drawn, rtol=1e-3).reference_problem() is None


def test_an_integer_range_that_does_not_fit_an_input_is_refused(tmp_path):
    model = load_model(onnx_models.ids_and_flags(tmp_path / "ids.onnx"))
    too_wide = (0, 2**63)
    with pytest.raises(InputError, match=r"does not fit input 'ids' \(int64"):
        samples.random_samples(model, seed=0, int_range=too_wide)


def watch_onnxruntime(monkeypatch) -> list:
    """The inputs every run of onnxruntime (the check's reference) is given, as they come."""
    seen = []
    real = check.run_onnxruntime

    def spy(model, inputs, **kwargs):
        seen.append([np.array(a) for a in inputs])
        return real(model, inputs, **kwargs)

    monkeypatch.setattr(check, "run_onnxruntime", spy)
    return seen


def test_the_range_reaches_the_inputs_of_a_real_run(tmp_path, monkeypatch, fast_config):
    """ORCHESTRATE_CHECK_INT_MIN/MAX: what onnxruntime and both builds are given."""
    seen = watch_onnxruntime(monkeypatch)
    model = onnx_models.ids_and_flags(tmp_path / "ids.onnx")
    out = tmp_path / "run"
    env = {"ORCHESTRATE_CHECK_INT_MIN": "-2", "ORCHESTRATE_CHECK_INT_MAX": "2"}
    args = ["--build-only", "--target", "llvm", "--config", str(fast_config), "--out", str(out)]
    result = CliRunner().invoke(main, [*args, str(model)], env=env)
    assert result.exit_code == 0, result.output
    assert len(seen) == 3  # the reference: once per sample, for both builds
    assert set(np.unique(np.stack([ids for ids, _ in seen]))) == {-2, -1, 0, 1, 2}
    tuned = json.loads((out / "report.json").read_text())["tuned"]["check"]
    assert tuned["status"] == MATCHED and tuned["samples"] == 3
    assert tuned["inputs"] == "3 random samples (seeds 0-2, integers -2..2)"


def test_real_samples_from_check_inputs_are_what_the_check_runs(tmp_path, monkeypatch, fast_config):
    """Two samples given as (2, *shape): onnxruntime and both builds run on exactly those."""
    seen = watch_onnxruntime(monkeypatch)
    given = np.random.default_rng(7).uniform(0, 1, (2, 1, 3, 8, 8)).astype("float32")
    npz = tmp_path / "real.npz"
    np.savez(npz, x=given)
    out = tmp_path / "run"
    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    args = ["--build-only", "--target", "llvm", "--config", str(fast_config), "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--check-inputs", str(npz), str(model)])
    assert result.exit_code == 0, result.output
    assert [len(s) for s in seen] == [1, 1]
    assert np.array_equal(seen[0][0], given[0]) and np.array_equal(seen[1][0], given[1])
    tuned = json.loads((out / "report.json").read_text())["tuned"]["check"]
    assert tuned["status"] == MATCHED and tuned["inputs"] == f"2 sample(s) from {npz}"


def test_one_sample_may_come_without_its_leading_axis(tmp_path):
    model = load_model(onnx_models.ids_and_flags(tmp_path / "ids.onnx"))
    ids, flags = np.arange(16).reshape(2, 8), np.ones((2, 8), bool)
    np.savez(tmp_path / "one.npz", ids=ids, flags=flags)
    loaded = samples.load_samples(tmp_path / "one.npz", model)
    ((got_ids, got_flags),) = loaded.arrays  # in the model's input order
    assert np.array_equal(got_ids, ids) and np.array_equal(got_flags, flags)
    np.savez(tmp_path / "uneven.npz", ids=np.stack([ids, ids]), flags=flags)
    with pytest.raises(InputError, match=r"different numbers of samples \('ids' 2, 'flags' 1\)"):
        samples.load_samples(tmp_path / "uneven.npz", model)


@pytest.mark.parametrize(
    "arrays, says",
    [
        ({"ids": np.zeros((2, 8), "int32")}, "'ids' is int32 but the model's input is int64"),
        (
            {"ids": np.zeros((8, 2), "int64")},
            "'ids' has shape (8, 2) but the model's input is (2, 8)",
        ),
        ({"idz": np.zeros((2, 8), "int64")}, "has no array for input 'ids'"),
    ],
)
def test_check_inputs_that_do_not_fit_the_model_are_refused(tmp_path, arrays, says):
    model = load_model(onnx_models.ids_and_flags(tmp_path / "ids.onnx"))
    np.savez(tmp_path / "bad.npz", flags=np.ones((2, 8), bool), **arrays)
    with pytest.raises(InputError) as refused:
        samples.load_samples(tmp_path / "bad.npz", model)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_a_model_nan_everywhere_is_refused_before_any_work(tmp_path, fast_config):
    """Log(-|x| - 1) compiles and runs, but no value of it can be compared: it tuned for its
    whole budget, then shipped nothing (exit 5). Refused up front now (exit 2), nothing
    written; --no-check tunes it and ships it marked unchecked."""
    model = onnx_models.nan_everywhere(tmp_path / "nan.onnx")
    out = tmp_path / "run"
    args = ["--build-only", "--target", "llvm", "--config", str(fast_config), "--out", str(out)]
    refused = CliRunner().invoke(main, [*args, str(model)])
    assert refused.exit_code == 2, refused.output
    assert not out.exists() and "Traceback" not in refused.output
    (line,) = refused.stderr.strip().splitlines()
    assert "output 'y' as NaN everywhere on every sample" in line
    assert "give --check-inputs with samples on which it is a number" in line
    assert line.endswith("or give --no-check to tune it and ship model.so unchecked")
    shipped = CliRunner().invoke(main, [*args, "--no-check", str(model)])
    assert shipped.exit_code == 0, shipped.output
    summary = json.loads((out / "report.json").read_text())["summary"]
    assert summary["check_status"] == SKIPPED and summary["shipped"] == "tuned"
    assert not summary["shipped_checked"] and "--no-check" in summary["unchecked_reason"]
    assert (out / "model.so").is_file()
    assert "UNCHECKED" in (out / "report.md").read_text()


def test_outputs_the_same_on_every_sample_warn_and_their_match_says_so(tmp_path, fast_config):
    """Relu(-|x| - 1) is zero whatever x: a build that ignored its inputs would match too (an
    untrained model's zeroed head passed "max relative error 0.0e+00", unremarked)."""
    model = onnx_models.saturated(tmp_path / "zero.onnx")
    out = tmp_path / "run"
    args = ["--build-only", "--target", "llvm", "--config", str(fast_config), "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--json", str(model)])
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    said = "gives every output zero everywhere on all 3 samples, so a build that ignored"
    assert any(said in e.get("message", "") for e in events if e["event"] == "warning")
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["check_status"] == MATCHED and report["summary"]["shipped_checked"]
    assert said in report["tuned"]["check"]["reason"]


def test_outputs_that_change_with_the_inputs_carry_no_caveat(tmp_path):
    model = load_model(onnx_models.tiny_cnn(tmp_path / "tiny.onnx"))
    given = samples.random_samples(model, seed=0, int_range=(0, 9))
    assert Checker(model, samples=given, rtol=1e-3).reference_caveat() is None
    assert Checker(model, samples=given, rtol=10.0).reference_caveat() is not None


def test_a_model_onnxruntime_has_no_kernel_for_is_refused_with_the_fix(tmp_path, fast_config):
    """Opset 4: onnxruntime runs opset 7 and later (no Relu-1). The run tuned for its whole
    budget, then could not check its model (exit 5)."""
    proto = onnx.load(onnx_models.tiny_cnn(tmp_path / "tiny.onnx"))
    proto.opset_import[0].version = 4
    onnx.save(proto, tmp_path / "old.onnx")
    out = tmp_path / "run"
    args = ["--budget", "1h", "--target", "llvm", "--config", str(fast_config), "--out", str(out)]
    refused = CliRunner().invoke(main, [*args, str(tmp_path / "old.onnx")])
    assert refused.exit_code == 2, refused.output
    assert not out.exists()
    (line,) = refused.stderr.strip().splitlines()
    assert "onnxruntime has no CPU kernel for an operator of the model" in line
    assert "the model is of opset 4 and onnxruntime runs opset 7 and later" in line
    assert "or give --no-check" in line


def test_a_model_computes_in_half_precision_by_any_float16_value_or_cast(tmp_path):
    assert load_model(onnx_models.half_cnn(tmp_path / "half.onnx")).half_precision
    single = onnx.load(onnx_models.tiny_cnn(tmp_path / "tiny.onnx"))
    assert not load_model(tmp_path / "tiny.onnx").half_precision
    # float32 in and out, float16 inside: a Cast to it and back around the last layer.
    graph = single.graph
    graph.node[-1].input[0] = "back"
    graph.node.insert(-1, helper.make_node("Cast", ["flat"], ["low"], to=TensorProto.FLOAT16))
    graph.node.insert(-1, helper.make_node("Cast", ["low"], ["back"], to=TensorProto.FLOAT))
    onnx.save(single, tmp_path / "cast.onnx")
    assert load_model(tmp_path / "cast.onnx").half_precision


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_model_is_checked_within_rtol_half_and_ships(tmp_path, fast_config, dtype):
    """float16: TVM accumulates in float16, onnxruntime's CPU kernels in float32: the tiny
    model's builds are ~5e-3 from onnxruntime, beyond [check] rtol; every float16 model once
    ended with no model.so and exit 4. bfloat16: compared with onnxruntime on a float32 copy
    (deploy/upcast.py); its input was refused as a type that "cannot be tuned" (exit 2)."""
    model = onnx_models.half_cnn(tmp_path / "half.onnx", dtype=dtype)
    out = tmp_path / "run"
    args = ["--build-only", "--target", "llvm", "--config", str(fast_config), "--out", str(out)]
    result = CliRunner().invoke(main, [*args, str(model)])
    assert result.exit_code == 0, result.output
    check_ = json.loads((out / "report.json").read_text())["tuned"]["check"]
    assert check_["status"] == MATCHED and check_["rtol"] == 5e-2
    assert 1e-3 < check_["max_rel_error"] < 5e-2  # beyond rtol: the test would fail without it
    assert (out / "model.so").is_file()


def test_a_model_that_quantizes_as_it_runs_is_checked_within_rtol_quantized(tmp_path):
    """A MobileNet-V3 quantized by onnxruntime's quantize_dynamic: TVM and onnxruntime rounded
    one value a step apart on one sample, 3.6e-2 at the output; no build could ship (exit 4)."""
    model = load_model(onnx_models.conv_integer(tmp_path / "q.onnx"))
    assert model.quantized and not load_model(onnx_models.tiny_cnn(tmp_path / "t.onnx")).quantized
    settings = Settings.load(overrides={"check.rtol_quantized": 1e-4})
    checker = Checker.for_model(
        model,
        samples=samples.random_samples(model, seed=0, int_range=(0, 9)),
        settings=settings.check,
    )
    assert checker.rtol == 1e-4
    reference = checker._references()
    per = 1 + checker.nudges  # sample 0 and its nudged copies off by 1%
    off = [[np.asarray(r[0]) * np.float32(1.01)] for r in reference[:per]] + reference[per:]
    found = checker.compare(off)
    assert (
        found.status == DIFFERS and "> rtol_quantized 0.0001 (output 'y', sample 0)" in found.reason
    )


def test_a_quantized_sample_that_differs_passes_where_a_nudged_copy_matches(tmp_path):
    """A TFLite int8 EfficientNet-B0: TVM 0.07-0.37 from onnxruntime on 9 of 24 random inputs,
    a value at a rounding boundary a step apart, carried by later layers (exit 4, nothing
    shipped, on most runs); each matched on a copy nudged by 1/4096. A build that differs on
    every copy still differs."""
    model = load_model(onnx_models.conv_integer(tmp_path / "q.onnx"))
    settings = Settings.load(env={})
    drawn = samples.random_samples(model, seed=0, int_range=(0, 9))
    checker = Checker.for_model(model, samples=drawn, settings=settings.check)
    per = 1 + NUDGES
    assert checker.nudges == NUDGES and len(checker.runs) == 3 * per
    assert np.array_equal(checker.runs[per + 2][0], drawn.arrays[1][0] * np.float32(1 + 2 * NUDGE))
    reference = checker._references()
    stepped = [list(outputs) for outputs in reference]
    stepped[per] = [np.asarray(reference[per][0]) * np.float32(1.2)]  # sample 1 itself only
    found = checker.compare(stepped)
    assert found.status == MATCHED and found.max_rel_error == 0.0
    assert found.reason.startswith("sample 1 matched on a nudged copy")
    wrong = [[np.asarray(outputs[0]) * np.float32(1.2)] for outputs in reference]
    found = checker.compare(wrong)
    assert found.status == DIFFERS and found.samples == 3
    assert (
        "> rtol_quantized 0.05 (output 'y', sample 0), and on the 5 nudged copies" in found.reason
    )
    unquantized = load_model(onnx_models.tiny_cnn(tmp_path / "t.onnx"))
    plain = samples.random_samples(unquantized, seed=0, int_range=(0, 9))
    float_checker = Checker.for_model(unquantized, samples=plain, settings=settings.check)
    assert float_checker.nudges == 0 and float_checker.runs == list(plain.arrays)


def test_a_nudged_copy_moves_floats_a_little_and_a_few_integers_by_one_within_their_range():
    """A full-int8 TFLite model (int8 input) had nothing to nudge: 2 of 6 checks of MobileNet-V2
    failed on a rounding step that one nudged copy of each sample cleared."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype("float32")
    ids = rng.integers(-128, 128, (4, 64)).astype("int8")
    flags = rng.random((4, 64)) < 0.5
    for k in (1, 2):
        moved_x, moved_ids, moved_flags = check.nudged((x, ids, flags), k)
        assert moved_x.dtype == x.dtype and np.allclose(moved_x, x * (1 + k * NUDGE), rtol=1e-7)
        step = moved_ids.astype(int) - ids
        assert moved_ids.dtype == ids.dtype and set(np.unique(step)) <= {-1, 0, 1}
        assert 0 < np.count_nonzero(step) < ids.size / 16
        assert moved_ids.min() >= ids.min() and moved_ids.max() <= ids.max()
        assert moved_flags is flags
    assert check.nudged((x, ids, flags), 0) == (x, ids, flags)
    assert not np.array_equal(check.nudged((ids,), 1)[0], check.nudged((ids,), 2)[0])


def test_a_nudged_half_precision_copy_differs_from_its_sample():
    """float16 has 10 bits of fraction: scaled by 1 + 1/4096, nearly every value rounded back
    to itself, and the nudged copies were the sample again."""
    half = np.random.default_rng(0).standard_normal((4, 64)).astype("float16")
    for k in range(1, check.NUDGES + 1):
        (moved,) = check.nudged((half,), k)
        assert moved.dtype == half.dtype
        assert np.count_nonzero(moved != half) > 0.9 * half.size
        assert np.allclose(moved, half, rtol=k * 2e-3, atol=0)


def test_a_half_precision_build_beyond_rtol_half_is_named_by_it(tmp_path):
    model = load_model(onnx_models.half_cnn(tmp_path / "half.onnx"))
    settings = Settings.load(overrides={"check.rtol_half": 1e-4})
    checker = Checker.for_model(
        model,
        samples=samples.random_samples(model, seed=0, int_range=(0, 9)),
        settings=settings.check,
    )
    reference = checker._references()
    off = [[np.asarray(reference[0][0]) * np.float16(1.01)]] + reference[1:]
    found = checker.compare(off)
    assert found.status == DIFFERS and "> rtol_half 0.0001 (output 'y', sample 0)" in found.reason
    assert checker.samples.source == "3 random samples (seeds 0-2)"  # no integer input


@pytest.mark.parametrize(
    "model, given, error, fix",
    [
        (onnx_models.ids_and_flags, False, "INVALID_ARGUMENT : indices", "set [check] int_min"),
        (onnx_models.ids_and_flags, True, "INVALID_ARGUMENT : indices", "give --check-inputs"),
        (onnx_models.tiny_cnn, False, "INVALID_ARGUMENT : x", "give --check-inputs with samples"),
        (onnx_models.tiny_cnn, False, "NOT_IMPLEMENTED : no MatMul(13)", "no CPU kernel"),
    ],
)
def test_no_reference_is_explained_with_the_fix_that_applies(
    tmp_path, monkeypatch, model, given, error, fix
):
    """It advised [check] int_min and int_max for every model, one without integer inputs or
    one with an operator onnxruntime's CPU kernels lack too."""
    loaded = load_model(model(tmp_path / "m.onnx"))
    drawn = samples.random_samples(loaded, seed=0, int_range=(0, 9))
    path = str(tmp_path / "samples.npz") if given else None  # the user's, or random ones
    checker = Checker(loaded, samples=dataclasses.replace(drawn, path=path), rtol=1e-3)

    def refuses(*_args, **_kwargs):
        raise RuntimeError(f"[ONNXRuntimeError] : 2 : {error}")

    monkeypatch.setattr(check, "run_onnxruntime", refuses)
    found = checker.compare([])
    assert found.status == NOT_CHECKABLE and fix in found.reason
    assert ("int_min" in found.reason) == (fix == "set [check] int_min")


def test_a_shape_a_scalar_a_bool_and_an_index_output_are_checked_and_ship(tmp_path, fast_config):
    """A Shape output (TVM returns it as a shape, not a tensor) made every build "FAILED WHEN
    RUN (TypeError: 'int' object is not iterable)": exit 4, nothing shipped."""
    model = onnx_models.outputs_of_every_kind(tmp_path / "kinds.onnx")
    out = tmp_path / "run"
    args = ["--build-only", "--target", "llvm", "--config", str(fast_config), "--out", str(out)]
    result = CliRunner().invoke(main, [*args, str(model)])
    assert result.exit_code == 0, result.output
    check_ = json.loads((out / "report.json").read_text())["tuned"]["check"]
    assert check_["status"] == MATCHED and check_["outputs"] == 4
    assert (out / "model.so").is_file()


def test_sequence_outputs_are_compared_item_by_item():
    one, two = np.array([1.0, 2.0], "float32"), np.array([3.0], "float32")
    theirs = [[[one, two]]]
    assert compare([[[one, two]]], theirs, rtol=1e-3).status == MATCHED
    found = compare([[[one, two * 1.1]]], theirs, rtol=1e-3, names=["parts"])
    assert found.status == DIFFERS and found.reason.endswith("(output 'parts[1]', sample 0)")
    found = compare([[[one]]], theirs, rtol=1e-3, names=["parts"])
    assert found.reason == (
        "output 'parts', sample 0: a sequence of 1 where onnxruntime's is a sequence of 2"
    )


def test_a_model_with_a_sequence_output_and_nothing_to_search_ships(tmp_path, fast_config):
    """Its four items were taken for four outputs ("4 outputs where onnxruntime gives 1": exit
    4), and a run whose only task had nothing to search was "budget too small" (exit 3)."""
    model = onnx_models.sequence_output(tmp_path / "seq.onnx")
    out = tmp_path / "run"
    result = CliRunner().invoke(main, tune_args(model, out, fast_config))
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["stop"] == "tasks-done" and not report["summary"]["budget_too_small"]
    assert report["tuned"]["check"]["status"] == MATCHED and (out / "model.so").is_file()


def test_a_model_ending_in_top_k_tunes_and_ships(tmp_path, fast_config):
    """TopK's task is one call of an external sort, its PrimFunc without a "root" block:
    reading the blocks of every task (to find tasks that share a search) raised ScheduleError
    after the untuned model was measured: exit 1 with a traceback."""
    model = onnx_models.top_k(tmp_path / "topk.onnx")
    out = tmp_path / "run"
    result = CliRunner().invoke(main, tune_args(model, out, fast_config, budget="24trials"))
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["tuned"]["check"]["status"] == MATCHED and (out / "model.so").is_file()
    assert report["summary"]["trials"] > 0


@pytest.mark.parametrize("chosen, seen", [(None, "1"), ("0", "0")], ids=["ours", "user's"])
def test_onnxruntime_keeps_no_telemetry_unless_the_user_asks(tmp_path, chosen, seen):
    """onnxruntime 1.29+ writes a device id and an event store for upload to Microsoft under
    the user's cache folder as it starts (on some hosts: it wrote them here, not on CI); every
    run's output check left them there. What onnxruntime reads as it starts is ours to set, the
    user's choice kept. A fresh interpreter: the variable is read once, when onnxruntime starts."""
    import os
    import subprocess
    import sys

    model = onnx_models.tiny_cnn(tmp_path / "tiny.onnx")
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    env.update(HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))
    if chosen is not None:
        env["ORT_DISABLE_TELEMETRY"] = chosen
    code = (
        "import os, sys\n"
        "from tune_orchestrator.deploy.library import onnxruntime_session\n"
        "from tune_orchestrator.model.loading import load_model\n"
        "onnxruntime_session(load_model(sys.argv[1]))\n"
        "print(os.environ.get('ORT_DISABLE_TELEMETRY'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(model)],
        env=env,
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert done.stdout.split()[-1] == seen
    if seen == "1":
        assert not [p for p in tmp_path.rglob("*") if "Microsoft" in p.parts]
