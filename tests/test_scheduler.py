import pytest

from tune_orchestrator.scheduler import GainScheduler, TaskState, assign_floors, model_latency_s
from tune_orchestrator.tasks import Task


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
    b = state(1, weight=1, baseline=0.5, history=[0.7])  # tuned, slower: the default is kept
    c = state(2, weight=1, baseline=0.25)  # not tuned: runs untuned
    assert model_latency_s([a, b, c]) == pytest.approx(2 * 1.0 + 0.5 + 0.25)
    assert model_latency_s([a, state(2)]) is None


def test_the_lookahead_never_picks_the_task_being_measured():
    sched = GainScheduler()
    heavy, light = state(0, weight=3, baseline=1e-3), state(1, baseline=1e-3)
    assert sched.pick([heavy, light]) is heavy
    assert sched.pick([heavy, light], exclude={0}) is light
    assert sched.pick([heavy], exclude={0}) is None


def test_the_heaviest_tasks_get_a_floor_and_go_first_until_they_reach_it():
    tasks = [state(0, baseline=6.0), state(1, baseline=3.0), state(2, baseline=1.0)]
    assign_floors(tasks, share=0.8, trials=256)
    assert [t.share for t in tasks] == pytest.approx([0.6, 0.3, 0.1])
    assert [t.floor for t in tasks] == [256, 256, 0]  # 60% is short of 80%: the next joins
    sched = GainScheduler(window=1)
    tasks[0].record_round(5.0)  # 17% better: 0.83 s of model latency per second of round
    tasks[1].record_round(2.9)  # 3% better: 0.1 s per second
    for t in tasks:
        t.round_s = [1.0]
    tasks[0].trials, tasks[1].trials = 256, 64
    assert sched.pick(tasks) is tasks[1]  # short of its floor: first, whatever it gains
    tasks[1].trials = 256
    assert sched.pick(tasks) is tasks[0]  # floors met: by expected gain per second again


def test_a_task_whose_search_keeps_finding_nothing_new_yields_to_others():
    sched = GainScheduler()
    a, b = state(0, weight=2, baseline=1e-3), state(1, baseline=1e-3)
    assert sched.pick([a, b]) is a
    a.empty_searches = 2  # its expected gain is quartered
    assert sched.pick([a, b]) is b


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


# -- the proposal pool ------------------------------------------------------------------------


def candidate(key):
    from tune_orchestrator.tasks import Candidate

    return Candidate(None, None, key)


def test_set_aside_candidates_wait_for_a_later_round_newest_batch_first():
    from tune_orchestrator.search import ProposalPool

    pool = ProposalPool(limit=5)
    assert [c.key for c in pool.add(0, [candidate(1), candidate(2)])] == [1, 2]
    assert [c.key for c in pool.add(0, [candidate(2), candidate(3)])] == [3]  # 2 waits already
    assert [c.key for c in pool.waiting(0)] == [3, 1, 2]
    pool.take(0, [candidate(1)])
    assert [c.key for c in pool.waiting(0)] == [3, 2] and pool.size(1) == 0
    pool.add(0, [candidate(k) for k in (4, 5, 6, 7)])  # 6 would wait: the oldest goes
    assert [c.key for c in pool.waiting(0)] == [4, 5, 6, 7, 3] and pool.dropped[0] == 1
