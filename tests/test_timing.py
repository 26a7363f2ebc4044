"""When a GPU candidate stops being timed (adaptive repeats, racing), the timed window that
keeps timings apart across processes, and the busy-share arithmetic."""

from __future__ import annotations

import fcntl
import itertools
import multiprocessing
import os
import signal
import time

import pytest

from tune_orchestrator.measure._figures import Figures, Span, covered
from tune_orchestrator.measure._timing import (
    LONGEST,
    RACED,
    TIGHT,
    TimingPlan,
    rel_half_width,
    verdict,
)
from tune_orchestrator.measure._window import DeviceWindow, WindowBusy
from tune_orchestrator.measure._workers import Job, Outcome
from tune_orchestrator.measure.base import MeasureInput

# -- adaptive repeats and racing -----------------------------------------------------------


def test_a_steady_kernel_stops_at_the_minimum_repeats():
    plan = TimingPlan(min_repeats=3, max_repeats=20, max_rel_ci=0.01)
    assert verdict([1e-4, 1e-4], plan) is None
    assert verdict([1e-4, 1.0001e-4, 0.9999e-4], plan) == TIGHT


def test_a_noisy_kernel_repeats_until_the_interval_is_tight_or_the_maximum():
    plan = TimingPlan(min_repeats=3, max_repeats=6, max_rel_ci=0.01)
    noisy = [1e-4, 1.2e-4, 0.9e-4]
    assert rel_half_width(noisy) > 0.01 and verdict(noisy, plan) is None
    assert verdict(noisy * 2, plan) == LONGEST
    tight = [1e-4 * (1 + 0.001 * (-1) ** i) for i in range(8)]
    assert verdict(tight, TimingPlan(min_repeats=8, max_repeats=30)) == TIGHT


def test_a_clearly_slower_candidate_is_raced_after_race_after_repeats():
    plan = TimingPlan(min_repeats=5, race_after=1, race_margin=0.5)
    assert verdict([3e-4], plan, best_s=1e-4) == RACED  # 3x the best after one repeat
    assert verdict([1.4e-4], plan, best_s=1e-4) is None  # within the margin: timed on
    assert verdict([3e-4], plan, best_s=None) is None  # no best yet: nothing to race
    assert verdict([3e-4], TimingPlan(min_repeats=5, race=False), best_s=1e-4) is None
    later = TimingPlan(min_repeats=5, race_after=2)
    assert verdict([3e-4], later, best_s=1e-4) is None
    assert verdict([3e-4, 3e-4], later, best_s=1e-4) == RACED


def test_racing_needs_the_whole_interval_above_the_margin():
    plan = TimingPlan(min_repeats=10, race_after=2, race_margin=0.5)
    wide = [1e-4, 3e-4]  # mean 2e-4 but the interval reaches below 1.5e-4
    assert verdict(wide, plan, best_s=1e-4) is None


def test_launches_per_repeat_keep_a_repeat_at_least_repeat_ms():
    plan = TimingPlan(repeat_ms=1.0, min_launches=1)
    assert plan.launches(2e-6) == 500  # 2 us kernels: 500 back-to-back launches per event pair
    assert plan.launches(5e-3) == 1
    assert TimingPlan(repeat_ms=1.0, min_launches=4).launches(5e-3) == 4
    assert TimingPlan(flush_l2=True).launches(2e-6) == 1  # every timed launch starts cold
    assert plan.launches(0.0) == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"min_repeats": 0},
        {"min_repeats": 5, "max_repeats": 4},
        {"max_rel_ci": 0},
        {"race_after": 0},
        {"race_margin": -0.1},
        {"repeat_ms": -1},
    ],
)
def test_bad_timing_plans_are_refused(bad):
    with pytest.raises(ValueError):
        TimingPlan(**bad)


# -- the timed window across processes ----------------------------------------------------


def _hold_timed(path: str, ready, release) -> None:
    with DeviceWindow(path).timed():
        ready.set()
        release.wait(30)


def _hold_shared(path: str, ready, release) -> None:
    with DeviceWindow(path).shared():
        ready.set()
        release.wait(30)


def _spawn(target, path: str):
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=target, args=(path, ready, release))
    proc.start()
    assert ready.wait(30)
    return proc, release


def _turnstile_closed(path: str, timeout_s: float = 30.0) -> bool:
    """Whether another process comes to hold the window's turnstile (a timer waiting for
    the window) within `timeout_s`: a hang guard, not a timing."""
    deadline = time.monotonic() + timeout_s
    with open(path + ".gate", "a") as gate:
        while time.monotonic() < deadline:
            try:
                fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(gate, fcntl.LOCK_UN)
            time.sleep(0.01)
    return False


def test_one_timing_at_a_time_and_device_work_waits_for_it(tmp_path):
    path = str(tmp_path / "window.lock")
    holder, release = _spawn(_hold_timed, path)
    ticks = itertools.count()
    try:
        window = DeviceWindow(path, clock=lambda: float(next(ticks)))
        with pytest.raises(WindowBusy):
            with window.timed(wait_s=0.2):
                pass
        with pytest.raises(WindowBusy):
            with window.shared(wait_s=0.2):
                pass
        assert window.waited_s == 2.0  # one tick per wait: the failed ones count too
    finally:
        release.set()
        holder.join(30)
    with window.timed(wait_s=5):  # free again
        pass
    assert window.waited_s == 3.0 and window.held == (5.0, 6.0)  # (acquired, released)


def test_device_work_runs_side_by_side_but_keeps_timings_out(tmp_path):
    path = str(tmp_path / "window.lock")
    worker, release = _spawn(_hold_shared, path)
    try:
        with DeviceWindow(path).shared(wait_s=1):  # shared beside shared
            pass
        with pytest.raises(WindowBusy):
            with DeviceWindow(path).timed(wait_s=0.2):
                pass
    finally:
        release.set()
        worker.join(30)


def test_a_waiting_timing_is_not_starved_by_a_stream_of_device_work(tmp_path):
    path = str(tmp_path / "window.lock")
    worker, release_worker = _spawn(_hold_shared, path)
    ctx = multiprocessing.get_context("fork")
    timed, release_timer = ctx.Event(), ctx.Event()
    timer = ctx.Process(target=_hold_timed, args=(path, timed, release_timer))
    timer.start()
    try:
        assert _turnstile_closed(path)  # the timer is queued behind the shared holder
        assert not timed.is_set()
        with pytest.raises(WindowBusy):  # new device work waits behind the queued timer
            with DeviceWindow(path).shared(wait_s=0.3):
                pass
        release_worker.set()
        assert timed.wait(10)  # the timer goes next
    finally:
        release_worker.set()
        release_timer.set()
        worker.join(30)
        timer.join(30)


def test_a_process_killed_in_its_window_releases_it(tmp_path):
    path = str(tmp_path / "window.lock")
    holder, _ = _spawn(_hold_timed, path)
    os.kill(holder.pid, signal.SIGKILL)  # what the pool does to a hanging candidate
    holder.join(30)
    with DeviceWindow(path).timed(wait_s=5):  # WindowBusy if the dead holder still held it
        pass


# -- busy share ----------------------------------------------------------------------------


def test_covered_counts_overlaps_once_and_clips():
    assert covered([(0, 2), (1, 3), (5, 6)], 0, 10) == pytest.approx(4)
    assert covered([(0, 2), (1, 3)], 1.5, 2.5) == pytest.approx(1)
    assert covered([], 0, 1) == 0


def test_busy_share_counts_windows_over_the_measure_phase_per_gpu():
    figures = Figures(lanes=2)
    item = MeasureInput("a.so", ())
    for lane, window in [(0, (0.0, 1.0)), (0, (1.0, 2.0)), (1, (0.5, 1.0))]:
        figures.ran(Job(0, item, lane=lane), Outcome((1.0,), window=window, steps={"timed": 1}))
    figures.phase_s = 4.0
    assert figures.busy_per_gpu() == pytest.approx([0.5, 0.125])
    assert figures.to_dict()["busy"] == pytest.approx(0.3125)


def test_a_span_counts_each_call_from_its_first_window():
    span = Span(lanes=1)
    item = MeasureInput("a.so", ())
    span.open(0.0)
    for start in (1.0, 2.0):  # the pipeline fills for 1 s, then the window is busy
        job = Job(0, item, started=0.0)
        span.add(job, Outcome((1.0,), window=(start, start + 1.0), steps={"timed": 1}), start + 1)
    span.close(3.0)
    assert span.busy() == pytest.approx(1.0)
    assert MeasureInput("a.so", ()) == MeasureInput("a.so", (), None)  # label defaults to None
