"""Tasks of one kind share their schedules during a run (search/sisters.py): a task without a
best, or trailing a sister of the same kind by FLOP/s, is offered that sister's fastest
schedules replayed on its own shapes, each once, a few a round; tasks of another kind never."""

from __future__ import annotations

import dataclasses

import pytest
from test_transfer_replay import conv, matmul
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

from tune_orchestrator import _tvm
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import Task, structural_key
from tune_orchestrator.search import sisters as sisters_module
from tune_orchestrator.search.sisters import Sisters
from tune_orchestrator.search.transfer import FAILED, Replayed


@pytest.fixture(scope="module")
def target():
    target = resolve_target("llvm").target
    _tvm.load_tensor_intrinsics(target)
    return target


@pytest.fixture(scope="module")
def family(target):
    """Three convolutions of one kind (other shapes) and a matmul, each with two schedules."""
    workloads = [conv(c=8, f=16), conv(c=16, f=16), conv(c=8, hw=8, f=32), matmul()]
    tasks = [
        Task(i, f"t{i}", 1, 1e6 * (i + 1), workload, f"k{i}")
        for i, workload in enumerate(workloads)
    ]
    return tasks, {task.index: proposed(task.workload, target, 2) for task in tasks}


def proposed(workload, target, n):
    """The first `n` schedules MetaSchedule's search proposes (random cost model)."""
    ctx = ms.TuneContext(
        mod=workload,
        target=target,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.EvolutionarySearch(population_size=16),
        rand_state=1,
        num_threads=1,
        logger=_tvm.quiet_logger(),
    )
    ctx.pre_tuning(
        max_trials=64,
        num_trials_per_iter=n,
        design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(seed=1),
    )
    return [candidate.sch for candidate in ctx.generate_measure_candidates()]


def shapes(mod) -> list:
    return [info.as_json()[2] for info in ArgInfo.from_entry_func(mod, remove_preproc=True)]


def fastest_at(schedules, seconds):
    """A `fastest` callback: task i's schedules at seconds[i] (absent: none measured)."""
    return lambda i: [(seconds[i], sch) for sch in schedules[i]] if i in seconds else []


def test_a_task_without_a_best_is_offered_its_sisters_fastest_replayed_on_its_shapes(
    family, target
):
    tasks, schedules = family
    sisters = Sisters(tasks, target=target, trail=0.8, share=2)
    found = sisters.offers(tasks[0], None, fastest_at(schedules, {1: 1e-3, 2: 1e-3, 3: 1e-6}))
    assert len(found) == 2  # one of each convolution; the matmul is of another kind
    for sch in found:
        assert shapes(sch.mod) == shapes(tasks[0].workload)
    # The fastest sister by FLOP/s first: task 2 does 3 MFLOP in the time task 1 does 2.
    keys = [structural_key(sch.mod) for sch in found]
    again = sisters.offers(tasks[0], None, fastest_at(schedules, {2: 1e-3}))
    assert len(again) == 1 and structural_key(again[0].mod) not in keys[:1]
    assert sisters.offered == 3


def test_each_schedule_is_offered_once_then_the_sisters_next(family, target):
    tasks, schedules = family
    sisters = Sisters(tasks, target=target, trail=0.8, share=1)
    fastest = fastest_at(schedules, {1: 1e-3})
    first = sisters.offers(tasks[0], None, fastest)
    second = sisters.offers(tasks[0], None, fastest)
    assert len(first) == len(second) == 1
    assert structural_key(first[0].mod) != structural_key(second[0].mod)
    assert sisters.offers(tasks[0], None, fastest) == []  # both tried


def test_a_task_level_with_its_sisters_is_offered_nothing(family, target):
    tasks, schedules = family
    sisters = Sisters(tasks, target=target, trail=0.8, share=2)
    fastest = fastest_at(schedules, {1: 1e-3})  # task 1: 2 MFLOP in 1 ms, 2 GFLOP/s
    # Task 0 (1 MFLOP) at 0.6 ms runs 1.67 GFLOP/s, above 0.8 x 2: nothing to learn from.
    assert sisters.offers(tasks[0], 0.6e-3, fastest) == []
    # At 1 ms (1 GFLOP/s) it trails: the sister's fastest is offered.
    assert len(sisters.offers(tasks[0], 1e-3, fastest)) == 1


def test_sharing_off_offers_nothing(family, target):
    tasks, schedules = family
    sisters = Sisters(tasks, target=target, trail=0.8, share=0)
    assert sisters.offers(tasks[0], None, fastest_at(schedules, {1: 1e-3, 2: 1e-3})) == []


def test_a_prime_extent_takes_its_sisters_schedules_split_as_it_must_be(family, target):
    """A loop of prime extent splits trivially in every schedule of its task, TVM's own samples
    too: a sister's schedule is not refused for it (the 7x7 stages of a ResNet)."""
    tasks, schedules = family
    odd = dataclasses.replace(tasks[1], workload=conv(c=16, hw=13, f=16))
    sisters = Sisters([tasks[0], odd], target=target, trail=0.8, share=2)
    found = sisters.offers(odd, None, fastest_at(schedules, {0: 1e-3}))
    assert len(found) == 1 and sisters.failed == 0
    assert shapes(found[0].mod) == shapes(odd.workload)


def test_a_schedule_that_does_not_replay_is_counted_and_skipped(family, target, monkeypatch):
    tasks, schedules = family
    refused = str(schedules[0][0].trace)

    def replay(trace, *args, **options):  # the sister's fastest does not replay
        if str(trace) == refused:
            return Replayed(None, FAILED, 0, "refused by the test")
        return real_replay(trace, *args, **options)

    real_replay = sisters_module.replay
    monkeypatch.setattr(sisters_module, "replay", replay)
    sisters = Sisters(tasks[:2], target=target, trail=0.8, share=2)
    found = sisters.offers(tasks[1], None, fastest_at(schedules, {0: 1e-3}))
    assert sisters.failed == 1 and sisters.offered == len(found) == 1  # the next one was taken
    assert shapes(found[0].mod) == shapes(tasks[1].workload)
