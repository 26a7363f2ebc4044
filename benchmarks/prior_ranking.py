"""How well do shipped priors rank the candidates of runs they never saw?

    python benchmarks/prior_ranking.py --priors A.json B.json --runs RUN_DIR ... [--first 64]
                                       [--out F]

Every run directory's measured records are scored by each prior (orchestrator/prior.py), a
workload at a time; with `--first N` only each workload's first N records (its first round,
drawn at random in a run with the prior off: the fairest test of a prior). Per workload, and
as means over the workloads of all runs: the rank correlation of the prior's score with the
measured latency, and what a first round of 16 would have bought had the prior chosen it from
these records - the best latency among its 16 top scored, over the workload's best - against
16 drawn at random (the exact expectation). Later records were chosen by the runs' own
search, so over all records the figures compare priors with each other on the same
candidates, not with the search they would steer.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROUND = 16
LEAST = 2 * ROUND  # workloads with fewer finite records are left out


def random_best(latencies: np.ndarray, k: int) -> float:
    """The expected best of k records drawn at random without replacement."""
    ordered = np.sort(latencies)
    n = len(ordered)
    chances = [math.comb(n - 1 - i, k - 1) / math.comb(n, k) for i in range(n)]
    return float(np.dot(chances, ordered))


def workload_figures(scores: np.ndarray, latencies: np.ndarray) -> dict[str, float]:
    best = float(latencies.min())
    top = np.argsort(scores, kind="stable")[:ROUND]
    return {
        "records": len(latencies),
        "rho": float(spearmanr(-scores, 1.0 / latencies).statistic),
        "top16": float(latencies[top].min()) / best,
        "random16": random_best(latencies, ROUND) / best,
    }


def score_run(
    priors: dict[str, object], folder: Path, target: object, first: int
) -> dict[str, dict]:
    from tune_orchestrator.predictor import record_features, run_records
    from tune_orchestrator.run.skipped import Skipped

    records = run_records(folder, target, Skipped())
    keys, features, latencies = record_features(records, target)
    by_key: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        if math.isfinite(latencies[i]) and not np.isnan(features[i]).all():
            by_key.setdefault(key, []).append(i)
    out = {}
    for key, members in by_key.items():
        members = members[:first] if first else members
        if len(members) < LEAST:
            continue
        lat = latencies[members]
        feats = [features[i] for i in members]
        out[key] = {
            name: workload_figures(fitted.predict(feats), lat) for name, fitted in priors.items()
        }
    return out


def summary(per_run: dict[str, dict]) -> dict[str, dict[str, float]]:
    rows: dict[str, list[dict]] = {}
    for workloads in per_run.values():
        for figures in workloads.values():
            for name, fig in figures.items():
                rows.setdefault(name, []).append(fig)
    return {
        name: {
            "workloads": len(figs),
            "mean_rho": float(np.mean([f["rho"] for f in figs])),
            "geomean_top16": float(np.exp(np.mean([math.log(f["top16"]) for f in figs]))),
            "geomean_random16": float(np.exp(np.mean([math.log(f["random16"]) for f in figs]))),
            "top16_at_best": sum(f["top16"] == 1.0 for f in figs),
        }
        for name, figs in rows.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--priors", nargs="+", type=Path, required=True)
    parser.add_argument("--runs", nargs="+", type=Path, required=True)
    parser.add_argument("--first", type=int, default=0, help="each workload's first N records")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from tune_orchestrator.model.targets import resolve_target
    from tune_orchestrator.prior import about, load_prior

    target = resolve_target("llvm").target
    priors = {str(p): load_prior(p) for p in args.priors}
    per_run = {str(folder): score_run(priors, folder, target, args.first) for folder in args.runs}
    result = {
        "priors": {str(p): about(p) for p in args.priors},
        "summary": summary(per_run),
        "runs": per_run,
    }
    print(json.dumps(result["summary"], indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
