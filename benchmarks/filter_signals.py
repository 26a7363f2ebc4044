"""Would a second ranking signal let the filter keep less of a round? Replays runs tuned with
`--filter none` (every candidate measured) and ranks each round's candidates several ways.

    python benchmarks/filter_signals.py RUN_DIR [RUN_DIR ...] [--label vm-2core]

The rounds and their records are those of benchmarks/filter_replay.py. Before each round the
rankers are trained on every earlier record of the run: `packsum` (the one model the search and
the filter share), `rank` (XGBoost's rank:ndcg, the filter's own ranker before it), `local`
(packsum fitted on the round's task's records only, blind to the other tasks; on a task's
first round, with only its default schedule measured, the shared model's order), `decisions`
(a model of the schedule's sampled decisions, tile factors as log2 and categorical picks, fitted
on the round's task's earlier records with the same trace: a view of a candidate the store
features do not share; where a task has fewer than 8 such records, the shared model's order),
and the sums of their places in the round (`packsum+rank`, `packsum+local`,
`packsum+decisions`, `all`), which a filter with a model of its own beside the shared one
could use. For each: the share of a round that must be
kept, best-ranked first, to hold 90% of its true top 10% (what a perfect calibration would
keep; the filter saves only what this leaves out), and the rank correlation with the measured
latency within the round; means over the rounds of each run. Raw figures go to
benchmarks/results/filter_signals-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, json_lines
from filter_replay import (
    journal_rounds,
    judged_rounds,
    load_run,
    predict,
    rank_correlation,
    share_needed,
)

SIGNALS = (
    "packsum",
    "rank",
    "local",
    "decisions",
    "packsum+rank",
    "packsum+local",
    "packsum+decisions",
    "all",
)
MIN_DECISION_RECORDS = 8  # a task's earlier records with the round's trace, to fit `decisions`


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories tuned --filter none")
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    args = parser.parse_args()
    rows = {}
    for run in args.runs:
        print(f"{run}: extracting features ...", flush=True)
        rows[str(run)] = replay(*load_run(run), journal_rounds(run), decision_vectors(run))
    print(f"\n{'run':<60}{'rounds':>7}" + "".join(f"{s:>15}" for s in SIGNALS))
    for run, row in rows.items():
        cells = "".join(
            f"{row[s]['share_needed']:>8.0%} {row[s]['rank_correlation']:>5.2f} " for s in SIGNALS
        )
        print(f"{run[-60:]:<60}{row['rounds']:>7}{cells}")
    print("(each signal: share of a round needed to hold 90% of its top 10%, rank correlation)")
    out = ROOT / "benchmarks" / "results" / f"filter_signals-{args.label}-{dt.date.today()}.json"
    out.write_text(json.dumps({"machine": args.label, "rows": rows}, indent=2))
    print(f"raw figures: {out.relative_to(ROOT)}")


def decision_vectors(run: Path) -> list[tuple[tuple[Any, ...], np.ndarray]]:
    """Each record's trace shape (its workload and the kinds of instruction that sampled a
    decision) and its decisions as numbers, in commit order (the database file's lines, as
    load_run's records)."""
    out = []
    for workload, (trace, *_) in json_lines(run / "database_tuning_record.json"):
        insts, decisions = trace
        shape: list[Any] = [workload]
        values: list[float] = []
        for inst, decision in decisions:
            picked = decision if isinstance(decision, list) else [decision]
            shape.append((insts[inst][0], len(picked)))
            # tile factors are products: their logs add up; a categorical pick is an index
            values += [math.log2(max(1, v)) if isinstance(decision, list) else v for v in picked]
        out.append((tuple(shape), np.asarray(values, dtype=float)))
    return out


def decision_places(
    decisions: list[tuple[tuple[Any, ...], np.ndarray]],
    latencies: np.ndarray,
    start: int,
    members: list[int],
    fallback: np.ndarray,
    seed: int,
) -> np.ndarray:
    """Places of the round's `members` by an XGBoost regression of the decisions on each
    record's speed relative to its trace's best, fitted on the records before `start` with
    the same trace shape; members without such a model keep their `fallback` place."""
    import xgboost as xgb

    from tune_orchestrator.filters.xgb import positions

    scores = np.full(len(members), np.nan)
    for shape in {decisions[i][0] for i in members}:
        train = [i for i in range(start) if decisions[i][0] == shape and np.isfinite(latencies[i])]
        mine = [k for k, i in enumerate(members) if decisions[i][0] == shape]
        if len(train) < MIN_DECISION_RECORDS:
            continue
        model = xgb.XGBRegressor(n_estimators=200, max_depth=4, subsample=0.8, random_state=seed)
        model.fit(
            np.stack([decisions[i][1] for i in train]),
            latencies[train].min() / latencies[train],
        )
        scores[mine] = -model.predict(np.stack([decisions[members[k]][1] for k in mine]))
    if np.isnan(scores).all():
        return fallback
    # the modelled members in their own order, each unmodelled one at its fallback place
    ranked = positions(np.where(np.isnan(scores), np.inf, scores)).astype(float)
    ranked[np.isnan(scores)] = fallback[np.isnan(scores)]
    return positions(ranked)


def places(
    config: Any,
    features: list[np.ndarray],
    tasks: list[str],
    latencies: np.ndarray,
    start: int,
    members: list[int],
    decisions: list[tuple[tuple[Any, ...], np.ndarray]],
) -> dict[str, np.ndarray]:
    """Each signal's places for the round's `members`, trained on the records before `start`
    with the filter's `config` (a TrimmerConfig)."""
    from tune_orchestrator.filters._predictor import Predictor
    from tune_orchestrator.filters.xgb import positions

    out = {}
    for objective in ("packsum", "rank"):
        out[objective] = positions(
            predict(objective, config, features, tasks, latencies, start, members)
        )
    own = [i for i in range(start) if tasks[i] == tasks[members[0]]]
    local = Predictor(seed=config.seed, min_samples=1)
    local.add(tasks[members[0]], [features[i] for i in own], latencies[own])
    local.fit()
    out["local"] = (
        positions(local.predict([features[i] for i in members]))
        if local.booster is not None
        else out["packsum"]  # the task's first round: one record of its own, nothing to fit
    )
    out["decisions"] = decision_places(
        decisions, latencies, start, members, out["packsum"], config.seed
    )
    out["packsum+rank"] = positions(out["packsum"] + out["rank"])
    out["packsum+local"] = positions(out["packsum"] + out["local"])
    out["packsum+decisions"] = positions(out["packsum"] + out["decisions"])
    out["all"] = positions(out["packsum"] + out["rank"] + out["local"] + out["decisions"])
    return out


def replay(
    features: list[np.ndarray],
    tasks: list[str],
    latencies: np.ndarray,
    rounds: list[dict[str, Any]],
    decisions: list[tuple[tuple[Any, ...], np.ndarray]],
) -> dict[str, Any]:
    from tune_orchestrator.filters import TrimmerConfig

    config = TrimmerConfig()
    needed: dict[str, list[float]] = {s: [] for s in SIGNALS}
    correlations: dict[str, list[float]] = {s: [] for s in SIGNALS}
    judged = 0
    for _, members, start in judged_rounds(tasks, rounds, config.min_samples):
        judged += 1
        measured = latencies[members]
        for signal, place in places(
            config, features, tasks, latencies, start, members, decisions
        ).items():
            needed[signal].append(share_needed(place, measured, config))
            rho = rank_correlation(place, measured)
            if rho is not None:
                correlations[signal].append(rho)
    return {
        "rounds": judged,
        **{
            s: {
                "share_needed": float(np.mean(needed[s])) if needed[s] else math.nan,
                "rank_correlation": (
                    float(np.mean(correlations[s])) if correlations[s] else math.nan
                ),
                "per_round": needed[s],
            }
            for s in SIGNALS
        },
    }


if __name__ == "__main__":
    main()
