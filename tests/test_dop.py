"""The DOP controller and the parallel engine on a simulated GPU that misbehaves like a real one."""

from __future__ import annotations

import pytest

from measure import (
    DopConfig,
    DopController,
    MeasureInput,
    Measurement,
    SimulatedEngine,
    SimulatedGpu,
)

ARGS = (("float32", (16,)),)


def inputs(n: int, tag: str = "c") -> list[MeasureInput]:
    return [MeasureInput(f"{tag}{i}.so", ARGS) for i in range(n)]


def run(
    gpu: SimulatedGpu, n: int = 400, **engine_args
) -> tuple[SimulatedEngine, list[Measurement]]:
    engine = SimulatedEngine(gpu, DopController(DopConfig(max_dop=16), seed=1), **engine_args)
    return engine, engine.measure(inputs(n))


def test_on_a_quiet_gpu_the_dop_rises_to_the_ceiling():
    engine, results = run(SimulatedGpu(noise=0.01, quiet_until=64))
    assert engine.dop == 16
    assert all(check.passed for check in engine.checks)
    assert max(d for d, _ in engine.batches) == 16
    assert len(results) == 400 and all(m.ok for m in results)


def test_under_interference_it_backs_off_and_lowers_the_ceiling():
    engine, _ = run(SimulatedGpu(noise=0.01, interference=0.03, quiet_until=1))
    failed = [c for c in engine.checks if not c.passed]
    assert failed and all(c.rel_error > 0.05 for c in failed)
    assert engine.controller.ceiling < 16
    assert engine.dop <= 3  # 3% per extra kernel passes the 5% test at DOP 2 only
    assert all(d <= engine.controller.ceiling + 2 for d, _ in engine.batches[-10:])


def test_it_settles_where_idle_units_stop_absorbing_concurrency():
    engine, _ = run(SimulatedGpu(noise=0.01, interference=0.08, quiet_until=6))
    assert 5 <= engine.dop <= 7


def test_crashes_that_grow_with_concurrency_make_it_back_off():
    engine, results = run(SimulatedGpu(noise=0.01, quiet_until=1, crash_per_extra=0.03), n=300)
    assert any(c.failure_rate > 0.1 for c in engine.checks)
    assert engine.controller.ceiling < 16
    # failures that isolation does not reproduce are re-timed, so most candidates get a time
    assert sum(m.ok for m in results) >= 0.9 * len(results)


def test_a_new_best_is_never_one_measured_only_in_parallel():
    gpu = SimulatedGpu(noise=0.01, interference=0.0, interference_noise=0.08, quiet_until=1)
    engine = SimulatedEngine(gpu, DopController(DopConfig(max_rel_error=0.5), seed=3))
    best, new_bests = float("inf"), []

    def arrived(i: int, m: Measurement) -> None:
        nonlocal best
        if m.ok and m.mean_s < best:
            best = m.mean_s
            new_bests.append(m)

    engine.measure(inputs(400), on_result=arrived, best_s=None)
    assert max(d for d, _ in engine.batches) > 4  # it did measure in parallel
    assert new_bests and all(m.dop == 1 for m in new_bests)
    assert engine.isolated_runs > 0


def test_a_fixed_parallelism_is_kept():
    engine, _ = run(SimulatedGpu(noise=0.01, interference=0.5), n=60, fixed_dop=4)
    assert {d for d, _ in engine.batches} == {4} and engine.checks == []


def test_throttled_batches_are_caught_by_the_isolated_check():
    engine, _ = run(
        SimulatedGpu(noise=0.01, quiet_until=64, throttle_probability=0.3, throttle_slowdown=1.4)
    )
    assert any(not c.passed for c in engine.checks)


def test_engine_contract_on_the_simulated_gpu():
    engine = SimulatedEngine(SimulatedGpu())
    seen = []
    results = engine.measure(inputs(20), on_result=lambda i, m: seen.append((i, m)))
    assert [i for i, _ in seen] == list(range(20)) and [m for _, m in seen] == results
    assert engine.measure([]) == []
    stats = engine.stats()
    assert stats["engine"] == "SimulatedEngine" and stats["device"] == "cuda" and stats["batches"]


@pytest.mark.parametrize(
    "bad", [{"start": 0}, {"start": 20}, {"backoff": 1.5}, {"step": 0}, {"max_rel_error": 0}]
)
def test_bad_dop_settings_are_refused(bad):
    with pytest.raises(ValueError):
        DopConfig(**bad)


def test_the_summary_and_report_tell_how_the_dop_moved_and_why():
    from budget.render import describe_measurement

    engine, _ = run(SimulatedGpu(noise=0.01, interference=0.03, quiet_until=1), n=120)
    stats = {**engine.stats(), "measuring_share": 0.42}
    lines = describe_measurement(stats)
    backed_off = sum(1 for c in engine.checks if not c.passed)
    assert lines[0].endswith("42% of the run spent measuring")
    assert lines[1].startswith("DOP over time 1 -> 3")
    assert f"now {engine.dop}, ceiling {engine.controller.ceiling}" in lines[1]
    assert f"{backed_off} backed off" in lines[2] and backed_off > 0
