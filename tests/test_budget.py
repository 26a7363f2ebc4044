import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import AnyOf, BudgetError, BudgetLimits, Ledger, Spend, parse_budget
from budget.grammar import DEVICE_HOURS, DOLLARS, ENERGY, TRIALS, WALL


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


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


def test_several_limits_join_with_commas():
    budget = parse_budget("2gpu-h,$4, 500trials")
    assert budget.get(DEVICE_HOURS) == 2.0
    assert budget.get(DOLLARS) == 4.0
    assert budget.get(TRIALS) == 500
    assert str(budget) == "2gpu-h,$4,500trials"


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "the budget is empty"),
        ("5", "expected a number and a unit"),
        ("5parsecs", "unknown unit 'parsecs'"),
        ("0min", "must be a positive amount"),
        ("-3h", "expected a number and a unit"),
        ("1.5trials", "must be whole"),
        ("5min,10min", "gives wall-clock time twice"),
        ("5min,", "cannot read ''"),
    ],
)
def test_bad_budgets_say_what_is_expected(text, message):
    with pytest.raises(BudgetError) as info:
        parse_budget(text)
    assert message in str(info.value)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789.,$-e hsminkJWgputral")), max_size=16))
def test_any_string_parses_or_gets_the_clear_error(text):
    try:
        budget = parse_budget(text)
    except BudgetError as exc:
        assert "budget" in str(exc)
    else:
        assert all(limit.amount > 0 for limit in budget.limits)


def test_gpu_units_on_a_cpu_run_name_the_units_that_apply():
    with pytest.raises(ValueError, match="units that apply: s, min, h, trials$"):
        BudgetLimits(parse_budget("2gpu-h"), devices=0)
    BudgetLimits(parse_budget("2gpu-h"), devices=1)  # fine with a GPU


def test_ledger_charges_phases_with_the_injected_clock():
    clock = FakeClock()
    ledger = Ledger(clock=clock)
    with ledger.phase("build"):
        clock.now += 3.0
    with ledger.phase("build"):
        clock.now += 2.0
    ledger.charge_round(trials=8, seconds=5.0)
    assert ledger.phases == {"build": 5.0}
    assert ledger.wall_s == 5.0
    assert (ledger.trials, ledger.rounds) == (8, 1)


def test_work_before_the_ledger_existed_counts():
    clock = FakeClock()
    ledger = Ledger(clock=clock, earlier_s=4.0)  # e.g. the model import, timed by the caller
    ledger.charge_phase("import", 4.0)
    clock.now += 1.0
    assert ledger.wall_s == 5.0 and ledger.phases == {"import": 4.0}


def test_spend_of_an_earlier_session_carries_over():
    clock = FakeClock()
    first = Ledger(clock=clock, devices=1)
    with first.phase("measure"):
        clock.now += 1800.0
    first.charge_round(trials=64, seconds=1800.0)
    saved = pickle.loads(pickle.dumps(Spend.from_dict(first.snapshot().to_dict())))
    clock.now += 10_000.0  # the machine was down; downtime is not spend
    second = Ledger(clock=clock, carried=saved, devices=1)
    clock.now += 600.0
    assert second.wall_s == pytest.approx(2400.0)
    assert second.device_h == pytest.approx(2400.0 / 3600.0)
    assert second.trials == 64
    assert second.phases["measure"] == pytest.approx(1800.0)


def test_trial_limit_stops_at_the_budget_and_caps_the_round():
    rule = BudgetLimits(parse_budget("20trials"))
    ledger = Ledger(clock=FakeClock())
    ledger.charge_round(trials=16, seconds=1.0)
    assert not rule.decide(ledger).stop
    assert rule.trials_left(ledger) == 4
    ledger.charge_round(trials=4, seconds=1.0)
    decision = rule.decide(ledger)
    assert decision.stop and decision.reason == "trial budget reached: 20 of 20"


def test_wall_limit_keeps_the_reserve_and_skips_a_round_that_would_not_fit():
    clock = FakeClock()
    rule = BudgetLimits(parse_budget("100s"))
    ledger = Ledger(clock=clock)
    ledger.reserved_s = 10.0
    assert not rule.decide(ledger).stop  # no round yet: nothing to forecast
    clock.now += 30.0
    ledger.charge_round(trials=8, seconds=30.0)
    assert not rule.decide(ledger).stop  # 70 s left > 30 s round + 10 s reserve
    clock.now += 30.0
    ledger.charge_round(trials=8, seconds=30.0)
    decision = rule.decide(ledger)  # 40 s left, not more than 30 + 10
    assert decision.stop
    assert "wall-clock budget reached: 1m00s of 1m40s spent" in decision.reason


def test_device_hours_limit_counts_wall_time_times_devices():
    clock = FakeClock()
    rule = BudgetLimits(parse_budget("1gpu-min"), devices=1)
    ledger = Ledger(clock=clock, devices=1)
    clock.now += 59.0
    assert not rule.decide(ledger).stop
    clock.now += 2.0
    assert rule.decide(ledger).stop


def test_any_of_stops_on_the_first_rule_and_allows_the_fewest_trials():
    rules = AnyOf([BudgetLimits(parse_budget("1h")), BudgetLimits(parse_budget("10trials"))])
    ledger = Ledger(clock=FakeClock())
    assert rules.trials_left(ledger) == 10
    ledger.charge_round(trials=10, seconds=1.0)
    assert rules.decide(ledger).reason.startswith("trial budget reached")
