"""Builders and engines: conformance, and real failing candidates (compile error, crash, hang)."""

import concurrent.futures
import errno
import functools
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import tvm
from tvm.script import tirx as T

from devices import GPU
from engine_contract import check_engine_contract
from tune_orchestrator.measure import (
    Build,
    Builder,
    BuildInput,
    BuildPool,
    Engine,
    LocalEngine,
    MeasureInput,
    Measurement,
    SimulatedEngine,
    SimulatedGpu,
    TimerConfig,
)
from tune_orchestrator.measure._pool import WorkerPool
from tune_orchestrator.measure.base import short_error
from tune_orchestrator.measure.build_pool import adaptive_timeout_s

ARGS = (("float32", (16,)), ("float32", (16,)))
LLVM = tvm.target.Target({"kind": "llvm", "num-cores": 2})


@T.prim_func(s_tir=True)
def add_one(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] + 1.0


@T.prim_func(s_tir=True)
def add_4096_times(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i, j in T.grid(16, 4096):  # thousands of times add_one's work
        with T.sblock("B"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] * 0.5 + A[vi]


@T.prim_func(s_tir=True)
def writes_far_out_of_bounds(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("B"):
            vi = T.axis.remap("S", [i])
            B[vi * 100000000] = A[vi]  # ~6 GB past the buffer: the process dies


@T.prim_func(s_tir=True)
def never_ends(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i, j in T.grid(1 << 20, 1 << 20):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[(vi + vj) % 16] = B[(vi * 7 + vj) % 16] * 1.0001 + A[vj % 16]


@T.prim_func(s_tir=True)
def writes_nan(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("B"):
            vi = T.axis.remap("S", [i])
            B[vi] = T.log(A[vi] - 100.0)  # the inputs are ~N(0, 1): log of a negative number


def module(func):
    return tvm.IRModule({"main": func})


@pytest.fixture(scope="module")
def pool():
    with BuildPool(workers=2, timeout_s=60) as builder:
        yield builder


@pytest.fixture(scope="module")
def engine():
    with LocalEngine(timer=TimerConfig(repeat=2, min_repeat_ms=1), timeout_s=5) as eng:
        yield eng


# -- conformance: every Builder and Engine -------------------------------------------------


@pytest.fixture(params=["pool"])
def any_builder(request) -> Builder:
    return request.getfixturevalue(request.param)


def _runs_if_built(item: MeasureInput) -> float:
    """A simulated candidate fails where the real engines do: its artifact is missing."""
    return 2e-5 if os.path.exists(item.artifact) else math.inf


@pytest.fixture
def simulated() -> Engine:
    return SimulatedEngine(SimulatedGpu(), latency=_runs_if_built)


@pytest.fixture
def simulated_overlap() -> Engine:
    return SimulatedEngine(SimulatedGpu(), latency=_runs_if_built, overlap_timing=True)


@pytest.fixture
def simulated_gpus() -> Engine:
    return SimulatedEngine(SimulatedGpu(), latency=_runs_if_built, gpus=[2, 5])


# The CUDA engine runs these checks in test_gpu.py, the RPC engine in test_rpc.py.
@pytest.fixture(params=["engine", "simulated", "simulated_overlap", "simulated_gpus"])
def any_engine(request) -> Engine:
    return request.getfixturevalue(request.param)


@pytest.mark.slow
def test_builders_return_one_build_per_input_in_order_with_errors_as_data(any_builder):
    builds = any_builder.build(
        [
            BuildInput(module(add_one), LLVM),
            BuildInput("not a module", LLVM),
            BuildInput(module(add_one), LLVM),
        ]
    )
    assert [b.ok for b in builds] == [True, False, True]
    assert builds[1].artifact is None and builds[1].error.startswith("build failed:")
    assert all(Path(b.artifact).is_file() for b in builds if b.ok)
    any_builder.release(builds)
    assert not any(Path(b.artifact).exists() for b in builds if b.ok)
    assert any_builder.build([]) == []


def test_a_build_told_to_stop_starts_no_more_and_returns_the_ones_it_built(any_builder):
    inputs = [BuildInput(module(add_one), LLVM)] * 8
    # Workers ready first: a pool still starting them would start no build before the stop.
    any_builder.release(any_builder.build(inputs[:2]))
    calls = []

    def until():  # true from the third look on: some builds have started, most have not
        calls.append(1)
        return len(calls) > 2

    builds = any_builder.build(inputs, until=until)
    assert 0 < len(builds) < len(inputs)  # a prefix: those started before the stop
    assert all(b.ok and Path(b.artifact).is_file() for b in builds)
    any_builder.release(builds)
    again = any_builder.build(inputs[:2], until=lambda: False)  # the cancelled left no mark
    assert [b.ok for b in again] == [True, True]
    any_builder.release(again)


def test_the_build_timeout_is_a_multiple_of_the_recent_builds_median_within_bounds():
    limit = functools.partial(adaptive_timeout_s, factor=3, low=0.5, high=60)
    assert limit([0.2] * 15) == 60  # too few builds timed yet: the configured timeout
    assert limit([0.2] * 9 + [3.0] * 7) == pytest.approx(0.6)  # the median, not the mean
    assert limit([0.1] * 16) == 0.5 and limit([30.0] * 16) == 60
    assert adaptive_timeout_s([0.2] * 16, factor=0, low=0.5, high=60) == 60  # not adaptive


@pytest.mark.slow
def test_a_pools_builds_set_the_timeout_of_its_next_builds():
    with BuildPool(workers=2, timeout_s=60, adaptive_timeout=3, min_timeout_s=0.5) as builder:
        assert builder.timeout_s == 60  # nothing timed yet: the configured timeout
        quick = builder.build([BuildInput(module(add_one), LLVM)] * 16)
        assert all(b.ok for b in quick)
        limit = adaptive_timeout_s([b.seconds for b in quick], factor=3, low=0.5, high=60)
        assert builder.timeout_s == limit == builder._pool.timeout_s  # the worker pool's too
        builder.release(quick)


@pytest.mark.slow
def test_a_job_longer_than_the_timeout_is_cut_as_timed_out_and_its_worker_replaced():
    pool = WorkerPool(workers=1, timeout_s=0.5)
    try:
        value, error = pool.outcome(pool.submit(time.sleep, 60), "build")  # as if it hung
        assert value is None and error == "build timed out after 0.5 s"
        pool.timeout_s = 60  # room for the new worker to start
        assert pool.outcome(pool.submit(os.getpid), "a job")[1] is None
    finally:
        pool.close()


@pytest.mark.slow
def test_a_timed_out_build_says_so_and_costs_its_timeout():
    """The filter learns what builds cost: one cut by the timeout held its worker for it."""
    with BuildPool(workers=1, timeout_s=0.5, min_timeout_s=0.5) as builder:
        submit = builder._pool.submit
        builder._pool.submit = lambda fn, *args: submit(time.sleep, 60)  # as if it hung
        (build,) = builder.build([BuildInput(module(add_one), LLVM)])
        assert not build.ok and build.timed_out and build.seconds == 0.5
        builder._pool.submit = submit
        builder._pool.timeout_s = 60  # room for the new worker to start
        (build,) = builder.build([BuildInput(module(add_one), LLVM)])
        assert build.ok and not build.timed_out and 0 < build.seconds < 60
        builder.release([build])


def test_build_folders_left_by_killed_runs_are_removed_and_no_live_ones(tmp_path):
    from tune_orchestrator.measure.build_pool import sweep_stale_build_dirs

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    hour_ago = time.time() - 3700
    folders = {
        "killed": tmp_path / f"orchestrate-builds-{gone}-abc",  # gone, idle for an hour
        "recent": tmp_path / f"orchestrate-builds-{gone}-def",  # gone, but written just now
        "alive": tmp_path / f"orchestrate-builds-{os.getpid()}-ghi",  # this process
        "other": tmp_path / "orchestrate-builds-xyz",  # no process id in the name
    }
    for name, folder in folders.items():
        folder.mkdir()
        (folder / "cand-1.so").write_bytes(b"\0")
        if name != "recent":
            os.utime(folder, (hour_ago, hour_ago))
    assert sweep_stale_build_dirs(tmp_path) == [folders["killed"]]
    assert [f.exists() for f in folders.values()] == [False, True, True, True]


def test_a_stale_build_folder_of_another_user_or_a_link_is_left_alone(tmp_path):
    from tune_orchestrator.measure.build_pool import sweep_stale_build_dirs

    if os.geteuid() != 0:
        pytest.skip("needs root, who may remove any user's folder, to give one to another")
    hour_ago = time.time() - 3700
    theirs = tmp_path / "orchestrate-builds-999999999-abc"  # no such process, idle for an hour
    theirs.mkdir()
    (theirs / "cand-1.so").write_bytes(b"\0")
    os.chown(theirs, 65534, 65534)
    link = tmp_path / "orchestrate-builds-999999999-def"
    link.symlink_to(theirs)
    for path in (theirs, link):
        os.utime(path, (hour_ago, hour_ago), follow_symlinks=False)
    assert sweep_stale_build_dirs(tmp_path) == []
    assert (theirs / "cand-1.so").exists()


def test_a_build_that_failed_for_want_of_room_stops_the_run_and_is_not_a_failed_candidate(
    pool, monkeypatch
):
    """LLVM ends a worker whose disk fills, which read as the candidate crashing its worker: a
    run whose temporary folder another process filled recorded every later candidate as
    failing, in the run and in the library, and told nothing."""
    import shutil
    import tempfile

    from tune_orchestrator.measure import build_pool

    real = shutil.disk_usage
    free = {"bytes": 16 << 20}
    monkeypatch.setattr(
        build_pool.shutil, "disk_usage", lambda path: real(path)._replace(free=free["bytes"])
    )
    failing = BuildInput("not a module", LLVM)
    (with_room,) = pool.build([failing])  # a failure of its own: data, as ever
    assert with_room.error.startswith("build failed:")
    free["bytes"] = 5 << 20
    with pytest.raises(OSError) as raised:
        pool.build([failing])
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.strerror == "a build failed with 5.0 MiB free"
    assert raised.value.filename == tempfile.gettempdir()  # the CLI: free space or set TMPDIR
    free["bytes"] = 16 << 20
    # The same words from the compiler (a linker that could not write) are the disk's too.
    said = f"build failed: ld: final link failed: {os.strerror(errno.ENOSPC)}"
    monkeypatch.setattr(pool._pool, "settle", lambda future, what: (None, said, "error"))
    with pytest.raises(OSError):
        pool.build([failing])


@pytest.mark.filterwarnings("ignore:build is deprecated:DeprecationWarning")
def test_tvms_own_folders_for_a_build_lie_in_the_pools_folder(tmp_path, monkeypatch):
    """A worker that LLVM ended left TVM's folders of objects in TMPDIR, which nothing
    removes; in the pool's folder they go with the pool."""
    import tempfile

    from tune_orchestrator.measure import _worker

    monkeypatch.setattr(tempfile, "tempdir", None)  # restored after: the worker sets it
    made = []
    real = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    path, _ = _worker.build(module(add_one), LLVM, str(tmp_path))
    assert Path(path).parent == tmp_path
    assert made and all(Path(folder).parent == tmp_path for folder in made)


def test_a_build_pools_folder_names_its_process_and_goes_with_it():
    with BuildPool(workers=1) as builder:
        folder = Path(builder._dir)
        assert folder.name.startswith(f"orchestrate-builds-{os.getpid()}-")
        builder.release(builder.build([BuildInput(module(add_one), LLVM)]))
    assert not folder.exists()


def test_without_an_adaptive_timeout_every_build_has_the_configured_one(pool):
    builds = pool.build([BuildInput(module(add_one), LLVM)] * 16)
    assert pool.timeout_s == 60
    pool.release(builds)


def test_engines_keep_the_contract(any_builder, any_engine):
    built = any_builder.build([BuildInput(module(add_one), LLVM)] * 2)
    good = [MeasureInput(b.artifact, ARGS) for b in built]
    check_engine_contract(any_engine, good, MeasureInput("/no/such/file.so", ARGS))
    any_builder.release(built)


def test_the_local_engine_times_one_at_a_time_in_order(pool, engine):
    built = pool.build([BuildInput(module(add_one), LLVM)] * 2)
    inputs = [
        MeasureInput(built[0].artifact, ARGS),
        MeasureInput("/no/such/file.so", ARGS),
        MeasureInput(built[1].artifact, ARGS),
    ]
    arrived = []
    results = engine.measure(inputs, on_result=lambda i, m: arrived.append((i, m)))
    assert arrived == list(enumerate(results))  # each result reported once, as it came, in order
    assert len(results[0].run_secs) == 2 and all(0 < s < 1e-2 for s in results[0].run_secs)
    assert "cannot find file" in results[1].error
    assert engine.stats()["candidates"] >= 3 and engine.stats()["candidates_per_s"] > 0
    pool.release(built)


@pytest.mark.slow
def test_the_local_engine_cuts_short_a_candidate_clearly_slower_than_the_best_so_far(pool):
    fast, slow = pool.build([BuildInput(module(f), LLVM) for f in (add_one, add_4096_times)])
    inputs = [MeasureInput(fast.artifact, ARGS), MeasureInput(slow.artifact, ARGS)]
    timer = TimerConfig(repeat=3, min_repeat_ms=1, race=True, race_margin=0.5)
    with LocalEngine(timer=timer, timeout_s=10) as racing:
        alone = racing.measure(inputs[1:])  # no best yet: timed in full
        first, second = racing.measure(inputs)  # the fast one is the best so far
        late = racing.measure(inputs[1:], best_s=first.mean_s)  # the task's best, given
        stats = racing.stats()
    assert len(alone[0].run_secs) == 3 and not alone[0].raced
    assert len(first.run_secs) == 3 and not first.raced
    assert second.raced and len(second.run_secs) == 1 and second.ok  # valid, only slower
    assert second.mean_s > 10 * first.mean_s
    assert late[0].raced and stats["raced"] == 2
    with LocalEngine(timer=TimerConfig(repeat=3, min_repeat_ms=1), timeout_s=10) as timed:
        assert [len(m.run_secs) for m in timed.measure(inputs)] == [3, 3]  # racing off
    (nan,) = pool.build([BuildInput(module(writes_nan), LLVM)])
    with LocalEngine(timer=timer, timeout_s=10) as racing:
        wrong, after = racing.measure([MeasureInput(nan.artifact, ARGS), inputs[1]])
    assert wrong.finite is False and not after.raced  # a kernel writing NaN sets no best
    pool.release([fast, slow, nan])


def test_untuned_kernels_of_different_tasks_are_not_raced_against_each_other(pool):
    from tune_orchestrator.model.tasks import Task
    from tune_orchestrator.run.measuring import measure_untuned_tasks

    tasks = [
        Task(i, f.__name__, 1, 1.0, module(f), f"{i:016x}")
        for i, f in enumerate((add_one, add_4096_times))
    ]
    timer = TimerConfig(repeat=3, min_repeat_ms=1, race=True)
    with LocalEngine(timer=timer, timeout_s=10) as racing:
        fast, slow = measure_untuned_tasks(
            tasks, SimpleNamespace(target=LLVM), pool, racing, [t.workload for t in tasks]
        )
    assert slow.mean_s > 10 * fast.mean_s  # would be raced against the other task's kernel
    assert len(slow.run_secs) == 3 and not slow.raced


# -- faults: real crashing and hanging candidates -------------------------------------------


@pytest.mark.slow
def test_a_crash_and_a_hang_cost_one_result_each_and_the_engine_goes_on(pool, engine):
    builds = pool.build(
        [BuildInput(module(f), LLVM) for f in (writes_far_out_of_bounds, never_ends, add_one)]
    )
    assert all(b.ok for b in builds)
    crashed, hung, fine = engine.measure([MeasureInput(b.artifact, ARGS) for b in builds])
    assert crashed.error == "measurement crashed the worker process"
    assert hung.error == "measurement timed out after 5 s"
    assert fine.ok
    pool.release(builds)


def test_a_kernel_writing_nan_is_timed_and_flagged(pool, engine):
    (build,) = pool.build([BuildInput(module(writes_nan), LLVM)])
    (m,) = engine.measure([MeasureInput(build.artifact, ARGS)])
    assert m.ok and m.finite is False
    pool.release([build])


def test_a_pool_closed_while_a_worker_starts_kills_it_and_closes():
    """A run that stops at once (its budget already spent on resume) closes its build pool
    while the workers are still starting; a worker caught with its process up and its pipes
    not yet open once made TVM's shutdown raise and the interpreter's exit hang."""
    from tvm.support.popen_pool import PopenWorker

    pool = WorkerPool(workers=1, timeout_s=10)
    starting = PopenWorker()
    starting._proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    process = starting._proc
    pool._executor._worker_map[0] = starting
    pool.close()
    assert process.wait(timeout=10) != 0  # killed, not left to sleep
    assert pool._executor._shutdown  # its __del__ will not shut it down a second time
    # In a run the job thread starting this worker opens its pipes before the pool's second
    # pass kills it whole; here no thread does: without this, TVM's PopenWorker.__del__ would
    # meet the missing pipes (an unraisable AttributeError, pytest's one warning).
    starting._proc = None


@pytest.mark.slow
def test_a_pool_started_ahead_says_when_each_worker_was_ready():
    """What the report's `workers_ready_s` rests on: a worker started with start() books the
    seconds until it could take a job; one whose initializer fails books nothing."""
    pool = WorkerPool(workers=2, timeout_s=30)
    concurrent.futures.wait(pool.start(2), timeout=60)
    deadline = time.monotonic() + 5  # a future's waiters wake before its callbacks run
    while len(pool.ready_s) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(pool.ready_s) == 2 and all(0 < s < 60 for s in pool.ready_s)
    assert pool.outcome(pool.submit(os.getpid), "a job")[1] is None  # still takes jobs
    pool.close()

    broken = WorkerPool(workers=1, timeout_s=30, initializer=functools.partial(int, "x"))
    (started,) = broken.start(1)
    assert started.exception(timeout=60) is not None
    broken.close()
    assert broken.ready_s == []


def test_measurement_holds_either_times_or_an_error():
    with pytest.raises(ValueError):
        Measurement((1.0,), "both")
    with pytest.raises(ValueError):
        Measurement(None, None)
    assert Measurement(None, "x").mean_s == float("inf")
    assert Measurement((1.0, 3.0)).mean_s == 2.0
    assert Build(None, "x").ok is False


def test_short_error_keeps_the_line_that_matters():
    assert (
        short_error("Traceback (most recent call last):\n  File x\nValueError: bad shape")
        == "ValueError: bad shape"
    )
    assert short_error("Bad node spec\n==> Context: node 3") == "Bad node spec"
    assert short_error(RuntimeError()) == "RuntimeError"


# -- CUDA candidates build on a host without a GPU ------------------------------------------


@pytest.mark.skipif(GPU, reason="checks building without a GPU")
def test_metaschedule_cuda_candidates_build_without_a_gpu(pool):
    from tvm.s_tir import meta_schedule as ms

    from tune_orchestrator import _tvm
    from tune_orchestrator.model.targets import resolve_target

    @T.prim_func(s_tir=True)
    def matmul(
        A: T.Buffer((64, 64), "float32"),
        B: T.Buffer((64, 64), "float32"),
        C: T.Buffer((64, 64), "float32"),
    ):
        for i, j, k in T.grid(64, 64, 64):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = 0.0
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    target = resolve_target("nvidia/nvidia-h100", build_only=True).target
    _tvm.load_tensor_intrinsics()
    ctx = ms.TuneContext(
        mod=module(matmul),
        target=target,
        space_generator="post-order-apply",
        search_strategy="replay-trace",
        task_name="mm",
        num_threads=2,
    )
    ctx.pre_tuning(
        max_trials=2,
        num_trials_per_iter=2,
        design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(),
    )
    candidates = ctx.generate_measure_candidates()
    builds = pool.build([BuildInput(c.sch.mod, target) for c in candidates])
    assert builds and all(b.ok for b in builds), [b.error for b in builds]
    pool.release(builds)


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM])
def test_a_worker_outlives_the_signals_meant_for_the_run(number):
    """Ctrl-C in the terminal (SIGINT to its whole process group), a closed terminal (SIGHUP)
    or a service's stop (SIGTERM to all its processes) killed the workers: the round the run
    was to finish recorded its builds and measurements as crashes."""
    pool = WorkerPool(workers=1, timeout_s=30)
    try:
        worker, error = pool.outcome(pool.submit(os.getpid), "a job")
        assert error is None
        os.kill(worker, number)
        time.sleep(0.5)  # delivered, and acted on had it not been ignored
        assert pool.outcome(pool.submit(os.getpid), "a job") == (worker, None)
    finally:
        pool.close()
