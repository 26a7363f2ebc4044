"""Filters: the conformance suite every Filter runs, Trimmer's choice, audit and calibrated
threshold on synthetic predictors of known error, the predictor's JSON round trip, and warm
start."""

from __future__ import annotations

import json
import math
import resource
import signal
import types
from collections.abc import Callable

import numpy as np
import pytest
from tvm.s_tir import meta_schedule as ms

from tune_orchestrator.config import Settings
from tune_orchestrator.filters import (
    NAMES,
    Filter,
    NoFilter,
    RoundCosts,
    Selection,
    TrimmerConfig,
    TrimmerFilter,
    make_filter,
)
from tune_orchestrator.filters._calibration import Calibration, stratified_sample
from tune_orchestrator.filters._cost import BuildCost, expected_gain
from tune_orchestrator.filters.xgb import Audit, choose, positions
from tune_orchestrator.measure import Measurement
from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
from tune_orchestrator.model.loading import load_model
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import Candidate, extract_tasks, structural_key
from tune_orchestrator.predictor import FAILED_TARGET, Predictor
from tune_orchestrator.search import TaskSearch


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


def test_positions_are_places_in_the_predicted_ranking_as_shares_of_the_round():
    predicted = np.log([1.0, 3.0, 1.2, 1.6, 2.0])  # predicted latency / the task's best
    np.testing.assert_allclose(positions(predicted), [0.2, 1.0, 0.4, 0.6, 0.8])
    # The same ranking, however spread its predictions, places the same.
    np.testing.assert_allclose(positions(predicted * 0.01), positions(predicted))
    np.testing.assert_allclose(positions(np.array([0.5, 0.5])), [0.5, 1.0])  # ties: in order


def test_choose_keeps_the_best_placed_share_of_the_round_best_first():
    places = positions(np.log([1.0, 3.0, 1.2, 1.6, 2.0]))
    assert choose(places, threshold=0.4, min_keep=1, max_keep=10) == [0, 2]
    assert choose(places, threshold=0.8, min_keep=1, max_keep=10) == [0, 2, 3, 4]
    assert choose(places, threshold=0.8, min_keep=1, max_keep=2) == [0, 2]  # at most
    assert choose(places, threshold=0.0, min_keep=3, max_keep=10) == [0, 2, 3]  # at least


def test_an_audited_candidate_faster_than_every_kept_one_is_a_false_negative():
    audit = Audit()
    missed = audit.judge([2.0, 3.0], [(1.5, 10.0), (9.0, 10.0)], best_before=2.5)
    assert missed == 1 and audit.false_negatives == 1
    assert audit.judge([1.0], [], best_before=1.0) == 0  # no audit: nothing to judge
    assert audit.false_negatives == 1


def test_recall_of_the_top_tenth_is_weighted_by_how_much_each_audit_stands_for():
    audit = Audit()
    # 9 kept at 1.0; 1 audited of 10 rejected (it stands for 10) at 0.5: the top 10% of the 19
    # candidates is the audited one's class, none of which was kept.
    audit.judge([1.0] * 9, [(0.5, 10.0)], best_before=0.9)
    assert audit.recall == pytest.approx(0.0)
    clean = Audit()
    clean.judge([0.1, 1.0, 1.0], [(2.0, 4.0), (math.inf, 4.0)], best_before=1.0)
    assert clean.recall == pytest.approx(1.0)


def test_the_recall_interval_resamples_audited_rounds_and_narrows_as_they_add_up():
    def audit_of(rounds: int, missed_every: int) -> Audit:
        audit = Audit()
        for r in range(rounds):  # 9 kept; one audit (standing for 4) faster than all of them
            fast = 0.5 if r % missed_every == 0 else 2.0
            audit.add(_judged([1.0] * 9, [(fast, 4.0)]))
        return audit

    assert audit_of(1, 3).recall_interval() is None  # one round: nothing to resample
    clean = audit_of(6, 1_000)  # only round 0 missed its top
    low, high = clean.recall_interval()
    assert low < clean.recall < high == pytest.approx(1.0)
    short, long = audit_of(9, 3), audit_of(45, 3)
    assert short.recall == pytest.approx(long.recall)
    (a, b), (c, d) = short.recall_interval(), long.recall_interval()
    assert a < c <= long.recall <= d < b  # same rate, five times the rounds: narrower
    saved = json.loads(json.dumps(long.to_dict()))  # as filter.json keeps it for a resumed run
    assert Audit.from_dict(saved).recall_interval() == long.recall_interval()
    assert saved["recall_interval"] == [round(c, 4), round(d, 4)]


def _judged(kept, audited) -> Audit:
    audit = Audit()
    audit.judge(kept, audited, best_before=1.0)
    return audit


def test_a_stratified_audit_draws_one_per_run_and_its_weights_estimate_the_whole():
    ranked = list(range(100, 150))  # 50 rejected, best predicted first
    rng = np.random.default_rng(0)
    sample = stratified_sample(ranked, 5, rng)
    assert [w for _, w in sample] == [10.0] * 5 and sum(w for _, w in sample) == 50
    assert [(i - 100) // 10 for i, _ in sample] == [0, 1, 2, 3, 4]  # one from each run
    value = {i: (i - 100) ** 2 for i in ranked}  # any quantity: its weighted sum is unbiased
    estimates = [
        sum(w * value[i] for i, w in stratified_sample(ranked, 5, rng)) for _ in range(2000)
    ]
    assert np.mean(estimates) == pytest.approx(sum(value.values()), rel=0.02)
    assert stratified_sample(ranked[:3], 5, rng) == [(100, 1.0), (101, 1.0), (102, 1.0)]


def test_the_threshold_keeps_the_target_share_of_the_recent_top_candidates():
    calibration = Calibration(target=0.9, share=0.1, rounds=3, min_rounds=2)
    # 100 candidates a round, all measured (weight 1); the predicted positions of the 10 fastest
    # are 0.0, 0.1, ..., 0.9.
    samples = [(0.1 * i, 1.0, 1e-4 * (1 + i)) for i in range(10)]
    samples += [(0.05 * i, 1.0, 1e-2) for i in range(90)]
    calibration.add(samples)
    assert calibration.threshold() is None  # one round is not evidence enough
    calibration.add(samples)
    # 20 tops in, at 0.0, 0.0, 0.1, 0.1, ...: keeping 90% of them and of a 21st like them
    # takes 19 of the 20 (a plain 90% quantile, 18 of 20, would stop at 0.8).
    assert calibration.threshold() == pytest.approx(0.9)
    for _ in range(3):  # the same top, but judged perfectly: old rounds are forgotten
        calibration.add([(0.0, 1.0, lat) for _, _, lat in samples])
    assert calibration.threshold() == 0.0


def test_too_little_evidence_for_the_target_keeps_the_whole_round():
    calibration = Calibration(target=0.95, share=0.1, rounds=8, min_rounds=1)
    fast = [(0.1 * i, 1.0, 1e-4 * (1 + i)) for i in range(10)]
    calibration.add(fast + [(0.01 * i, 1.0, 1e-2) for i in range(90)])
    assert calibration.threshold() == 1.0  # 95% of 11 tops is more than the 10 seen


def test_calibration_resumes_from_its_state_but_not_from_an_older_runs_gap_evidence():
    calibration = Calibration(target=0.9, share=0.1)
    fast = [(0.1 * i, 1.0, 1e-4 * (1 + i)) for i in range(10)]  # the top 10 of 100
    for _ in range(2):
        calibration.add(fast + [(0.01 * i, 1.0, 1e-2) for i in range(90)])
    resumed = Calibration(target=0.9, share=0.1)
    resumed.restore(json.loads(json.dumps(calibration.to_dict())))
    assert resumed.threshold() == calibration.threshold() == pytest.approx(0.9)
    older = Calibration(target=0.9, share=0.1)  # state written before positions: gaps
    older.restore({"evidence": [[[2.5, 1.0]], [[3.0, 1.0]]]})
    assert older.threshold() is None  # gathers its evidence again


def test_rounds_that_keep_too_little_of_their_top_raise_the_share_aimed_at_until_rounds_do():
    calibration = Calibration(target=0.9, share=0.1, step=0.1)
    # 200 candidates a round; the predicted positions of the 20 fastest are 0.0, 0.05, ..., 0.95.
    samples = [(0.05 * i, 1.0, 1e-4 * (1 + i)) for i in range(20)]
    samples += [(0.005 * i, 1.0, 1e-2) for i in range(180)]
    for _ in range(2):
        calibration.add(samples, recall=1.0)
    assert calibration.level == 0.9  # rounds that kept their whole top: never below the target
    assert calibration.threshold() == pytest.approx(0.9)
    calibration.add(samples, recall=0.4)  # this round kept 40% of its top
    assert calibration.level == pytest.approx(0.95)
    assert calibration.threshold() == pytest.approx(0.95)
    resumed = Calibration(target=0.9, share=0.1, step=0.1)
    resumed.restore(json.loads(json.dumps(calibration.to_dict())))
    assert resumed.level == pytest.approx(0.95)
    for _ in range(5):
        calibration.add(samples, recall=1.0)
    assert calibration.level == pytest.approx(0.9)
    assert calibration.threshold() == pytest.approx(0.9)


class RankingPredictor:
    """A trained predictor whose predicted log latency is the true one plus Gaussian error of
    a known size (per candidate key): the filter sees its candidates only through it."""

    warm, booster, samples = True, object(), 10_000

    def __init__(self, truth: dict[int, float], error: Callable[[int], float], seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.table = {k: v + error(k) * rng.normal() for k, v in truth.items()}

    def predict(self, features):
        return np.asarray([self.table[int(np.ravel(row)[0])] for row in features])


def synthetic_round(r: int, offered: int, random_from: int | None = None):
    """Round `r`'s candidates (keys r * offered onwards, each key its own feature); those at
    place `random_from` or later in the round are the search's random picks."""
    keys = range(r * offered, (r + 1) * offered)
    return keys, [
        types.SimpleNamespace(
            key=k,
            features=np.array([k]),
            explore=random_from is not None and k % offered >= random_from,
        )
        for k in keys
    ]


def run_synthetic_rounds(
    error: float,
    rounds: int = 40,
    offered: int = 64,
    seed: int = 0,
    *,
    drift: float = 0.0,
    recall_step: float = 0.1,
):
    """The filter on `rounds` rounds of one task, ranked with `error` (plus `drift` more each
    round); returns per round the true recall of the round's top 10% (known here for every
    candidate, measured or not) and the share kept."""
    rng = np.random.default_rng(seed)
    truth = {k: float(rng.normal()) for k in range(rounds * offered)}  # log latency
    task = types.SimpleNamespace(key="t", name="t", index=0)
    flt = TrimmerFilter(
        target=None,
        config=TrimmerConfig(min_keep=4, max_keep=offered, seed=seed, recall_step=recall_step),
        predictor=RankingPredictor(  # type: ignore[arg-type]
            truth, lambda k: error + drift * (k // offered), seed + 1
        ),
    )
    true_recall, kept_share = [], []
    for r in range(rounds):
        keys, candidates = synthetic_round(r, offered)
        selection = flt.select(task, candidates)  # type: ignore[arg-type]
        chosen = [candidates[i] for i in selection.keep]
        flt.learn(task, chosen, [Measurement((math.exp(truth[c.key]),)) for c in chosen])  # type: ignore[arg-type]
        kept = {candidates[i].key for i in selection.keep if i not in selection.audit}
        top = sorted(keys, key=truth.__getitem__)[: offered // 10]
        true_recall.append(sum(k in kept for k in top) / len(top))
        kept_share.append(len(kept) / offered)
    return true_recall, kept_share, flt


@pytest.mark.parametrize("error", [0.0, 0.3, 1.0, 2.0])
def test_the_calibrated_threshold_reaches_the_recall_target_whatever_the_ranking_error(error):
    true_recall, kept_share, flt = run_synthetic_rounds(error)
    later = slice(10, None)  # after the calibration rounds
    assert np.mean(true_recall[later]) >= 0.85  # aimed at 0.9; a few rounds of noise
    estimate = flt.stats()["total"]["recall"]
    assert estimate == pytest.approx(np.mean(true_recall), abs=0.1)  # the audit is honest
    if error == 0.0:  # a perfect ranking keeps little more than the top itself
        assert np.mean(kept_share[later]) < 0.3
    if error == 2.0:  # a poor one (rank correlation ~0.4, as on real rounds) keeps most
        assert np.mean(kept_share[later]) > 0.5


def test_when_rounds_get_harder_to_rank_the_filter_aims_higher_and_holds_its_recall():
    # The ranking error grows from 0.2 to 1.8 over the run: the threshold, calibrated on
    # rounds ranked better than the next, keeps too little of each new round's top.
    def later(step):
        runs = [run_synthetic_rounds(0.2, seed=s, drift=0.04, recall_step=step) for s in range(4)]
        return np.mean([np.mean(recall[10:]) for recall, _, _ in runs])

    fixed, adaptive = later(0.0), later(0.1)
    assert fixed < 0.85  # aimed at 0.9 throughout
    assert adaptive >= 0.88


def test_a_better_predictor_filters_more():
    shares = [np.mean(run_synthetic_rounds(e)[1][10:]) for e in (0.1, 0.5, 1.0)]
    assert shares[0] < shares[1] < shares[2]


def test_the_filter_keeps_everything_until_its_threshold_is_calibrated():
    _, kept_share, flt = run_synthetic_rounds(0.0, rounds=3)
    assert kept_share[:2] == [1.0, 1.0]  # two rounds of evidence first
    assert kept_share[2] < 0.5
    assert flt.stats()["threshold"] is not None and flt.stats()["seconds"] > 0


def test_the_searchs_random_picks_are_kept_unjudged_and_the_rest_filtered_as_before():
    """Exploration the search's model did not choose is not vetoed by that model: the random
    picks are measured however badly they rank, and neither the threshold nor the recall
    counts them."""
    task = types.SimpleNamespace(key="t", name="t", index=0)
    offered, explore = 64, 4
    truth = {k: float(k % offered) for k in range(20 * offered)}  # the last of a round slowest
    flt = TrimmerFilter(
        target=None,
        config=TrimmerConfig(min_keep=4, max_keep=offered),
        predictor=RankingPredictor(truth, lambda k: 0.0, 0),  # type: ignore[arg-type]
    )
    for r in range(20):
        keys, candidates = synthetic_round(r, offered, random_from=60)
        selection = flt.select(task, candidates)  # type: ignore[arg-type]
        chosen = [candidates[i] for i in selection.keep]
        assert {c.key for c in chosen if c.explore} == set(keys[-explore:])
        assert not {candidates[i].key for i in selection.audit} & set(keys[-explore:])
        flt.learn(task, chosen, [Measurement((math.exp(truth[c.key]),)) for c in chosen])  # type: ignore[arg-type]
    assert len(selection.keep) < offered // 2  # the rest was filtered: a perfect ranking
    total = flt.stats()["total"]
    assert total["explored"] == 20 * explore
    assert total["recall"] == pytest.approx(1.0)
    assert flt.calibration.threshold() < 0.5  # the slow random picks did not widen it


def test_an_audit_slower_than_the_rounds_random_picks_is_no_false_negative():
    """Each round, the search's random picks are a new best and every judged candidate is
    faster than the task's best before the round: an audit that beats every kept candidate
    still found nothing the round did not, so it is no false negative."""
    task = types.SimpleNamespace(key="t", name="t", index=0)
    offered, rounds = 64, 20
    rng = np.random.default_rng(1)
    truth = {  # log latencies: each round 10 faster; its random picks (60-63) 5 more
        k: -10.0 * (k // offered) - (5.0 if k % offered >= 60 else float(rng.normal()))
        for k in range(rounds * offered)
    }
    flt = TrimmerFilter(
        target=None,
        config=TrimmerConfig(min_keep=4, max_keep=offered, recall_target=0.5),  # keeps little
        predictor=RankingPredictor(truth, lambda k: 1.0, 0),  # type: ignore[arg-type]
    )
    beaten = 0  # rounds where an audit beat every kept candidate
    for r in range(rounds):
        keys, candidates = synthetic_round(r, offered, random_from=60)
        selection = flt.select(task, candidates)  # type: ignore[arg-type]
        chosen = [candidates[i] for i in selection.keep]
        audited = {candidates[i].key for i in selection.audit}
        kept = [truth[c.key] for c in chosen if c.key not in audited and not c.explore]
        beaten += any(truth[k] < min(kept) for k in audited)
        flt.learn(task, chosen, [Measurement((math.exp(truth[c.key]),)) for c in chosen])  # type: ignore[arg-type]
    assert beaten > 0  # the case arose
    assert flt.stats()["total"]["false_negatives"] == 0


# -- what candidates cost ---------------------------------------------------------------------


def run_priced_rounds(*, costs: bool, rounds: int = 30, offered: int = 64, timeout: bool = False):
    """The filter on rounds where every third candidate is slow to build, 3 s (`timeout`: cut
    by a 2-s timeout), the rest 0.2 s, told the costs or not; ranked with an error as large as
    on real rounds, and, as on real rounds, the slow builds are never among the fastest tenth.
    Returns the filter and, per round after the tenth, the build seconds of what it built and
    the true recall of the round's top 10%."""
    rng = np.random.default_rng(0)
    truth = {k: float(rng.normal()) for k in range(rounds * offered)}  # log latency
    slow = {k for k, t in truth.items() if k % 3 == 0 and t > -1.0}
    task = types.SimpleNamespace(key="t", name="t", index=0)
    flt = TrimmerFilter(
        target=None,
        config=TrimmerConfig(min_keep=4, max_keep=offered),
        predictor=RankingPredictor(truth, lambda k: 1.0, 1),  # type: ignore[arg-type]
    )
    spent, recall = [], []
    for r in range(rounds):
        keys, candidates = synthetic_round(r, offered, random_from=60)
        for c in candidates:  # one store row: the key, and whether it is slow to build
            c.features = np.array([[c.key, float(c.key in slow)]])
        selection = flt.select(task, candidates)  # type: ignore[arg-type]
        chosen = [candidates[i] for i in selection.keep]
        cut = [timeout and c.key in slow for c in chosen]
        build_s = tuple(
            (2.0 if x else 3.0) if c.key in slow else 0.2 for c, x in zip(chosen, cut, strict=True)
        )
        measured = [
            Measurement(None, "build timed out") if x else Measurement((math.exp(truth[c.key]),))
            for c, x in zip(chosen, cut, strict=True)
        ]
        paid = RoundCosts(build_s, tuple(cut), measure_s=0.01 * len(chosen)) if costs else None
        flt.learn(task, chosen, measured, paid)  # type: ignore[arg-type]
        if r >= 10:
            kept = {candidates[i].key for i in selection.keep if i not in selection.audit}
            top = sorted(keys, key=truth.__getitem__)[: offered // 10]
            recall.append(sum(k in kept for k in top) / len(top))
            spent.append(sum(build_s))
    return flt, spent, recall


def test_build_cost_learns_which_candidates_are_slow_to_build():
    rng = np.random.default_rng(0)
    features = [np.array([[x, rng.normal()]]) for x in rng.uniform(0, 3, 200)]
    seconds = [0.1 * math.exp(m[0, 0]) * math.exp(0.1 * rng.normal()) for m in features]
    cost = BuildCost(min_samples=32)
    cost.add(features[:150], seconds[:150], [False] * 150)
    assert not cost.ready
    cost.fit()
    predicted = cost.predict(features[150:])
    order = np.argsort(np.argsort(predicted)), np.argsort(np.argsort(seconds[150:]))
    assert np.corrcoef(*order)[0, 1] > 0.9  # rank correlation on candidates it did not see
    assert not cost.times_out(predicted).any()  # no build has timed out: none is predicted to
    fitted = cost._booster
    cost.add(features[150:170], seconds[150:170], [False] * 20)
    cost.fit()
    assert cost._booster is fitted  # refitted only once a quarter more builds came
    cost.add(features[170:], seconds[170:], [False] * 30)
    cost.fit()
    assert cost._booster is not fitted


def test_expected_gain_grows_with_the_predicted_speed_up_and_with_doubt_about_a_slow_one():
    gain = expected_gain(np.array([-0.5, 0.0, 0.5, 5.0]), sigma=0.3)
    assert gain[0] > gain[1] > gain[2] > gain[3] >= 0
    assert gain[0] == pytest.approx(1 - math.exp(-0.5 + 0.045), abs=0.02)  # surely faster
    assert expected_gain(np.array([0.5]), 1.0)[0] > expected_gain(np.array([0.5]), 0.1)[0]


def test_told_what_builds_cost_the_filter_keeps_cheaper_candidates_and_its_recall():
    """Latency alone ranks a slow-to-build candidate like any other; gain per second puts it
    behind cheap ones that promise as much, and the calibration still keeps the top."""
    blind, spent_blind, recall_blind = run_priced_rounds(costs=False)
    priced, spent, recall = run_priced_rounds(costs=True)
    assert priced.pricing.builds.ready and not blind.pricing.builds.ready
    assert np.mean(spent) < 0.85 * np.mean(spent_blind)
    assert np.mean(recall) >= 0.85 and np.mean(recall_blind) >= 0.85
    assert priced.stats()["costs"]["build_samples"] > 0


def test_a_candidate_predicted_to_time_out_is_not_built_even_as_a_random_pick():
    flt, spent, _ = run_priced_rounds(costs=True, timeout=True)
    assert flt.pricing.builds.timeout_s == 2.0
    assert flt.stats()["costs"]["predicted_timeouts_dropped"] > 0
    assert all(s == pytest.approx(0.2 * round(s / 0.2)) for s in spent[-5:])  # no slow build


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


# -- the predictor: JSON round trip and warm start ------------------------------------------


@pytest.mark.parametrize("objective", ["packsum", "regression", "rank"])
def test_predictor_survives_a_json_round_trip_with_identical_predictions(tmp_path, objective):
    from scipy.stats import spearmanr

    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 1, 12)).astype(np.float32)  # one store per candidate
    latency = np.exp(x[:, 0, 0] * 0.5 + 0.1 * rng.normal(size=200)) * 1e-4
    first = Predictor(min_samples=10, objective=objective)
    first.add("w", x[:100], latency[:100])  # two tasks: a ranker's two queries
    first.add("v", x[100:], latency[100:] * 3)
    first.fit()
    first.save(tmp_path / "predictor.json")
    assert (tmp_path / "predictor.json").read_text().lstrip().startswith("{")  # JSON, not pickle
    second = Predictor()  # told nothing: the file says what it learned
    second.load(tmp_path / "predictor.json")
    assert second.objective == objective
    np.testing.assert_array_equal(first.predict(x), second.predict(x))
    assert spearmanr(first.predict(x[:100]), latency[:100]).correlation > 0.8  # lower: faster


def test_a_predictor_that_cannot_be_saved_leaves_the_old_file_and_no_partial_one(tmp_path):
    import errno

    x = np.random.default_rng(2).normal(size=(40, 1, 4)).astype(np.float32)
    model = Predictor(min_samples=10)
    model.add("w", x, np.exp(x[:, 0, 0]) * 1e-4)
    model.fit()
    (tmp_path / "predictor.json").write_text("{}")

    # No room to write more than 1000 bytes to a file, as on a full disk (the write fails with
    # EFBIG instead of ENOSPC): xgboost's own writer raised a bare XGBoostError there, so a
    # full disk was an internal error with a traceback, not the one line that says to free space.
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
    try:
        with pytest.raises(OSError) as raised:
            model.save(tmp_path / "predictor.json")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert raised.value.errno == errno.EFBIG
    assert [p.name for p in tmp_path.iterdir()] == ["predictor.json"]
    assert (tmp_path / "predictor.json").read_text() == "{}"


@pytest.mark.parametrize("objective", ["packsum", "rank"])
def test_a_fit_uses_the_cores_it_is_given(objective):
    x = np.random.default_rng(0).uniform(size=(20, 2, 4)).astype(np.float32)
    model = Predictor(threads=3, objective=objective)
    model.add("w", x, 1e-4 * (1 + x[:, 0, 0]))
    model.fit()
    learner = json.loads(model.booster.save_config())["learner"]
    assert learner["generic_param"]["nthread"] == "3"
    assert TrimmerFilter(target=None, config=TrimmerConfig(threads=3)).predictor.threads == 3
    with pytest.raises(ValueError, match="threads must be at least 1 but got 0"):
        Predictor(threads=0)


def test_the_predictor_learns_from_a_first_round_of_one_task():
    """The filter starts judging after its first 64 measurements, often one round of one
    task: its model must order them then, not score them all alike."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(4)
    x = rng.normal(size=(64, 1, 30)).astype(np.float32)
    latency = 1e-4 * np.exp(0.5 * x[:, 0, 0] + 0.1 * rng.normal(size=64))
    for objective in ("packsum", "rank"):
        model = Predictor(min_samples=64, objective=objective)
        model.add("w", x, latency)
        model.fit()
        assert model.ready
        assert spearmanr(model.predict(x), latency).correlation > 0.8, objective


def test_the_search_scores_a_loaded_ranker_as_throughput_with_its_best_at_one(tmp_path):
    """--warm-start with the predictor.json of a version whose filter had a ranker of its own
    starts the search's model too; TVM's evolution samples parents in proportion to scores,
    so they must stay in (0, 1]."""
    from tune_orchestrator.search.cost_model import throughput

    rng = np.random.default_rng(2)
    x = rng.normal(size=(120, 1, 6)).astype(np.float32)
    ranker = Predictor(objective="rank")
    ranker.add("w", x, np.exp(x[:, 0, 0]) * 1e-4)
    ranker.fit()
    scores = throughput(ranker, x)
    assert scores.max() == pytest.approx(1.0) and (scores > 0).all()
    assert int(np.argmax(scores)) == int(np.argmin(ranker.predict(x)))


def test_warm_start_from_a_run_directory_trains_every_model_on_its_records(proposals, tmp_path):
    """--warm-start runs/<earlier run>: every model given (the shared one, or a ranker loaded
    from an older version's file) learns the earlier run's records (features extracted
    once), and ranks its schedules as they were measured."""
    from scipy.stats import rankdata, spearmanr
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord

    from tune_orchestrator.predictor import pooled, store_features, unreadable, warm_start

    target, task, candidates = proposals
    context = TuneContext(mod=task.workload, target=target, task_name="earlier")
    features = store_features(context, [c.measure_candidate for c in candidates])
    rows = pooled(features)
    readable = ~unreadable(features)
    # The earlier run's latencies follow the feature that varies most: something to learn.
    column = max(range(rows.shape[1]), key=lambda j: len(set(rows[readable, j])))
    latencies = 1e-4 * rankdata(np.nan_to_num(rows[:, column]))
    database = JSONDatabase(work_dir=str(tmp_path))
    workload = database.commit_workload(task.workload)
    for c, latency in zip(candidates, latencies, strict=True):
        mc = c.measure_candidate
        database.commit_tuning_record(
            TuningRecord(mc.sch.trace, workload, [float(latency)], target, mc.args_info)
        )
    models = [Predictor(min_samples=10_000), Predictor(min_samples=10_000, objective="rank")]
    used = warm_start(models, tmp_path, target)
    assert used.startswith(f"{len(candidates)} records of 1 workloads")
    for model in models:
        assert model.warm and model.ready and model.samples == int(readable.sum()) > 10
        predicted = model.predict([f for f, ok in zip(features, readable, strict=True) if ok])
        assert spearmanr(predicted, latencies[readable]).correlation > 0.5, model.objective


def test_the_filter_ranks_with_the_search_model_without_training_it(proposals, tmp_path):
    """One model a round: given the search's predictor, the filter ranks with it and leaves
    its training to the search (no second fit charged to the filter), yet still saves it as
    predictor.json for --warm-start."""
    from tvm.s_tir.meta_schedule import TuneContext

    from tune_orchestrator.predictor import store_features

    target, task, candidates = proposals
    context = TuneContext(mod=task.workload, target=target, task_name="shared")
    features = store_features(context, [c.measure_candidate for c in candidates])
    shared = Predictor(min_samples=8)
    shared.add(task.key, features, fake_latencies(candidates))
    shared.fit()
    booster = shared.booster
    trimmer = make_filter(
        "xgb",
        target=target,
        config=TrimmerConfig(min_samples=8),
        state_dir=tmp_path,
        predictor=shared,
    )
    assert trimmer.predictor is shared
    chosen = candidates[:16]
    trimmer.select(task, chosen)
    trimmer.learn(task, chosen, [Measurement((lat,)) for lat in fake_latencies(chosen)])
    assert shared.booster is booster and shared.samples == len(candidates)  # not trained
    assert (tmp_path / "predictor.json").is_file()
    again = make_filter("xgb", target=target, state_dir=tmp_path, predictor=Predictor())
    assert again.predictor.booster is None  # resuming: the search refits it from the records


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


@pytest.mark.parametrize("objective", ["packsum", "regression", "rank"])
def test_a_candidate_without_features_ranks_last_and_teaches_nothing(objective):
    rng = np.random.default_rng(0)
    stores = rng.uniform(size=(80, 2, 4)).astype(np.float32)  # two stores per candidate
    latencies = 1e-4 * (1 + stores[:, 0, 0] + stores[:, 1, 0])
    predictor = Predictor(min_samples=8, objective=objective)
    unreadable = np.full((1, 4), np.nan, dtype=np.float32)
    predictor.add("w", [*stores, unreadable], [*latencies, 1e-9])
    assert predictor.samples == 80  # the candidate without features (and its latency) is dropped
    predictor.fit()
    predicted = predictor.predict([*stores[:3], unreadable])
    assert predicted[-1] > predicted[:3].max()
    if objective != "rank":  # log ratios: the unreadable one "far slower than the best"
        assert predicted[-1] >= FAILED_TARGET
