"""Timing compiled models: repeats scaled to the model's latency, models timed in turn, and a
change claimed only beyond the spread."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from tune_orchestrator.config import Settings
from tune_orchestrator.deploy.timing import Latency, Timing, change, claimed_speedup, time_models
from tune_orchestrator.errors import InputError


class FakeClock:
    """Seconds that pass only when a fake model runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeVM:
    """A model whose inference takes `seconds` on `clock`; it notes each run in `log`."""

    def __init__(self, name: str, seconds: float, log: list[str], clock: FakeClock) -> None:
        self.name, self.seconds, self.log, self.clock = name, seconds, log, clock

    def __getitem__(self, function: str):
        assert function == "main"

        def main(*args):
            self.log.append(self.name)
            self.clock.now += self.seconds

        return main

    def time_evaluator(self, function, dev, number=1, repeat=1, min_repeat_ms=0):
        """TVM's timer: one warm-up run, then `repeat` timings of `number` runs (more runs
        until a timing lasts `min_repeat_ms`)."""
        main = self[function]

        def evaluate(*args):
            main()
            results = []
            for _ in range(repeat):
                n = number
                while True:
                    start = self.clock()
                    for _ in range(n):
                        main()
                    took = self.clock() - start
                    if took * 1e3 >= min_repeat_ms:
                        break
                    n *= 2
                results.append(took / n)
            return type("Result", (), {"results": results, "mean": sum(results) / repeat})()

        return evaluate


INPUTS = [np.zeros((2, 2), dtype="float32")]


def test_a_slow_model_gets_the_minimum_timings_and_no_warm_up_run_per_timing():
    log: list[str] = []
    clock = FakeClock()
    timing = Timing(repeat=10, min_repeat=3, max_s=0.2, min_repeat_ms=50)
    (latency,) = time_models(
        [(FakeVM("slow", 0.15, log, clock), tvm.cpu())], INPUTS, timing, clock=clock
    )
    assert latency.samples == pytest.approx((0.15,) * 3) and latency.runs_per_timing == 1
    assert len(log) == 4  # one run to size the timings, then one per timing


def test_a_fast_model_gets_every_timing_each_running_it_for_min_repeat_ms():
    log: list[str] = []
    clock = FakeClock()
    run_s = 2.0**-9  # ~2 ms, and sums of it are exact: 8 runs last 15.625 ms
    timing = Timing(repeat=5, min_repeat=3, max_s=60.0, min_repeat_ms=15.625)
    (latency,) = time_models(
        [(FakeVM("fast", run_s, log, clock), tvm.cpu())], INPUTS, timing, clock=clock
    )
    assert latency.samples == (run_s,) * 5 and latency.runs_per_timing == 8


def test_models_are_timed_in_turn_as_often_as_the_slowest_allows():
    log: list[str] = []
    clock = FakeClock()
    timing = Timing(repeat=6, min_repeat=2, max_s=0.25, min_repeat_ms=50)
    a, b = FakeVM("a", 0.06, log, clock), FakeVM("b", 0.12, log, clock)
    latencies = time_models([(a, tvm.cpu()), (b, tvm.cpu())], INPUTS, timing, clock=clock)
    timed = log[2:]  # after one sizing run of each
    assert [len(x.samples) for x in latencies] == [2, 2]  # 0.25 s fits two timings of b
    assert timed == ["a", "b", "b", "a"]


def test_repeats_stay_within_the_bounds():
    timing = Timing(repeat=10, min_repeat=3, max_s=20.0)
    assert timing.repeats(0.001) == 10
    assert timing.repeats(4.0) == 5
    assert timing.repeats(60.0) == 3
    assert Timing(repeat=4, min_repeat=4, max_s=float("inf")).repeats(1.0) == 4


@pytest.mark.parametrize(
    "untuned, tuned, expected",
    [
        ((10, 11, 12), (5, 6, 7), "faster"),
        ((10, 11, 12), (13, 14, 15), "slower"),
        ((10, 11, 30), (5, 6, 10.5), "no change"),  # one untuned outlier is no speedup
        ((7.17, 7.2), (4.5, 7.18), "no change"),
    ],
)
def test_a_change_is_claimed_only_when_every_timing_beats_every_other(untuned, tuned, expected):
    assert change(Latency(untuned), Latency(tuned)) == expected


@pytest.mark.parametrize(
    "untuned, tuned, claimed",
    [
        ((10, 11, 12), (5, 5.5, 7), 2.0),
        ((10, 11, 12), (13, 22, 25), 0.5),
        ((10, 11, 30), (5, 5.5, 10.5), 1.0),  # the medians say 2x; the spread says noise
    ],
)
def test_the_speedup_claimed_is_the_ratio_beyond_the_spread_and_exactly_1_within(
    untuned, tuned, claimed
):
    u, t = Latency(untuned), Latency(tuned)
    assert claimed_speedup(change(u, t), u, t) == claimed


def test_the_check_settings_bound_the_repeats(tmp_path):
    timing = Timing.from_settings(Settings.load().check)
    assert (timing.repeat, timing.min_repeat, timing.max_s, timing.min_repeat_ms) == (
        10,
        3,
        20.0,
        50,
    )
    path = tmp_path / "bad.toml"
    path.write_text("[check]\nlatency_repeat = 2\nlatency_min_repeat = 3\n")
    with pytest.raises(InputError, match="1 <= latency_min_repeat <= latency_repeat"):
        Settings.load(path)
