"""How well does the filter judge real rounds? Replays runs tuned with `--filter none` (every
candidate measured) through the filter's own predictor and calibration, round by round.

    python benchmarks/filter_replay.py RUN_DIR [RUN_DIR ...] [--label vm-2core]

A round is a run of consecutive records of one task in commit order. Before each round the
predictor is trained on every earlier record of the run (as the live filter is after each
round) and ranks the round's candidates. Two calibrations set the keep threshold from the true
top 10% of the last rounds: on predicted positions (the share of the round ranked ahead,
what the filter keeps by) and on predicted gaps to the round's predicted best (what it kept by
before). For each, over the rounds it filtered: the share kept, the true recall of each
round's top 10% (every candidate was measured, so no audit is needed), and the round's best
kept over its best. Also the predictor's rank correlation with the measured latency within
rounds. Raw figures go to benchmarks/results/filter_replay-<label>-<date>.json.
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
from _common import ROOT

MIN_ROUND = 8  # smaller runs of records (default schedules, resumed leftovers) are not rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories tuned --filter none")
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    args = parser.parse_args()
    rows = {}
    for run in args.runs:
        print(f"{run}: extracting features ...", flush=True)
        rows[str(run)] = replay(*load_run(run))
    print_table(rows)
    out = ROOT / "benchmarks" / "results" / f"filter_replay-{args.label}-{dt.date.today()}.json"
    out.write_text(json.dumps({"machine": args.label, "rows": rows}, indent=2))
    print(f"raw figures: {out.relative_to(ROOT)}")


def load_run(run: Path) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Feature rows, task keys and latencies (inf: failed) of a run's records, in commit order
    (the database file's line order; TVM's own reader sorts them)."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule import TuneContext
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from filters._predictor import pooled_features
    from orchestrator.search.cost_model import workload_key

    def lines(name: str) -> list[Any]:
        text = (run / name).read_text().splitlines()
        return [json.loads(line) for line in text if line.strip()]

    workloads = [Workload.from_json(tvm_ffi.convert(w)) for w in lines("database_workload.json")]
    by_task: dict[str, tuple[Any, Any, list[tuple[int, Any, float]]]] = {}
    for order, (index, raw) in enumerate(lines("database_tuning_record.json")):
        record = TuningRecord.from_json(tvm_ffi.convert(raw), workloads[index])
        secs = [float(s) for s in record.run_secs]
        latency = sum(secs) / len(secs) if all(s < 1e9 for s in secs) else math.inf
        key = workload_key(record.workload.mod)
        entry = by_task.setdefault(key, (record.workload.mod, record.target, []))
        entry[2].append((order, record.as_measure_candidate(), latency))
    orders, rows, tasks, latencies = [], [], [], []
    for key, (mod, target, items) in by_task.items():
        context = TuneContext(mod=mod, target=target, task_name=key)
        features = pooled_features(context, [candidate for _, candidate, _ in items])
        for (order, _, latency), row in zip(items, features, strict=True):
            orders.append(order)
            rows.append(row)
            tasks.append(key)
            latencies.append(latency)
    by_order = np.argsort(orders)
    return (
        np.vstack(rows)[by_order],
        [tasks[i] for i in by_order],
        np.asarray(latencies)[by_order],
    )


def rounds_of(tasks: list[str]) -> list[tuple[int, int]]:
    """(start, end) of each run of consecutive records of one task."""
    bounds, start = [], 0
    for i in range(1, len(tasks) + 1):
        if i == len(tasks) or tasks[i] != tasks[start]:
            bounds.append((start, i))
            start = i
    return bounds


def replay(features: np.ndarray, tasks: list[str], latencies: np.ndarray) -> dict[str, Any]:
    from scipy.stats import spearmanr

    from filters import TrimmerConfig
    from filters._calibration import Calibration, top_weights
    from filters._predictor import Predictor
    from filters.xgb import choose, positions

    config = TrimmerConfig()
    calibrations = {
        key: Calibration(
            target=config.recall_target, share=config.top_share, rounds=config.evidence_rounds
        )
        for key in ("position", "gap")
    }
    judged: dict[str, list[dict[str, float]]] = {key: [] for key in calibrations}
    correlations = []
    for start, end in rounds_of(tasks):
        if end - start < MIN_ROUND or start < config.min_samples:
            continue
        predictor = Predictor(seed=config.seed, min_samples=config.min_samples)
        for task in dict.fromkeys(tasks[:start]):
            mine = [i for i in range(start) if tasks[i] == task]
            predictor.add(task, features[mine], latencies[mine])
        predictor.fit()
        predicted = predictor.predict(features[start:end])
        measured = latencies[start:end]
        finite = np.isfinite(measured)
        if finite.sum() >= 3:
            correlations.append(float(spearmanr(predicted[finite], measured[finite]).correlation))
        scores = {"position": positions(predicted), "gap": predicted - predicted.min()}
        for key, calibration in calibrations.items():
            threshold = calibration.threshold()
            samples = [
                (float(s), 1.0, float(lat)) for s, lat in zip(scores[key], measured, strict=True)
            ]
            tops = top_weights(samples, config.top_share)
            if threshold is not None:
                keep = choose(
                    scores[key],
                    threshold=threshold,
                    min_keep=config.min_keep,
                    max_keep=len(measured),
                )
                kept_best = min(measured[keep]) if len(keep) else math.inf
                judged[key].append(
                    {
                        "kept": len(keep) / len(measured),
                        "top": sum(tops),
                        "top_kept": sum(tops[i] for i in keep),
                        "best_ratio": float(kept_best / measured.min()),
                    }
                )
            calibration.add(samples)
    result: dict[str, Any] = {
        "records": len(tasks),
        "rounds": len(rounds_of(tasks)),
        "rank_correlation": float(np.mean(correlations)) if correlations else None,
    }
    for key, rounds in judged.items():
        top = sum(r["top"] for r in rounds)
        result[key] = {
            "filtered_rounds": len(rounds),
            "kept_share": float(np.mean([r["kept"] for r in rounds])) if rounds else None,
            "recall": sum(r["top_kept"] for r in rounds) / top if top else None,
            "worst_best_ratio": max((r["best_ratio"] for r in rounds), default=None),
        }
    return result


def print_table(rows: dict[str, Any]) -> None:
    print(f"\n{'run':<48}{'rho':>6}  {'by':<9}{'rounds':>7}{'kept':>7}{'recall':>8}{'best':>8}")
    for run, r in rows.items():
        rho = "-" if r["rank_correlation"] is None else f"{r['rank_correlation']:.2f}"
        for key in ("position", "gap"):
            j = r[key]
            if not j["filtered_rounds"]:
                print(f"{run[-48:]:<48}{rho:>6}  {key:<9}{0:>7}")
                continue
            print(
                f"{run[-48:]:<48}{rho:>6}  {key:<9}{j['filtered_rounds']:>7}"
                f"{j['kept_share']:>7.0%}{j['recall']:>8.0%}{j['worst_best_ratio']:>8.3f}"
            )
            run, rho = "", ""


if __name__ == "__main__":
    main()
