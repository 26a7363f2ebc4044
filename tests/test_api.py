"""The Python API's surface: what a caller imports, passes and branches on."""

from __future__ import annotations

import inspect
import re
from importlib import metadata

import pytest

import tune_orchestrator
from tune_orchestrator import BudgetTooSmall, InputError, Options
from tune_orchestrator.budget.base import STOP_CODES


def test_one_import_gives_the_version_the_calls_and_the_exceptions_to_handle():
    assert tune_orchestrator.__version__ == metadata.version("tune-orchestrator")
    for name in tune_orchestrator.__all__:
        assert getattr(tune_orchestrator, name) is not None
    assert issubclass(BudgetTooSmall, Exception) and issubclass(InputError, Exception)
    assert callable(tune_orchestrator.tune) and callable(tune_orchestrator.estimate)


def test_tune_takes_a_few_parameters_and_the_rest_as_options():
    parameters = inspect.signature(tune_orchestrator.tune).parameters
    assert len(parameters) <= 10
    assert list(parameters)[:2] == ["model", "budget"]
    made = Options.of(None, seed=3, candidate_filter="none")
    assert made == Options(seed=3, candidate_filter="none")
    assert made.overrides() == {"tune.seed": 3, "tune.filter": "none"}
    assert Options.of(made, seed=4).seed == 4 and made.seed == 3  # options are not changed


def test_an_unknown_option_is_named_with_the_ones_there_are():
    with pytest.raises(TypeError, match=r"unexpected option\(s\) filter; options are: .*seed"):
        tune_orchestrator.tune("model.onnx", "1min", filter="none")


def test_the_stop_codes_are_a_fixed_set_the_report_schema_lists():
    from tune_orchestrator.budget.report import schema

    listed = schema()["properties"]["summary"]["properties"]["stop"]["enum"]
    assert set(STOP_CODES) <= set(listed)
    assert len(set(STOP_CODES)) == len(STOP_CODES)


def test_a_model_or_out_that_is_not_a_path_is_a_type_error_naming_the_fix(tmp_path, tiny_model):
    """A pipeline holding an onnx.ModelProto got "expected str, bytes or os.PathLike object, not
    ModelProto" from deep inside; an `out` of another type the same."""
    import onnx

    proto = onnx.load(tiny_model)
    with pytest.raises(TypeError, match=r"model must be a path .*not ModelProto; save it first"):
        tune_orchestrator.tune(proto, "1min", target="llvm", out=tmp_path / "run")
    with pytest.raises(TypeError, match=r"^out must be a path \(str or os.PathLike\), not int$"):
        tune_orchestrator.tune(tiny_model, "1min", target="llvm", out=5)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "options, found",
    [
        ({"price": "0.5"}, TypeError("price must be a number of US dollars per hour, not str")),
        ({"library": 3}, TypeError("library must be a path (str or os.PathLike), not int")),
        ({"library": ""}, InputError("library is an empty path (an unset variable?)")),
        ({"config": ""}, InputError("config is an empty path")),
        ({"on_event": 5}, TypeError("on_event must be a function of one event (a dict), not 5")),
    ],
)
def test_an_option_of_a_kind_it_never_takes_is_refused_before_anything_is_written(
    tmp_path, tiny_model, options, found
):
    """price="0.5" raised "'<=' not supported between instances of 'int' and 'str'"; library=""
    put the tuning library in the current directory; on_event=5 failed at the first event,
    leaving a run directory behind."""
    with pytest.raises(type(found), match="^" + re.escape(str(found))):
        tune_orchestrator.tune(tiny_model, "1min", target="llvm", out=tmp_path / "run", **options)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "given, found",
    [
        ("no:1x3x8x8", InputError("--input-shape names no, which the model does not have")),
        ({"x": "1x3"}, InputError("input_shapes['x'] = '1x3' is not a list of integers")),
        (5, InputError("input_shapes 5 is neither {name: [dims]} nor a list of 'name:dims'")),
    ],
)
def test_input_shapes_one_string_alone_is_taken_other_forms_are_refused_in_one_line(
    tmp_path, tiny_model, given, found
):
    """One string was read letter by letter; a number or a string of dimensions raised
    TypeError or ValueError from inside."""
    with pytest.raises(type(found), match=str(found).replace("[", r"\[").replace("(", r"\(")):
        tune_orchestrator.tune(
            tiny_model, "1min", target="llvm", out=tmp_path / "run", input_shapes=given
        )


def test_a_bad_budget_filter_or_target_the_caller_did_not_give_is_named_by_where_it_came_from(
    tmp_path, tiny_model, monkeypatch
):
    """ORCHESTRATE_TUNE_BUDGET=abc read "budget 'abc': cannot read 'abc'" to a caller who gave
    no budget."""
    monkeypatch.setenv("ORCHESTRATE_TUNE_BUDGET", "abc")
    with pytest.raises(
        InputError, match=r"^environment: ORCHESTRATE_TUNE_BUDGET: \[tune\] budget 'abc'"
    ):
        tune_orchestrator.tune(tiny_model, target="llvm", out=tmp_path / "run")
    with pytest.raises(InputError, match=r"^budget 'abc': cannot read"):  # given: as it was
        tune_orchestrator.tune(tiny_model, "abc", target="llvm", out=tmp_path / "run")
    config = tmp_path / "c.toml"
    config.write_text('[tune]\nfilter = "xx"\n')
    with pytest.raises(InputError, match=rf"^{config}: \[tune\] filter: unknown filter 'xx'"):
        tune_orchestrator.tune(
            tiny_model, "1min", target="llvm", out=tmp_path / "run", config=config
        )
    monkeypatch.setenv("ORCHESTRATE_TUNE_TARGET", "nosuch")
    with pytest.raises(
        InputError, match=r"^environment: .*_TARGET: \[tune\] target: unknown target"
    ):
        tune_orchestrator.tune(tiny_model, "1min", out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_dollar_budget_at_price_zero_is_refused_before_any_work(tmp_path, tiny_model):
    with pytest.raises(InputError, match=r"a price of \$0/h never reaches: the run would not"):
        tune_orchestrator.tune(tiny_model, "$1", target="llvm", out=tmp_path / "run", price=0)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_two_runs_in_threads_of_one_process_run_one_after_the_other(
    tmp_path, tiny_model, fast_config
):
    """TVM keeps its importer's and lowering's state in globals: a pipeline tuning two models
    in two threads had one of them fail with an error that read as bad input ("TVM cannot
    import tiny.onnx: AssertionError", "nested op_tag is not allowed")."""
    import threading

    results, events = {}, {1: [], 2: []}

    def tune(seed: int) -> None:
        try:
            results[seed] = tune_orchestrator.tune(
                tiny_model, "8trials", target="llvm", out=tmp_path / f"run{seed}",
                config=fast_config, seed=seed, on_event=events[seed].append,
            ).exit_code  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - what the other thread raised is the finding
            results[seed] = exc

    threads = [threading.Thread(target=tune, args=(seed,)) for seed in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {1: 0, 2: 0}
    waited = [
        seed for seed, seen in events.items()
        if any("waiting for the run in another thread" in e.get("message", "") for e in seen)
    ]  # fmt: skip
    assert len(waited) == 1
