"""Conformance suite: every Filter keeps a valid subset and learns without failing."""

import pytest

from filters import NAMES, Filter, NoFilter, Selection, make_filter
from measure import Measurement
from orchestrator.tasks import Task

TASK = Task(0, "t0", 1, 1e6, None, "0" * 16)


@pytest.fixture(params=NAMES)
def any_filter(request) -> Filter:
    return make_filter(request.param)


@pytest.mark.parametrize("count", [0, 1, 7, 64])
def test_filters_keep_an_ascending_subset(any_filter, count):
    candidates = [object() for _ in range(count)]
    selection = any_filter.select(TASK, candidates)
    assert isinstance(selection, Selection)
    assert set(selection.keep) <= set(range(count))
    if count:
        assert selection.keep  # a round never filters everything away


def test_filters_learn_from_successes_and_failures(any_filter):
    any_filter.learn(
        TASK, [object(), object()], [Measurement((1e-3,)), Measurement(None, "crashed")]
    )


def test_no_filter_keeps_everything():
    assert NoFilter().select(TASK, [1, 2, 3]).keep == (0, 1, 2)


def test_selection_must_be_ascending_and_unique():
    with pytest.raises(ValueError):
        Selection((2, 1))
    with pytest.raises(ValueError):
        Selection((1, 1))


def test_unknown_filters_list_the_known_ones():
    with pytest.raises(ValueError, match="unknown filter 'x'; choose one of: none"):
        make_filter("x")
