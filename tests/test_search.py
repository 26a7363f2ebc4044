"""The search room's promises, on a real MetaSchedule search of a tiny model's task: a population
sized to the round, a task's search that goes on from round to round without proposing a
schedule twice, and each schedule's features extracted once for the search, the filter and
learning."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.runner import RunnerResult
from tvm.s_tir.schedule import Schedule

from cost_models import ScoredBy
from tune_orchestrator.config import Settings
from tune_orchestrator.filters import Predictor
from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
from tune_orchestrator.model.loading import load_model
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import extract_tasks, structural_key
from tune_orchestrator.search import TaskSearch, spaces, strategy
from tune_orchestrator.search import cost_model as shared
from tune_orchestrator.search.cost_model import SharedCostModel, candidate_features
from tune_orchestrator.search.strategy import population_size


@pytest.fixture(scope="module")
def tiny_tasks(tiny_model):
    target = resolve_target("llvm").target
    found = extract_tasks(fuse_for_tuning(import_to_relax(load_model(tiny_model)), target), target)
    return target, found


@pytest.fixture(scope="module")
def conv(tiny_tasks):
    target, found = tiny_tasks
    return target, found[0]


@pytest.fixture(scope="module")
def reshape(tiny_tasks):
    """The tiny model's reshape: on a CPU its design space holds one schedule."""
    target, found = tiny_tasks
    return target, next(task for task in found if task.name == "reshape")


def task_search(conv, cost_model, proposals=8, settings=None):
    target, task = conv
    return TaskSearch(
        task,
        target=target,
        settings=settings or Settings.load(),
        database=ms.database.MemoryDatabase(),
        cost_model=cost_model,
        rand_state=5,
        threads=1,
        proposals=proposals,
    )


def keys(candidates):
    return {structural_key(mc.sch.mod) for mc in candidates}


def scheduled(schedules):
    return {structural_key(sch.mod) for sch in schedules}


def latencies(candidates):
    return [1e-4 * (1 + i % 7) for i in range(len(candidates))]


def results(candidates):
    return [RunnerResult([s], None) for s in latencies(candidates)]


def test_the_population_is_sized_to_the_round_within_its_bounds():
    sized = Settings.load()  # 2 schedules per candidate, between 64 and 512
    assert [population_size(sized, n) for n in (8, 64, 100, 1000)] == [64, 128, 200, 512]
    fixed = Settings.load(overrides={"search.population": 100})
    assert population_size(fixed, 8) == population_size(fixed, 1000) == 100


@pytest.mark.slow
def test_a_tasks_search_goes_on_from_round_to_round_and_never_proposes_a_schedule_twice(conv):
    search = task_search(conv, ms.cost_model.RandomModel(seed=0))
    assert search.population == 64
    rounds = []
    for _ in range(3):
        proposed = search.propose()
        rounds.append(keys(proposed))
        search.learn(list(zip(proposed, latencies(proposed), strict=True)))
    assert [len(r) for r in rounds] == [8, 8, 8]
    assert len(rounds[0] | rounds[1] | rounds[2]) == 24
    assert search.best_s == pytest.approx(1e-4)  # the fastest measured: the next parents
    assert (search.times.searches, search.times.proposed) == (3, 24)
    assert search.times.sampling > 0 and search.times.mutation > 0


@pytest.mark.slow
def test_a_long_search_lets_go_of_what_tvm_kept_and_still_proposes_full_new_rounds(
    conv, monkeypatch
):
    """TVM's evolution keeps every schedule it returns for as long as its strategy lives, and
    a long run's memory grew with it. Past a bound the strategies start afresh, and the rounds
    after stay full, new and evolved (not made up with random samples), though the model ranks
    the parents above all else."""
    monkeypatch.setattr(strategy, "_HELD_MOST", 16)
    # One design space in play: every pick but the random share is the evolution's.
    monkeypatch.setattr(spaces, "in_play", lambda elites: [e[2] for e in elites[:1]])
    # The parents a learned model knows to be fast, scored above all else, come back first
    # from an evolution that no longer leaves them out.
    proposed: set[int] = set()
    rng = np.random.default_rng(0)
    model = ScoredBy(lambda mc: 2.0 if structural_key(mc.sch.mod) in proposed else rng.uniform())
    search = task_search(conv, model)
    for _ in range(6):
        round_ = search.propose()
        assert len(keys(round_)) == 8 and not keys(round_) & proposed
        assert len(search.explored) == int(8 * search.eps_greedy)
        # After a fresh start too, the next round's recent parents are this search's news.
        assert not {structural_key(sch.mod) for sch in search._recent} & proposed
        proposed |= keys(round_)
        search.learn(list(zip(round_, latencies(round_), strict=True)))
    assert search.forgotten >= 2
    search._forget()  # TVM's state no longer holds them: its evolution returns them again
    again = search._evolve(search._evolution, search._parents(), 8)
    assert {structural_key(sch.mod) for sch in again} & proposed


@pytest.mark.slow
def test_a_tasks_first_round_is_its_fresh_draws_best_ranked_then_the_evolution_takes_over(conv):
    """With nothing measured, the evolution's bests are mutants of a few draws; a task's first
    round is its fresh samples themselves, the cost model's best first. The second round
    evolves from what the first measured and proposes nothing twice."""
    rng = np.random.default_rng(1)
    scores: dict[int, float] = {}
    model = ScoredBy(lambda mc: scores.setdefault(structural_key(mc.sch.mod), rng.uniform()))
    search = task_search(conv, model)
    drawn, evolved = [], []
    sample, evolve = search._sample, search._evolve

    def sampled(strategy, n):
        found = list(sample(strategy, n))
        drawn.extend(found)
        return found

    def evolution(strategy, population, wanted):
        evolved.append(scheduled(population))
        return evolve(strategy, population, wanted)

    search._sample, search._evolve = sampled, evolution
    first = search.propose()
    assert not evolved and len(first) == 8
    assert keys(first) == set(sorted(scheduled(drawn), key=lambda key: -scores[key])[:8])
    search.learn(list(zip(first, latencies(first), strict=True)))
    second = search.propose()
    assert len(evolved) == 1 and keys(first) <= evolved[0]  # its parents: the first round
    assert len(second) == 8 and not keys(second) & keys(first)


def test_a_space_of_one_schedule_is_proposed_whole_and_then_exhausted(reshape, monkeypatch):
    """An injective kernel's design space can hold a single schedule (its design space makes
    no decision): sampling draws it again and again, and evolving it finds nothing new. It is
    proposed at once, without an evolution, unjudged by the filter, and the task's search is
    over (no more searches to pay for)."""
    search = task_search(reshape, ms.cost_model.RandomModel(seed=0))
    monkeypatch.setattr(search, "_evolve", lambda *_: pytest.fail("evolved a whole space"))
    draws = []
    real = search._sample
    monkeypatch.setattr(search, "_sample", lambda *args: draws.append(args[1]) or real(*args))
    proposed = search.propose()
    assert sum(draws) <= 2  # not the population: a draw of a large fused kernel takes seconds
    assert len(proposed) == 1 and search.exhausted
    assert search.explored == keys(proposed)
    assert (search.last.searches, search.last.proposed, search.last.mutation) == (1, 1, 0.0)
    assert search.propose() == []


def test_only_a_sample_that_drew_each_of_its_schedules_twice_or_more_shows_a_whole_space(conv):
    """The Good-Turing estimate of what a sample missed is its share of schedules drawn once:
    one such schedule and the space may hold more. A small sample shows nothing, and a space
    larger than the round is left to the evolution to rank."""
    search = task_search(conv, ms.cost_model.RandomModel(seed=0))
    s = list(search._sample(search._strategy, 9))
    assert len(scheduled(s)) == 9
    assert scheduled(search._whole_space(s[:2] * 16, 8)) == scheduled(s[:2])
    assert search._whole_space(s[:2] * 16 + s[2:3], 8) is None  # s[2] drawn once
    assert search._whole_space(s[:2] * 15, 8) is None  # 30 draws: too few to tell
    assert search._whole_space(s * 4, 8) is None  # 9 schedules, a round of 8
    assert len(search._whole_space(s * 4, 9)) == 9
    assert search.propose() and not search.exhausted  # a convolution's sample: all drawn once


@pytest.mark.slow
def test_the_search_says_which_proposals_are_its_random_picks(conv):
    """The eps-greedy share of a round is fresh random schedules, not the cost model's
    choice: the search names them, so the filter does not veto them with that model."""
    settings = Settings.load(overrides={"search.eps_greedy": 0.25})
    search = task_search(conv, ms.cost_model.RandomModel(seed=0), settings=settings)
    for _ in range(2):
        proposed = search.propose()
        assert len(search.explored) == 2 and search.explored <= keys(proposed)
        search.learn(list(zip(proposed, latencies(proposed), strict=True)))


@pytest.mark.slow
def test_each_schedules_features_are_extracted_once_for_the_search_the_filter_and_learning(
    conv, monkeypatch
):
    extracted = []
    real = shared.store_features

    def counting(context, candidates):
        extracted.extend(structural_key(mc.sch.mod) for mc in candidates)
        return real(context, candidates)

    monkeypatch.setattr(shared, "store_features", counting)
    model = SharedCostModel(Predictor(seed=0), warmup=0)
    search = task_search(conv, model)
    first = search.propose()
    assert not model.ready and extracted == []  # untrained, it scores at random: no features
    model.add(search.ctx, first, results(first))
    model.fit()
    assert model.ready and len(extracted) == len(first)

    extracted.clear()
    second = search.propose()  # guided: every schedule it scores has its features extracted
    assert extracted and search.last.features > 0
    assert keys(second) <= set(extracted)
    extracted.clear()
    candidate_features(model, search.ctx, second)  # the filter ranks the round
    model.add(search.ctx, second, results(second))  # and learning learns it
    assert extracted == []


def test_search_threads_score_while_the_loop_learns_without_a_race(conv, monkeypatch):
    """Search-ahead threads ask `ready` and `predict` while the main thread adds measurements
    of new workloads and refits: no error, and every score is one a fitted model gives."""
    stores = np.random.default_rng(0).uniform(size=(16, 2, 4)).astype(np.float32)
    latencies = 1e-4 * (1 + stores[:, 0, 0])
    monkeypatch.setattr(shared, "store_features", lambda _, mcs: list(stores[: len(mcs)]))
    context, candidates = measure_candidates(conv, 16)
    predictor = Predictor(seed=0)
    model = SharedCostModel(predictor, warmup=0)
    predictor.add("w0", stores, latencies)
    model.fit()
    predictor._data = _Yielding(predictor._data)
    published = {_rounded(shared.throughput(predictor, stores))}
    answers: list[tuple[float, ...]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def search_ahead() -> None:
        try:
            while not done.is_set():
                assert model.ready
                answers.append(_rounded(model.predict(context, candidates)))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=search_ahead) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        deadline, n = time.monotonic() + 1.5, 0
        while time.monotonic() < deadline and not errors:
            n += 1
            predictor.add(f"w{n}", stores[:2], latencies[:2])  # a new workload each time
            if n % 20 == 0:
                model.fit()
                published.add(_rounded(shared.throughput(predictor, stores)))
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert errors == [], errors
    assert answers and set(answers) <= published


def measure_candidates(conv, n):
    """A tuning context of the task and `n` MeasureCandidates of its unscheduled workload."""
    target, task = conv
    context = ms.TuneContext(mod=task.workload, target=target, task_name="scored")
    args = ms.arg_info.ArgInfo.from_entry_func(task.workload)
    return context, [ms.MeasureCandidate(Schedule(task.workload), args) for _ in range(n)]


def _rounded(scores: np.ndarray) -> tuple[float, ...]:
    return tuple(np.round(scores, 9).tolist())


class _Yielding(dict):
    """Training data that hands the GIL over at each workload it yields: a thread walking it
    while the learner adds a workload meets the change at once, not once in a while."""

    def values(self):
        for value in super().values():
            time.sleep(0)
            yield value


def test_a_stalled_search_starts_again_from_its_two_fastest_and_fresh_samples(conv):
    """After `restart_after` rounds that did not move the task's best, the next search evolves
    its two fastest schedules and fresh samples, none of the last round's proposals; a round
    that moves the best resets the count."""
    settings = Settings.load(overrides={"search.restart_after": 2})
    search = task_search(conv, ms.cost_model.RandomModel(), settings=settings)
    populations = []
    evolve = search._evolve

    def watched(strategy, population, wanted):
        populations.append({structural_key(sch.mod) for sch in population})
        return evolve(strategy, population, wanted)

    search._evolve = watched
    first = search.propose()
    search.learn([(mc, 1e-3 * (i + 1)) for i, mc in enumerate(first)])  # the first best
    fastest = {structural_key(first[0].sch.mod), structural_key(first[1].sch.mod)}
    for _ in range(2):  # two rounds that do not beat it
        last = search.propose()
        search.learn([(mc, 1.0) for mc in last])
        assert populations[-1] & (keys(first) - fastest)  # it went on from the last round
    search.propose()
    assert search.restarts == 1
    assert fastest <= populations[-1] and not populations[-1] & (keys(last) - fastest)
    found = search.propose()
    search.learn([(mc, 1e-6) for mc in found])  # a new best: no restart next
    search.propose()
    assert search.restarts == 1
