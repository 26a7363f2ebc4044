"""What a run would spend, phase by phase, and the latency it would reach at a given budget:
the model behind `orchestrate estimate` and `benchmarks/estimate_accuracy.py`.

It follows the run's own rules (session.py, budget/limits.py): the budget covers the command
from start to exit; a budget below the fixed phases forecast by overheads.py is refused up
front; once the untuned model is compiled and checked, the final phase is kept back; rounds
are shrunk to what is left and given to the task whose next round adds the most gain; tuning
stops early when the tuning curve says it has had nearly all it will get and the run's
stopping rule may judge.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from tune_orchestrator.budget.forecast import Allocation, TuningPrior
from tune_orchestrator.budget.grammar import ENERGY, TRIALS, Budget
from tune_orchestrator.budget.limits import BudgetLimits, clock_rates
from tune_orchestrator.budget.units import fmt_budget_up

from ..deploy.timing import Timing
from ..run.scheduler import RoundSizes
from . import overheads

TUNING_PHASES = ("search", "filter", "build", "measure", "learn")


@dataclasses.dataclass(frozen=True)
class EarlyStop:
    """When the run's diminishing-returns rule stops it ([stopping] in the config): once all
    but `min_gain` of the attainable gain is had, and only once the rule may judge: after
    `min_rounds` rounds, `task_rounds` rounds for every task holding `task_share` of the
    latency, and every task's floor of trials (the allocation's floors)."""

    min_gain: float
    min_rounds: int
    task_rounds: int
    task_share: float

    @classmethod
    def from_settings(cls, stopping: Any) -> EarlyStop | None:
        """None when early stopping is off."""
        if not stopping.early_stop:
            return None
        return cls(
            min_gain=stopping.min_gain,
            min_rounds=stopping.min_rounds,
            task_rounds=stopping.evidence_rounds,
            task_share=stopping.evidence_share,
        )

    def stops(self, allocation: Allocation, rounds: int) -> bool:
        return (
            allocation.reached >= 1.0 - self.min_gain
            and rounds >= self.min_rounds
            and allocation.floors_met
            and all(
                count >= self.task_rounds
                for share, count in zip(allocation.shares, allocation.rounds, strict=True)
                if share >= self.task_share
            )
        )


@dataclasses.dataclass(frozen=True)
class FixedPhases:
    """Seconds of the phases a run pays whatever its budget, as estimate just measured them
    (or, with no device here, as overheads.py forecasts them)."""

    import_s: float  # process start to the tasks extracted
    untuned_s: float  # every task's default schedule built and measured
    compile_s: float  # one compile of the model
    check_s: float  # one check of the model against onnxruntime
    timing_s: float  # one timing of the untuned model
    latency_s: float | None  # the untuned model's seconds per inference, if it ran here
    report_s: float  # writing the report

    @property
    def start_s(self) -> float:
        """Before the first round: import, baseline, the untuned model compiled and checked."""
        return self.import_s + self.untuned_s + self.compile_s + self.check_s + self.timing_s

    @property
    def reserve_s(self) -> float:
        """What the run keeps back for its final phase."""
        return overheads.reserve_s(self.compile_s, self.check_s + self.timing_s, self.report_s)

    def reserve_at(self, tuned_latency_s: float | None, timing: Timing) -> float:
        """What the run keeps back once tuned to `tuned_latency_s` (overheads.FinalReserve);
        reserve_s where the untuned or the tuned model's latency is not known."""
        if tuned_latency_s is None or not self.latency_s:
            return self.reserve_s
        return overheads.FinalReserve(
            compile_s=self.compile_s,
            check_s=self.check_s + self.timing_s,
            latency_s=self.latency_s,
            kernels_s=self.latency_s,
            report_s=self.report_s,
            timing=timing,
        ).at(tuned_latency_s)

    def final_s(self, tuned_latency_s: float | None, timing: Timing) -> float:
        """Compile and check the tuned model, time both in turn, write the report."""
        tuned_timing = (
            overheads.timing_s(tuned_latency_s, timing) if tuned_latency_s is not None else 0.0
        )
        return self.compile_s + self.check_s + self.timing_s + tuned_timing + self.report_s


@dataclasses.dataclass(frozen=True)
class RoundCosts:
    """A round of `size` candidates costs `fixed_s + per_candidate_s * candidates`, split
    into the tuning phases by `split`."""

    fixed_s: float
    per_candidate_s: float
    size: int
    split: Mapping[str, float]  # phase -> share of a round's time (sums to 1)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a round needs at least one candidate but got {self.size}.")
        if self.fixed_s < 0 or self.per_candidate_s <= 0:
            raise ValueError(
                "round costs must be fixed_s >= 0 and per_candidate_s > 0 but got "
                f"{self.fixed_s}, {self.per_candidate_s}."
            )

    def seconds(self, candidates: int) -> float:
        return self.fixed_s + self.per_candidate_s * candidates

    @classmethod
    def guessed(
        cls, *, untuned_s: float, tasks: int, device_type: str, cores: int, size: int
    ) -> RoundCosts:
        """A round's cost before any was timed here (overheads.py): a candidate's building and
        measuring scaled from what a task took in the baseline, and a search sized to its
        round, as the run's is: a round of 16 searches a quarter as long as one of 64."""
        search_s = overheads.ROUND_S_ON_2_CORES * 2 / max(1, cores)
        ratio = overheads.CANDIDATE_VS_BASELINE
        candidate_s = ratio.get(device_type, ratio["cpu"]) * overheads.baseline_task_s(
            untuned_s, tasks
        )
        typical = overheads.ROUND_S_CANDIDATES
        per_s = candidate_s + search_s / typical
        return cls(0.0, per_s, size, default_split(search_s, candidate_s, typical))

    def candidates_within(self, seconds: float) -> int:
        """The most candidates a round can take in `seconds`, at most `size`."""
        return min(self.size, self.affordable(seconds))

    def affordable(self, seconds: float) -> int:
        """The candidates `seconds` pay for at one round's fixed cost, as a budget's
        allowance counts them (BudgetLimits.allowance), however large the round."""
        return max(0, int((seconds - self.fixed_s) / self.per_candidate_s))


def default_split(fixed_s: float, per_candidate_s: float, size: int) -> dict[str, float]:
    """A round's phases before any run here was timed (overheads.py)."""
    total = fixed_s + per_candidate_s * size
    split = {p: 0.0 for p in TUNING_PHASES}
    for phase, share in overheads.ROUND_FIXED_SPLIT.items():
        split[phase] += share * fixed_s / total
    for phase, share in overheads.ROUND_CANDIDATE_SPLIT.items():
        split[phase] += share * per_candidate_s * size / total
    return split


def observed_split(phases: Sequence[Mapping[str, float]]) -> dict[str, float] | None:
    """The tuning phases' shares of the tuning time in earlier runs' spend, if they tuned."""
    totals = {p: sum(float(ph.get(p, 0.0)) for ph in phases) for p in TUNING_PHASES}
    whole = sum(totals.values())
    return {p: s / whole for p, s in totals.items()} if whole > 0 else None


def budget_seconds(
    budget: Budget, *, devices: int, usd_per_hour: float | None
) -> tuple[float | None, int | None]:
    """(seconds of wall clock the budget's clock-metered limits allow, its trial cap)."""
    rates = clock_rates(devices, usd_per_hour)
    seconds = [lim.amount / rates[lim.kind] for lim in budget.limits if rates.get(lim.kind)]
    trials = budget.get(TRIALS)
    return (min(seconds) if seconds else None), (None if trials is None else int(trials))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunCosts:
    """What a run of the model pays: its fixed phases, the fixed spend it forecasts before any
    work (import included; a budget below it is refused up front), its rounds' costs, how the
    final timings go, and the devices and price its clock-metered limits count."""

    fixed: FixedPhases
    minimum_s: float
    rounds: RoundCosts
    timing: Timing
    devices: int = 1
    usd_per_hour: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuningOutlook:
    """How its tuning would go: the tasks' shares of the untuned latency, their floors of
    trials (scheduler.heavy_floors: no early stop before they are met), the round sizes the
    scheduler gives (default the rounds' size) with a first round for each task holding
    `coverage` of the latency first, sized as the run sizes it from the `first_rounds`
    candidates first rounds share (0: the smallest size), the tuning curve, the share of
    each task's latency tuning can remove, and the early-stopping rule."""

    task_shares: Sequence[float]
    floors: Sequence[int] = ()
    sizes: RoundSizes | None = None
    first_rounds: int = 0
    coverage: float = 0.0
    prior: TuningPrior
    attainable: float
    early_stop: EarlyStop | None

    def __post_init__(self) -> None:
        if not 0 <= self.attainable < 1:
            raise ValueError(f"attainable must be in [0, 1) but got {self.attainable}.")


def forecast_run(
    budget: Budget, *, costs: RunCosts, outlook: TuningOutlook, max_rounds: int = 10_000
) -> dict[str, Any]:
    """What a run of this model would spend under `budget`, phase by phase, and the latency
    it would reach; a refusal with the budget that would do where the fixed spend does not fit."""
    seconds, trial_cap = budget_seconds(
        budget, devices=costs.devices, usd_per_hour=costs.usd_per_hour
    )
    row: dict[str, Any] = {
        "budget": str(budget),
        "seconds": seconds,
        "trials_cap": trial_cap,
        # the GPU's power is known only once a run meters it: energy limits are not forecast
        "not_forecast": [lim.text for lim in budget.limits if lim.kind == ENERGY],
    }
    minimum = _refused_minimum(
        budget, costs.minimum_s, devices=costs.devices, usd_per_hour=costs.usd_per_hour
    )
    if minimum is not None:
        return {**row, "refused": True, "minimum": minimum}
    fixed, rounds = costs.fixed, costs.rounds
    smallest = BudgetLimits(budget, round_size=rounds.size).min_round

    def tuned(kept_s: float) -> tuple[Allocation, tuple[float, int, int, str], float | None]:
        """The rounds that fit while `kept_s` is kept back, and the latency they reach."""
        allocation = Allocation(
            outlook.task_shares, outlook.prior, outlook.floors, coverage=outlook.coverage
        )
        given = _give_rounds(
            allocation,
            rounds,
            sizes=outlook.sizes or RoundSizes(rounds.size, rounds.size),
            first_rounds=outlook.first_rounds,
            trial_cap=trial_cap,
            window=None if seconds is None else seconds - fixed.start_s - kept_s,
            smallest=smallest,
            early_stop=outlook.early_stop,
            max_rounds=max_rounds,
        )
        if fixed.latency_s is None:
            return allocation, given, None
        return allocation, given, fixed.latency_s * (1 - allocation.reached * outlook.attainable)

    allocation, given, latency = tuned(fixed.reserve_s)
    kept_s = fixed.reserve_at(latency, costs.timing)  # as the run: less once the model is faster
    if seconds is not None and kept_s < fixed.reserve_s:
        allocation, given, latency = tuned(kept_s)
    tuning_s, trials, count, stop = given
    phases = _phases(fixed, tuning_s, rounds.split, fixed.final_s(latency, costs.timing))
    return {
        **row,
        "refused": False,
        "stop": stop,
        "rounds": count,
        "trials": trials,
        "gain_reached": allocation.reached,
        **_spent(sum(phases.values()), phases, costs),
        "latency_s": latency,
        "speedup": fixed.latency_s / latency if latency else None,
    }


def _spent(total: float, phases: Mapping[str, float], costs: RunCosts) -> dict[str, Any]:
    return {
        "phases": dict(phases),
        "total_s": total,
        "device_h": total * costs.devices / 3600.0,
        "usd": total * costs.usd_per_hour / 3600.0 if costs.usd_per_hour else None,
    }


def _refused_minimum(
    budget: Budget, minimum_s: float, *, devices: int, usd_per_hour: float | None
) -> str | None:
    """The budget a run would ask for when one of `budget`'s limits cannot cover `minimum_s`
    (the run refuses it up front); None when every limit can."""
    rates = clock_rates(devices, usd_per_hour)
    for limit in budget.limits:
        rate = rates.get(limit.kind)
        if rate and limit.amount < minimum_s * rate:
            return fmt_budget_up(limit.kind, minimum_s * rate)
    return None


def _give_rounds(
    allocation: Allocation,
    rounds: RoundCosts,
    *,
    sizes: RoundSizes,
    first_rounds: int,
    trial_cap: int | None,
    window: float | None,
    smallest: int,
    early_stop: EarlyStop | None,
    max_rounds: int,
) -> tuple[float, int, int, str]:
    """Give rounds to the tasks as the run's scheduler would, each shrunk to the trials and
    the tuning `window` left, until one cannot be given: (tuning seconds, trials, rounds, why
    they stopped). First rounds are sized as the run's loop sizes them (_first_touch)."""
    tuning_s, trials, count, stop = 0.0, 0, 0, None
    room = _room(rounds, trial_cap, window, trials, tuning_s)
    sizes = sizes.for_budget(len(allocation.uncovered), first_rounds, room)
    while stop is None:
        first = _first_touch(allocation, sizes, room)
        planned = allocation.next_round(sizes.options(), rounds.seconds, first)
        task, size = planned or (0, rounds.size)  # None: nothing to allocate, stopped below
        if trial_cap is not None:
            size = min(size, trial_cap - trials)
        if window is not None:
            fits = rounds.candidates_within(window - tuning_s)
            # A round too small to repay its search is not started, as in the run.
            size = min(size, fits if fits >= smallest else 0)
        if size <= 0:
            stop = "budget" if trial_cap is None or trials < trial_cap else "trials"
        elif planned is None or (early_stop is not None and early_stop.stops(allocation, count)):
            stop = "converged"
        elif count >= max_rounds:
            stop = "rounds"
        else:
            allocation.give(task, size)
            tuning_s += rounds.seconds(size)
            trials += size
            count += 1
            room = _room(rounds, trial_cap, window, trials, tuning_s)
    return tuning_s, trials, count, stop


def _room(
    rounds: RoundCosts, trial_cap: int | None, window: float | None, trials: int, tuning_s: float
) -> int | None:
    """Candidates the trials and the tuning window left hold; None with neither limit."""
    left = [] if trial_cap is None else [trial_cap - trials]
    if window is not None:
        left.append(rounds.affordable(window - tuning_s))
    return min(left) if left else None


def _first_touch(allocation: Allocation, sizes: RoundSizes, room: int | None) -> int:
    """A first round's size now, as the run's loop gives it (TuningLoop._sizes_now): the
    size first rounds share out, shrunk while the `room` left cannot give every task still
    to cover one of the smallest (RoundSizes.covering)."""
    if room is None:
        return sizes.first_touch
    return sizes.covering(len(allocation.uncovered), room).first_touch


def _phases(
    fixed: FixedPhases, tuning_s: float, split: Mapping[str, float], final_s: float
) -> dict[str, float]:
    """Seconds by phase: the fixed ones, the tuning time split as rounds split, two compiles,
    the checks and timings, the report."""
    return {
        "import": fixed.import_s,
        "untuned": fixed.untuned_s,
        **{p: tuning_s * split.get(p, 0.0) for p in TUNING_PHASES},
        "compile": 2 * fixed.compile_s,
        "check": fixed.check_s + fixed.timing_s + final_s - fixed.compile_s - fixed.report_s,
        "report": fixed.report_s,
    }
