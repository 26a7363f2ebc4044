"""What earlier runs in a runs directory say for `orchestrate estimate`: the tuning curve, what
a round costs, and the share of a task's untuned latency tuning removes."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tune_orchestrator.budget.forecast import BUILTIN_PRIOR, TuningPrior, fit_prior
from tune_orchestrator.budget.ledger import Spend

from ..errors import InputError
from ..rundir import RunDir
from .run import observed_split

# Before any run here has tuned: the share of a task's untuned latency tuning removes. CPU:
# untuned kernels are naive loops; weighed as attainable_share does, one 3-minute run of each
# of eight benchmark models on 2 cores (znver4, 2026-12-05) gave 0.966-0.971 for each from the
# other seven. GPU: untuned kernels use dlight's default schedules; tuning beats them by less.
BUILTIN_ATTAINABLE = {"cpu": 0.965, "cuda": 0.4}
_MOST_ATTAINABLE = 0.98


def _task_rounds(
    entries: Sequence[Mapping[str, Any]],
) -> tuple[dict[int, float | None], dict[int, list[tuple[int, float]]]]:
    """Each task's untuned latency, and its (trials so far, best latency) after each round."""
    baselines = {e["task"]: e.get("latency_s") for e in entries if e.get("type") == "baseline"}
    rounds: dict[int, list[tuple[int, float]]] = {}
    for e in entries:
        if e.get("type") == "round" and e.get("best_s") is not None:
            done = rounds.setdefault(e["task"], [])
            trials = (
                (done[-1][0] if done else 0) + int(e.get("measured", 0)) + int(e.get("failed", 0))
            )
            done.append((trials, float(e["best_s"])))
    return baselines, rounds


def journal_observations(entries: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """(trials, fraction of the task's final gain) after each round but the last of each task
    with 2+ rounds (the last is 1 by construction and tells nothing)."""
    baselines, rounds = _task_rounds(entries)
    observations = []
    for task, done in rounds.items():
        untuned = baselines.get(task)
        final = done[-1][1]
        if untuned is None or len(done) < 2 or not final < untuned:
            continue
        observations += [(t, (untuned - best) / (untuned - final)) for t, best in done[:-1]]
    return observations


def attainable_share(
    journals: Sequence[Sequence[Mapping[str, Any]]], prior: TuningPrior
) -> float | None:
    """The share of a task's untuned latency that tuning removes in the end, from earlier
    runs: each tuned task's final cut, divided by the share of its gain the tuning curve says
    its trials had bought, averaged by the task's part of its model's untuned latency (untuned
    latency times call sites). The forecast applies one share to every task, so the heavy
    tasks' cuts are the ones it must get right, not the many small kernels' that tuning
    cuts little."""
    shares, parts = [], []
    for entries in journals:
        baselines, rounds = _task_rounds(entries)
        calls = {  # call sites of each task
            t["index"]: t.get("weight", 1)
            for e in entries
            if e.get("type") == "session"
            for t in e.get("tasks", [])
        }
        total = sum(s * calls.get(t, 1) for t, s in baselines.items() if s and s > 0)
        for task, done in rounds.items():
            untuned = baselines.get(task)
            trials, best = done[-1]
            if untuned and untuned > 0 and prior.fraction(trials) > 0:
                cut = max(0.0, (untuned - best) / untuned) / prior.fraction(trials)
                shares.append(min(cut, _MOST_ATTAINABLE))
                parts.append(untuned * calls.get(task, 1) / total)
    if not shares:
        return None
    return sum(s * p for s, p in zip(shares, parts, strict=True)) / sum(parts)


def earlier_runs(runs_dir: Path) -> list[list[dict[str, Any]]]:
    """The journals of earlier runs under `runs_dir`; unreadable ones (damaged, another
    user's) are skipped."""
    journals = []
    try:
        paths = sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []
    except OSError:
        return journals
    for path in paths:
        run = RunDir(path)
        try:
            if not (path / RunDir.JOURNAL).is_file() or run.recorded_simulated():
                continue  # not a run, or a simulated GPU's: no timings of a real one
            journals.append(run.journal())
        except (InputError, OSError):
            continue
    return journals


def prior_and_round_cost(
    journals: Sequence[Sequence[Mapping[str, Any]]], runs_dir: Path
) -> tuple[TuningPrior, tuple[float, float] | None, dict[str, float] | None]:
    """The tuning curve (fitted on earlier runs, else built in), the (fixed, per candidate)
    seconds of a round seen in earlier runs, and how their tuning time split into phases
    (of runs that measured a round: a run of a few trials from the library spends its little
    tuning time on learning the library, not on searching)."""
    observations = [o for j in journals for o in journal_observations(j)]
    fitted = fit_prior(observations, f"fitted on {len(journals)} earlier run(s) in {runs_dir}")
    costs, phases = [], []
    for journal in journals:
        last = next((e["spend"] for e in reversed(journal) if "spend" in e), None)
        spend = Spend.from_dict(last) if last else None
        if spend is not None and spend.round_costs:
            costs += spend.round_costs
            phases.append(spend.phases)
    cost = None
    if costs:
        cost = (
            statistics.median(c.fixed_s for c in costs),
            statistics.median(c.per_candidate_s for c in costs),
        )
    return fitted or BUILTIN_PRIOR, cost, observed_split(phases)


@dataclasses.dataclass(frozen=True)
class Attainable:
    """The share of a task's untuned latency tuning removes in the end."""

    share: float
    source: str
    seen: bool  # from earlier runs, not the built-in guess

    @classmethod
    def from_runs(
        cls,
        journals: Sequence[Sequence[Mapping[str, Any]]],
        prior: TuningPrior,
        device_type: str,
        runs_dir: Path,
    ) -> Attainable:
        """From the journals of earlier runs in `runs_dir`, else the built-in guess."""
        seen = attainable_share(journals, prior)
        if seen is not None:
            return cls(seen, f"earlier runs in {runs_dir}", True)
        builtin = BUILTIN_ATTAINABLE.get(device_type, BUILTIN_ATTAINABLE["cpu"])
        return cls(builtin, f"built-in guess for {device_type}", False)
