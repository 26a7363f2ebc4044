"""How well does the filter judge real rounds? Replays runs tuned with `--filter none` (every
candidate measured) through the filter's own predictor and calibration, round by round.

    python benchmarks/filter_replay.py RUN_DIR [RUN_DIR ...] [--recall-step 0.1]
                                       [--label vm-2core]

The rounds are the journal's, their records the next ones of their task in commit order.
Before each round the predictor is trained on every earlier record of the run (as the live
filter is after each round) and ranks the round's candidates; once with each objective of
filters/_predictor.py: `packsum` (the one model the search and the filter share), `rank` (the
filter's own ranker before it) and `regression` (the search's before). Each keeps by
predicted position (the share of the round ranked ahead) with its own calibration from the
true top 10% of the last rounds, its aim moved after each round by `--recall-step` times the
round's shortfall from 90% (default: [filter] recall_step). For each, over the rounds it
filtered: the share kept, the true recall of each round's top 10% (every candidate was
measured, so no audit is needed), the round's best kept over its best (`best`), the task's
best after the round with the filter over its best without it (`task`: above 1 only where the
filter cut a candidate that would have been a new best of its task), and the share of the
round that had to be kept, best-ranked first, to hold 90% of its top 10% (what a perfect
calibration would keep). Also the rank correlation with the measured latency within rounds.

Paired, the same proposals with and without the filter, so the search's run-to-run variance
(two live runs diverge before the filter first acts) does not blur the comparison: each
filtered round is charged the build and measure time of only what the filter keeps and audits
(the run's own per-round build and measure seconds, pro rata), and wherever no filtered round
cut a new best of its task, the run's tuning curve is the same, so `none`'s final latency is
reached that much sooner. What it leaves out: that the search would then learn from fewer
measurements (and see the rejected candidates offered again). Raw figures go to
benchmarks/results/filter_replay-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, committed_records

MIN_ROUND = 8  # rounds with fewer records are not judged (a deadline can cut a round short)
_WORK = ("build", "measure")  # what the filter saves on each candidate it rejects
OBJECTIVES = ("packsum", "rank", "regression")  # the shared model's, then the two before it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories tuned --filter none")
    parser.add_argument("--recall-step", type=float, help="default: [filter] recall_step")
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    args = parser.parse_args()
    from tune_orchestrator.config import Settings

    step = Settings.load(None).filter.recall_step if args.recall_step is None else args.recall_step
    rows = {}
    for run in args.runs:
        print(f"{run}: extracting features ...", flush=True)
        rows[str(run)] = replay(*load_run(run), journal_rounds(run), recall_step=step)
    print_table(rows)
    out = ROOT / "benchmarks" / "results" / f"filter_replay-{args.label}-{dt.date.today()}.json"
    out.write_text(json.dumps({"machine": args.label, "recall_step": step, "rows": rows}, indent=2))
    print(f"raw figures: {out.relative_to(ROOT)}")


def load_run(run: Path) -> tuple[list[np.ndarray], list[str], np.ndarray]:
    """Store features, task keys and latencies (inf: failed) of a run's records, in commit
    order."""
    from tune_orchestrator.filters._predictor import record_features

    tasks, features, latencies = record_features([r for _, r in committed_records(run)])
    return features, tasks, latencies


def journal_rounds(run: Path) -> list[dict[str, Any]]:
    """The run's round events, each with its own build and measure seconds."""
    from tune_orchestrator.rundir import RunDir

    rounds, before = [], {}
    for event in RunDir(run).journal():
        if event["type"] == "round":
            phases = event["spend"]["phases"]
            event["work_s"] = sum(phases.get(p, 0.0) - before.get(p, 0.0) for p in _WORK)
            before = phases
            rounds.append(event)
    return rounds


def rounds_of(tasks: list[str], rounds: list[dict[str, Any]]) -> list[tuple[int, list[int]]]:
    """Each journal round's index and its records: the next `measured` records of its task,
    after those committed before the first round (the tasks' default schedules, timed with the
    untuned model)."""
    first = len(tasks) - sum(event["measured"] for event in rounds)
    out, taken = [], set(range(first))
    for index, event in enumerate(rounds):
        mine = [i for i, t in enumerate(tasks) if t == event["task_key"] and i not in taken][
            : event["measured"]
        ]
        taken.update(mine)
        out.append((index, mine))
    return out


def judged_rounds(
    tasks: list[str], rounds: list[dict[str, Any]], min_samples: int
) -> Iterator[tuple[int, list[int], int]]:
    """The rounds a replay judges, as (round index, record indices, first record): at least
    MIN_ROUND records, after the filter's first `min_samples` measurements."""
    for index, members in rounds_of(tasks, rounds):
        start = min(members, default=0)
        if len(members) >= MIN_ROUND and start >= min_samples:
            yield index, members, start


def rank_correlation(scores: np.ndarray, measured: np.ndarray) -> float | None:
    """Spearman's correlation of `scores` with the measured latencies of a round (None with
    fewer than 3 measured or scores all alike)."""
    from scipy.stats import spearmanr

    finite = np.isfinite(measured)
    if finite.sum() < 3 or not np.ptp(scores[finite]) > 0:
        return None
    return float(spearmanr(scores[finite], measured[finite]).correlation)


def replay(
    features: list[np.ndarray],
    tasks: list[str],
    latencies: np.ndarray,
    rounds: list[dict[str, Any]],
    *,
    recall_step: float,
) -> dict[str, Any]:
    from tune_orchestrator.filters import TrimmerConfig
    from tune_orchestrator.filters._calibration import Calibration, top_weights
    from tune_orchestrator.filters.xgb import choose, positions

    config = TrimmerConfig(recall_step=recall_step)
    calibrations = {
        key: Calibration(
            target=config.recall_target,
            share=config.top_share,
            rounds=config.evidence_rounds,
            step=config.recall_step,
        )
        for key in OBJECTIVES
    }
    judged: dict[str, list[dict[str, float]]] = {key: [] for key in calibrations}
    saved: dict[str, list[float]] = {key: [0.0] * len(rounds) for key in calibrations}
    correlations: dict[str, list[float]] = {key: [] for key in calibrations}
    needed: dict[str, list[float]] = {key: [] for key in calibrations}
    for index, members, start in judged_rounds(tasks, rounds, config.min_samples):
        measured = latencies[members]
        # The task's best before the round: a lost round best changes the curve only where it
        # would have been a new best for its task.
        before = min(
            (latencies[i] for i in range(start) if tasks[i] == tasks[members[0]]),
            default=math.inf,
        )
        scores = {}
        for key in calibrations:
            predicted = predict(key, config, features, tasks, latencies, start, members)
            scores[key] = positions(predicted)
            rho = rank_correlation(predicted, measured)
            if rho is not None:
                correlations[key].append(rho)
            needed[key].append(share_needed(scores[key], measured, config))
        for key, calibration in calibrations.items():
            threshold = calibration.threshold()
            samples = [
                (float(s), 1.0, float(lat)) for s, lat in zip(scores[key], measured, strict=True)
            ]
            tops = top_weights(samples, config.top_share)
            recall = 1.0  # a round not filtered kept all of its top
            if threshold is not None:
                keep = choose(
                    scores[key],
                    threshold=threshold,
                    min_keep=config.min_keep,
                    max_keep=len(measured),
                )
                kept_best = min(measured[keep]) if len(keep) else math.inf
                rejected = len(measured) - len(keep)
                audits = min(
                    rejected, max(config.min_audit, math.ceil(config.audit_share * rejected))
                )
                share = (len(keep) + audits) / len(measured)
                saved[key][index] = (1 - share) * rounds[index]["work_s"]
                judged[key].append(
                    {
                        "round": index + 1,
                        "measured": share,
                        "kept": len(keep) / len(measured),
                        "top": sum(tops),
                        "top_kept": sum(tops[i] for i in keep),
                        "best_ratio": float(kept_best / measured.min()),
                        "task_ratio": float(min(before, kept_best) / min(before, measured.min())),
                    }
                )
                if sum(tops):
                    recall = sum(tops[i] for i in keep) / sum(tops)
            calibration.add(samples, recall)
    # When the run first came within 2% of its final latency, and when it would have with the
    # filter's savings (the curve unchanged while no filtered round lost a new best of its
    # task).
    curve = [(e["spend"]["wall_s"], e["model_latency_s"]) for e in rounds]
    goal = curve[-1][1] * 1.02 if curve else math.inf
    reached = next((i for i, (_, lat) in enumerate(curve) if lat <= goal), None)
    result: dict[str, Any] = {
        "records": len(tasks),
        "rounds": len(rounds),
        "final_latency_s": curve[-1][1] if curve else None,
        "reached_final_s": None if reached is None else curve[reached][0],
        "wall_s": curve[-1][0] if curve else None,
    }
    for key, judgements in judged.items():
        top = sum(r["top"] for r in judgements)
        upto = [] if reached is None else [r for r in judgements if r["round"] <= reached + 1]
        result[key] = {
            "rank_correlation": (float(np.mean(correlations[key])) if correlations[key] else None),
            "share_needed": float(np.mean(needed[key])) if needed[key] else None,
            "filtered_rounds": len(judgements),
            "kept_share": float(np.mean([r["kept"] for r in judgements])) if judgements else None,
            "measured_share": (
                float(np.mean([r["measured"] for r in judgements])) if judgements else None
            ),
            "recall": sum(r["top_kept"] for r in judgements) / top if top else None,
            "worst_best_ratio": max((r["best_ratio"] for r in judgements), default=None),
            "worst_task_ratio": max((r["task_ratio"] for r in judgements), default=None),
            "saved_s": sum(saved[key]),
            # None where a filtered round before it lost a new best of its task: the curve
            # would differ.
            "reached_final_s": (
                None
                if reached is None or any(r["task_ratio"] > 1.0 for r in upto)
                else curve[reached][0] - sum(saved[key][: reached + 1])
            ),
            "rounds": judgements,
        }
    return result


def predict(
    objective: str,
    config: Any,
    features: list[np.ndarray],
    tasks: list[str],
    latencies: np.ndarray,
    start: int,
    members: list[int],
) -> np.ndarray:
    """What a predictor of `objective`, trained on every record before `start` (as the live
    filter's is after each round), predicts for the round's `members`."""
    from tune_orchestrator.filters._predictor import Predictor

    predictor = Predictor(seed=config.seed, min_samples=config.min_samples, objective=objective)
    for task in dict.fromkeys(tasks[:start]):
        mine = [i for i in range(start) if tasks[i] == task]
        predictor.add(task, [features[i] for i in mine], latencies[mine])
    predictor.fit()
    return predictor.predict([features[i] for i in members])


def share_needed(places: np.ndarray, measured: np.ndarray, config: Any) -> float:
    """The share of a round that must be kept, best-ranked first, to hold `recall_target` of
    its true top `top_share`."""
    top = set(np.argsort(measured)[: max(1, round(config.top_share * len(measured)))].tolist())
    got = 0
    for count, i in enumerate(np.argsort(places, kind="stable"), start=1):
        got += int(i) in top
        if got >= config.recall_target * len(top):
            return count / len(measured)
    return 1.0


def print_table(rows: dict[str, Any]) -> None:
    for run, r in rows.items():
        reached = r["reached_final_s"]
        print(
            f"\n{run}: {r['rounds']} rounds, {r['records']} records; final "
            f"{r['final_latency_s'] * 1e3:.3f} ms, reached (within 2%) at "
            f"{'-' if reached is None else f'{reached:.0f} s'} of {r['wall_s']:.0f} s"
        )
        print(
            f"  {'model':<11}{'rho':>5}{'needed':>7}{'rounds':>7}{'kept':>7}{'built':>7}"
            f"{'recall':>8}{'best':>7}{'task':>7}{'saved':>8}{'reached':>9}"
        )
        for key in OBJECTIVES:
            j = r[key]
            rho = "-" if j["rank_correlation"] is None else f"{j['rank_correlation']:.2f}"
            needed = "-" if j["share_needed"] is None else f"{j['share_needed']:.0%}"
            if not j["filtered_rounds"]:
                print(f"  {key:<11}{rho:>5}{needed:>7}{0:>7}")
                continue
            then = j["reached_final_s"]
            print(
                f"  {key:<11}{rho:>5}{needed:>7}{j['filtered_rounds']:>7}{j['kept_share']:>7.0%}"
                f"{j['measured_share']:>7.0%}{j['recall']:>8.0%}{j['worst_best_ratio']:>7.3f}"
                f"{j['worst_task_ratio']:>7.3f}"
                f"{j['saved_s']:>6.0f} s{'-' if then is None else f'{then:.0f} s':>9}"
            )


if __name__ == "__main__":
    main()
