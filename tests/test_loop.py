"""The tuning loop's bookkeeping with real MetaSchedule search on a tiny model, and a fake
builder and device (the loop's decisions, not kernels, are under test here)."""

from __future__ import annotations

import json
import threading

import pytest
from tvm.s_tir import meta_schedule as ms

from tune_orchestrator.budget import AnyOf, BudgetLimits, Ledger, StoppingRule, parse_budget
from tune_orchestrator.budget.base import Decision
from tune_orchestrator.config import Settings
from tune_orchestrator.filters import Filter, NoFilter, Selection
from tune_orchestrator.measure import Build, Builder, Engine, Measurement
from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
from tune_orchestrator.model.loading import load_model
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import extract_tasks, structural_key
from tune_orchestrator.run.loop import LoopParts, LoopRules, LoopStart, TuningLoop
from tune_orchestrator.run.scheduler import GainScheduler, RoundPlan, Scheduler, TaskState
from tune_orchestrator.search import TaskSearch


class KeyBuilder(Builder):
    """Builds nothing: the artifact names the scheduled module by its structural hash."""

    workers = 2

    def build(self, inputs, until=None):
        return [Build(f"sched-{structural_key(item.mod)}") for item in inputs]


class Clock:
    """A ledger's clock that moves only when a build says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class SlowBuilder(KeyBuilder):
    """Each build takes `seconds` on `clock`; it starts no build once `until()` is true."""

    def __init__(self, clock, seconds):
        self.clock, self.seconds = clock, seconds

    def build(self, inputs, until=None):
        out = []
        for item in inputs:
            if until is not None and until():
                break
            self.clock.now += self.seconds
            out.append(Build(f"sched-{structural_key(item.mod)}"))
        return out


class HashDevice(Engine):
    """Times nothing: each schedule's latency follows from its hash (0.1 to 1 ms)."""

    device_type = "cpu"

    def __init__(self):
        self.measured: list[str] = []

    def measure(self, inputs, on_result=None, best_s=None):
        out = []
        for i, item in enumerate(inputs):
            self.measured.append(item.artifact)
            m = Measurement((self.latency_s(item.artifact),))
            out.append(m)
            if on_result is not None:
                on_result(i, m)
        return out

    def latency_s(self, artifact: str) -> float:
        return 1e-4 * (1 + int(artifact.split("-")[1]) % 10)


class FlatDevice(HashDevice):
    """Every schedule takes 0.1 ms: the tuning curve is flat after each task's first round,
    whichever schedules the search happened to find."""

    def latency_s(self, artifact: str) -> float:
        return 1e-4


class HalfFilter(Filter):
    """Keeps the half of what it is offered that it has been offered most often (it favours
    what waited); records every offer and every lesson."""

    name = "half"

    def __init__(self):
        self.events: list[tuple[str, int, list[int]]] = []
        self.offers: dict[int, int] = {}

    def select(self, task, candidates):
        self.events.append(("select", task.index, [c.key for c in candidates]))
        for c in candidates:
            self.offers[c.key] = self.offers.get(c.key, 0) + 1
        ranked = sorted(range(len(candidates)), key=lambda i: -self.offers[candidates[i].key])
        return Selection(tuple(ranked[: max(1, len(candidates) // 2)]))

    def learn(self, task, candidates, measurements, costs=None):
        self.events.append(("learn", task.index, [c.key for c in candidates]))


@pytest.fixture(scope="module")
def tasks(tiny_model):
    target = resolve_target("llvm").target
    model = onnx_models.tiny_cnn(tiny_model.parent / "twins.onnx", twin_convs=True)
    found = extract_tasks(fuse_for_tuning(import_to_relax(load_model(model)), target), target)
    return target, found


import onnx_models  # noqa: E402  (after the fixtures' imports, as the other tests do)


def make_loop(
    tasks,
    fast_config,
    *,
    budget,
    flt=None,
    pipeline=False,
    journal=None,
    builder=None,
    ledger=None,
    tasks_used=2,
    bests=None,
    parked=None,
    stops=None,
    engine=None,
    scheduler=None,
    **settings,
):
    target, found = tasks
    states = [TaskState(t, baseline_s=1e-3 * (len(found) - t.index)) for t in found[:tasks_used]]
    engine = engine or HashDevice()
    loop = TuningLoop(
        LoopRules(
            target=target,
            settings=Settings.load(fast_config, settings),
            stopping=AnyOf(
                [BudgetLimits(parse_budget(budget), round_size=8), *([stops] if stops else [])]
            ),
        ),
        LoopParts(
            database=ms.database.MemoryDatabase(),
            cost_model=ms.cost_model.RandomModel(),
            candidate_filter=flt or NoFilter(),
            builder=builder or KeyBuilder(),
            engine=engine,
            scheduler=scheduler or GainScheduler(),
        ),
        LoopStart(states=states, measured={}, rand_state=0, bests=bests, parked=parked),
        ledger=ledger or Ledger(),
        journal=journal if journal is not None else (lambda entry: None),
        emit=lambda *a, **k: None,
        threads=2,
        pipeline=pipeline,
    )
    return loop, engine


def test_candidates_the_filter_sets_aside_are_measured_in_a_later_round(tasks, fast_config):
    flt = HalfFilter()
    entries = []
    loop, engine = make_loop(tasks, fast_config, budget="48trials", flt=flt, journal=entries.append)
    loop.run()
    assert len(engine.measured) == 48 and len(set(engine.measured)) == 48  # none twice
    offers = [(task, keys) for kind, task, keys in flt.events if kind == "select"]
    lessons = [(task, keys) for kind, task, keys in flt.events if kind == "learn"]
    task, offered = offers[0]
    set_aside = set(offered) - set(lessons[0][1])
    assert len(set_aside) == 4  # 8 proposed, 4 measured
    later = [set(measured) for t, measured in lessons[1:] if t == task]
    assert later and set_aside <= later[0]  # waited in the pool, then measured next time
    rounds = [e for e in entries if e["type"] == "round"]
    assert all(e["waiting"] >= 0 for e in rounds) and any(e["waiting"] for e in rounds)
    assert sum(e["proposed"] for e in rounds) >= 48


class SlowLearningFilter(HalfFilter):
    """Takes `seconds` on `clock` to learn from a round (a ranker's fit)."""

    def __init__(self, clock, seconds):
        super().__init__()
        self.clock, self.seconds = clock, seconds

    def learn(self, task, candidates, measurements, costs=None):
        super().learn(task, candidates, measurements)
        self.clock.now += self.seconds


def test_the_filters_learning_is_charged_to_the_filter_not_to_learn(tasks, fast_config):
    # The report's filter phase is the filter's whole cost, its training included: a filter
    # whose model is slow to train must show in the filter row, not hide in learn's.
    clock = Clock()
    loop, _ = make_loop(
        tasks,
        fast_config,
        budget="32trials",
        flt=SlowLearningFilter(clock, 7.0),
        ledger=Ledger(clock=clock),
    )
    loop.run()
    rounds = sum(1 for kind, _, _ in loop.filter.events if kind == "learn")
    assert rounds >= 2
    assert loop.ledger.phases["filter"] == pytest.approx(7.0 * rounds)
    assert loop.ledger.phases.get("learn", 0.0) == 0.0  # nothing else moves this clock


def test_builds_stop_starting_when_the_budget_could_not_measure_them(tasks, fast_config):
    # Before any round there is no forecast: the first round gets all 8 candidates, which
    # would build for 80 s of a 1-minute budget. Builds stop once what they took, and as much
    # again for measuring and learning, fills what is left.
    clock = Clock()
    entries = []
    loop, engine = make_loop(
        tasks,
        fast_config,
        budget="1min",
        builder=SlowBuilder(clock, 10.0),
        ledger=Ledger(clock=clock),
        journal=entries.append,
    )
    loop.run()
    first = next(e for e in entries if e["type"] == "round")
    assert first["measured"] == 3  # built at 0, 10 and 20 s; at 30 s, 30 + 30 >= 60
    assert loop.ledger.wall_s <= 60.0
    assert len(engine.measured) == loop.ledger.trials  # only what was built was measured
    assert first["waiting"] >= 5  # the unbuilt wait for the task's next round


def test_a_resumed_tasks_search_goes_on_from_its_fastest_measured_schedules(tasks, fast_config):
    first, second = tasks[1][:2]
    earlier, _ = make_loop(tasks, fast_config, budget="8trials")
    ran = earlier.proposer.search(first).propose(4)
    bests = {first.index: [(mc, 1e-4 * (i + 2)) for i, mc in enumerate(ran)]}
    loop, _ = make_loop(tasks, fast_config, budget="8trials", bests=bests)
    assert loop.proposer.search(first).best_s == 2e-4
    assert loop.proposer.search(second).best_s is None  # nothing measured: random parents
    assert loop.proposer.search(first).propose()  # replayed schedules evolve like fresh ones


def test_candidates_set_aside_do_not_stand_in_for_new_proposals(tasks, fast_config):
    """A pool full of what the filter rejected must not stop the search: every round of a
    task proposes new candidates."""
    flt = HalfFilter()
    entries = []
    loop, _ = make_loop(tasks, fast_config, budget="96trials", flt=flt, journal=entries.append)
    loop.run()
    rounds = [e for e in entries if e["type"] == "round"]
    assert len(rounds) > 2 and all(e["proposed"] > 0 for e in rounds)


def test_a_tasks_next_round_is_searched_only_after_its_last_one_is_learned(tasks, fast_config):
    flt = HalfFilter()
    loop, engine = make_loop(tasks, fast_config, budget="64trials", flt=flt, pipeline=True)
    loop.run()
    for task in {t for _, t, _ in flt.events}:
        kinds = [kind for kind, t, _ in flt.events if t == task]
        assert all(a != b for a, b in zip(kinds, kinds[1:], strict=False)), kinds  # alternate
    assert len(engine.measured) == 64


class CountingBuilder(KeyBuilder):
    def __init__(self):
        self.built = 0

    def build(self, inputs, until=None):
        self.built += len(inputs)
        return super().build(inputs, until)


def test_a_pipelined_run_builds_and_searches_nothing_past_its_trial_budget(
    tasks, fast_config, monkeypatch
):
    """With a trial cap, the round being measured counts against it: the round prepared
    beside it is the last one that fits, and no task is searched ahead for a round after it."""
    real = TaskSearch.propose
    ahead: list[int] = []

    def propose(self, wanted=None):
        if threading.current_thread().name.startswith("search-ahead"):
            ahead.append(loop.ledger.trials)
        return real(self, wanted)

    monkeypatch.setattr(TaskSearch, "propose", propose)
    builder = CountingBuilder()
    loop, engine = make_loop(
        tasks, fast_config, budget="24trials", pipeline=True, builder=builder, tasks_used=4
    )
    loop.run()
    assert len(engine.measured) == 24
    assert builder.built == 24  # no round built and then thrown away
    # Searches ahead start only while a round after the one being prepared still fits: with
    # rounds of 8, while the first is measured (the second prepared, a third to come).
    assert ahead == [0]


def test_an_empty_search_does_not_retire_the_task_but_sends_the_next_round_elsewhere(
    tasks, fast_config, monkeypatch
):
    real = TaskSearch.propose
    calls: list[int] = []

    def propose(self, wanted=None):
        calls.append(self.task.index)
        first = calls.count(self.task.index) <= 1 and self.task.index == 0
        return [] if first else real(self, wanted)

    monkeypatch.setattr(TaskSearch, "propose", propose)
    entries = []
    loop, engine = make_loop(tasks, fast_config, budget="32trials", journal=entries.append)
    first, second = loop.states
    # Task 0 holds more latency than task 1, but not twice as much.
    second.baseline_s = 0.8 * first.task.weight * first.baseline_s / second.task.weight
    loop.run()
    assert calls[:2] == [0, 1]  # task 0 found nothing new: the next round went to task 1
    assert loop.states[0].retired is None and loop.states[0].trials > 0
    assert [e["task"] for e in entries if e["type"] == "empty_search"] == [0]


def test_a_task_is_retired_when_its_search_space_is_exhausted(tasks, fast_config, monkeypatch):
    def propose(self, wanted=None):
        self.exhausted = True
        return []

    monkeypatch.setattr(TaskSearch, "propose", propose)
    loop, engine = make_loop(tasks, fast_config, budget="32trials")
    stopped = loop.run()
    assert [s.retired for s in loop.states] == ["search space exhausted"] * 2
    assert stopped.reason == "every task is retired: search space exhausted"
    assert stopped.code == "tasks-done"
    assert engine.measured == []


def test_a_search_error_sends_the_task_back_later_and_retires_it_only_when_it_repeats(
    tasks, fast_config, monkeypatch
):
    real = TaskSearch.propose
    calls: list[int] = []

    def propose(self, wanted=None):
        calls.append(self.task.index)
        if self.task.index == 1:  # always fails, as a TVM pass can on some GPU schedules
            raise RuntimeError("Check failed: blockIdx is bound but threadIdx is not")
        if calls.count(0) == 1:  # fails once, then searches normally
            raise RuntimeError("Check failed: a transient one")
        return real(self, wanted)

    monkeypatch.setattr(TaskSearch, "propose", propose)
    entries = []
    loop, engine = make_loop(tasks, fast_config, budget="32trials", journal=entries.append)
    loop.run()
    first, second = loop.states
    assert first.retired is None and first.trials == 32
    assert second.retired.startswith("search failed 3 times in a row: ")
    assert second.trials == 0
    errors = [e["task"] for e in entries if e["type"] == "search_error"]
    assert errors.count(0) == 1 and errors.count(1) == 3


class BrokenDevice(HashDevice):
    """Runs nothing: every candidate fails, as on a device in a bad state."""

    def measure(self, inputs, on_result=None, best_s=None):
        out = []
        for i, item in enumerate(inputs):
            self.measured.append(item.artifact)
            out.append(Measurement(None, "CUDA error: an illegal memory access was encountered"))
            if on_result is not None:
                on_result(i, out[-1])
        return out


def test_a_run_in_which_nothing_runs_stops_once_every_task_has_shown_it(tasks, fast_config):
    loop, engine = make_loop(tasks, fast_config, budget="400trials", engine=BrokenDevice())
    stopped = loop.run()
    assert stopped.code == "nothing-ran"
    assert len(engine.measured) == 32  # two rounds of 8 for each task, not the 400 trials
    assert stopped.reason == (
        "none of the 32 candidates measured on 2 task(s) built and ran; the first failure: "
        "CUDA error: an illegal memory access was encountered"
    )


def test_one_task_that_runs_nothing_does_not_stop_the_run(tasks, fast_config, monkeypatch):
    real = HashDevice.measure
    engine = HashDevice()

    def measure(inputs, on_result=None, best_s=None):
        if loop.states[0].trials == 0 and inputs and loop.states[1].trials == 0:
            return BrokenDevice.measure(engine, inputs, on_result, best_s)
        return real(engine, inputs, on_result, best_s)

    monkeypatch.setattr(engine, "measure", measure)
    loop, _ = make_loop(tasks, fast_config, budget="32trials", engine=engine)
    stopped = loop.run()
    assert stopped.code == "trials" and len(engine.measured) == 32


def test_a_single_task_whose_first_round_runs_nothing_goes_on(tasks, fast_config, monkeypatch):
    # A round can fail for its schedules alone; one task's one round does not stop the run.
    real = HashDevice.measure
    engine = HashDevice()

    def measure(inputs, on_result=None, best_s=None):
        if not engine.measured:
            return BrokenDevice.measure(engine, inputs, on_result, best_s)
        return real(engine, inputs, on_result, best_s)

    monkeypatch.setattr(engine, "measure", measure)
    loop, _ = make_loop(tasks, fast_config, budget="24trials", engine=engine, tasks_used=1)
    stopped = loop.run()
    assert stopped.code == "trials" and len(engine.measured) == 24
    assert loop.states[0].best_s is not None


def test_a_run_whose_every_search_fails_stops_as_one_that_ran_nothing(
    tasks, fast_config, monkeypatch
):
    def propose(self, wanted=None):
        raise RuntimeError("Check failed: an internal error of TVM's")

    monkeypatch.setattr(TaskSearch, "propose", propose)
    loop, engine = make_loop(tasks, fast_config, budget="32trials")
    stopped = loop.run()
    assert stopped.code == "nothing-ran" and engine.measured == []
    assert stopped.reason == (
        "no candidate ran, every task is retired: search failed 3 times in a row: "
        "Check failed: an internal error of TVM's"
    )


def test_the_round_fills_whole_waves_of_build_workers(tasks, fast_config):
    loop, _ = make_loop(tasks, fast_config, budget="8trials", **{"tune.trials_per_round": 7})
    assert loop.sizes.largest == 8  # two workers: 7 would leave one idle for the last build


def test_a_round_gives_every_gpu_a_round_of_its_own():
    from tune_orchestrator.run.loop import round_size

    workers = KeyBuilder().workers
    assert round_size(64, workers, gpus=1) == 64
    assert round_size(64, workers, gpus=8) == 512  # each GPU's pipeline fills once
    assert round_size(7, workers, gpus=3) == 22  # 21, in whole waves of two builds


def test_journal_entries_stay_json(tasks, fast_config):
    """Every entry the loop journals reads back as it was written, by any JSON reader (no
    NaN or Infinity, which Python writes and strict readers refuse)."""
    entries = []
    loop, _ = make_loop(tasks, fast_config, budget="8trials", journal=entries.append)
    loop.run()
    rounds = [e for e in entries if e["type"] == "round"]
    assert rounds and sum(e["trials"] for e in rounds) == 8
    assert json.loads(json.dumps(entries, allow_nan=False)) == entries


class AfterRounds(StoppingRule):
    """Stops once `rounds` rounds were measured, whatever else was prepared."""

    def __init__(self, rounds):
        self.rounds = rounds

    def decide(self, ledger, tasks=()):
        return Decision(ledger.rounds >= self.rounds, "enough rounds")


def proposed_keys(monkeypatch) -> list[int]:
    """Records the structural key of every candidate any TaskSearch proposes from now on."""
    real, keys = TaskSearch.propose, []

    def propose(self, wanted=None):
        found = real(self, wanted)
        keys.extend(structural_key(mc.sch.mod) for mc in found)
        return found

    monkeypatch.setattr(TaskSearch, "propose", propose)
    return keys


def test_every_proposal_is_measured_or_left_waiting_none_is_lost(tasks, fast_config, monkeypatch):
    """Set aside by the filter, cut by the budget or prepared ahead when the run stops: what
    was proposed (by a search, or shared by a sister task) and not measured is in the
    leftovers a resume starts from."""
    proposed = proposed_keys(monkeypatch)
    loop, engine = make_loop(
        tasks, fast_config, budget="400trials", flt=HalfFilter(), pipeline=True, tasks_used=3,
        stops=AfterRounds(5),  # as an interrupt does: the round prepared ahead goes unmeasured
    )  # fmt: skip
    loop.run()
    measured = {int(a.split("-")[1]) for a in engine.measured}
    waiting = {c.key for cs in loop.proposer.leftovers().values() for c in cs}
    shared = set().union(*(loop.proposer.search(state.task).shared for state in loop.states))
    assert loop.ledger.rounds == 5 and waiting and not measured & waiting
    assert set(proposed) | shared == measured | waiting
    assert not any(loop.proposer.pool.dropped.values())


def test_candidates_left_waiting_are_measured_first_after_a_resume(tasks, fast_config, tmp_path):
    from tune_orchestrator.rundir import RunDir
    from tune_orchestrator.rundir.waiting import load_waiting, save_waiting

    first, _ = make_loop(tasks, fast_config, budget="8trials", flt=HalfFilter(), tasks_used=1)
    first.run()
    left = first.proposer.leftovers()
    keys = {c.key for c in left[0]}
    assert len(keys) == 8  # set aside by the filter in two rounds that measured 4 each
    with RunDir.open(tmp_path / "run", fingerprint={}) as run:
        assert save_waiting(run, left, tasks[0]) == 8
        parked = load_waiting(run, tasks[1], target=tasks[0])
    assert {structural_key(mc.sch.mod) for mc in parked[0]} == keys
    resumed, engine = make_loop(tasks, fast_config, budget="8trials", tasks_used=1, parked=parked)
    resumed.run()
    assert {int(a.split("-")[1]) for a in engine.measured} == keys  # no new search needed
    assert resumed.proposer.restored == 8


def test_the_stop_does_not_wait_for_a_search_running_ahead():
    from tune_orchestrator.search import Proposer

    started, release = threading.Event(), threading.Event()

    class StuckSearch:
        exhausted = False

        def propose(self, wanted=None):
            started.set()
            release.wait(30)
            return []

    proposer = Proposer(
        make_search=lambda task, proposals: StuckSearch(),
        cost_model=None,
        measured={},
        proposals=8,
        ahead=1,
        charge=lambda *args: None,
    )
    task = tasks_of(1)[0]
    proposer.ahead([(task, 8)])
    assert started.wait(30)
    proposer.close()  # returns with the search still running: nobody will use its proposals
    assert proposer.abandoned == 1
    release.set()


def tasks_of(n):
    from tune_orchestrator.model.tasks import Task

    return [Task(i, f"t{i}", 1, 1e6, None, f"{i:016x}") for i in range(n)]


class LastTaskFirst(Scheduler):
    """Rounds of 8: a first round for every task, then the last task it may pick, always (a
    scheduler that never serves the floors)."""

    def pick(self, states, sizes, exclude=()):
        active = [s for s in states if s.retired is None and s.task.index not in exclude]
        new = [s for s in active if s.rounds == 0]
        return RoundPlan((new or active)[-1], 8, 1.0, 1.0) if active else None


def test_the_early_stop_waits_for_the_heavy_tasks_floors_and_the_rounds_go_to_them(
    tasks, fast_config
):
    """The early stop may not end the run before the tasks holding `heavy_share` of the
    latency have had `heavy_trials` trials each; while it would stop but for them, the rounds
    go to them, whatever the scheduler prefers, not on to the trial budget."""
    from tune_orchestrator.budget.diminishing import DiminishingReturns

    budget = parse_budget("400trials")
    early = DiminishingReturns(budget.limits[0], min_rounds=2, min_share=1.0, min_measured_rounds=0)
    journal = []
    loop, _ = make_loop(
        tasks, fast_config, budget="400trials", tasks_used=3, stops=early, engine=FlatDevice(),
        scheduler=LastTaskFirst(), journal=journal.append,
        **{"stopping.heavy_share": 0.6, "stopping.heavy_trials": 40},
    )  # fmt: skip
    stopped = loop.run()  # every schedule is as fast: only the floors keep the run going
    assert stopped.code == "stopped-paying"  # the early stop ended it, not the trial budget
    floored = [s for s in loop.states if s.floor]
    assert floored and all(s.floor <= s.trials < s.floor + 8 for s in floored)
    # The journal (and rounds.csv, the events) say which rounds the early stop waited for:
    # the scheduler's own (the last task) first, then the floored tasks' catching up.
    rounds = [e for e in journal if e["type"] == "round"]
    waited = [e for e in rounds if e["early_stop_waits"]]
    floored_at = {s.task.index for s in floored}
    assert waited and {e["task"] for e in waited} <= floored_at
    assert not rounds[0]["early_stop_waits"]


def test_a_waited_for_task_whose_search_came_back_empty_is_left_to_the_scheduler(
    tasks, fast_config
):
    loop, _ = make_loop(
        tasks, fast_config, budget="400trials", tasks_used=3, scheduler=LastTaskFirst()
    )
    assert loop._pick((0,)).state.task.index == 0  # the scheduler alone would pick task 2
    loop.states[0].empty_searches = 1
    assert loop._pick((0,)).state.task.index == 2
    assert loop._pick((0, 1)).state.task.index == 1


def test_given_schedules_are_measured_committed_and_made_parents_within_the_budget(
    tasks, fast_config
):
    """The library round's way in: schedules the search did not propose are trials like a
    round's (in the database, marked measured, parents of the task's search), capped by the
    budget, and never measured twice; no round is counted."""
    loop, engine = make_loop(tasks, fast_config, budget="3trials")
    task = loop.states[0].task
    search = TaskSearch(
        task,
        target=loop.target,
        settings=loop.settings,
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(),
        rand_state=1,
        threads=2,
        proposals=5,
    )
    given = search.propose()[:5]
    results = loop.measure_given({task.index: given})
    assert len(results[task.index]) == 3 == len(engine.measured) == loop.ledger.trials
    assert loop.ledger.rounds == 0 and len(loop.database.get_all_tuning_records()) == 3
    keys = {structural_key(mc.sch.mod) for mc in given[:3]}
    assert loop.measured[task.index] == keys
    parents = loop._bests[task.index]
    assert [secs for _, secs in parents] == sorted(m.mean_s for m in results[task.index])
    assert loop.measure_given({task.index: given[:3]}) == {}  # measured already


def test_a_task_measures_what_its_sister_of_one_kind_reached(tasks, fast_config):
    # The twin model's two convolutions (tasks 0 and 1) are of one kind: the second one touched
    # is offered the first's fastest schedules replayed on its shapes, and those that replay
    # are measured in its round. Whether one replays depends on which schedules the search
    # reached (the hash seed, the threads): the test asks that something was offered.
    loop, engine = make_loop(tasks, fast_config, budget="32trials")
    loop.run()
    offered = [loop.proposer.search(state.task).shared for state in loop.states]
    measured = {int(artifact.split("-")[1]) for artifact in engine.measured}
    assert set().union(*offered) <= measured
    counts = loop.proposer.shared()
    assert counts["shared"] == sum(map(len, offered))
    assert counts["shared"] + counts["shared_failed"] > 0


def first_rounds(entries) -> dict[int, int]:
    """Each task's first round's trials, from the journal."""
    found: dict[int, int] = {}
    for e in entries:
        if e["type"] == "round":
            found.setdefault(e["task"], e["trials"])
    return found


def test_first_rounds_leave_half_the_trial_budget_to_the_rounds_after_them(tasks, fast_config):
    # Two tasks, 32 trials: first rounds share no more than 16, one smallest round each; with
    # 400 trials they take the largest round each, as [scheduler] first_rounds lets them.
    sizes = {"scheduler.first_round": 8, "tune.trials_per_round": 32}  # rounds of 8, 16, 32
    short, wide = [], []
    make_loop(tasks, fast_config, budget="32trials", journal=short.append, **sizes)[0].run()
    make_loop(tasks, fast_config, budget="400trials", journal=wide.append, **sizes)[0].run()
    assert first_rounds(short) == {0: 8, 1: 8}
    assert first_rounds(wide) == {0: 32, 1: 32}


def test_first_rounds_shrink_while_the_budget_left_cannot_give_every_task_one(tasks, fast_config):
    # Three tasks, first rounds of 8 (least 4). 24 trials give every task one of 8. 20 do
    # not: the first task gets 4, after which 16 give the two others 8 each. 8 trials afford
    # one round only, measured whole.
    sizes = {
        "scheduler.first_round": 8,
        "scheduler.least_first_round": 4,
        "tune.trials_per_round": 32,
    }
    seen = {}
    for budget in (24, 20, 8):
        entries = []
        loop, _ = make_loop(
            tasks, fast_config, budget=f"{budget}trials", journal=entries.append,
            tasks_used=3, **sizes,
        )  # fmt: skip
        loop.run()
        seen[budget] = first_rounds(entries)
    assert seen[24] == {0: 8, 1: 8, 2: 8}
    assert seen[20] == {0: 4, 1: 8, 2: 8}
    assert seen[8] == {0: 8}
