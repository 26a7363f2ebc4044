"""The Python API's surface: what a caller imports, passes and branches on."""

from __future__ import annotations

import inspect
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
