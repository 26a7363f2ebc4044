"""The parallel engine's scheduling and the DOP controller on a simulated GPU that misbehaves
like a real one, on a virtual clock: the exclusive timed window (the default), several GPUs,
racing, and DOPpler's overlapping timings with their fidelity guard."""

from __future__ import annotations

import json
import math
import statistics

import jsonschema
import pytest
from scipy.stats import kendalltau

from tune_orchestrator.budget.units import fmt_duration
from tune_orchestrator.measure import (
    DopConfig,
    DopController,
    MeasureInput,
    Measurement,
    SimulatedEngine,
    SimulatedGpu,
    TimingPlan,
)
from tune_orchestrator.measure._workers import Job, Outcome, Workers
from tune_orchestrator.measure.parallel import ParallelEngine

ARGS = (("float32", (16,)),)


def inputs(n: int, tag: str = "c") -> list[MeasureInput]:
    return [MeasureInput(f"{tag}{i}.so", ARGS) for i in range(n)]


def engine_on(gpu: SimulatedGpu, **engine_args) -> SimulatedEngine:
    return SimulatedEngine(gpu, DopController(DopConfig(max_dop=16), seed=1), **engine_args)


def run(
    gpu: SimulatedGpu, n: int = 400, **engine_args
) -> tuple[SimulatedEngine, list[Measurement]]:
    engine = engine_on(gpu, **engine_args)
    return engine, engine.measure(inputs(n))


def overlap(gpu: SimulatedGpu, n: int = 400, **engine_args):
    return run(gpu, n, overlap_timing=True, **engine_args)


def windows_overlap(intervals: list[tuple[float, float]]) -> bool:
    ordered = sorted(intervals)
    return any(b[0] < a[1] - 1e-12 for a, b in zip(ordered, ordered[1:], strict=False))


# -- the exclusive timed window (default) --------------------------------------------------


def test_timings_stay_true_under_interference_because_they_never_overlap():
    gpu = SimulatedGpu(noise=0.01, interference=0.5, interference_noise=0.2)
    engine, results = run(gpu, n=300)
    truth = [gpu.true_latency(i.artifact) for i in inputs(300)]
    measured = [m.mean_s for m in results]
    assert engine.dop > 4  # many candidates were prepared at once
    assert not any(windows_overlap(w) for w in engine.figures.windows)
    assert all(m.ok and m.dop == 1 for m in results)  # every timing was taken alone
    assert kendalltau(measured, truth).statistic > 0.95
    assert statistics.median(abs(m - t) / t for m, t in zip(measured, truth, strict=True)) < 0.03


def test_preparing_never_runs_inside_a_timing_and_timings_never_overlap():
    """Warm-up launches the kernel: the worker holds the window shared for it (_window.py)."""
    gpu = SimulatedGpu(prepare_s=0.005, load_s=0.001, check_s=0.002, check_after_timing=True)
    engine, _ = in_rounds(gpu, n=256)
    timed, shared = engine.figures.windows[0], engine.workers.shared_holds[0]
    assert len(shared) == 2 * 256 and not windows_overlap(timed)  # prepare, then check
    assert not any(s < t_end - 1e-12 and t < s_end - 1e-12
                   for s, s_end in shared for t, t_end in timed)  # fmt: skip


def test_checking_before_the_timing_keeps_the_window_busier():
    """A check after the timing is a second shared hold, which waits behind the timers that
    asked meanwhile and holds back the ones after it; the worker now checks the warm-up's
    outputs in the same hold as the warm-up."""
    common = {"prepare_s": 0.045, "check_s": 0.02, "load_s": 0.002, "seed": 3}
    before, _ = in_rounds(SimulatedGpu(**common), n=640, fixed_dop=16)
    after, _ = in_rounds(SimulatedGpu(**common, check_after_timing=True), n=640, fixed_dop=16)
    assert before.stats()["busy"] > after.stats()["busy"] + 0.05
    assert before.stats()["candidates_per_s"] > 1.1 * after.stats()["candidates_per_s"]


def test_a_worker_started_on_demand_pays_its_start_once():
    gpu = SimulatedGpu(worker_start_s=5.0)
    warm, _ = in_rounds(gpu, n=128, fixed_dop=4)
    cold, _ = in_rounds(gpu, n=128, fixed_dop=4, warm=1)
    assert warm.virtual_s < 5.0 <= cold.virtual_s < 5.0 + warm.virtual_s + 1.0


def test_the_stand_in_gpu_takes_its_costs_from_a_real_gpu():
    from tune_orchestrator.simulate import stand_in_gpu

    gpu = stand_in_gpu()
    assert gpu == SimulatedGpu.calibrated("nvidia-h100")
    assert 0.02 < gpu.prepare_s < 0.2 and gpu.worker_start_s > 1


def test_overlapping_the_same_candidates_corrupts_them():
    """Why exclusive is the default: the same GPU with timings overlapped at DOP 8."""
    gpu = SimulatedGpu(noise=0.01, interference=0.5, interference_noise=0.2)
    engine, results = overlap(gpu, n=300, fixed_dop=8)
    truth = [gpu.true_latency(i.artifact) for i in inputs(300)]
    parallel = [(m.mean_s, t) for m, t in zip(results, truth, strict=True) if m.dop > 1]
    assert parallel and statistics.median(abs(m - t) / t for m, t in parallel) > 0.5


def in_rounds(gpu: SimulatedGpu, n: int, **engine_args) -> tuple[SimulatedEngine, list]:
    """`n` candidates measured in rounds of 64 per GPU, as the tuning loop hands them over."""
    engine, items = engine_on(gpu, **engine_args), inputs(n)
    size = 64 * len(engine.workers.gpus)
    return engine, [m for k in range(0, n, size) for m in engine.measure(items[k : k + size])]


def test_the_dop_becomes_the_workers_that_keep_the_window_busy():
    """Preparing holds the window shared (it runs the kernel), so a slow preparation bounds
    the busy share however many prepare at once: 10 ms against ~2 ms timings leaves ~70%."""
    slow_preparation, _ = in_rounds(SimulatedGpu(prepare_s=0.01), n=800)
    quick_preparation, _ = in_rounds(SimulatedGpu(prepare_s=0.0005), n=800)
    stats = slow_preparation.stats()
    assert 0.6 <= stats["busy"] < 0.8 and slow_preparation.dop == 16
    assert quick_preparation.dop < slow_preparation.dop
    assert quick_preparation.stats()["busy"] >= 0.85
    paces = stats["paces"]
    assert paces and paces[0]["dop"] == 1 and paces[0]["new_dop"] > 1  # it starts at 1
    assert all(p["reason"] for p in paces)


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_candidates_spread_over_gpus_and_throughput_scales(gpus):
    one, _ = in_rounds(SimulatedGpu(), n=1024)
    many, results = in_rounds(SimulatedGpu(), n=1024 * gpus, gpus=gpus)
    assert all(m.ok for m in results)
    stats = many.stats()
    assert stats["gpus"] == list(range(gpus)) and len(stats["busy_per_gpu"]) == gpus
    per_gpu = [len(w) for w in many.figures.windows]
    assert max(per_gpu) - min(per_gpu) <= 0.15 * statistics.fmean(per_gpu)  # taken as freed
    ratio = stats["candidates_per_s"] / (gpus * one.stats()["candidates_per_s"])
    assert 0.85 < ratio < 1.15  # virtual time: the model scales, whatever this host does
    assert min(stats["busy_per_gpu"]) > 0.6  # the window's bound (see the test above)


def test_a_clearly_slower_candidate_is_raced_and_still_a_valid_measurement():
    latency = {"best.so": 1e-4, "close.so": 1.1e-4, "slow.so": 5e-4}
    engine = SimulatedEngine(
        SimulatedGpu(noise=0.001),
        latency=lambda item: latency[item.artifact],
        plan=TimingPlan(min_repeats=5, race_after=1, race_margin=0.5),
        fixed_dop=1,
    )
    best, close, slow = engine.measure([MeasureInput(name, ARGS) for name in latency], best_s=1e-4)
    assert slow.ok and slow.raced and len(slow.run_secs) == 1
    assert slow.mean_s == pytest.approx(5e-4, rel=0.01)
    assert not best.raced and not close.raced and len(close.run_secs) >= 5
    assert engine.stats()["raced"] == 1


def test_the_best_found_during_a_call_races_later_candidates():
    latency = lambda item: 1e-4 if item.artifact == "c0.so" else 1e-3  # noqa: E731
    engine = SimulatedEngine(SimulatedGpu(noise=0.001), latency=latency, fixed_dop=1)
    results = engine.measure(inputs(10), best_s=None)
    assert not results[0].raced and all(m.raced for m in results[1:])


def test_repeats_adapt_to_the_noise():
    quiet, _ = run(SimulatedGpu(noise=0.0005), n=100, plan=TimingPlan(race=False))
    noisy, _ = run(SimulatedGpu(noise=0.05), n=100, plan=TimingPlan(race=False, max_repeats=20))
    assert quiet.stats()["repeats"] == pytest.approx(3)
    assert noisy.stats()["repeats"] > 8


def test_failures_only_in_a_crowd_are_retimed_alone_and_back_the_dop_off():
    engine, results = run(SimulatedGpu(quiet_until=2, crash_per_extra=0.05), n=600)
    backed_off = [p for p in engine.controller.paces if p.reason == "failures"]
    assert backed_off and engine.controller.ceiling < 16
    assert engine.isolated_runs > 0
    assert sum(m.ok for m in results) >= 0.95 * len(results)  # alone, they time fine


def test_a_candidate_that_never_gets_the_window_is_measured_again():
    class BusyOnce(Workers):
        """Workers whose first attempt at each job finds the window busy."""

        gpus = [0]

        def __init__(self) -> None:
            self.done: list[tuple[Job, Outcome]] = []
            self.attempts: list[int] = []

        def now(self) -> float:
            return 0.0

        def start(self, job: Job, plan: TimingPlan) -> None:
            self.attempts.append(job.attempt)
            busy = job.attempt == 0
            outcome = Outcome(None, "window busy", busy=True) if busy else Outcome((1e-4,))
            self.done.append((job, outcome))

        def wait(self) -> list[tuple[Job, Outcome]]:
            done, self.done = self.done, []
            return done

    workers = BusyOnce()
    results = ParallelEngine(workers, fixed_dop=2).measure(inputs(3))
    assert all(m.ok for m in results) and sorted(workers.attempts) == [0, 0, 0, 1, 1, 1]


def test_a_fixed_parallelism_is_kept_and_not_paced():
    engine, _ = run(SimulatedGpu(), n=400, fixed_dop=4)
    assert {b["dop"] for b in engine.batches} == {4} and engine.controller.paces == []


def test_simulated_time_is_virtual_and_charged_per_call():
    engine = engine_on(SimulatedGpu())
    assert engine.virtual_s == 0.0
    engine.measure(inputs(50, "a"))
    first = engine.virtual_s
    engine.measure(inputs(50, "b"))
    assert 0 < first < engine.virtual_s
    assert engine.stats()["measure_s"] == pytest.approx(engine.virtual_s)


def test_an_injected_latency_sees_the_label():
    seen = []

    def latency(item: MeasureInput) -> float:
        seen.append(item.label)
        return math.inf if item.label == ("task", 2) else 2e-4

    engine = SimulatedEngine(SimulatedGpu(), latency=latency)
    items = [MeasureInput(f"{k}.so", ARGS, label=("task", k)) for k in range(4)]
    results = engine.measure(items)
    assert sorted(seen) == [("task", k) for k in range(4)]
    assert [m.ok for m in results] == [True, True, False, True]
    assert results[0].mean_s == pytest.approx(2e-4, rel=0.05)


# -- overlapping timings (opt-in) and DOPpler's fidelity guard -------------------------------


def test_on_a_quiet_gpu_the_dop_rises_to_the_ceiling():
    engine, results = overlap(SimulatedGpu(noise=0.01, quiet_until=64))
    assert engine.dop == 16
    assert all(check.passed for check in engine.checks)
    assert max(b["dop"] for b in engine.batches) == 16
    assert len(results) == 400 and all(m.ok for m in results)


def test_under_interference_it_backs_off_and_lowers_the_ceiling():
    engine, _ = overlap(SimulatedGpu(noise=0.01, interference=0.03, quiet_until=1))
    failed = [c for c in engine.checks if not c.passed]
    assert failed and all(c.rel_error > 0.05 for c in failed)
    assert engine.controller.ceiling < 16
    assert engine.dop <= 3  # 3% per extra kernel passes the 5% test at DOP 2 only
    assert all(b["dop"] <= engine.controller.ceiling + 2 for b in engine.batches[-10:])


def test_it_settles_where_idle_units_stop_absorbing_concurrency():
    engine, _ = overlap(SimulatedGpu(noise=0.01, interference=0.08, quiet_until=6))
    assert 4 <= engine.dop <= 7


def test_crashes_that_grow_with_concurrency_make_it_back_off():
    engine, results = overlap(SimulatedGpu(noise=0.01, quiet_until=1, crash_per_extra=0.03), n=300)
    assert any(c.failure_rate > 0.1 for c in engine.checks)
    assert engine.controller.ceiling < 16
    # failures that isolation does not reproduce are re-timed, so most candidates get a time
    assert sum(m.ok for m in results) >= 0.9 * len(results)


def test_a_new_best_is_never_one_measured_only_in_parallel():
    gpu = SimulatedGpu(noise=0.01, interference=0.0, interference_noise=0.08, quiet_until=1)
    engine = SimulatedEngine(
        gpu, DopController(DopConfig(max_rel_error=0.5), seed=3), overlap_timing=True
    )
    best, new_bests = float("inf"), []

    def arrived(i: int, m: Measurement) -> None:
        nonlocal best
        if m.ok and m.mean_s < best:
            best = m.mean_s
            new_bests.append(m)

    engine.measure(inputs(400), on_result=arrived, best_s=None)
    assert max(b["dop"] for b in engine.batches) > 4  # it did measure in parallel
    assert new_bests and all(m.dop == 1 for m in new_bests)
    assert engine.isolated_runs > 0


def test_isolated_retimings_really_run_one_at_a_time():
    """The guard's reference timings must be isolated: nothing else on the GPU meanwhile."""
    engine, _ = overlap(SimulatedGpu(noise=0.01, quiet_until=64), n=400, gpus=2)
    jobs = engine.workers.jobs  # (lane, started, done, alone) of every job run
    alone = [j for j in jobs if j[3]]
    assert len(alone) == engine.isolated_runs > 0
    for lane, start, end, _ in alone:
        others = [j for j in jobs if j[0] == lane and j[1:3] != (start, end)]
        assert all(o_end <= start or o_start >= end for _, o_start, o_end, _ in others)


def test_throttled_batches_are_caught_by_the_isolated_check():
    """Throttling slows timings without failing runs: the isolated re-measure's error is what
    lowers the DOP, and the same run without throttling keeps its DOP."""
    quiet = overlap(SimulatedGpu(noise=0.01, quiet_until=64))[0]
    assert quiet.checks and all(c.passed for c in quiet.checks)
    engine, _ = overlap(
        SimulatedGpu(noise=0.01, quiet_until=64, throttle_probability=0.3, throttle_slowdown=1.4)
    )
    failed = [c for c in engine.checks if not c.passed]
    limit = engine.controller.config.max_rel_error
    assert failed and all(c.rel_error > limit and c.failure_rate == 0 for c in failed)


@pytest.mark.parametrize(
    "bad",
    [
        {"start": 0},
        {"start": 20},
        {"backoff": 1.5},
        {"step": 0},
        {"max_rel_error": 0},
        {"target_busy": 0},
    ],
)
def test_bad_dop_settings_are_refused(bad):
    with pytest.raises(ValueError):
        DopConfig(**bad)


# -- what the report says --------------------------------------------------------------------


def test_the_report_says_how_fast_how_busy_and_where_the_time_went():
    from tune_orchestrator.budget.render import describe_measurement
    from tune_orchestrator.budget.report import schema

    engine = engine_on(SimulatedGpu(), gpus=2)
    best = None
    for r in range(6):  # rounds, as the tuning loop calls it
        results = engine.measure(inputs(64, f"r{r}-"), best_s=best)
        best = min([m.mean_s for m in results if m.ok] + ([best] if best else []))
    stats = {**engine.stats(), "measuring_share": 0.42}
    json.dumps(stats)  # report.json can hold it
    jsonschema.validate(stats, schema()["properties"]["measurement"])
    lines = describe_measurement(stats)
    assert lines[0] == (
        "measured on simulated GPU 0, 1, one candidate at a time in each GPU's timed window, "
        "42% of the run spent measuring"
    )
    assert lines[1].startswith(f"384 candidates at {stats['candidates_per_s']:.3g}/s; GPU busy")
    assert "(GPU 0 " in lines[1] and ", GPU 1 " in lines[1]
    assert lines[2].startswith("per candidate: load ") and "timed " in lines[2]
    assert lines[3].startswith(f"{stats['raced']} raced") and stats["raced"] > 0
    assert lines[4].startswith("DOP (preparing workers per GPU) over time 1 -> ")
    # Each span's time, so that a slow start (workers still starting) shows in the report.
    assert all(b["seconds"] > 0 for b in stats["batches"])
    first = stats["batches"][0]
    assert f"its first {first['candidates']} candidates (DOP 1) took " in lines[4]
    assert (
        all(0 <= b["filling_s"] < b["seconds"] for b in stats["batches"]) and first["filling_s"] > 0
    )
    assert f", {fmt_duration(first['filling_s'])} of it before the first timing" in lines[4]


def test_the_report_says_how_long_the_measuring_and_building_workers_took_to_start():
    from tune_orchestrator.budget.render import describe_measurement
    from tune_orchestrator.budget.report import schema

    base = {"engine": "CudaEngine", "device": "cuda", "gpus": [0], "measuring_share": 0.1}
    ready = {"started": 16, "ready": 16, "first": 9.81, "last": 17.2}
    jsonschema.validate({**base, "workers_ready_s": ready}, schema()["properties"]["measurement"])
    assert describe_measurement({**base, "workers_ready_s": ready})[1] == (
        "16 measuring workers started with the engine; 16 ready, the first after 9.8s, the "
        "last after 17.2s"
    )
    starting = {"started": 16, "ready": 0, "first": None, "last": None}
    assert describe_measurement({**base, "workers_ready_s": starting})[1] == (
        "16 measuring workers started with the engine; none ready yet"
    )
    builders = {"started": 4, "ready": 4, "first": 3.05, "last": 3.9}
    both = {**base, "workers_ready_s": ready, "builders_ready_s": builders}
    jsonschema.validate(both, schema()["properties"]["measurement"])
    assert describe_measurement(both)[1:] == [
        "16 measuring workers started with the engine; 16 ready, the first after 9.8s, the "
        "last after 17.2s",
        "4 building workers started with the run; 4 ready, the first after 3.0s, the last "
        "after 3.9s",
    ]


def test_the_report_tells_how_the_overlapping_dop_moved_and_why():
    from tune_orchestrator.budget.render import describe_measurement

    engine, _ = overlap(SimulatedGpu(noise=0.01, interference=0.03, quiet_until=1), n=120)
    lines = describe_measurement({**engine.stats(), "measuring_share": 0.42})
    backed_off = sum(1 for c in engine.checks if not c.passed)
    assert lines[0].endswith("with overlapping timings, 42% of the run spent measuring")
    dop_line = next(x for x in lines if x.startswith("DOP (candidates timed at once per GPU)"))
    assert "over time 1 -> 3" in dop_line
    assert f"now {engine.dop}, ceiling {engine.controller.ceiling}" in dop_line
    assert f"{backed_off} backed off" in lines[-1] and backed_off > 0
