"""Filters: the conformance suite every Filter runs, Trimmer's choice and audit on synthetic
scores, the predictor's JSON round trip, and warm start."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tvm.s_tir import meta_schedule as ms

from filters import NAMES, Filter, NoFilter, Selection, TrimmerConfig, TrimmerFilter, make_filter
from filters._predictor import Predictor
from filters.xgb import Audit, choose
from measure import Measurement
from orchestrator.config import Settings
from orchestrator.model import fuse_for_tuning, import_to_relax, load_model
from orchestrator.search import TaskSearch
from orchestrator.targets import resolve_target
from orchestrator.tasks import Candidate, extract_tasks, structural_key


@pytest.fixture(scope="module")
def proposals(tiny_model, fast_config, tmp_path_factory):
    """Real candidates of the tiny model's convolution, as the search proposes them."""
    target = resolve_target("llvm").target
    tasks = extract_tasks(fuse_for_tuning(import_to_relax(load_model(tiny_model)), target), target)
    conv = next(t for t in tasks if "conv2d" in t.name)
    search = TaskSearch(
        conv,
        target=target,
        settings=Settings.load(fast_config),
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(),
        rand_state=3,
        threads=2,
        proposals=24,
    )
    candidates = [Candidate(conv, mc, structural_key(mc.sch.mod)) for mc in search.propose()]
    return target, conv, candidates


def fake_latencies(candidates):
    """Latencies that depend on the schedule, so a predictor has something to learn."""
    return [1e-4 * (1 + (c.key % 97) / 10) for c in candidates]


def filters_under_test(target, tmp_path):
    return [
        NoFilter(),
        TrimmerFilter(
            target=target,
            config=TrimmerConfig(min_samples=8, min_keep=2, max_keep=12),
            state_dir=tmp_path,
        ),
    ]


# -- conformance ----------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(len(NAMES)))
def test_every_filter_keeps_a_valid_subset_before_and_after_learning(proposals, tmp_path, index):
    target, task, candidates = proposals
    flt: Filter = filters_under_test(target, tmp_path)[index]
    assert flt.select(task, []).keep == ()
    for _ in range(2):  # untrained, then trained on what it measured
        selection = flt.select(task, candidates)
        assert isinstance(selection, Selection)
        assert selection.keep and set(selection.keep) <= set(range(len(candidates)))
        assert set(selection.audit) <= set(selection.keep)
        chosen = [candidates[i] for i in selection.keep]
        latencies = fake_latencies(chosen)
        measurements = [Measurement((lat,)) for lat in latencies[:-1]] + [
            Measurement(None, "crashed")
        ]
        flt.learn(task, chosen, measurements)
    assert flt.stats()["name"] == flt.name


def test_unknown_filters_list_the_known_ones():
    with pytest.raises(ValueError, match="unknown filter 'x'; choose one of: xgb, none"):
        make_filter("x")


def test_no_filter_keeps_everything():
    assert NoFilter().select(None, [1, 2, 3]).keep == (0, 1, 2)


def test_selection_must_be_unique_and_audit_kept():
    with pytest.raises(ValueError):
        Selection((1, 1))
    with pytest.raises(ValueError):
        Selection((0, 1), audit=(2,))


def test_a_round_cut_short_keeps_the_most_promising_and_its_share_of_audits():
    selection = Selection((4, 0, 3, 1, 5, 2), audit=(5, 2))  # best predicted first, audits last
    assert selection.first(10) == (4, 0, 3, 1, 5, 2)
    assert selection.first(4) == (4, 0, 3, 5)  # 4 x 2/6: one audit stays
    assert selection.first(2) == (4, 5)  # at least one audit once two fit
    assert selection.first(1) == (4,)  # one slot: the predicted best
    assert selection.first(0) == ()
    assert Selection((2, 0, 1)).first(2) == (2, 0)  # by rank, not by proposal order


# -- Trimmer on synthetic scores -----------------------------------------------------------


def test_choose_keeps_what_is_within_the_margin_best_first():
    predicted = np.log([1.0, 3.0, 1.2, 1.6, 2.0])  # predicted latency / best
    assert choose(predicted, margin=0.5, min_keep=1, max_keep=10) == [0, 2]
    assert choose(predicted, margin=1.0, min_keep=1, max_keep=10) == [0, 2, 3, 4]
    assert choose(predicted, margin=1.0, min_keep=1, max_keep=2) == [0, 2]  # at most
    assert choose(predicted, margin=0.05, min_keep=3, max_keep=10) == [0, 2, 3]  # at least


def test_an_audit_that_finds_a_better_rejected_candidate_widens_the_margin():
    config = TrimmerConfig(margin=0.5, widen=1.5, narrow=0.9)
    audit = Audit(margin=0.5)
    missed = audit.judge([2.0, 3.0], [1.5, 9.0], rejected=20, best_before=2.5, config=config)
    assert missed == 1 and audit.false_negatives == 1
    assert audit.margin == pytest.approx(0.75)


def test_audits_that_keep_confirming_narrow_it_down_to_the_floor():
    config = TrimmerConfig(margin=0.5, min_margin=0.3, narrow=0.9)
    audit = Audit(margin=0.5)
    for _ in range(10):
        assert audit.judge([1.0, 1.1], [5.0], rejected=10, best_before=1.0, config=config) == 0
    assert audit.margin == pytest.approx(0.3)
    assert (
        audit.judge([1.0], [], rejected=0, best_before=1.0, config=config) == 0
    )  # no audit: no change
    assert audit.margin == pytest.approx(0.3)


def test_recall_of_the_top_tenth_is_weighted_by_how_much_each_audit_stands_for():
    audit = Audit(margin=0.5)
    # 9 kept at 1.0; 1 audited of 10 rejected (it stands for 10) at 0.5: the top 10% of the 19
    # candidates is the audited one's class, none of which was kept.
    audit.judge([1.0] * 9, [0.5], rejected=10, best_before=0.9, config=TrimmerConfig())
    assert audit.recall == pytest.approx(0.0)
    clean = Audit(margin=0.5)
    clean.judge(
        [0.1, 1.0, 1.0], [2.0, math.inf], rejected=8, best_before=1.0, config=TrimmerConfig()
    )
    assert clean.recall == pytest.approx(1.0)


def test_a_round_selected_before_the_last_one_was_learned_is_judged_on_its_own(proposals, tmp_path):
    """Pipelining selects a task's next round before its current round is measured."""
    target, task, candidates = proposals
    flt = TrimmerFilter(target=target, config=TrimmerConfig(max_keep=12), state_dir=tmp_path)
    first, second = candidates[:12], candidates[12:]
    keep_first = [first[i] for i in flt.select(task, first).keep]
    keep_second = [second[i] for i in flt.select(task, second).keep]
    flt.learn(task, keep_first, [Measurement((lat,)) for lat in fake_latencies(keep_first)])
    flt.learn(task, keep_second, [Measurement((lat,)) for lat in fake_latencies(keep_second)])
    assert flt.audits[task.key].kept == len(keep_first) + len(keep_second)
    assert flt._pending[task.key] == []


def test_kmeans_audit_samples_spread_and_count(proposals, tmp_path):
    target, _, _ = proposals
    flt = TrimmerFilter(target=target, config=TrimmerConfig(audit_share=0.25), state_dir=tmp_path)
    rng = np.random.default_rng(0)
    features = np.vstack([rng.normal(loc, 0.01, size=(10, 4)) for loc in (0.0, 5.0, 10.0, 15.0)])
    chosen = flt._audit_sample(list(range(40)), features)
    assert len(chosen) == 10  # a quarter of the rejected
    assert {i // 10 for i in chosen} == {0, 1, 2, 3}  # every cluster is sampled


# -- the predictor: JSON round trip and warm start ------------------------------------------


def test_predictor_survives_a_json_round_trip_with_identical_predictions(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 12)).astype(np.float32)
    latency = np.exp(x[:, 0] * 0.5 + 0.1 * rng.normal(size=200)) * 1e-4
    first = Predictor(min_samples=10)
    first.add("w", x, latency)
    first.fit()
    first.save(tmp_path / "predictor.json")
    assert (tmp_path / "predictor.json").read_text().lstrip().startswith("{")  # JSON, not pickle
    second = Predictor()
    second.load(tmp_path / "predictor.json")
    np.testing.assert_array_equal(first.predict(x), second.predict(x))
    assert np.corrcoef(first.predict(x), np.log(latency / latency.min()))[0, 1] > 0.9


def test_the_filter_filters_from_the_first_round_when_warm_started(proposals, tmp_path):
    target, task, candidates = proposals
    teacher = TrimmerFilter(target=target, config=TrimmerConfig(min_samples=8), state_dir=tmp_path)
    teacher.learn(task, candidates, [Measurement((lat,)) for lat in fake_latencies(candidates)])
    saved = tmp_path / "predictor.json"
    assert saved.is_file() and (tmp_path / "filter.json").is_file()
    student = TrimmerFilter(target=target, config=TrimmerConfig(min_samples=10_000, max_keep=8))
    assert "predictor" in student.warm_start(saved)
    assert student.predictor.ready  # despite min_samples: it starts warm
    student.learn(task, candidates[:1], [Measurement((1e-4,))])  # a first best for the task
    assert len(student.select(task, candidates).keep) < len(candidates)
