"""Python's cycle collector while a run parses the tuning library's JSON."""

from __future__ import annotations

import gc
import json

import pytest

from tune_orchestrator.collector import run_scope
from tune_orchestrator.library.files import json_lines

LINES = b"\n".join(json.dumps([i, [[["tile", [i, 2]]], [1e-6]]]).encode() for i in range(200))


@pytest.fixture(autouse=True)
def collector_as_found():
    assert gc.isenabled() and gc.get_freeze_count() == 0
    yield
    gc.enable()
    gc.unfreeze()


def test_in_a_run_the_parsed_records_are_frozen_until_the_run_ends():
    with run_scope():
        values = json_lines(LINES)
        # Each record's lists at least (the test's own objects beside them).
        assert gc.get_freeze_count() > 4 * len(values)
        assert gc.isenabled()
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_outside_a_run_parsing_freezes_nothing():
    assert len(json_lines(LINES)) == 200
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_a_process_that_froze_its_own_heap_keeps_it_as_it_was():
    gc.freeze()
    before = gc.get_freeze_count()
    with run_scope():
        json_lines(LINES)
        assert gc.get_freeze_count() == before
    assert gc.get_freeze_count() == before


def test_a_collector_the_caller_turned_off_stays_off():
    gc.disable()
    with run_scope():
        json_lines(LINES)
    assert not gc.isenabled()


def test_a_run_inside_a_run_leaves_the_unfreezing_to_the_outer_one():
    with run_scope():
        with run_scope():
            json_lines(LINES)
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
