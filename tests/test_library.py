"""The tuning library: writers at once, torn lines, stock TVM reading it, what a run takes
from it and gives it. The tests named `e2e` run real tunes (about a minute): select them with
-k e2e, leave them out with -k 'not e2e'."""

from __future__ import annotations

import contextlib
import gc
import json
import math
import multiprocessing
import os
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import s_tir, te
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord

from other_users import ALICE, as_user, can_switch_users
from tune_orchestrator import predictor as predictor_module
from tune_orchestrator.budget.render import describe_library, library_rounds
from tune_orchestrator.config import Settings
from tune_orchestrator.errors import InputError
from tune_orchestrator.library import Contents, Library, LibraryView, RunLibrary, plateaued
from tune_orchestrator.library.features import FEATURES, FeatureShelf, shelf_tag
from tune_orchestrator.library.files import (
    RECORDS,
    WORKLOADS,
    default_root,
    record_json,
    target_key,
)
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import Task
from tune_orchestrator.run.scheduler import GainScheduler, RoundSizes, TaskState

TARGET = tvm.target.Target({"kind": "llvm"})


def workload(n: int):
    """A PrimFunc doubling a vector of `n`: one workload per size."""
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def make_database(folder: Path, sizes, factors, secs=lambda n, f: 1e-6 * f) -> Path:
    """A run's JSONDatabase: for each size, one record per split factor (distinct traces)."""
    folder.mkdir(parents=True, exist_ok=True)
    database = JSONDatabase(work_dir=str(folder))
    for n in sizes:
        mod = workload(n)
        committed = database.commit_workload(mod)
        for factor in factors:
            sch = s_tir.Schedule(mod)
            (loop,) = sch.get_loops(sch.get_sblock("B"))
            sch.split(loop, [None, factor])
            args = ArgInfo.from_prim_func(mod["main"])
            database.commit_tuning_record(
                TuningRecord(sch.trace, committed, [secs(n, factor)], TARGET, args)
            )
    return folder


def files(folder: Path) -> tuple[Path, Path]:
    return folder / WORKLOADS, folder / RECORDS


def secs_of(record) -> float:
    return float(record.run_secs[0].value)


def stock_records(folder: Path) -> int:
    """Records stock TVM reads from the folder (it raises on any line it cannot parse)."""
    return len(JSONDatabase(work_dir=str(folder), allow_missing=False).get_all_tuning_records())


def _add_one_by_one(path: str, source: str, barrier) -> None:
    """A writer process: each record of `source` added on its own, so writers interleave."""
    library = Library(Path(path))
    found = Contents.parse(*(p.read_bytes() for p in files(Path(source))))
    barrier.wait()
    for row in found.records:
        library.add(found.workloads, [row])


def test_two_writers_at_once_keep_both_sets_and_stock_tvm_reads_the_result(tmp_path):
    first = make_database(tmp_path / "a", sizes=[64, 128, 256], factors=[1, 2, 4, 8, 16])
    second = make_database(tmp_path / "b", sizes=[128, 512], factors=[1, 2, 4, 8, 16, 32])
    library = Library(tmp_path / "library")
    context = multiprocessing.get_context("fork")  # the writers need no TVM
    barrier = context.Barrier(2)
    writers = [
        context.Process(target=_add_one_by_one, args=(str(library.path), str(src), barrier))
        for src in (first, second)
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    assert [w.exitcode for w in writers] == [0, 0]
    # 15 + 12 records, of which size 128 shares factors 1..16 with the first writer: 5 once.
    contents = library.read()
    assert len(contents.records) == 15 + 12 - 5
    assert len(contents.workloads) == 4 and contents.broken == 0
    assert stock_records(library.path) == 22
    view = LibraryView(contents, target=TARGET)
    assert sorted(len(p) for p in view.by_workload.values()) == [5, 5, 6, 6]


def test_the_library_s_lock_is_taken_through_no_link(tmp_path):
    """In a library folder a team shares, a lock file someone made a link would have the next
    member's run create the file it points to, where that member may write."""
    library = Library(tmp_path / "library")
    library.path.mkdir()
    (library.path / WORKLOADS).write_text("")
    (library.path / ".lock").symlink_to(tmp_path / "made-by-someone-else")
    for use in (library.read, lambda: library.exclusive().__enter__()):
        with pytest.raises(OSError, match="Too many levels of symbolic links"):
            use()
    assert not (tmp_path / "made-by-someone-else").exists()


def test_a_run_that_waits_long_for_the_library_says_why(tmp_path, monkeypatch):
    """Another process holding the lock (one stopped with Ctrl-Z as it wrote the library) kept
    every run of the target waiting, silently."""
    import fcntl
    import threading

    from tune_orchestrator.library import files

    monkeypatch.setattr(files, "WAITING_SAID_AFTER_S", 0.5)
    first = make_database(tmp_path / "a", sizes=[64], factors=[1, 2])
    library = Library(tmp_path / "library")
    library.add_files(first / WORKLOADS, first / RECORDS)
    told: list[str] = []
    run_library = RunLibrary(library, Settings.load(None), warn=told.append)
    run_library.read(target=TARGET)  # free: nothing said
    holder = os.open(library.path / ".lock", os.O_RDWR)  # another open file: another holder
    fcntl.flock(holder, fcntl.LOCK_EX)
    threading.Timer(0.1, os.close, (holder,)).start()  # a run's write: a moment
    run_library.read(target=TARGET)
    assert told == [] and len(run_library.view.by_workload) == 1

    holder = os.open(library.path / ".lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    reader = threading.Thread(target=run_library.read, kwargs={"target": TARGET}, daemon=True)
    try:
        reader.start()
        reader.join(2)
        waited, said = reader.is_alive(), list(told)
    finally:
        os.close(holder)
        reader.join(10)
    assert waited  # it waits, as before, but has said why
    assert said == [
        f"waiting for the tuning library {library.path}: another orchestrate process holds its "
        "lock (one stopped with Ctrl-Z holds it until it goes on: fg)"
    ]
    assert not reader.is_alive() and len(run_library.view.by_workload) == 1


def test_a_torn_last_line_is_skipped_on_read_and_mended_by_the_next_write(tmp_path):
    run = make_database(tmp_path / "run", sizes=[64, 128], factors=[1, 2, 4])
    library = Library(tmp_path / "library")
    assert library.add_files(*files(run)) == 6
    records = library.path / RECORDS
    whole = records.read_bytes()
    records.write_bytes(whole[: len(whole) - 40])  # a write cut short in its last line
    with pytest.raises(RuntimeError):  # stock TVM cannot read the torn file
        stock_records(library.path)
    torn = library.read()
    assert len(torn.records) == 5 and torn.broken == 1
    # Adding what it holds adds nothing, yet the files are written whole again: every line
    # parses and TVM reads them; the torn record comes back from a run that offers it.
    held = make_database(tmp_path / "held", sizes=[64], factors=[1, 2, 4])
    assert library.add_files(*files(held)) == 0
    assert library.read().broken == 0 and stock_records(library.path) == 5
    assert library.add_files(*files(run)) == 1 and stock_records(library.path) == 6
    # A torn workload line: its records are skipped until a write drops it.
    workloads = library.path / WORKLOADS
    workloads.write_bytes(workloads.read_bytes()[:-30])
    half = library.read()
    assert len(half.workloads) == 2 and half.workloads[1] is None and len(half.records) == 3
    other = make_database(tmp_path / "other", sizes=[256], factors=[1])
    assert library.add_files(*files(other)) == 1
    assert stock_records(library.path) == 4 and library.read().broken == 0


def test_a_reader_between_the_two_renames_finds_every_record_s_workload(tmp_path, monkeypatch):
    """The writer replaces the workload file first: stock TVM, which takes no lock, may read
    the new workload file with the old record file, and every record still finds its
    workload at its line. (Killed at that moment, the library is just as readable.)"""
    library = Library(tmp_path / "library")
    library.add_files(*files(make_database(tmp_path / "a", sizes=[64], factors=[1, 2])))
    replace = Library._replace

    def killed_after_workloads(self, name, lines):
        replace(self, name, lines)
        if name == WORKLOADS:
            raise KeyboardInterrupt  # the process dies between the renames

    monkeypatch.setattr(Library, "_replace", killed_after_workloads)
    second = make_database(tmp_path / "b", sizes=[32, 64], factors=[4])
    with pytest.raises(KeyboardInterrupt):
        library.add_files(*files(second))
    assert len(library.read().workloads) == 2
    assert stock_records(library.path) == 2  # the old records, each with its workload
    monkeypatch.setattr(Library, "_replace", replace)
    leftover = library.path / f".{RECORDS}.k9x"  # a temp file of a writer killed by -9
    leftover.write_text("[0, [")
    assert library.add_files(*files(second)) == 2
    assert stock_records(library.path) == 4 and not leftover.exists()


def test_default_location_follows_xdg_cache_home_and_the_target_key_reads_well(tmp_path):
    assert default_root({"XDG_CACHE_HOME": str(tmp_path)}) == (
        tmp_path / "tune-orchestrator" / "library"
    )
    assert default_root({"XDG_CACHE_HOME": "relative"}) == (
        Path.home() / ".cache" / "tune-orchestrator" / "library"
    )
    cpu = target_key(resolve_target("llvm"))
    gpu = target_key(resolve_target("nvidia/nvidia-h100", build_only=True))
    assert cpu.startswith("llvm-") and "cores-" in cpu
    assert gpu.startswith("cuda-sm_90a-") and cpu != gpu
    assert all(ch.isalnum() or ch in "-_." for ch in cpu + gpu)


@pytest.mark.parametrize(
    "latencies, expected",
    [
        ([5.0] + [4.0] * 7, True),  # best reached early, the last half did not beat it
        ([5.0] * 7 + [4.0], False),  # the last trial improved it
        ([5.0] * 7 + [4.99], True),  # by less than min_gain (1%)
        ([4.0] * 5, False),  # too few trials to tell
        ([math.inf] * 4 + [4.0] * 4, False),  # nothing ran before the last half
    ],
)
def test_a_plateau_is_a_last_share_of_trials_that_did_not_beat_the_best_before(latencies, expected):
    assert plateaued(latencies, min_trials=6, share=0.5, min_gain=0.01) is expected


def test_a_match_gives_the_fastest_records_that_ran_and_the_library_s_trial_count(tmp_path):
    # Factor 1 failed (MetaSchedule's 1e10), the others got faster with larger factors.
    secs = {1: 1e10, 2: 4e-6, 4: 3e-6, 8: 2e-6, 16: 2e-6, 32: 2e-6}
    run = make_database(tmp_path / "run", [64, 128], list(secs), lambda n, f: secs[f])
    library = Library(tmp_path / "library")
    library.add_files(*files(run))
    view = LibraryView(library.read(), target=TARGET)
    # In measured order: failed, 4, 3, 2, 2, 2 us: no gain in the last third, some in the half.
    match = view.match(workload(64), top=3, min_trials=6, share=0.3, min_gain=0.01)
    assert match.trials == 6 and match.best_s == 2e-6 and match.plateau
    assert [secs_of(r) for r in match.records] == pytest.approx([2e-6] * 3)
    assert view.match(workload(32), top=3, min_trials=6, share=0.3, min_gain=0.01) is None
    assert not view.match(workload(64), top=3, min_trials=6, share=0.5, min_gain=0.01).plateau
    assert not view.match(workload(64), top=3, min_trials=7, share=0.3, min_gain=0.01).plateau
    # Transfer-tuning's source: the other workloads' best records, never the task's own.
    others = view.others(workload(64), per_workload=2)
    assert len(others) == 2 and all(r.workload.mod.same_as(others[0].workload.mod) for r in others)
    assert tvm_ffi.structural_equal(others[0].workload.mod, workload(128))
    # Training: this model's workloads first, each spread over its latencies.
    first = {view.match(workload(128), top=1, min_trials=1, share=0.5, min_gain=0).key}
    chosen = view.parse(view.training(limit=20, first=first))
    assert len(chosen) == 12 and tvm_ffi.structural_equal(chosen[0].workload.mod, workload(128))
    assert sorted({secs_of(r) for r in chosen}) == pytest.approx(sorted(set(secs.values())))
    # Any prefix is a choice of its own: both workloads, the fastest and slowest of each.
    prefix = view.parse(view.training(limit=20, first=first)[:4])
    assert {len(r.workload.mod["main"].params[0].shape) for r in prefix} == {1}
    assert {int(r.workload.mod["main"].params[0].shape[0]) for r in prefix} == {64, 128}
    assert sorted(secs_of(r) for r in prefix) == pytest.approx([2e-6, 2e-6, 1e10, 1e10])


def test_training_on_the_library_stops_at_its_share_of_the_budget(tmp_path):
    """A large library must not eat a short budget: training reads and learns records a chunk
    at a time and stops once its seconds are spent."""
    run = make_database(tmp_path / "run", [64, 128, 256], [1, 2, 4, 8, 16, 32, 64, 128])
    library = Library(tmp_path / "library")
    library.add_files(*files(run))
    settings = Settings.load(None)
    tasks = [Task(0, "t0", 1, 1e6, workload(64), "0")]

    def trained(seconds, clock=None):
        one = RunLibrary(library, settings)
        one.TRAIN_CHUNK = 8
        one.clock = clock or one.clock
        one.read(target=TARGET)
        predictor = SimpleNamespace(
            added=[], add=lambda group, f, lat: predictor.added.append(len(f))
        )
        one.train([predictor], TARGET, tasks, fit=False, seconds=seconds)
        return one.trained_records, one.trained_workloads, sum(predictor.added)

    ticks = iter(range(100))  # each look at the clock: a second later
    assert trained(2.5, clock=lambda: float(next(ticks))) == (16, 3, 16)  # two chunks of 8
    assert trained(None) == (24, 3, 24)
    # Features the library keeps (those 24 now) cost no reading: all of them within 2.5 s.
    ticks = iter(range(100))
    assert trained(2.5, clock=lambda: float(next(ticks))) == (24, 3, 24)


def learned(library: Library) -> list[tuple[str, list, list]]:
    """What one run's training on `library` gives its predictor: (group, features,
    latencies) of each add."""
    one = RunLibrary(library, Settings.load(None))
    one.read(target=TARGET)
    adds = []
    predictor = SimpleNamespace(add=lambda group, f, lat: adds.append((group, f, list(lat))))
    one.train([predictor], TARGET, [], fit=False)
    return sorted(adds, key=lambda add: add[0])


def same_adds(one, other) -> bool:
    return [(g, lat) for g, _, lat in one] == [(g, lat) for g, _, lat in other] and all(
        len(f) == len(h) and all(np.array_equal(a, b) for a, b in zip(f, h, strict=True))
        for (_, f, _), (_, h, _) in zip(one, other, strict=True)
    )


def test_a_second_run_trains_on_the_features_the_first_extracted(tmp_path, monkeypatch):
    """Reading a record into TVM and extracting its features costs ~15 ms: the library
    keeps them, so the next run's training costs its fit."""
    run = make_database(tmp_path / "run", [64, 128], [1, 2, 4, 8])
    library = Library(tmp_path / "library")
    library.add_files(*files(run))
    first = learned(library)
    assert sum(len(f) for _, f, _ in first) == 8 and (library.path / FEATURES).is_file()

    def no_extraction(*args, **kwargs):
        raise AssertionError("features extracted again")

    with monkeypatch.context() as patch:
        patch.setattr(predictor_module, "record_features", no_extraction)
        assert same_adds(learned(library), first)
    # A record added since is read and extracted; the others still come from the file.
    library.add_files(*files(make_database(tmp_path / "more", [256], [2])))
    extracted = []
    real = predictor_module.record_features
    monkeypatch.setattr(
        predictor_module,
        "record_features",
        lambda records, *a, **k: extracted.append(len(records)) or real(records, *a, **k),
    )
    assert sum(len(f) for _, f, _ in learned(library)) == 9 and extracted == [1]


def test_features_of_another_tvm_or_a_broken_file_are_extracted_again(tmp_path):
    run = make_database(tmp_path / "run", [64], [1, 2, 4])
    library = Library(tmp_path / "library")
    library.add_files(*files(run))
    first = learned(library)
    path = library.path / FEATURES
    for damage in (b"not a zip", path.read_bytes()[:100], b""):
        path.write_bytes(damage)
        assert same_adds(learned(library), first)
        assert FeatureShelf(path, shelf_tag(TARGET)).entries.keys() == {
            LibraryView(library.read(), target=TARGET).digest(p) for p in range(3)
        }
    assert FeatureShelf(path, "another TVM's").entries == {}


def test_features_of_records_the_library_no_longer_holds_are_dropped(tmp_path):
    library = Library(tmp_path / "library")
    library.add_files(*files(make_database(tmp_path / "old", [64], [1, 2])))
    learned(library)
    (library.path / WORKLOADS).unlink()  # the user cleared the library
    (library.path / RECORDS).unlink()
    library.add_files(*files(make_database(tmp_path / "new", [128], [4])))
    learned(library)
    shelf = FeatureShelf(library.path / FEATURES, shelf_tag(TARGET))
    view = LibraryView(library.read(), target=TARGET)
    assert set(shelf.entries) == {view.digest(0)}


def test_each_workload_keeps_its_fastest_half_and_a_spread_of_the_rest(tmp_path):
    """Unbounded, every run's ~1,000 records of a small CNN joined the library: after a few
    runs each run read and parsed tens of MB of them, three times, and held them in memory."""
    library = Library(tmp_path / "library")
    first = make_database(tmp_path / "first", [64], range(1, 13))  # 1-12 us: factor f, f us
    make_database(first, [128], [1, 2])  # another workload, under the bound
    assert library.add_files(*files(first), keep=4) == 6  # 4 of the 12, and both of the 2

    def held() -> dict[str, list[float]]:
        contents = library.read()
        by_size: dict[str, list[float]] = {}
        for line, record in contents.records:
            by_size.setdefault(contents.workloads[line][0], []).append(record[1][0] * 1e6)
        return {key: [round(s, 1) for s in secs] for key, secs in by_size.items()}

    big, small = held().values()
    assert big == [1, 2, 3, 12] and small == [1, 2]  # the fastest two, then the rest's ends
    assert stock_records(library.path) == 6
    # Faster records of the workload push out slower ones; those kept stay in file order.
    faster = make_database(tmp_path / "faster", [64], range(13, 16), secs=lambda n, f: 1e-7 * f)
    assert library.add_files(*files(faster), keep=4) == 2  # 1.3 and 1.4 us stay, 1.5 does not
    assert list(held().values())[0] == [1, 12, 1.3, 1.4]
    assert library.add_files(*files(first), keep=4) == 0  # all held or cut: nothing stays
    assert stock_records(library.path) == 6


def learned_run(folder: Path, source: JSONDatabase):
    """A run's database in `folder` of `source`'s records, as a run writes it, and the
    features its cost model learned of each (the i-th record's all i + 1), kept as a run
    keeps them (rundir/learned.py)."""
    from tune_orchestrator.model.tasks import task_key
    from tune_orchestrator.predictor import feature_width
    from tune_orchestrator.rundir.database import RunDatabase
    from tune_orchestrator.rundir.learned import Learned, LearnedFile

    folder.mkdir()
    run = RunDatabase(*files(folder))
    kept = LearnedFile.for_target(folder / "learned.jsonl", TARGET)
    for i, record in enumerate(source.get_all_tuning_records()):
        mod = record.workload.mod
        again = TuningRecord(
            record.trace, run.commit_workload(mod), record.run_secs, TARGET, record.args_info
        )
        stores = np.full((2, feature_width()), i + 1, np.float32)
        kept.append([(run.commit_named(again), Learned(i, task_key(mod), stores))])
    return kept


def test_features_of_records_cut_from_the_library_go_with_them(tmp_path):
    """The features file grew by every run's records as the library did."""
    library = Library(tmp_path / "library")
    settings = Settings.load(None, {"library.keep_per_workload": 2})
    for name, factors in (("slow", [4, 8]), ("fast", [1, 2])):
        source = JSONDatabase(work_dir=str(make_database(tmp_path / f"{name}-db", [64], factors)))
        kept = learned_run(tmp_path / name, source)
        RunLibrary(library, settings).add(files(tmp_path / name), [], {"check": {"ok": True}}, kept)
    view = LibraryView(library.read(), target=TARGET)
    assert [round(record[1][0] * 1e6) for _, record in view.contents.records] == [1, 2]
    shelf = FeatureShelf(library.path / FEATURES, shelf_tag(TARGET))
    assert set(shelf.entries) == {view.digest(0), view.digest(1)}


def library_task(index: int, *, library_trials: int, plateau: bool) -> TaskState:
    """A task after its library round: the best of its library records measured here."""
    task = Task(index, f"t{index}", 1, 1e6, None, f"{index:016x}")
    state = TaskState(task, baseline_s=10.0)
    state.record_round(5.0, trials=0, seconds=1.0)
    state.trials, state.library_trials, state.plateau = 4, library_trials, plateau
    return state


def test_the_scheduler_sees_a_task_at_a_plateau_in_the_library_as_deep():
    sizes = RoundSizes(16, 64)
    sched = GainScheduler()
    fresh = TaskState(Task(9, "t9", 1, 1e6, None, "9"), baseline_s=10.0)
    fresh.record_round(5.0, trials=16, seconds=1.0, fixed_s=0.5)
    fresh.trials = 16
    flat = library_task(0, library_trials=512, plateau=True)
    # The same latency and the same cut so far: the plateau makes the difference.
    assert sched.pick([flat, fresh], sizes).state is fresh
    assert sched.expected_gain(flat, 64) < 0.05 * sched.expected_gain(fresh, 64)
    steep = library_task(0, library_trials=512, plateau=False)
    assert sched.expected_gain(steep, 64) > 5 * sched.expected_gain(flat, 64)
    # Nothing else to buy: the plateau task still gets its round.
    fresh.retired = "done"
    assert sched.pick([flat, fresh], sizes).state is flat
    assert flat.trials_after == [512] and flat.depth == 516


def restored_from(journal: list[dict]):
    """A run of two tasks ("double", "x") restored from `journal` and an empty database."""
    from tvm.s_tir import meta_schedule as ms

    from tune_orchestrator.rundir.restore import restore

    tasks = [Task(0, "double", 1, 64.0, workload(64), "0"), Task(1, "x", 1, 8.0, workload(8), "1")]
    return restore(
        tasks,
        journal,
        ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(),
        target=TARGET,
    )


def test_a_resumed_run_keeps_its_library_rounds_and_has_none_again():
    entry = {"type": "library_round", "task": 0, "best_s": 5e-6, "measured": 3, "seconds": 1.2}
    restored = restored_from(
        [{"type": "session"}, {**entry, "library_trials": 40, "plateau": True}]
    )
    state = restored.states[0]
    assert restored.library.done == {0}  # the session passes these as done: no second one
    assert state.history == [5e-6] and state.round_trials == [0] and state.round_s == [1.2]
    assert (state.library_trials, state.plateau, state.measured_rounds) == (40, True, 1)
    assert restored.states[1].rounds == 0


def test_a_resumed_run_reports_what_its_earlier_sessions_took_from_the_library(tmp_path):
    tally = {"tried": 3, "as_is": 1, "re_derived": 1, "failed": 1, "measured": 2}
    journal = [
        {"type": "session"},
        {"type": "library_round", "task": 0, "best_s": 5e-6, "measured": 3, "failed": 1,
         "library_trials": 40, "plateau": True},
        {"type": "round", "kind": "transfer", "task": 1, "best_s": 2e-6, "trials": 2,
         "measured": 2, "transfer": {**tally, "best_s": 2e-6, "default_s": 4e-6}},
    ]  # fmt: skip
    restored = restored_from(journal)
    library = RunLibrary(Library(tmp_path / "library"), Settings.load())
    library.resume(restored.library, restored.states)
    report = library.report()
    assert (report["reused_records"], report["reused_tasks"], report["plateau_tasks"]) == (4, 1, 1)
    assert report["transferred"]["x"]["tried"] == 3
    line = describe_library(report)
    assert line.startswith("4 records of 1 tasks reused (1 at a plateau there); 3 schedules")
    assert "beating the default schedule on 1" in line


def test_the_library_round_event_validates_and_prints(capsys):
    import jsonschema

    from tune_orchestrator.budget import Ledger
    from tune_orchestrator.cli.printer import Printer
    from tune_orchestrator.events import Emitter
    from tune_orchestrator.events import schema as event_schema
    from tune_orchestrator.measure import Measurement

    events = []
    flat = library_task(0, library_trials=512, plateau=True)
    measured = [Measurement((5.0,)), Measurement(None, "build failed")]
    emit = Emitter(events.append, Printer(tty=False))
    RunLibrary._emit(flat, measured, 3, Ledger(), emit)
    jsonschema.validate(events[0], event_schema())
    assert events[0]["measured"] == 1 and events[0]["failed"] == 1 and events[0]["plateau"]
    out = capsys.readouterr().out
    assert "library    t0 [1/3]  1 of its fastest records measured, 1 failed" in out
    assert "(512 library trials, at a plateau there)" in out


def test_a_run_leaves_the_library_alone_when_told_or_when_its_timings_are_not_real(tmp_path):
    settings = Settings.load()
    cpu = resolve_target("llvm")
    assert RunLibrary.open(False, cpu, settings, build_only=False).off == "--no-library"
    assert "build-only" in RunLibrary.open(None, cpu, settings, build_only=True).off
    simulated = resolve_target("auto", simulate=True)
    assert "simulated" in RunLibrary.open(None, simulated, settings, build_only=False).off
    used = RunLibrary.open(tmp_path / "root", cpu, settings, build_only=False)
    assert used.off is None and used.path == tmp_path / "root" / target_key(cpu)
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="is a file"):
        RunLibrary.open(tmp_path / "file", cpu, settings, build_only=False)


def test_only_a_run_whose_tuned_model_passed_its_check_adds_and_never_its_defaults(tmp_path):
    run = make_database(tmp_path / "run", sizes=[64], factors=[1, 2, 4])
    default = JSONDatabase(work_dir=str(run)).get_all_tuning_records()[0]
    settings = Settings.load()

    def finish(tuned, defaults=()):
        library = RunLibrary(Library(tmp_path / "library"), settings)
        library.add(files(run), defaults, tuned)
        return library

    for tuned in (None, {}, {"check": {"ok": False}}):
        assert finish(tuned).added is None
    assert not (tmp_path / "library" / RECORDS).exists()
    assert "differ" in finish({"check": {"ok": False}}).not_added
    assert finish({"check": {"ok": True}}, [default]).added == 2
    assert finish({"check": {"ok": True}}).added == 1  # the default's record only now


def split_index(factor: int):
    return lambda i: (i // factor, i % factor)


def layout_database(folder: Path) -> JSONDatabase:
    """A run's database whose schedules transform a buffer's layout, as CUDA schedules do:
    their traces hold an IndexMap, which TVM's own `as_json` cannot convert."""
    folder.mkdir(parents=True)
    database = JSONDatabase(work_dir=str(folder))
    mod = workload(64)
    committed = database.commit_workload(mod)
    for factor in (4, 8):
        sch = s_tir.Schedule(mod)
        sch.transform_layout(sch.get_sblock("B"), ("write", 0), split_index(factor))
        args = ArgInfo.from_prim_func(mod["main"])
        database.commit_tuning_record(TuningRecord(sch.trace, committed, [1e-6], TARGET, args))
    return database


def test_the_features_a_run_learned_go_to_the_library_with_its_records(tmp_path, monkeypatch):
    """The next run trains on a run's records without reading them into TVM: the features its
    cost model learned are kept (rundir/learned.py) under the names the run's database gave
    the records as it wrote them, which the library gives them too (layout transforms
    included, whose traces TVM's as_json cannot convert)."""
    plain = JSONDatabase(work_dir=str(make_database(tmp_path / "plain", [64], [2, 4])))
    layout = layout_database(tmp_path / "layout")
    library = Library(tmp_path / "library")
    for name, source in (("plain-run", plain), ("layout-run", layout)):
        kept = learned_run(tmp_path / name, source)
        RunLibrary(library, Settings.load(None)).add(
            files(tmp_path / name), [], {"check": {"ok": True}}, kept
        )
    monkeypatch.setattr(predictor_module, "record_features", None)  # no extraction: kept
    adds = learned(library)
    assert sum(len(f) for _, f, _ in adds) == 4
    assert sorted(float(m[0, 0]) for _, f, _ in adds for m in f) == [1.0, 1.0, 2.0, 2.0]


def test_schedules_that_transform_a_layout_are_added_and_left_waiting_as_tvm_writes_them(
    tmp_path,
):
    database = layout_database(tmp_path / "run")
    default, tuned = database.get_all_tuning_records()
    filed = [json.loads(line)[1] for line in files(tmp_path / "run")[1].read_text().splitlines()]
    assert [record_json(default), record_json(tuned)] == filed
    again = TuningRecord.from_json(record_json(tuned), tuned.workload)  # a parked candidate
    assert str(again.trace) == str(tuned.trace)

    library = RunLibrary(Library(tmp_path / "library"), Settings.load())
    library.add(files(tmp_path / "run"), [default], {"check": {"ok": True}})
    assert library.added == 1 and stock_records(tmp_path / "library") == 1


def _use_library(root: str, run: str, settings: Settings) -> tuple:
    """What a run takes from the library under `root` and gives it (run: a run's database)."""
    cpu = resolve_target("llvm")
    library = RunLibrary.open(Path(root), cpu, settings, build_only=False)
    library.read(target=cpu)
    library.add(files(Path(run)), [], {"check": {"ok": True}})
    return library.view.records, library.read_only, library.added, library.not_added


@contextlib.contextmanager
def _a_library_others_may_enter(tmp_path: Path, *, folder_mode: int = 0o755):
    """A library this user made (two records) where others may enter, and a run's database
    beside it: (the library's folder, the arguments of _use_library)."""
    shared = Path(tempfile.mkdtemp(prefix="library-"))  # pytest's own tmp is its owner's alone
    shared.chmod(0o755)
    folder = Library.for_target(resolve_target("llvm"), shared).path
    Library(folder).add_files(*files(make_database(tmp_path / "old", [64], [2, 4])))
    folder.chmod(folder_mode)
    run = make_database(shared / "run", [64, 128], [8])
    try:
        yield folder, (str(shared), str(run), Settings.load(None))
    finally:
        folder.chmod(0o755)
        shutil.rmtree(shared)


def _as_another_user(args: tuple, modes: dict[Path, int]) -> tuple:
    """_use_library(*args) as a user who did not make the library: another one where this is
    root (tests/other_users.py), else this one, the `modes` set first on the library's files."""
    if os.geteuid() != 0:
        for path, mode in modes.items():
            path.chmod(mode)
        return _use_library(*args)
    if can_switch_users():  # the settings were read here: this Python's files may be root's
        return as_user(ALICE, _use_library, *args)
    pytest.skip("root may write anything and cannot act as another user here")


@pytest.mark.parametrize("lock", ["kept", "never made"])
def test_a_library_this_user_may_read_but_not_write_is_read_and_left_as_it_is(tmp_path, lock):
    """A colleague's library, one on a read-only mount or baked into an image: it was "not
    readable and writable by you" and the run tuned without it."""
    with _a_library_others_may_enter(tmp_path) as (folder, args):
        if lock == "never made":
            (folder / ".lock").unlink()
        before = {p.name: p.read_bytes() for p in folder.iterdir()}
        modes = {**{p: 0o444 for p in folder.iterdir()}, folder: 0o555}
        records, read_only, added, not_added = _as_another_user(args, modes)
        folder.chmod(0o755)
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert records == 2 and read_only is not None and "not writable by you" in read_only
    assert added is None and not_added == f"read-only here: {read_only}"


def test_a_library_folder_a_team_shares_takes_every_member_s_records(tmp_path):
    """Its lock file is its maker's (mode 644 under the usual umask): another member's run
    could not open it to write and so added nothing, with a warning."""
    with _a_library_others_may_enter(tmp_path, folder_mode=0o777) as (folder, args):
        used = _as_another_user(args, {folder / ".lock": 0o444})  # the lock not theirs to write
        assert used == (2, None, 2, None) and stock_records(folder) == 4


def test_a_record_the_library_cannot_take_is_a_warning_not_a_failed_run(tmp_path, monkeypatch):
    """model.so has shipped when the records are added: a failure there (TVM's as_json on a
    CUDA trace once) is reported, never the run's end."""
    database = layout_database(tmp_path / "run")
    warnings = []
    library = RunLibrary(Library(tmp_path / "library"), Settings.load(), warn=warnings.append)

    def unconvertible(record):
        raise TypeError("Not supported type: IndexMap")

    monkeypatch.setattr("tune_orchestrator.library.run.record_json", unconvertible)
    library.add(files(tmp_path / "run"), database.get_all_tuning_records(), {"check": {"ok": True}})
    assert library.added is None
    assert library.not_added == "adding them failed (TypeError: Not supported type: IndexMap)"
    assert len(warnings) == 1 and "please report it" in warnings[0]


def test_the_report_line_says_what_was_reused_and_added():
    line = describe_library(
        {
            "path": "/cache/lib",
            "off": None,
            "reused_records": 8,
            "reused_tasks": 2,
            "plateau_tasks": 1,
            "added": 40,
        }
    )
    assert line == "8 records of 2 tasks reused (1 at a plateau there), 40 added; /cache/lib"
    off = describe_library({"off": "--no-library"})
    assert off == "off (--no-library)"
    failed = {"path": "/l", "off": None, "reused_records": 0, "reused_tasks": 0, "added": None}
    assert "none added (the check failed)" in describe_library(
        {**failed, "not_added": "the check failed"}
    )
    assert describe_library(None) is None
    assert library_rounds({"reused_tasks": 3}) == " (+3 library rounds)"
    assert library_rounds({"reused_tasks": 1}) == " (+1 library round)"
    assert library_rounds({"reused_tasks": 0}) == library_rounds(None) == ""


# -- end to end: real tunes of the tiny model -------------------------------------------------


def tune(model: Path, out: Path, config: Path, *options: str, budget: str = "16trials"):
    from click.testing import CliRunner

    from cli_args import tune_args
    from tune_orchestrator.cli.commands import main

    result = CliRunner().invoke(main, tune_args(model, out, config, *options, budget=budget))
    assert result.exit_code == 0, result.output + repr(result.exception)
    return SimpleNamespace(
        out=out,
        stdout=result.stdout,
        report=json.loads((out / "report.json").read_text()),
        journal=[json.loads(x) for x in (out / "journal.jsonl").read_text().splitlines()],
    )


def extract(model: Path):
    from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
    from tune_orchestrator.model.loading import load_model
    from tune_orchestrator.model.tasks import extract_tasks

    target = resolve_target("llvm").target
    return extract_tasks(fuse_for_tuning(import_to_relax(load_model(model)), target), target)


def scheduled_key(record) -> int:
    """The schedule a record stands for, whatever database it came from."""
    from tune_orchestrator.model.tasks import structural_key

    return structural_key(record.as_measure_candidate().sch.mod)


@pytest.fixture(scope="module")
def twice(tmp_path_factory, fast_config):
    """The twin-convolution model tuned with --no-library, then twice with the library, each
    time in a fresh cache of its own."""
    import onnx_models

    base = tmp_path_factory.mktemp("library-e2e")
    model = onnx_models.tiny_cnn(base / "twins.onnx", twin_convs=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(base / "cache"))
        apart = tune(model, base / "apart", fast_config, "--no-library", budget="8trials")
        cache_after_apart = sorted((base / "cache").rglob("*"))
        first = tune(model, base / "first", fast_config)
        after_first = Library(Path(first.report["library"]["path"])).read()
        features = Path(first.report["library"]["path"]) / FEATURES
        with np.load(features) as saved:  # the tag the run wrote, for its target
            kept_after_first = set(FeatureShelf(features, str(saved["tag"])).entries)
        frozen: list[int] = []  # the objects frozen whenever the collector ran
        gc.callbacks.append(watch := lambda phase, _: frozen.append(gc.get_freeze_count()))
        try:
            second = tune(model, base / "second", fast_config)
        finally:
            gc.callbacks.remove(watch)
    return SimpleNamespace(
        model=model,
        cache=base / "cache",
        cache_after_apart=cache_after_apart,
        apart=apart,
        first=first,
        after_first=after_first,
        kept_after_first=kept_after_first,
        second=second,
        frozen_in_second=max(frozen),
        frozen_after=gc.get_freeze_count(),
    )


def test_e2e_no_library_touches_nothing(twice):
    # (onnxruntime and matplotlib may keep caches there; the library must not appear.)
    assert not any("tune-orchestrator" in str(p) for p in twice.cache_after_apart)
    assert twice.apart.report["library"]["off"] == "--no-library"
    assert not any(e["type"] == "library_round" for e in twice.apart.journal)
    assert f"{'library':<20}off (--no-library)" in twice.apart.stdout


def test_e2e_a_second_run_starts_where_the_first_ended(twice):
    first, second = twice.first, twice.second
    path = Path(first.report["library"]["path"])
    assert path.parent == twice.cache / "tune-orchestrator" / "library"
    tuned = {t["name"] for t in first.report["tasks"] if t["trials"]}
    # The first run added its trials (not its default schedules), and stock TVM reads them.
    assert first.report["library"]["added"] == first.report["summary"]["trials"]
    # The second run's first round is its library round: each task the first one tuned.
    rounds = [e for e in second.journal if e["type"] in ("library_round", "round")]
    library_rounds = [e for e in rounds if e["type"] == "library_round"]
    assert rounds[: len(library_rounds)] == library_rounds
    names = {t["index"]: t["name"] for t in second.report["tasks"]}
    assert {names[e["task"]] for e in library_rounds} == tuned
    assert second.report["library"]["reused_tasks"] == len(tuned)
    progress = [x for x in second.stdout.splitlines() if x.startswith("library    ")]
    assert len(progress) == len(tuned)  # one progress line each
    # It measured the first run's best schedule of each task again: the best it reached.
    view = LibraryView(twice.after_first, target=TARGET)
    best_keys = set()
    for task in extract(twice.model):
        match = view.match(task.workload, top=1, min_trials=1, share=0.5, min_gain=0.0)
        if match is not None:
            best_keys.add(scheduled_key(match.records[0]))
    measured = JSONDatabase(work_dir=str(second.out)).get_all_tuning_records()
    assert len(best_keys) == len(tuned) and best_keys <= {scheduled_key(r) for r in measured}
    for e in library_rounds:
        first_best = next(
            t["best_s"] for t in first.report["tasks"] if t["name"] == names[e["task"]]
        )
        assert e["library_best_s"] == pytest.approx(first_best, rel=1e-9)
        assert e["measured"] >= 1 and e["library_trials"] >= 1
    # The learned model started from the library; only new records were added.
    lib = second.report["library"]
    assert lib["trained_records"] == first.report["library"]["added"]
    # The first run left the features of every record it added that ran beside them, for the
    # second to train on without reading them into TVM.
    ran = [p for p in range(view.records) if math.isfinite(view.latency(p))]
    assert ran and {view.digest(p) for p in ran} <= twice.kept_after_first
    assert 0 < lib["added"] <= second.report["summary"]["trials"] - lib["reused_records"]
    assert stock_records(path) == first.report["library"]["added"] + lib["added"]
    line = f"{'library':<20}{lib['reused_records']} records of {len(tuned)} tasks reused"
    assert line in second.stdout


def test_e2e_the_library_s_records_were_left_out_of_the_collector_s_passes_until_the_end(twice):
    # Frozen when parsed (no cycle among them), handed back to the collector by the run's end.
    assert twice.frozen_in_second > 0
    assert twice.frozen_after == 0


def test_e2e_a_new_shape_starts_from_the_library_s_schedules_of_its_kind(tmp_path, fast_config):
    """Model B's convolution has other shapes than model A's: no exact match, but A's tuned
    schedules replay on it (re-derived) and are measured as its first round."""
    import onnx_models

    a = onnx_models.wide_conv(tmp_path / "a.onnx", channels=16, size=16)
    b = onnx_models.wide_conv(tmp_path / "b.onnx", channels=24, size=12)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        tune(a, tmp_path / "a", fast_config)
        second = tune(b, tmp_path / "b", fast_config)
    transferred = second.report["library"]["transferred"]
    assert second.report["library"]["reused_tasks"] == 0  # no exact match
    ((name, tally),) = [(n, t) for n, t in transferred.items() if t["tried"]]
    assert tally["tried"] == tally["as_is"] + tally["re_derived"] + tally["failed"] >= 1
    assert tally["measured"] >= 1 and tally["best_s"] > 0
    rounds = [e for e in second.journal if e["type"] == "round"]
    assert rounds[0]["kind"] == "transfer" and rounds[0]["transfer"] == tally
    assert "schedules of same-kind tasks replayed on 1 task (" in second.stdout
