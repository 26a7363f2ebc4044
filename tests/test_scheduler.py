import math

import pytest

from tune_orchestrator.model.tasks import Task
from tune_orchestrator.run.scheduler import (
    GainScheduler,
    RoundCosts,
    RoundSizes,
    TaskState,
    assign_floors,
    current_shares,
    model_latency_s,
)

SIZES = RoundSizes(16, 64)


def state(index, *, weight=1, baseline=None, history=(), trials=16, round_s=1.0, fixed_s=0.0,
          retired=None):  # fmt: skip
    """A task with rounds of `trials` candidates whose bests were `history`."""
    task = Task(index, f"t{index}", weight, 1e6, None, f"{index:016x}")
    s = TaskState(task, baseline_s=baseline)
    for best in history:
        s.record_round(best, trials=trials, seconds=round_s, fixed_s=fixed_s)
        s.trials += trials
    s.retired = retired
    return s


def picked(sched, states, exclude=()):
    plan = sched.pick(states, SIZES, exclude)
    return None if plan is None else plan.state


def test_untouched_tasks_get_a_first_round_of_the_smallest_size_heaviest_first():
    sched = GainScheduler()
    small = state(0, weight=1, baseline=1e-3)
    heavy = state(1, weight=3, baseline=1e-3)  # called three times per inference
    plan = sched.pick([small, heavy], SIZES)
    assert plan.state is heavy and plan.size == 16


def test_every_task_holding_a_percent_of_the_model_is_touched_before_any_goes_deep():
    sched = GainScheduler(coverage_share=0.01)
    steep = state(0, baseline=10.0, history=[1.0])  # 10x in one round: the best curve by far
    light = state(1, baseline=0.05)  # 4.8% of the current model, never tuned
    tiny = state(2, baseline=0.005)  # 0.5%: not worth a round before the steep task's next
    assert picked(sched, [steep, light, tiny]) is light
    light.record_round(0.04, trials=16, seconds=1.0)
    light.trials = 16
    assert picked(sched, [steep, light, tiny]) is steep
    assert picked(GainScheduler(coverage_share=0.0), [steep, tiny]) is tiny


def test_coverage_follows_the_current_latency_not_the_untuned_one():
    sched = GainScheduler(coverage_share=0.01)
    heavy = state(0, baseline=100.0)
    light = state(1, baseline=0.5)  # 0.5% of the untuned model
    assert [round(x, 4) for x in current_shares([heavy, light])] == [0.995, 0.005]
    heavy.record_round(10.0, trials=16, seconds=1.0)
    heavy.trials = 16
    assert current_shares([heavy, light])[1] == pytest.approx(0.5 / 10.5)  # now 4.8%
    assert picked(sched, [heavy, light]) is light


def test_the_curve_exponent_is_measured_over_the_last_window_rounds():
    sched = GainScheduler(window=2)
    s = state(0, baseline=100.0, history=[10.0, 8.0, 6.0])  # after 16, 32, 48 trials
    assert s.trials_after == [16, 32, 48]
    assert sched.exponent(s) == pytest.approx(math.log(10 / 6) / math.log(48 / 16))
    one = state(1, baseline=100.0, history=[10.0])  # the untuned latency counts as one trial
    assert sched.exponent(one) == pytest.approx(math.log(10) / math.log(16))
    assert sched.exponent(state(2, baseline=1.0)) is None


def test_a_task_that_still_improves_beats_one_that_stalled():
    sched = GainScheduler(window=2, min_gain=0.01)
    stalled = state(0, baseline=10e-3, history=[2e-3, 2e-3, 2e-3])
    improving = state(1, baseline=4e-3, history=[3e-3, 2e-3])
    assert picked(sched, [stalled, improving]) is improving
    # Stalled, it still expects min_gain from doubling its trials: never zero.
    assert sched.expected_gain(stalled, 48) == pytest.approx(2e-3 * 0.01)


def test_a_tuned_schedule_slower_than_the_default_gains_only_once_it_beats_it():
    sched = GainScheduler(window=1, min_gain=0.01)
    behind = state(0, baseline=1.0, history=[4.0, 2.0])  # halving, still 2x the default
    assert sched.expected_gain(behind, 32) == pytest.approx(1.0 * (1 - 2 ** -math.log2(1 / 0.99)))
    ahead = state(1, baseline=1.0, history=[0.8, 0.4])  # the same curve, ahead of the default
    assert sched.expected_gain(ahead, 32) == pytest.approx(0.4 - 0.4 * 2**-1)


def test_a_fixed_cost_per_round_buys_larger_rounds_none_buys_the_smallest():
    sched = GainScheduler(window=1)

    def task(fixed_s):  # 1 s per candidate, and `fixed_s` a round whatever its size
        return state(0, baseline=1.0, history=[0.5], round_s=fixed_s + 16.0, fixed_s=fixed_s)

    assert sched.pick([task(0.0)], SIZES).size == 16
    assert RoundCosts.of(task(40.0)) == RoundCosts(40.0, 1.0)
    assert sched.pick([task(40.0)], SIZES).size == 32
    assert sched.pick([task(100.0)], SIZES).size == 64


def test_floors_of_trials_do_not_change_the_order():
    tasks = [state(0, baseline=6.0), state(1, baseline=3.0), state(2, baseline=1.0)]
    assign_floors(tasks, share=0.8, trials=256)
    assert [t.share for t in tasks] == pytest.approx([0.6, 0.3, 0.1])
    assert [t.floor for t in tasks] == [256, 256, 0]  # 60% is short of 80%: the next joins
    sched = GainScheduler(window=1)
    for t, best in zip(tasks, [1.0, 2.9, 0.1], strict=True):
        t.record_round(best, trials=64, seconds=1.0)
        t.trials = 64
    tasks[0].retired = "search space exhausted"
    # Task 1 is short of its floor and its curve is flat; task 2 has no floor and gains more.
    assert picked(sched, tasks) is tasks[2]


def test_a_task_without_any_latency_goes_first():
    sched = GainScheduler()
    plan = sched.pick([state(0, baseline=1.0), state(1)], SIZES)
    assert plan.state.task.index == 1 and plan.gain_s == math.inf


def test_done_tasks_get_no_rounds_and_none_is_returned_when_all_are_done():
    sched = GainScheduler()
    done = state(0, baseline=5.0, retired="exhausted")
    assert picked(sched, [done, state(1, baseline=1.0)]).task.index == 1
    assert sched.pick([state(0, baseline=1.0, retired="exhausted")], SIZES) is None


def test_model_latency_sums_weight_times_the_deployed_latency():
    a = state(0, weight=2, baseline=3.0, history=[1.0])
    b = state(1, weight=1, baseline=0.5, history=[0.7])  # tuned, slower: the default is kept
    c = state(2, weight=1, baseline=0.25)  # not tuned: runs untuned
    assert model_latency_s([a, b, c]) == pytest.approx(2 * 1.0 + 0.5 + 0.25)
    assert model_latency_s([a, state(2)]) is None


def test_the_lookahead_never_picks_the_task_being_measured():
    sched = GainScheduler()
    heavy, light = state(0, weight=3, baseline=1e-3), state(1, baseline=1e-3)
    assert picked(sched, [heavy, light]) is heavy
    assert picked(sched, [heavy, light], exclude={0}) is light
    assert picked(sched, [heavy], exclude={0}) is None


def test_a_task_whose_search_keeps_finding_nothing_new_yields_to_others():
    sched = GainScheduler()
    a, b = state(0, weight=2, baseline=1e-3), state(1, baseline=1e-3)
    assert picked(sched, [a, b]) is a
    a.empty_searches = 2  # its expected gain is quartered
    assert picked(sched, [a, b]) is b


@pytest.mark.parametrize(
    "kwargs",
    [{"window": 0}, {"first_round_gain": 0}, {"min_gain": 1}, {"coverage_share": 2}],
)
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        GainScheduler(**kwargs)


def test_equal_gains_go_to_the_task_whose_rounds_cost_less():
    sched = GainScheduler(window=1)
    slow = state(0, baseline=4.0, history=[2.0], round_s=120.0)
    fast = state(1, baseline=4.0, history=[2.0], round_s=30.0)
    assert picked(sched, [slow, fast]) is fast
    fast.round_s[-1] = 600.0  # now dearer than the other for the same gain
    assert picked(sched, [slow, fast]) is slow


def test_a_never_tuned_task_is_costed_at_the_typical_round():
    sched = GainScheduler(window=1, first_round_gain=0.5)
    tuned = state(0, baseline=10.0, history=[8.0], round_s=100.0)  # 6.25 s per candidate
    fresh = state(1, baseline=2.0)
    typical = RoundCosts.typical([tuned, fresh])
    assert typical == RoundCosts(0.0, 100.0 / 16)
    plan = sched.plan(
        fresh, SIZES, typical
    )  # 50% of 2 s from the smallest round, at the typical cost
    assert (plan.size, plan.gain_s, plan.cost_s) == (16, pytest.approx(1.0), pytest.approx(100.0))


def test_round_sizes_are_whole_waves_doubling_from_a_first_touch():
    assert RoundSizes.for_run(16, 64, 2).options() == [16, 32, 64]
    assert RoundSizes.for_run(16, 64, 16).options() == [16, 32, 64]
    assert RoundSizes.for_run(16, 64, 12) == RoundSizes(24, 72)  # whole waves of 12 builds
    assert RoundSizes.for_run(16, 96, 16).options() == [16, 32, 64, 96]
    assert RoundSizes.for_run(128, 64, 2) == RoundSizes(64, 64)
    assert RoundSizes.for_run(16, 64, 12, least=8).least == 12  # a whole wave
    assert RoundSizes.for_run(16, 64, 2, least=32).least == 16  # never above the smallest
    with pytest.raises(ValueError):
        RoundSizes(8, 4)
    with pytest.raises(ValueError):
        RoundSizes(16, 64, first=8)  # below the smallest only with a `least` that allows it


# -- the proposal pool ------------------------------------------------------------------------


def candidate(key):
    from tune_orchestrator.model.tasks import Candidate

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


def test_first_rounds_share_their_candidates_over_the_tasks_to_cover():
    """A few-task model's first rounds search wider (the README model: 6 tasks, rounds of 64);
    a many-task model's cover every task at the smallest size; never past the largest."""
    sizes = RoundSizes.for_run(16, 64, 2)  # 16, 32, 64
    assert sizes.for_tasks(6, 384).first_touch == 64
    assert sizes.for_tasks(12, 384).first_touch == 32
    assert sizes.for_tasks(30, 384).first_touch == 16
    assert sizes.for_tasks(1, 384).first_touch == 64
    assert sizes.first_touch == 16  # without tasks to share over: the smallest


def test_first_rounds_shrink_only_where_the_budget_cannot_cover_every_task():
    """resnet50ish at 5 minutes on a slow day: ~300 trials, 28 tasks; 16 each left 9 untuned."""
    sizes = RoundSizes.for_run(16, 64, 2, least=8).for_tasks(28, 150)
    assert sizes.covering(28, 300).first_touch == 8
    assert sizes.covering(28, 448).first_touch == 16  # 28 rounds of 16 fit
    assert sizes.covering(28, 24).first_touch == 16  # one round: measured whole
    assert RoundSizes.for_run(16, 64, 2).covering(28, 300).first_touch == 16  # no least
    wide = RoundSizes.for_run(16, 64, 2, least=8).for_tasks(6, 384)
    assert wide.covering(6, 300).first_touch == 64  # a few-task model's wider first rounds


def test_a_first_touch_gets_the_first_round_size():
    task = Task(0, "t0", 1, 1e6, None, "0")
    sizes = RoundSizes(16, 64).for_tasks(4, 384)
    plan = GainScheduler().pick([TaskState(task, baseline_s=1e-3)], sizes)
    assert plan is not None and plan.size == 64


def vector_task(index: int, n: int, flops: float = 1e6) -> Task:
    """A task with a real workload (doubling a vector of `n`): tasks of one kind, any `n`."""
    import tvm
    from tvm import te

    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    workload = tvm.IRModule({"main": te.create_prim_func([a, b])})
    return Task(index, f"t{index}", 1, flops, workload, f"{index:016x}")


def test_a_task_stuck_below_its_sister_tasks_throughput_gets_rounds_again():
    stuck = state(0, baseline=10.0, history=[5.0, 5.0, 5.0, 5.0], trials=64)
    moving = state(1, baseline=10.0, history=[4.0, 3.0, 2.6, 2.3], trials=64)
    stuck.task, moving.task = vector_task(0, 64), vector_task(1, 128)
    # Its own curve is flat: alone, the moving task would get every round.
    assert picked(GainScheduler(peers=False), [stuck, moving]) is moving
    # At its sister's throughput it would run in 2.3 s: a round of 64 after 256 trials
    # expects a fifth of the gap.
    sched = GainScheduler()
    assert sched.peer_latencies([stuck, moving]) == {0: 2.3, 1: 2.3}
    assert sched.expected_gain(stuck, 64, 2.3) == pytest.approx((5.0 - 2.3) * 64 / 320)
    assert picked(sched, [stuck, moving]) is stuck
    # A task of another kind is no sister; one of four times the FLOPs expects four times.
    other = state(2, baseline=10.0, history=[1.0], trials=64)
    other.task = Task(2, "t2", 1, 1e6, None, f"{2:016x}")
    heavier = state(3, baseline=40.0, history=[20.0], trials=64)
    heavier.task = vector_task(3, 256, flops=4e6)
    latencies = sched.peer_latencies([stuck, moving, other, heavier])
    assert 2 not in latencies and latencies[3] == pytest.approx(4e6 / (1e6 / 2.3))
