"""Files a run reads but the user did not name (the tuning library, a --warm-start run
directory's records, waiting.jsonl, the filter's saved state) may be torn, foreign or hostile:
what cannot be used is left out and counted, never replayed untrusted, never the run's end."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tvm
from tvm import s_tir, te
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord, Workload

from tune_orchestrator.config import Settings
from tune_orchestrator.errors import InputError
from tune_orchestrator.filters import TrimmerFilter
from tune_orchestrator.library import Library, LibraryView, RunLibrary
from tune_orchestrator.library.files import RECORDS, WORKLOADS, Contents, record_json
from tune_orchestrator.measure import Measurement
from tune_orchestrator.model.tasks import Task, task_key
from tune_orchestrator.predictor import Predictor, learn_records, saved_problem, warm_start
from tune_orchestrator.run.scheduler import TaskState
from tune_orchestrator.run.skipped import Skipped
from tune_orchestrator.rundir import RunDir
from tune_orchestrator.rundir.waiting import FILE, load_waiting

TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})
EVIL = "pragma_import_llvm"


def workload(n: int):
    """A PrimFunc doubling a vector of `n`: one workload per size, all of one kind."""
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def schedule(mod, factor: int, *, hostile: bool = False):
    sch = s_tir.Schedule(mod)
    (loop,) = sch.get_loops(sch.get_sblock("B"))
    outer, _ = sch.split(loop, [None, factor])
    if hostile:  # what would link foreign LLVM IR into the kernel
        sch.annotate(outer, EVIL, "define void @f() { ret void }")
    return sch


def record(mod, factor: int, secs, *, hostile: bool = False):
    trace = schedule(mod, factor, hostile=hostile).trace
    return TuningRecord(trace, Workload(mod), secs, TARGET, ArgInfo.from_prim_func(mod["main"]))


def database(folder: Path, records) -> Path:
    """A run's stock JSONDatabase holding `records` (TuningRecords)."""
    folder.mkdir(parents=True, exist_ok=True)
    db = JSONDatabase(work_dir=str(folder))
    for r in records:
        db.commit_workload(r.workload.mod)
        db.commit_tuning_record(
            TuningRecord(
                r.trace, db.commit_workload(r.workload.mod), r.run_secs, TARGET, r.args_info
            )
        )
    return folder


def library_of(tmp_path: Path, records) -> Library:
    run = database(tmp_path / "run", records)
    library = Library(tmp_path / "library")
    library.add_files(run / WORKLOADS, run / RECORDS)
    return library


def hostile_in(candidates) -> bool:
    return any(EVIL in str(mc.sch.trace) for mc in candidates)


class FakeLedger:
    """What the library's rounds ask of a ledger."""

    wall_s = device_h = usd = energy_j = trials = 0

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        self.now += 1.0
        return self.now

    @contextlib.contextmanager
    def phase(self, name):
        yield

    def snapshot(self):
        return SimpleNamespace(to_dict=dict)

    def record_point(self, latency) -> None:
        pass


class FakeLoop:
    """Measures whatever it is given in 1 us, and keeps what that was: the builder's view."""

    target = TARGET

    def __init__(self) -> None:
        self.given: dict[int, list] = {}

    def measure_given(self, given):
        for index, candidates in given.items():
            self.given.setdefault(index, []).extend(candidates)
        return {i: [Measurement((1e-6,)) for _ in cs] for i, cs in given.items() if cs}


def states(*sizes):
    return [
        TaskState(Task(i, f"t{n}", 1, float(n), workload(n), task_key(workload(n))), baseline_s=1.0)
        for i, n in enumerate(sizes)
    ]


def test_a_hostile_library_trace_is_counted_and_never_built_the_good_ones_are(tmp_path):
    mod = workload(64)
    # The hostile record is the fastest: reuse and transfer would take it first.
    good = [record(mod, f, [2e-6 * f]) for f in (2, 4, 8)]
    library = library_of(tmp_path, [*good, record(mod, 16, [1e-7], hostile=True)])
    skipped = Skipped()
    run = RunLibrary(library, Settings.load())
    run.read(target=TARGET, skipped=skipped)

    loop, tasks = FakeLoop(), states(64, 128)  # 128: untouched, gets transfer's replays
    run.reuse(loop, tasks, set(), FakeLedger(), lambda entry: None, lambda *a, **k: None)
    run.transfer(loop, tasks, FakeLedger(), lambda entry: None)

    assert len(loop.given[0]) == 3 and not hostile_in(loop.given[0])  # reused: the good ones
    assert loop.given[1] and not hostile_in(loop.given[1])  # transferred: good ones only
    assert skipped.to_dict() == {"unsafe_traces": 1}  # met by both, counted once
    trained = run.view.parse(run.view.training(100))
    assert len(trained) == 3 and not any(EVIL in str(r.trace) for r in trained)


def broken_library(tmp_path: Path) -> tuple[Library, int]:
    """A library of 2 good records of one workload, and records no run can use: run times []
    and null, tuned for CUDA, a torn line, and a workload this TVM cannot read (2 records);
    with how many of them are unusable."""
    mod, other = workload(64), workload(32)
    library = library_of(
        tmp_path, [record(mod, f, [1e-6 * f]) for f in (2, 4)] + [record(other, 2, [1e-6])] * 1
    )
    path = library.path / RECORDS
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    lines = [json.dumps(row) for row in rows]
    for secs in ([], None):
        lines.append(json.dumps([rows[0][0], [rows[0][1][0], secs, *rows[0][1][2:]]]))
    cuda = {"kind": "cuda", "keys": ["cuda", "gpu"], "arch": "sm_80", "thread_warp_size": 32}
    lines.append(json.dumps([rows[0][0], [rows[0][1][0], [1e-6], cuda, rows[0][1][3]]]))
    lines.append(json.dumps([rows[2][0], [rows[2][1][0], [3e-6], *rows[2][1][2:]]]))
    lines.append(lines[0][: len(lines[0]) // 2])  # torn by a crash
    path.write_text("\n".join(lines) + "\n")
    workloads = library.path / WORKLOADS
    shelf = [json.loads(line) for line in workloads.read_text().splitlines()]
    other_line = rows[2][0]
    shelf[other_line] = [shelf[other_line][0], "eyJub2RlcyI6IFt7InR5cGUiOiAiYm9ndXMifV19"]
    workloads.write_text("".join(json.dumps(w) + "\n" for w in shelf))
    return library, 6


def test_records_no_run_can_use_are_left_out_and_each_counted_once(tmp_path):
    library, unusable = broken_library(tmp_path)
    skipped = Skipped()
    view = LibraryView(library.read(), target=TARGET, skipped=skipped)
    everything = list(range(view.records))
    assert len(view.parse(everything)) == 2
    # Transfer's sources: the good records of 64; those of 32, whose workload is unreadable, not.
    assert len(view.others(workload(128), per_workload=4)) == 2
    assert len(view.parse(everything)) == 2  # asked again: counted once
    assert skipped.to_dict() == {"library_records": unusable}


def test_a_line_nested_too_deep_to_parse_is_a_broken_line_not_a_crash():
    deep = b"[0, " + b"[" * 100_000 + b"]" * 100_000 + b"]\n"
    contents = Contents.parse(b'["1", "x"]\n', deep)
    assert contents.records == [] and contents.broken == 1


def test_library_records_without_run_times_teach_nothing_and_end_nothing():
    """TVM reads run_secs [] and null; the cost model's training once divided by their count."""
    mod = workload(64)
    records = [
        record(mod, 2, [2e-6]),
        record(mod, 4, [1e-6]),
        record(mod, 8, []),
        record(mod, 8, None),
    ]
    added = []
    predictor = SimpleNamespace(add=lambda group, features, lats: added.extend(lats))
    skipped = Skipped()
    assert learn_records([predictor], records, TARGET, source="library", skipped=skipped) == {
        task_key(mod)
    }
    assert added == pytest.approx([2e-6, 1e-6]) and all(math.isfinite(x) for x in added)
    assert skipped.to_dict() == {"library_records": 2}


def test_a_warm_start_directory_s_unusable_records_are_counted_and_the_rest_learned(tmp_path):
    mod = workload(64)
    good = [record(mod, f, [1e-6 * f]) for f in (1, 2, 4, 8, 16, 32)]
    source = database(tmp_path / "earlier", [*good, record(mod, 64, [1e-7], hostile=True)])
    with open(source / RECORDS, "a") as fh:
        fh.write('[0, [[["GetSBlock"')  # torn
    skipped, model = Skipped(), Predictor(min_samples=10_000)
    used = warm_start([model], source, TARGET, skipped=skipped)
    assert used.startswith("6 records of 1 workloads") and model.warm
    assert skipped.to_dict() == {"unsafe_traces": 1, "warm_start_records": 1}


def test_a_warm_start_directory_with_nothing_usable_leaves_the_run_cold(tmp_path):
    source = database(tmp_path / "earlier", [record(workload(64), 2, [1e-6], hostile=True)])
    skipped, model = Skipped(), Predictor()
    assert warm_start([model], source, TARGET, skipped=skipped).startswith("nothing")
    assert not model.warm and model.booster is None
    assert skipped.to_dict() == {"unsafe_traces": 1, "warm_start": 1}


def test_a_saved_predictor_is_checked_for_xgboost_and_this_tvm_s_features(tmp_path):
    import xgboost as xgb

    (tmp_path / "not.json").write_text('{"learner": "no"}')
    assert saved_problem(tmp_path / "not.json")
    twelve = Predictor(min_samples=2)
    twelve.add(
        "w",
        [np.ones((1, 12), np.float32) * i for i in range(8)],
        [1e-6 * (i + 1) for i in range(8)],
    )
    twelve.fit()
    twelve.save(tmp_path / "twelve.json")
    assert isinstance(xgb.Booster(model_file=str(tmp_path / "twelve.json")), xgb.Booster)
    assert "a model of 12 features, where this TVM's candidates have 164" in saved_problem(
        tmp_path / "twelve.json"
    )


def waiting_line(task: Task, factor: int, **changes) -> str:
    rec = record(task.workload, factor, None, hostile=changes.pop("hostile", False))
    return json.dumps(
        {"task": task.index, "task_key": task.key, "record": record_json(rec), **changes}
    )


def test_parked_candidates_that_cannot_be_used_are_counted_and_searched_anew(tmp_path):
    task = Task(0, "t64", 1, 64.0, workload(64), task_key(workload(64)))
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        lines = [
            waiting_line(task, 2),
            waiting_line(task, 4, task_key="0" * 16),  # another task list's
            waiting_line(task, 8, hostile=True),
            waiting_line(task, 16)[:40],  # torn
        ]
        (run.path / FILE).write_text("\n".join(lines) + "\n")
        skipped = Skipped()
        parked = load_waiting(run, [task], target=TARGET, skipped=skipped)
    assert len(parked[0]) == 1 and not hostile_in(parked[0])
    assert skipped.to_dict() == {"unsafe_traces": 1, "waiting": 2}


def test_a_corrupt_filter_state_is_counted_and_the_filter_starts_afresh(tmp_path):
    (tmp_path / "filter.json").write_text('{"warm": true, "best": {"t": "fast"}')
    skipped = Skipped()
    flt = TrimmerFilter(target=TARGET, state_dir=tmp_path, skipped=skipped)
    assert skipped.count("filter_state") == 1 and not flt.predictor.warm and not flt.audits
    (tmp_path / "filter.json").write_text('{"best": {"t": "fast"}}')  # JSON, wrong values
    TrimmerFilter(target=TARGET, state_dir=tmp_path, skipped=skipped)
    assert skipped.count("filter_state") == 2


def test_filter_state_is_replaced_whole_so_a_failed_write_leaves_the_last_one(
    tmp_path, monkeypatch
):
    task = Task(0, "t64", 1, 64.0, workload(64), task_key(workload(64)))
    flt = TrimmerFilter(target=TARGET, state_dir=tmp_path)
    flt._best[task.key] = 1e-6
    flt._save_state(tmp_path)
    before = (tmp_path / "filter.json").read_text()

    def power_cut(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("os.fsync", power_cut)
    flt._best[task.key] = 5e-7
    with pytest.raises(OSError):
        flt._save_state(tmp_path)
    assert (tmp_path / "filter.json").read_text() == before
    assert [p.name for p in tmp_path.iterdir() if "filter" in p.name] == ["filter.json"]


def test_reasons_counted_before_the_session_listens_are_told_when_it_does():
    skipped, told = Skipped(), []
    skipped.add("filter_state", "filter.json: not JSON")
    skipped.add("filter_state", "again")
    skipped.listen(told.append)
    skipped.add("waiting", "line 3: torn")
    assert told == [
        "skipped saved filter state (filter.json) that could not be read: filter.json: not JSON",
        "skipped parked proposals (waiting.jsonl) that could not be read or replayed: line 3: torn",
    ]
    assert skipped.to_dict() == {"filter_state": 2, "waiting": 1}


def test_a_library_root_that_cannot_be_made_is_known_before_the_run(tmp_path, monkeypatch):
    """Under a file, say: the default root is counted with the fix (the run tunes without it),
    a named one refused up front, not found out when the run's records are added."""
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    target = SimpleNamespace(simulated=False, device_type="cpu", kind="llvm", target=TARGET)
    why = RunLibrary.open(None, target, Settings.load(None), build_only=False).unreadable
    assert why is not None and "cannot be created" in why and "set XDG_CACHE_HOME" in why
    with pytest.raises(InputError, match="--library .* cannot be created"):
        RunLibrary.open(blocker / "library", target, Settings.load(None), build_only=False)
    made = tmp_path / "new" / "library"
    assert RunLibrary.open(made, target, Settings.load(None), build_only=False).path is not None
    assert made.is_dir()


def test_a_library_under_a_link_to_nothing_names_the_link(tmp_path, monkeypatch):
    """A cache folder linked to a disk not mounted: "cannot be created (File exists)"."""
    (tmp_path / "cache").symlink_to(tmp_path / "unmounted")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = SimpleNamespace(simulated=False, device_type="cpu", kind="llvm", target=TARGET)
    why = RunLibrary.open(None, target, Settings.load(None), build_only=False).unreadable
    link = f"{tmp_path / 'cache'} is a symbolic link to {tmp_path / 'unmounted'}, which does not"
    assert why is not None and link in why, why


def _open_default_library(cache: str, settings: Settings) -> str | None:
    import os

    os.environ["XDG_CACHE_HOME"] = cache
    target = SimpleNamespace(simulated=False, device_type="cpu", kind="llvm", target=TARGET)
    return RunLibrary.open(None, target, settings, build_only=False).unreadable


def test_a_default_library_root_this_user_cannot_use_is_counted_not_fatal(tmp_path):
    import os
    import shutil
    import tempfile

    from other_users import ALICE, as_user, can_switch_users

    shared = Path(tempfile.mkdtemp(prefix="library-"))  # other users may enter /tmp's folders
    shared.chmod(0o755)
    closed = shared / "closed"
    closed.mkdir(mode=0o700)  # the cache folder another user made, or made private
    try:
        if os.geteuid() != 0:
            closed.chmod(0o000)
            why = _open_default_library(str(closed), Settings.load(None))
        elif can_switch_users():  # settings read first: this Python's files may be root's alone
            why = as_user(ALICE, _open_default_library, str(closed), Settings.load(None))
        else:
            pytest.skip("root may enter any folder and cannot act as another user here")
    finally:
        closed.chmod(0o700)
        shutil.rmtree(shared)
    assert why is not None and "cannot be reached" in why
    named = tmp_path / "library"
    named.write_text("not a folder")
    target = SimpleNamespace(simulated=False, device_type="cpu", kind="llvm", target=TARGET)
    with pytest.raises(InputError, match="--library .* is a file; give a directory you can read"):
        RunLibrary.open(named, target, Settings.load(None), build_only=False)
