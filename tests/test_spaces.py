"""A task's design spaces stay in play: a search whose fastest schedules all come from one of
MetaSchedule's design spaces still evolves and proposes the best guesses of another space
whose fastest is close, where before it never left the space its first round favoured."""

from __future__ import annotations

import numpy as np
import pytest
from tvm.s_tir import meta_schedule as ms

from cost_models import ScoredBy
from tune_orchestrator.config import Settings
from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
from tune_orchestrator.model.loading import load_model
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import extract_tasks, structural_key
from tune_orchestrator.search import TaskSearch, spaces


class Fake:
    """A schedule that says its space (for the list functions alone)."""

    def __init__(self, space: int, name: str = "") -> None:
        self.space, self.name = space, name

    def __repr__(self) -> str:
        return self.name or f"space {self.space}"


@pytest.fixture
def fake_spaces(monkeypatch):
    monkeypatch.setattr(spaces, "space_of", lambda sch: sch.space)


def elites(*pairs):
    return [(secs, Fake(space, f"{space}@{secs}"), space) for secs, space in pairs]


def test_a_space_is_in_play_while_its_fastest_is_within_the_band_of_the_best():
    ranked = elites((1.0, 7), (1.2, 7), (1.9, 8), (2.5, 9))
    assert spaces.in_play(ranked) == [7, 8]  # the leader's first; 9 is 2.5x the best
    assert spaces.in_play([]) == []


def test_each_spaces_fastest_survive_past_the_fastest_kept():
    ranked = elites(*[(1.0 + i / 100, 7) for i in range(10)], (3.0, 8), (3.1, 8), (3.2, 8))
    kept = spaces.keep(ranked, 6)
    assert [e[0] for e in kept[:6]] == [e[0] for e in ranked[:6]]
    assert [e[0] for e in kept[6:]] == [3.0, 3.1, 3.2]  # space 8's, up to PER_SPACE each
    assert len(spaces.keep(ranked + elites(*[(4.0, 8)] * 5), 6)) == 6 + spaces.PER_SPACE


def test_parents_put_every_space_in_play_first():
    ranked = elites(*[(1.0 + i / 100, 7) for i in range(10)], (1.5, 8), (9.0, 9))
    parents = spaces.parents(ranked, 6)
    assert [p.space for p in parents].count(8) == 1 and len(parents) == 6
    assert all(p.space != 9 for p in parents)  # out of the band: a parent only on its speed


def test_the_best_ranked_new_schedule_of_each_other_space_comes_first(fake_spaces):
    bests = [Fake(7, f"a{i}") for i in range(6)] + [Fake(8, "b0"), Fake(8, "b1"), Fake(9, "c0")]
    fresh = [Fake(7, "fa"), Fake(9, "fc0"), Fake(9, "fc1")]
    new = lambda sch: sch.name not in ("b0", "fc0")  # noqa: E731 - proposed before
    ordered, moved = spaces.every_space_first(bests, fresh, [7, 8], 4, new)
    assert [s.name for s in ordered[:2]] == ["b1", "a0"] and moved == 1
    assert sorted(map(repr, ordered)) == sorted(map(repr, bests))
    assert spaces.every_space_first(bests, fresh, [7], 4, new) == (bests, 0)  # one in play
    assert spaces.every_space_first(bests, fresh, [7, 8], 8, new) == (bests, 0)  # b1 in the head
    # a space the ranking left out entirely: a fresh sample of it
    ordered, moved = spaces.every_space_first(bests[:6], fresh, [7, 9], 4, new)
    assert [s.name for s in ordered[:2]] == ["fc1", "a0"] and moved == 1


@pytest.fixture(scope="module")
def conv(tiny_model):
    target = resolve_target("llvm").target
    found = extract_tasks(fuse_for_tuning(import_to_relax(load_model(tiny_model)), target), target)
    return target, found[0]


def mc_key(mc):
    return structural_key(mc.sch.mod)


@pytest.mark.slow
def test_a_search_keeps_proposing_a_close_space_its_cost_model_ranks_last(conv):
    target, task = conv
    # Every schedule of one design space ranked above every schedule of the others.
    favoured: list[int] = []
    rng = np.random.default_rng(0)
    model = ScoredBy(
        lambda mc: (
            rng.uniform(0.5, 1.0) if spaces.space_of(mc.sch) in favoured else rng.uniform(0.0, 0.1)
        )
    )
    search = TaskSearch(
        task, target=target, settings=Settings.load(), database=ms.database.MemoryDatabase(),
        cost_model=model, rand_state=5, threads=1, proposals=8,
    )  # fmt: skip
    round_ = search.propose()
    present = [spaces.space_of(mc.sch) for mc in round_]
    assert len(set(present)) > 1  # a random first round holds schedules of several spaces
    leader, other = present[0], next(s for s in present if s != present[0])
    favoured.append(leader)
    # The leader's schedules measure fastest, the other space's within the band, any third far.
    speed = {leader: 1e-4, other: 1.5e-4}
    for _ in range(4):
        search.learn([(mc, speed.get(spaces.space_of(mc.sch), 1e-2)) for mc in round_])
        round_ = search.propose()
        proposed = [spaces.space_of(mc.sch) for mc in round_]
        assert proposed.count(leader) >= len(round_) - 2  # the model's favourite leads
        assert other in proposed
        # and the filter does not veto it: the cost model's ranking is what it makes up for
        assert any(
            spaces.space_of(mc.sch) == other for mc in round_ if mc_key(mc) in search.explored
        )
