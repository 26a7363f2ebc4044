"""Do estimate's forecasts hold? For each model, `orchestrate estimate --budget B --json`, then
`orchestrate --budget B` in a child process timed from outside; the run's report is set
against the forecast: spend in total and by phase, trials, and the latency reached.

    python benchmarks/estimate_accuracy.py [--budget 3min] [--models smallcnn,resnetish,mlpish]
                                           [--out benchmarks/results/estimate_accuracy-....json]

Each model's estimate sees no earlier run (a first run on this machine); with --learn, a
second estimate and run follow the first in the same runs directory, so the estimate learns
round costs and the tuning curve from it. Error is (forecast - actual) / actual; the goal is
the total spend within 25%.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from budget_wall import model_path  # noqa: E402

PHASES = ("import", "untuned", "search", "build", "measure", "learn", "compile", "check")
GOAL = 0.25


def orchestrate(args: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tune_orchestrator", *args], capture_output=True, text=True, cwd=ROOT
    )
    return done, time.monotonic() - start


def error(forecast: float | None, actual: float | None) -> float | None:
    if forecast is None or not actual:
        return None
    return (forecast - actual) / actual


def one(model: Path, budget: str, runs: Path, attempt: int) -> dict[str, Any]:
    common = ["--target", "llvm"]
    done, _ = orchestrate(
        ["estimate", *common, "--runs-dir", str(runs), "--budget", budget, "--json", str(model)]
    )
    if done.returncode != 0:
        raise RuntimeError(f"estimate failed on {model.name}:\n{done.stderr[-3000:]}")
    estimate = json.loads(done.stdout.strip().splitlines()[-1])
    (forecast,) = estimate["runs"]
    out = runs / f"{model.stem}-{attempt}"
    done, wall = orchestrate(
        ["--budget", budget, *common, "--quiet", "--no-library", "--out", str(out), str(model)]
    )
    report_path = out / "report.json"
    if done.returncode != 0 or not report_path.is_file():
        raise RuntimeError(f"the run failed on {model.name}:\n{done.stderr[-3000:]}")
    report = json.loads(report_path.read_text())
    phases = report["spend"]["phases"]
    tuned = (report.get("tuned") or {}).get("latency") or {}
    actual_latency = tuned.get("median_s")
    if (report.get("comparison") or {}).get("shipped") == "untuned":
        actual_latency = report["comparison"]["untuned"]["median_s"]
    row = {
        "model": model.stem,
        "attempt": attempt,
        "budget": budget,
        "forecast_refused": forecast["refused"],
        "forecast_total_s": forecast.get("total_s"),
        "actual_wall_s": wall,  # from outside: start to exit
        "metered_wall_s": report["spend"]["wall_s"],
        "total_error": error(forecast.get("total_s"), wall),
        "forecast_trials": forecast.get("trials"),
        "actual_trials": report["spend"]["trials"],
        "forecast_latency_s": forecast.get("latency_s"),
        "actual_latency_s": actual_latency,
        "latency_error": error(forecast.get("latency_s"), actual_latency),
        "phases": {
            p: {
                "forecast_s": (forecast.get("phases") or {}).get(p),
                "actual_s": phases.get(p, 0.0),
                "error": error((forecast.get("phases") or {}).get(p), phases.get(p)),
            }
            for p in PHASES
        },
        "round_source": estimate["round"]["source"],
        "stop_forecast": forecast.get("stop"),
        "stop_actual": report["summary"].get("stop_reason"),
    }
    return row


def show(row: dict[str, Any]) -> None:
    def pct(x: float | None) -> str:
        return "   n/a" if x is None else f"{x:+6.0%}"

    print(
        f"{row['model']:<10} run {row['attempt'] + 1} ({row['budget']}): total forecast "
        f"{row['forecast_total_s'] or 0:6.1f} s, actual {row['actual_wall_s']:6.1f} s "
        f"({pct(row['total_error'])}); trials {row['forecast_trials']} vs {row['actual_trials']}; "
        f"latency {pct(row['latency_error'])}",
        flush=True,
    )
    print(
        "    "
        + ", ".join(
            f"{p} {v['forecast_s'] or 0:.0f}/{v['actual_s']:.0f} s"
            for p, v in row["phases"].items()
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="3min")
    parser.add_argument("--models", default="smallcnn,resnetish,mlpish")
    parser.add_argument("--learn", action="store_true", help="a second estimate and run each")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--machine", default=f"{platform.node()}, {os.cpu_count()} cores")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="estimate-accuracy-") as tmp:
        work = Path(tmp)
        for name in args.models.split(","):
            model = model_path(name, work)
            runs = work / f"runs-{name}"
            runs.mkdir()
            for attempt in range(2 if args.learn else 1):
                rows.append(one(model, args.budget, runs, attempt))
                show(rows[-1])
    totals = [abs(r["total_error"]) for r in rows if r["total_error"] is not None]
    result = {
        "machine": args.machine,
        "date": time.strftime("%Y-%m-%d"),
        "load_1min": os.getloadavg()[0],
        "budget": args.budget,
        "goal": f"total spend within {GOAL:.0%}",
        "worst_total_error": max(totals) if totals else None,
        "within_goal": all(t <= GOAL for t in totals),
        "runs": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
