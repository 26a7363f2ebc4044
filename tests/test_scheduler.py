import pytest

from orchestrator.scheduler import GainScheduler, TaskState, model_latency_s
from orchestrator.tasks import Task


def state(index, *, weight=1, baseline=None, history=(), retired=None):
    task = Task(index, f"t{index}", weight, 1e6, None, f"{index:016x}")
    s = TaskState(task, baseline_s=baseline)
    for best in history:
        s.record_round(best)
    s.retired = retired
    return s


def test_untuned_tasks_go_by_weight_times_latency():
    sched = GainScheduler()
    small = state(0, weight=1, baseline=1e-3)
    heavy = state(1, weight=3, baseline=1e-3)  # called three times per inference
    assert sched.pick([small, heavy]) is heavy


def test_a_task_that_still_improves_beats_one_that_stalled():
    sched = GainScheduler(window=2, min_gain=0.01)
    stalled = state(0, baseline=10e-3, history=[2e-3, 2e-3, 2e-3])
    improving = state(1, baseline=4e-3, history=[3e-3, 2e-3])
    assert sched.expected_improvement(stalled) == 0.01  # floored, not zero
    assert sched.expected_improvement(improving) == pytest.approx((4 - 2) / 4 / 2)
    assert sched.pick([stalled, improving]) is improving


def test_the_window_looks_back_a_fixed_number_of_rounds():
    sched = GainScheduler(window=2)
    s = state(0, baseline=100.0, history=[10.0, 8.0, 6.0])
    assert sched.expected_improvement(s) == pytest.approx((10.0 - 6.0) / 10.0 / 2)


def test_never_tuned_tasks_expect_the_first_round_gain():
    sched = GainScheduler(first_round_gain=0.4)
    assert sched.expected_improvement(state(0, baseline=1.0)) == 0.4
    assert sched.expected_gain(state(0, weight=2, baseline=1.0)) == pytest.approx(0.8)


def test_a_task_without_any_latency_goes_first():
    sched = GainScheduler()
    assert sched.pick([state(0, baseline=1.0), state(1)]).task.index == 1


def test_done_tasks_get_no_rounds_and_none_is_returned_when_all_are_done():
    sched = GainScheduler()
    assert (
        sched.pick([state(0, baseline=5.0, retired="exhausted"), state(1, baseline=1.0)]).task.index
        == 1
    )
    assert sched.pick([state(0, baseline=1.0, retired="exhausted")]) is None


def test_model_latency_sums_weight_times_the_deployed_latency():
    a = state(0, weight=2, baseline=3.0, history=[1.0])
    b = state(1, weight=1, baseline=0.5, history=[0.7])  # the best record is deployed, slower
    c = state(2, weight=1, baseline=0.25)  # not tuned: runs untuned
    assert model_latency_s([a, b, c]) == pytest.approx(2 * 1.0 + 0.7 + 0.25)
    assert model_latency_s([a, state(2)]) is None


@pytest.mark.parametrize("kwargs", [{"window": 0}, {"first_round_gain": 0}, {"min_gain": 2}])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        GainScheduler(**kwargs)


def test_equal_gains_go_to_the_task_whose_rounds_cost_less():
    sched = GainScheduler(window=1)
    slow = state(0, baseline=4.0, history=[2.0])
    fast = state(1, baseline=4.0, history=[2.0])
    slow.round_s, fast.round_s = [120.0], [30.0]
    assert sched.pick([slow, fast]) is fast
    fast.round_s = [600.0]  # now more than 4x dearer than the other for the same gain
    assert sched.pick([slow, fast]) is slow


def test_a_never_tuned_task_is_costed_at_the_typical_round():
    sched = GainScheduler(window=1, first_round_gain=0.5)
    tuned = state(0, baseline=10.0, history=[8.0])  # expects 20% of 8 = 1.6 s per round
    tuned.round_s = [100.0]
    fresh = state(1, baseline=2.0)  # expects 50% of 2 = 1.0 at the typical cost
    assert sched.expected_cost(fresh, 100.0) == 100.0
    assert sched.pick([tuned, fresh]) is tuned
