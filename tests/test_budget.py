"""budget/: grammar, meters, prices, the budget rule, plateau, forecasts, diminishing returns."""

import math
import pickle
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tune_orchestrator.budget import (
    AnyOf,
    BudgetError,
    BudgetLimits,
    Ledger,
    Spend,
    StoppingRule,
    TaskProgress,
    check_applicable,
    parse_budget,
)
from tune_orchestrator.budget.base import Decision
from tune_orchestrator.budget.diminishing import DiminishingReturns
from tune_orchestrator.budget.forecast import fit_curve
from tune_orchestrator.budget.grammar import DEVICE_HOURS, DOLLARS, ENERGY, TRIALS, WALL
from tune_orchestrator.budget.ledger import RoundCost
from tune_orchestrator.budget.limits import (
    budget_status,
    clock_seconds,
    primary_limit,
    seconds_short,
)
from tune_orchestrator.budget.plateau import TaskPlateau
from tune_orchestrator.budget.prices import run_price
from tune_orchestrator.budget.units import fmt_duration


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeEnergy:
    """A GPU drawing `watts`, metered against the fake clock."""

    def __init__(self, clock: FakeClock, watts: float) -> None:
        self.clock, self.watts, self.start = clock, watts, clock.now

    def __call__(self) -> float:
        return (self.clock.now - self.start) * self.watts + 5e6  # counters start anywhere


# -- grammar -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, kind, amount",
    [
        ("2gpu-h", DEVICE_HOURS, 2.0),
        ("90gpu-min", DEVICE_HOURS, 1.5),
        ("$5", DOLLARS, 5.0),
        ("5usd", DOLLARS, 5.0),
        ("45min", WALL, 2700.0),
        ("1.5h", WALL, 5400.0),
        ("300s", WALL, 300.0),
        ("500trials", TRIALS, 500.0),
        ("200kJ", ENERGY, 200e3),
        ("0.1kWh", ENERGY, 0.1 * 3.6e6),
        (" 10 MIN ", WALL, 600.0),
    ],
)
def test_every_unit_of_the_design_parses(text, kind, amount):
    budget = parse_budget(text)
    assert budget.kinds == {kind}
    assert budget.get(kind) == pytest.approx(amount)


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("3m30s", 210.0),
        ("1h30min", 5400.0),
        ("1h02m05s", 3725.0),
        ("5 min 30 s", 330.0),
        ("5m", 300.0),
    ],
)
def test_wall_clock_time_reads_in_parts_as_the_report_writes_it(text, seconds):
    assert parse_budget(text).get(WALL) == pytest.approx(seconds)


@pytest.mark.parametrize("seconds", [42.5, 210.0, 5400.0])
def test_a_duration_the_report_prints_reads_back_as_a_budget(seconds):
    assert parse_budget(fmt_duration(seconds)).get(WALL) == pytest.approx(seconds)


def test_several_limits_join_with_commas():
    budget = parse_budget("2gpu-h,$4, 500trials")
    assert (budget.get(DEVICE_HOURS), budget.get(DOLLARS), budget.get(TRIALS)) == (2.0, 4.0, 500)
    assert str(budget) == "2gpu-h,$4,500trials"


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "the budget is empty"),
        ("5", "expected a number and a unit"),
        ("5parsecs", "unknown unit 'parsecs'"),
        ("0min", "must be a positive, finite amount"),
        ("-3h", "'-3h' must be a positive, finite amount"),
        ("-$5", "'-$5' must be a positive, finite amount"),
        ("1.5trials", "must be whole"),
        ("5min,10min", "gives wall-clock time twice"),
        ("5min,", "has an empty limit; join limits with one comma"),
        ("5min,,50trials", "has an empty limit"),
        ("30s5min", "hours, minutes and seconds in that order"),
        ("1h1h", "hours, minutes and seconds in that order"),
        ("5min30trials", "hours, minutes and seconds in that order"),
        ("0m0s", "must be a positive, finite amount"),
    ],
)
def test_bad_budgets_say_what_is_expected(text, message):
    with pytest.raises(BudgetError) as info:
        parse_budget(text)
    assert message in str(info.value)


def assert_sound(budget) -> None:
    """A parsed budget: positive finite limits of distinct kinds that read back the same."""
    assert budget.limits
    assert all(math.isfinite(limit.amount) and limit.amount > 0 for limit in budget.limits)
    assert len(budget.kinds) == len(budget.limits)
    assert parse_budget(str(budget)) == budget


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789.,$-e hsminkJWgputral")), max_size=16))
def test_any_string_parses_or_gets_the_clear_error(text):
    try:
        budget = parse_budget(text)
    except BudgetError as exc:
        assert "budget" in str(exc)
    else:
        assert_sound(budget)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=24))
def test_arbitrary_unicode_parses_or_gets_the_clear_error(text):
    try:
        budget = parse_budget(text)
    except BudgetError as exc:
        assert "budget" in str(exc)
    else:
        assert_sound(budget)


@pytest.mark.parametrize(
    "text, setup, message",
    [
        (
            "2gpu-h",
            {"devices": 0},
            "is in GPU-hours but this run uses no GPU; units that apply: s, min, h, trials",
        ),
        ("$5", {"devices": 0}, "no price for this machine; give one with --price USD_PER_HOUR"),
        (
            "200kJ",
            {"devices": 1},
            "needs NVML on a GPU run; units that apply: s, min, h, trials, gpu-h, gpu-min",
        ),
    ],
)
def test_units_that_cannot_be_metered_name_the_ones_that_can(text, setup, message):
    with pytest.raises(ValueError) as info:
        check_applicable(parse_budget(text), **setup)
    assert message in str(info.value)
    check_applicable(parse_budget(text), devices=1, price_known=True, energy_known=True)


# -- meters --------------------------------------------------------------------------------


def test_meters_charge_phases_and_every_unit_with_the_injected_clock():
    clock = FakeClock()
    ledger = Ledger(
        clock=clock, devices=2, cores=16, usd_per_hour=6.0, energy=FakeEnergy(clock, 700.0)
    )
    with ledger.phase("build"):
        clock.now += 1800.0
    ledger.charge_round(trials=8, seconds=1800.0, fixed_s=600.0)
    assert ledger.phases == {"build": 1800.0}
    assert ledger.wall_s == 1800.0
    assert ledger.device_h == pytest.approx(1.0)  # two GPUs held for half an hour
    assert ledger.core_h == pytest.approx(8.0)
    assert ledger.usd == pytest.approx(3.0)
    assert ledger.energy_j == pytest.approx(700.0 * 1800.0)
    assert (ledger.trials, ledger.rounds) == (8, 1)
    # Forecasts are padded by 10%: overshooting is worse than stopping a little early.
    assert ledger.forecast_round(8) == pytest.approx(1.1 * 1800.0)
    assert ledger.forecast_round(4) == pytest.approx(1.1 * (600.0 + 4 * 150.0))


def test_work_before_the_ledger_existed_counts():
    clock = FakeClock()
    ledger = Ledger(clock=clock, earlier_s=4.0)  # e.g. the model import, timed by the caller
    ledger.charge_phase("import", 4.0)
    clock.now += 1.0
    assert ledger.wall_s == 5.0 and ledger.phases == {"import": 4.0}


def test_spend_survives_a_resume_and_downtime_is_not_spend():
    clock = FakeClock()
    first = Ledger(clock=clock, devices=1, usd_per_hour=3.0, energy=FakeEnergy(clock, 500.0))
    with first.phase("measure"):
        clock.now += 1800.0
    first.charge_round(trials=64, seconds=1800.0)
    saved = pickle.loads(pickle.dumps(Spend.from_dict(first.snapshot().to_dict())))
    clock.now += 10_000.0  # the machine was down
    second = Ledger(
        clock=clock, carried=saved, devices=1, usd_per_hour=3.0, energy=FakeEnergy(clock, 500.0)
    )
    clock.now += 600.0
    assert second.wall_s == pytest.approx(2400.0)
    assert second.device_h == pytest.approx(2400.0 / 3600.0)
    assert second.usd == pytest.approx(2.0)
    assert second.energy_j == pytest.approx(500.0 * 2400.0)
    assert second.trials == 64 and second.phases["measure"] == pytest.approx(1800.0)
    assert second.forecast_round(64) == pytest.approx(1.1 * 1800.0)  # round costs carry over


def test_sessions_without_a_price_are_charged_at_a_later_one():
    clock = FakeClock()
    first = Ledger(clock=clock)
    clock.now += 3600.0
    assert first.usd is None
    second = Ledger(
        clock=clock, carried=Spend.from_dict(first.snapshot().to_dict()), usd_per_hour=2.0
    )
    clock.now += 3600.0
    assert second.usd == pytest.approx(4.0)


def test_each_point_of_the_curve_sets_what_the_final_phase_keeps_back():
    ledger = Ledger(clock=FakeClock())
    ledger.reserved_s = 100.0
    ledger.record_point(4.0)
    assert ledger.reserved_s == 100.0  # nothing sets it anew
    ledger.reserve = lambda latency_s: 50.0 + latency_s
    ledger.record_point(2.0)
    assert ledger.reserved_s == 52.0
    ledger.record_point(None)  # no estimate: kept
    assert ledger.reserved_s == 52.0


# -- the budget rule -----------------------------------------------------------------------


def test_trials_are_exact_and_cap_the_round():
    rule = BudgetLimits(parse_budget("20trials"), round_size=16)
    ledger = Ledger(clock=FakeClock())
    ledger.charge_round(trials=16, seconds=1.0)
    assert not rule.decide(ledger).stop
    assert rule.allowance(ledger, 16) == 4  # the last round shrinks to what is left
    ledger.charge_round(trials=4, seconds=1.0)
    assert rule.decide(ledger).reason == "trial budget reached: 20 of 20"


@pytest.mark.parametrize(
    "text, setup",
    [
        ("10min", {}),
        ("0.5gpu-h", {"devices": 3}),
        ("$0.40", {"usd_per_hour": 2.4}),
        ("1000kJ", {"devices": 1, "watts": 1500.0}),
    ],
)
def test_rounds_shrink_so_no_budget_is_ever_overshot(text, setup):
    """Simulated tuning: each round costs 30 s of search plus 2 s per candidate."""
    clock = FakeClock()
    watts = setup.pop("watts", None)
    ledger = Ledger(clock=clock, energy=FakeEnergy(clock, watts) if watts else None, **setup)
    ledger.reserved_s = 20.0
    budget = parse_budget(text)
    rule = BudgetLimits(budget, round_size=64)
    sizes = []
    while not rule.decide(ledger).stop:
        n = rule.allowance(ledger, 64)
        assert n >= rule.min_round
        clock.now += 30.0 + 2.0 * n
        ledger.charge_round(trials=n, seconds=30.0 + 2.0 * n, fixed_s=30.0)
        sizes.append(n)
    clock.now += 20.0  # the reserve: compiling and checking the tuned model
    limit = budget.limits[0]
    assert ledger.spent(limit.kind) <= limit.amount * (1 + 1e-9)
    assert sizes[0] == 64
    assert ledger.spent(limit.kind) > 0.8 * limit.amount  # and the budget was used


def test_the_last_round_shrinks_to_what_is_left_instead_of_being_skipped():
    clock = FakeClock()
    ledger = Ledger(clock=clock)
    rule = BudgetLimits(parse_budget("300s"), round_size=64)
    clock.now += 158.0
    ledger.charge_round(trials=64, seconds=158.0, fixed_s=30.0)  # 30 s + 2 s per candidate
    # 142 s left; padded forecast 1.1 x (30 + 2 n) <= 142 gives n = 49
    assert rule.allowance(ledger, 64) == 49
    ledger.reserved_s = 20.0
    assert rule.allowance(ledger, 64) == 40


def test_the_stop_reason_gives_spend_limit_and_what_the_next_round_needs():
    clock = FakeClock()
    ledger = Ledger(clock=clock)
    ledger.reserved_s = 10.0
    clock.now += 80.0
    ledger.charge_round(trials=64, seconds=80.0, fixed_s=16.0)
    decision = BudgetLimits(parse_budget("100s"), round_size=64).decide(ledger)
    assert decision.stop
    assert decision.reason == (
        "wall-clock time budget reached: 1m20s of 1m40s spent; a round of 16+ candidates needs "
        "~35.2s and 10.0s are kept for compiling and checking the model"
    )


def test_the_first_round_is_forecast_before_any_round_was_timed():
    ledger = Ledger(clock=FakeClock())
    rule = BudgetLimits(parse_budget("100s"), round_size=64)
    assert rule.allowance(ledger, 64) == 64  # nothing to forecast from: the round is whole
    ledger.prior_round = RoundCost(fixed_s=20.0, per_candidate_s=2.0, candidates=0)
    ledger.reserved_s = 10.0
    # 90 s left; padded forecast 1.1 x (20 + 2 n) <= 90 gives n = 30
    assert rule.allowance(ledger, 64) == 30
    ledger.charge_round(trials=30, seconds=40.0, fixed_s=10.0)  # timed rounds replace it
    assert ledger.forecast_round(0) == pytest.approx(11.0)


def test_a_first_round_accepted_up_front_is_measured_though_its_forecast_grew():
    """Refused up front, or tuned: the fixed phases took longer than their forecast and the
    first round no longer fits whole, yet the round the budget was accepted for is measured."""
    clock = FakeClock()
    ledger = Ledger(clock=clock)
    rule = BudgetLimits(parse_budget("60s"), round_size=64)
    ledger.prior_round = RoundCost(fixed_s=20.0, per_candidate_s=2.0, candidates=0)
    ledger.reserved_s = 10.0
    clock.now += 25.0  # 25 s left: 1.1 x (20 + 2 n) <= 25 gives n = 1
    assert rule.allowance(ledger, 64) == 1 and rule.decide(ledger).stop
    ledger.promised_round = 16
    assert rule.allowance(ledger, 64) == 16 and not rule.decide(ledger).stop
    clock.now += 30.0  # nothing left after the final phase's seconds: no round at all
    assert rule.allowance(ledger, 64) == 0 and rule.decide(ledger).stop
    clock.now -= 30.0
    ledger.charge_round(trials=16, seconds=52.0, fixed_s=20.0)  # kept: later rounds are
    assert rule.allowance(ledger, 64) == 1  # sized as before


def test_work_in_flight_is_paid_before_the_next_round_is_allowed():
    clock = FakeClock()
    ledger = Ledger(clock=clock)
    rule = BudgetLimits(parse_budget("300s"), round_size=64)
    clock.now += 100.0
    ledger.charge_round(trials=64, seconds=100.0, fixed_s=36.0)  # 36 s + 1 s per candidate
    assert rule.allowance(ledger, 64) == 64
    ledger.committed_s = ledger.forecast_round(64)  # the round being measured: 110 s
    # 90 s left once it is paid: 1.1 x (36 + n) <= 90 gives n = 45
    assert rule.allowance(ledger, 64) == 45
    ledger.committed_s = 180.0
    assert rule.decide(ledger).stop


def test_trials_in_flight_are_taken_off_a_trial_budget():
    # 16 of 40 measured, 16 being measured: a round prepared now may have 8, none after it.
    rule = BudgetLimits(parse_budget("40trials"), round_size=16)
    ledger = Ledger(clock=FakeClock())
    ledger.charge_round(trials=16, seconds=1.0)
    ledger.committed_trials = 16
    assert rule.allowance(ledger, 16) == 8
    ledger.committed_trials = 16 + 8
    assert rule.allowance(ledger, 16) == 0 and rule.decide(ledger).stop


def test_the_ledger_keeps_the_longest_step_across_sessions():
    clock = FakeClock()
    ledger = Ledger(clock=clock)
    with ledger.phase("build"):
        clock.now += 3.0
    ledger.charge_phase("compile", 12.0)
    ledger.charge_phase("search", 5.0, overlapped=True)
    assert ledger.longest_step == ("compile", 12.0)
    carried = Spend.from_dict(ledger.snapshot().to_dict())
    assert Ledger(clock=clock, carried=carried).snapshot().longest_step == ("compile", 12.0)


@pytest.mark.parametrize(
    "text, setup, needed, expected",
    [
        ("1min", {}, 100.0, "2min"),
        ("3min", {}, 100.0, None),
        ("0.01gpu-h", {"devices": 2}, 100.0, "0.06gpu-h"),
        ("$0.01", {"usd_per_hour": 3.6}, 100.0, "$0.11"),
        ("100trials", {}, 1e6, None),  # trials are not spent by the clock
    ],
)
def test_a_budget_short_of_the_fixed_phases_names_the_one_that_would_do(
    text, setup, needed, expected
):
    clock = FakeClock()
    ledger = Ledger(clock=clock, **setup)
    clock.now += 5.0  # imports
    short = seconds_short(parse_budget(text), ledger, needed)
    assert (short[1] if short else None) == expected


@pytest.mark.parametrize(
    "text, setup, expected",
    [
        ("10min", {}, 600.0),
        ("1h,0.5gpu-h", {"devices": 2}, 900.0),  # two GPUs spend half a GPU-hour in 15 min
        ("$1,1h", {"usd_per_hour": 3.6}, 1000.0),
        ("100trials", {}, None),
        ("1kJ", {}, None),  # energy: metered by NVML, not the clock
    ],
)
def test_the_clock_seconds_of_a_budget_are_its_tightest_clock_limit(text, setup, expected):
    assert clock_seconds(parse_budget(text), Ledger(clock=FakeClock(), **setup)) == expected


def test_any_of_stops_on_the_first_rule_and_allows_the_fewest_candidates():
    rules = AnyOf(
        [
            BudgetLimits(parse_budget("1h"), round_size=64),
            BudgetLimits(parse_budget("10trials"), round_size=64),
        ]
    )
    ledger = Ledger(clock=FakeClock())
    assert rules.allowance(ledger, 64) == 10
    ledger.charge_round(trials=10, seconds=1.0)
    assert rules.decide(ledger).reason.startswith("trial budget reached")


def test_budget_status_reports_spend_left_and_overshoot():
    clock = FakeClock()
    ledger = Ledger(clock=clock, usd_per_hour=3.6)
    clock.now += 110.0
    rows = budget_status(parse_budget("100s,$1"), ledger.snapshot())
    assert rows[0]["spent"] == pytest.approx(110.0) and rows[0]["overshoot"] == pytest.approx(10.0)
    assert rows[1]["spent"] == pytest.approx(0.11) and rows[1]["left"] == pytest.approx(0.89)
    assert primary_limit(parse_budget("500trials,$3,2h")).kind == DOLLARS


# -- prices --------------------------------------------------------------------------------


def test_prices_come_from_the_table_by_gpu_name_or_core_count_and_the_override_wins():
    h100 = run_price(device_type="cuda", device_name="NVIDIA H100 80GB HBM3", devices=2, cores=16)
    assert h100.usd_per_hour == pytest.approx(2 * 2.99) and "H100" in h100.source
    assert run_price(device_type="cuda", device_name="Mystery GPU", devices=1, cores=8) is None
    assert (
        run_price(device_type="cpu", device_name="x86_64", devices=0, cores=2).usd_per_hour == 0.096
    )
    assert run_price(
        device_type="cpu", device_name="x86_64", devices=0, cores=6
    ).usd_per_hour == pytest.approx(6 * 0.048)
    assert (
        run_price(
            device_type="cuda", device_name="Mystery GPU", devices=4, cores=8, override=1.5
        ).usd_per_hour
        == 6.0
    )


# -- plateau -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "history, stops",
    [
        ([5.0, 3.0, 2.0], False),  # too young to judge
        ([5.0, 3.0, 2.0, 1.0], False),  # still improving
        ([5.0, 1.0, 1.0, 0.999, 0.998], True),  # 0.2% in 3 rounds
        ([math.inf, math.inf, math.inf], True),  # nothing ever measured
        ([math.inf, 2.0, 2.0, 2.0], False),  # first success just came
    ],
)
def test_task_plateau(history, stops):
    assert TaskPlateau(patience=3, min_gain=0.005).decide(history).stop is stops


def test_a_task_short_of_its_floor_is_not_retired_on_a_plateau_but_is_when_nothing_runs():
    rule = TaskPlateau(patience=3, min_gain=0.005)
    assert not rule.decide([5.0, 1.0, 1.0, 1.0, 1.0], protected=True).stop
    assert rule.decide([math.inf] * 3, protected=True).stop


# -- forecasts and diminishing returns -----------------------------------------------------


def exp_curve(x):
    return 1.0 + 9.0 * math.exp(-x / 300.0)


def power_curve(x):
    return 1.0 + 9.0 * (1.0 + x / 100.0) ** -1.5


@pytest.mark.parametrize("truth", [exp_curve, power_curve])
def test_fitted_curves_forecast_the_rest_of_the_curve(truth):
    xs = [30.0 * i for i in range(1, 30)]
    curve = fit_curve(xs, [truth(x) for x in xs])
    assert curve is not None and curve.rms_log_error < 0.01
    assert curve(3000.0) == pytest.approx(truth(3000.0), rel=0.02)
    assert curve.gain(870.0, 3000.0) == pytest.approx(
        (truth(870.0) - truth(3000.0)) / truth(870.0), abs=0.01
    )
    assert fit_curve([1.0, 1.0, 1.0], [2.0, 2.0, 2.0]) is None  # nothing to fit


def run_until_stopped(truth, budget_s=6000.0, round_s=30.0, tasks=None, waits=None, **rule_args):
    """Simulated run on a known tuning curve; returns (spend at stop or None, reason).
    `tasks(round)` gives the task progress the rule is told about after each round; `waits`
    collects (spend, the tasks the rule waits on) after each."""
    clock = FakeClock()
    ledger = Ledger(clock=clock)
    rule = DiminishingReturns(parse_budget(f"{budget_s}s").limits[0], **rule_args)
    ledger.record_point(truth(0.0))
    rounds = 0
    while ledger.wall_s < budget_s:
        clock.now += round_s
        rounds += 1
        ledger.charge_round(trials=64, seconds=round_s)
        ledger.record_point(truth(ledger.wall_s))
        decision = rule.decide(ledger, tasks(rounds) if tasks else ())
        if waits is not None:
            waits.append((ledger.wall_s, decision.waiting_on))
        if decision.stop:
            return ledger.wall_s, decision.reason
    return None, ""


def test_diminishing_returns_stop_after_the_knee_not_before():
    stopped, reason = run_until_stopped(exp_curve)
    knee = 300.0 * math.log(9.0 / 0.1)  # where the curve is within 10% of its floor: ~1350 s
    assert stopped is not None and knee <= stopped <= 3000.0
    assert reason.startswith(f"stopped at {int(stopped // 60)}m")
    assert "of 1h40m: the last 20% of spend improved end-to-end latency by" in reason
    assert "(< 1%); forecast for the remaining" in reason


@pytest.mark.slow
def test_steady_improvement_is_never_stopped_early():
    stopped, _ = run_until_stopped(lambda x: 10.0 - 0.0012 * x)  # ~7% better per window at the end
    assert stopped is None


def test_a_long_tail_keeps_the_run_going_while_the_forecast_pays():
    stopped_tail, _ = run_until_stopped(power_curve, min_gain=0.01)
    stopped_exp, _ = run_until_stopped(exp_curve, min_gain=0.01)
    assert stopped_exp is not None  # the same rule does stop a curve that flattens
    assert stopped_tail is None or stopped_tail > stopped_exp


def test_no_decision_on_too_few_rounds():
    ledger = Ledger(clock=FakeClock())
    for latency in (10.0, 10.0, 10.0):
        ledger.record_point(latency)
    assert not DiminishingReturns(parse_budget("1h").limits[0]).decide(ledger).stop


def test_diminishing_returns_wait_until_every_task_that_matters_had_its_chance():
    """Three tasks share the rounds; the light one (3%) needs no rounds, the others need two
    measured rounds each, and the heaviest its floor of 256 trials."""

    def tasks(rounds, floor_after=100):
        return [
            TaskProgress("heavy", 0.77, trials=64 * rounds, measured_rounds=rounds, floor=256),
            TaskProgress("late", 0.20, trials=64, measured_rounds=1 if rounds < floor_after else 2),
            TaskProgress("light", 0.03, trials=0, measured_rounds=0),
        ]

    alone, _ = run_until_stopped(exp_curve)
    late, reason = run_until_stopped(exp_curve, tasks=tasks)
    assert alone is not None and alone < 100 * 30.0  # on its own, the rule stops earlier
    assert late == pytest.approx(100 * 30.0)  # here, as soon as the late task had 2 rounds
    assert reason.endswith(
        "; evidence: the 2 task(s) holding 97% of the untuned latency had 2+ measured rounds "
        "each, the 1 heaviest (holding 77%) had 6400+ trials each"
    )
    never, _ = run_until_stopped(exp_curve, tasks=lambda r: tasks(r, floor_after=10**6))
    assert never is None
    retired = lambda r: [replace(t, done=True) if t.name == "late" else t for t in tasks(r, 10**6)]  # noqa: E731
    assert run_until_stopped(exp_curve, tasks=retired)[0] == alone  # retired: nothing to wait for


def test_diminishing_returns_wait_while_the_tasks_never_tried_hold_a_share_now():
    """An unrolled LSTM's heaviest kernels have one schedule each, slower than the default:
    their rounds bought nothing, the curve was flat, and a 1-minute run stopped after them
    with 12 tasks holding 19% of the latency never tried (each under `min_share` untuned)."""

    def tasks(rounds, held_now=0.19):
        return [
            TaskProgress("gates", 0.95, trials=1, measured_rounds=1, done=True),
            TaskProgress("matmul", 0.03, trials=0, measured_rounds=0, share_now=held_now * 0.6),
            TaskProgress("dense", 0.02, trials=0, measured_rounds=0, share_now=held_now * 0.4),
        ]

    alone, _ = run_until_stopped(exp_curve)
    waits = []
    assert run_until_stopped(exp_curve, tasks=tasks, waits=waits)[0] is None
    assert all(w == (1, 2) for x, w in waits if x >= alone)
    # Tried, or holding under min_share between them now, they are not waited for.
    tried = lambda r: [replace(t, trials=32, measured_rounds=2) for t in tasks(r)]  # noqa: E731
    assert run_until_stopped(exp_curve, tasks=tried)[0] == alone
    assert run_until_stopped(exp_curve, tasks=lambda r: tasks(r, held_now=0.04))[0] == alone


def test_diminishing_returns_name_the_tasks_they_wait_for_once_the_curve_would_stop():
    """The loop gives the rounds to the tasks named: none while more spending pays, the task
    short of its floor once the curve alone would stop."""
    progress = [
        TaskProgress("light", 0.2, trials=512, measured_rounds=8),
        TaskProgress("heavy", 0.8, trials=64, measured_rounds=4, floor=256),
    ]
    alone, _ = run_until_stopped(exp_curve)
    waits = []
    assert run_until_stopped(exp_curve, tasks=lambda r: progress, waits=waits)[0] is None
    assert alone is not None and all(not w for x, w in waits if x < alone)
    assert all(w == (1,) for x, w in waits if x >= alone)


class Waits(StoppingRule):
    def __init__(self, *waiting_on):
        self.waiting_on = waiting_on

    def decide(self, ledger, tasks=()):
        return Decision(False, waiting_on=self.waiting_on)


def test_any_of_waits_on_every_task_its_rules_wait_on_unless_one_stops():
    ledger = Ledger(clock=FakeClock())
    assert AnyOf([Waits(2), Waits(0, 2), Waits()]).decide(ledger).waiting_on == (0, 2)
    assert AnyOf([Waits(), Waits()]).decide(ledger) == Decision(False)
    ledger.charge_round(trials=8, seconds=1.0)
    limits = BudgetLimits(parse_budget("8trials"), round_size=8)
    assert AnyOf([Waits(1), limits]).decide(ledger).stop


def test_diminishing_returns_wait_while_a_task_can_catch_up_with_its_kind():
    """A convolution slower than its sister promises more from its next round than the
    model's flat curve says: the rule waits until that promise falls under min_gain."""

    def tasks(rounds, promise_until=100):
        behind = 0.05 if rounds < promise_until else 0.009  # of the model's latency
        return [
            TaskProgress("sister", 0.5, trials=64 * rounds, measured_rounds=rounds),
            TaskProgress(
                "behind", 0.5, trials=64 * rounds, measured_rounds=rounds, catch_up=behind
            ),
        ]

    alone, _ = run_until_stopped(exp_curve)
    caught_up, _ = run_until_stopped(exp_curve, tasks=tasks)
    assert alone is not None and alone < 100 * 30.0
    assert caught_up == pytest.approx(100 * 30.0)  # as soon as its promise fell under 1%

    def retired(r):
        return [replace(t, done=True) if t.name == "behind" else t for t in tasks(r, 10**6)]

    assert run_until_stopped(exp_curve, tasks=retired)[0] == alone


def test_dollars_alone_at_a_price_of_zero_are_refused_as_never_reached():
    """`--budget '$1' --price 0` was accepted and ran until killed."""
    with pytest.raises(ValueError, match=r"'\$1' is in dollars, which a price of \$0/h never"):
        check_applicable(parse_budget("$1"), devices=0, price_known=True, free=True)
    for stops in ("$1,1h", "$1,500trials"):  # another limit ends it
        check_applicable(parse_budget(stops), devices=0, price_known=True, free=True)
    check_applicable(parse_budget("$1"), devices=0, price_known=True)  # a price above $0/h
