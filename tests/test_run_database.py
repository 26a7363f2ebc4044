"""The run's database: TVM's files, and TVM's answers, with only the fastest records held."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tvm
from tvm import s_tir, te
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord

from tune_orchestrator.library import Library, LibraryView
from tune_orchestrator.rundir.database import RunDatabase

TARGET = tvm.target.Target({"kind": "llvm"})
WORKLOADS, RECORDS = "database_workload.json", "database_tuning_record.json"
# Run times that cover TVM's cases: failed runs (1e10), no run time, ties, a partly failed run.
SECS = [[3e-6], [1e10], None, [1e-6], [], [2e-6, 2e-6], [1e10, 5e-6], [1e-6], [4e-6], [0.5e-6]]


def workload(n: int):
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def trace(mod, factor: int | None):
    """A schedule's trace: a split by `factor`, or (None) no instruction at all."""
    sch = s_tir.Schedule(mod)
    if factor is not None:
        (loop,) = sch.get_loops(sch.get_sblock("B"))
        sch.split(loop, [None, factor])
    return sch.trace


def fill(database, sizes=(64, 128)) -> None:
    """Records of every kind TVM ranks (or does not) for each size, and one empty trace."""
    for n in sizes:
        mod = workload(n)
        committed = database.commit_workload(mod)
        args = ArgInfo.from_prim_func(mod["main"])
        for factor, secs in enumerate(SECS, start=1):
            record = TuningRecord(trace(mod, factor), committed, secs, TARGET, args)
            database.commit_tuning_record(record)
        database.commit_tuning_record(TuningRecord(trace(mod, None), committed, [1e-9], TARGET))


def answers(database, sizes=(64, 128), k=12) -> list[list[tuple[str, list[float] | None]]]:
    """get_top_k's records, as (trace, run times), per size."""
    out = []
    for n in sizes:
        top = database.get_top_k(database.commit_workload(workload(n)), k)
        out.append([described(r) for r in top])
    return out


def open_stock(folder: Path) -> JSONDatabase:
    return JSONDatabase(
        path_workload=str(folder / WORKLOADS),
        path_tuning_record=str(folder / RECORDS),
        allow_missing=False,
    )


def test_it_writes_the_files_stock_tvm_reads_and_answers_as_tvm_does(tmp_path):
    ours = RunDatabase(tmp_path / WORKLOADS, tmp_path / RECORDS)
    fill(ours)
    stock = open_stock(tmp_path)
    assert len(stock) == len(ours) == 2 * (len(SECS) + 1)
    assert answers(ours) == answers(stock)
    assert answers(ours, k=3) == answers(stock, k=3)
    # Fastest first, earlier first among equals; never a failed, unmeasured or empty one.
    first = answers(ours)[0]
    assert [secs for _, secs in first[:3]] == [[0.5e-6], [1e-6], [1e-6]]
    assert first[1][0] != first[2][0]
    assert len(first) == 7
    # Read back, the same answers: for files it wrote, and for files TVM wrote.
    assert answers(RunDatabase(tmp_path / WORKLOADS, tmp_path / RECORDS)) == answers(stock)
    theirs = tmp_path / "stock"
    theirs.mkdir()
    fill(JSONDatabase(work_dir=str(theirs)))
    assert answers(RunDatabase(theirs / WORKLOADS, theirs / RECORDS)) == answers(stock)


def test_it_holds_only_the_fastest_and_reads_every_record_from_the_file(tmp_path):
    ours = RunDatabase(tmp_path / WORKLOADS, tmp_path / RECORDS, kept=2)
    fill(ours)
    stock = open_stock(tmp_path)
    assert answers(ours) == answers(stock, k=2)
    reopened = RunDatabase(tmp_path / WORKLOADS, tmp_path / RECORDS, kept=2)
    assert answers(reopened) == answers(stock, k=2)
    assert len(reopened) == len(stock)
    # Every record, in the order committed, from the file (TVM's own: fastest first).
    every = [described(r) for r in reopened.each_record()]
    assert sorted(every) == sorted(described(r) for r in stock.get_all_tuning_records())
    assert [secs for _, secs in every[: len(SECS)]] == SECS


def described(record) -> tuple[str, list[float] | None]:
    secs = record.run_secs
    return str(record.trace), None if secs is None else [float(s) for s in secs]


def test_a_record_that_no_longer_replays_is_reported_not_fatal(tmp_path):
    ours = RunDatabase(tmp_path / WORKLOADS, tmp_path / RECORDS)
    fill(ours, sizes=(64,))
    other = workload(128)
    ours.commit_workload(other)
    # A record whose trace names a block its workload does not have (written by hand, say).
    rows = (tmp_path / RECORDS).read_bytes().splitlines()
    row = json.loads(rows[0])
    row[1][0][0][0][2][0] = "nothing"  # the block the trace's first instruction asks for
    row[1][1] = [1.0]  # the slowest: not among the fastest two, whose traces opening replays
    with open(tmp_path / RECORDS, "ab") as fh:
        fh.write(json.dumps(row).encode() + b"\n")
    reopened = RunDatabase(tmp_path / WORKLOADS, tmp_path / RECORDS, kept=2)
    seen = []
    read = list(reopened.each_record(lambda number, error: seen.append(number)))
    assert len(read) == len(SECS) + 1 and seen == [len(SECS) + 2]
    with pytest.raises(Exception):  # noqa: B017 - TVM's own error types
        list(reopened.each_record())
    # Among the fastest, it is replayed as the database opens, and fails there, as in TVM.
    with pytest.raises(Exception):  # noqa: B017
        RunDatabase(tmp_path / WORKLOADS, tmp_path / RECORDS)


def test_each_stored_replays_as_from_json_and_as_measure_candidate_do(tmp_path):
    """A resumed run reads every record as stored and replays a trace at most once, where
    TVM's from_json and as_measure_candidate replay each trace twice: the same records and
    candidates, also for a trace that transforms a layout (an IndexMap) and for the record
    that no longer replays."""
    ours = RunDatabase(tmp_path / WORKLOADS, tmp_path / RECORDS)
    fill(ours, sizes=(64,))
    mod = workload(32)
    committed = ours.commit_workload(mod)
    sch = s_tir.Schedule(mod)
    sch.transform_layout(sch.get_sblock("B"), ("write", 0), lambda i: (i // 4, i % 4))
    layout = ours.commit_named(TuningRecord(sch.trace, committed, None, None, None))
    rows = (tmp_path / RECORDS).read_bytes().splitlines()
    broken = json.loads(rows[0])
    broken[1][0][0][0][2][0] = "nothing"
    broken[1][1] = [1.0]  # the slowest: not among the fastest two, which opening replays
    with open(tmp_path / RECORDS, "ab") as fh:
        fh.write(json.dumps(broken).encode() + b"\n")
    reopened = RunDatabase(tmp_path / WORKLOADS, tmp_path / RECORDS, kept=2)
    missed, seen, mine = [], [], []
    theirs = [
        (r, r.as_measure_candidate()) for r in reopened.each_record(lambda n, e: missed.append(n))
    ]
    stored = list(reopened.each_stored())
    for number, record in enumerate(stored, start=1):
        try:
            mine.append(record.replay())
        except Exception:  # noqa: BLE001 - TVM's own error types
            seen.append(number)
    assert seen == missed == [len(SECS) + 3] and len(mine) == len(theirs) == len(SECS) + 2

    def facts(record, candidate) -> tuple:
        target = None if record.target is None else str(record.target)
        args = None if record.args_info is None else [a.as_json() for a in record.args_info]
        return (
            described(record),
            target,
            json.dumps(args),
            str(candidate.sch.trace),
            tvm.ir.save_json(candidate.sch.mod),
            json.dumps([a.as_json() for a in candidate.args_info]),
        )

    assert [facts(*pair) for pair in mine] == [facts(*pair) for pair in theirs]
    # Each one named as a library holding these records names it (library/features.py).
    library = Library(tmp_path / "library")
    library.add_files(tmp_path / WORKLOADS, tmp_path / RECORDS)
    view = LibraryView(library.read(), target=TARGET)
    named = {view.digest(p) for p in range(view.records)}
    assert len(named) == len(SECS) + 3 and {r.digest for r in stored} == named
    assert stored[-2].digest == layout  # as the commit named it
