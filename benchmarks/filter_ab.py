"""The learned filter against none: pairs of the same cold run, `--filter xgb` and `--filter
none`, and how soon each reached the other's final latency.

    python benchmarks/filter_ab.py [--models smallcnn:3min,resnetish:3min] [--pairs 3]
                                   [--repeats 30] [--label vm-2core]

Each MODEL:BUDGET runs `--pairs` times with each filter, alternating (which goes first
alternates too), each in a fresh process with its own run directory and no tuning library.
Per pair, from each run's convergence curve (the model latency the run estimates after each
round): the wall at which the xgb run first estimated the none run's final latency or better,
over the wall the none run took to reach it (its first round at that latency); under 1: the
filter got there sooner; no figure when it never got there. Then every shipped model.so is
timed interleaved (stock TVM, `--repeats` timings each). Also printed: the audited recall of
each round's true top 10% and the share of proposals kept. Raw figures go to
benchmarks/results/filter_ab-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from _common import ROOT, time_databases
from ab import model_file, run

FILTERS = ("xgb", "none")


def reached_s(curve: list[dict[str, Any]], latency_s: float) -> float | None:
    """The wall at which a run's estimated latency was first `latency_s` or better."""
    for point in curve:
        if point.get("latency_s") is not None and point["latency_s"] <= latency_s * (1 + 1e-9):
            return point["wall_s"]
    return None


def pair_figures(xgb: dict[str, Any], none: dict[str, Any]) -> dict[str, Any]:
    """How soon each run of a pair reached the other's final estimated latency."""
    final = {
        "xgb": xgb["convergence"][-1]["latency_s"],
        "none": none["convergence"][-1]["latency_s"],
    }
    xgb_at = reached_s(xgb["convergence"], final["none"])
    none_at = reached_s(none["convergence"], final["none"])
    ratio = xgb_at / none_at if xgb_at is not None and none_at else None
    return {"final_s": final, "xgb_reached_s": xgb_at, "none_reached_s": none_at, "ratio": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smallcnn:3min,resnetish:3min")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--label", default=platform.node() or "host")
    args = parser.parse_args()

    from tune_orchestrator.model.targets import resolve_target

    target_json = json.dumps(resolve_target("llvm").to_json())
    base = ROOT / "benchmarks" / "work" / f"filter_ab-{time.strftime('%Y%m%d-%H%M%S')}"
    out = ROOT / "benchmarks" / "results" / f"filter_ab-{args.label}-{dt.date.today()}.json"
    results: dict[str, Any] = {}
    for item in args.models.split(","):
        name, budget = item.split(":")
        model = model_file(name)
        runs: dict[str, list[dict[str, Any]]] = {f: [] for f in FILTERS}
        for k in range(args.pairs):
            for f in FILTERS if k % 2 == 0 else FILTERS[::-1]:
                print(f"{name} {budget}: pair {k + 1}/{args.pairs}, --filter {f} ...", flush=True)
                folder = base / f"{name}-{budget}-{f}-{k}"
                runs[f].append(
                    run(None, "tune_orchestrator", model, budget, folder, ("--filter", f))
                )
        pairs = [pair_figures(x, n) for x, n in zip(runs["xgb"], runs["none"], strict=True)]
        libraries = {f"{f}-{k}": Path(r["library"]) for f in FILTERS for k, r in enumerate(runs[f])}
        timed = time_databases(model, target_json, {}, args.repeats, libraries=libraries)
        results[item] = {"runs": runs, "pairs": pairs, "timed": timed}
        out.write_text(json.dumps({"models": results}, indent=2) + "\n")
        report(item, runs, pairs, timed)
    print(f"raw figures: {out.relative_to(ROOT)}")


def report(item: str, runs: dict[str, list[dict[str, Any]]], pairs: list, timed: dict) -> None:
    for k, pair in enumerate(pairs):
        ratio = "never" if pair["ratio"] is None else f"{pair['ratio']:.2f}x"
        shown = ", ".join(
            f"{f} {timed[f'{f}-{k}']['median_s'] * 1e3:.3f} ms ({runs[f][k]['trials']} trials)"
            for f in FILTERS
        )
        print(f"{item} pair {k + 1}: {shown}; xgb's time to none's final latency: {ratio}")
    audits = [r["filter"] for r in runs["xgb"] if r["filter"]]
    recalls = [a["recall"] for a in audits if a.get("recall") is not None]
    kept = sum(a["kept"] for a in audits) / max(1, sum(a["proposed"] for a in audits))
    ratios = [p["ratio"] for p in pairs if p["ratio"] is not None]
    median = f"{statistics.median(ratios):.2f}x" if ratios else "none reached"
    shown = ", ".join(f"{r:.2f}" for r in recalls) or "not audited"
    print(f"{item}: median time-to-quality ratio {median}; recall {shown}; kept {kept:.0%}")


if __name__ == "__main__":
    main()
