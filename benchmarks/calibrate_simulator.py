"""The simulated GPU against the real one: write its calibration from one real-GPU figure file,
and check what it predicts against the reports of real tuning runs.

    python benchmarks/calibrate_simulator.py calibrate ENGINE.json --name nvidia-h100
    python benchmarks/calibrate_simulator.py check REPORT.json [REPORT.json ...]
                                             [--name nvidia-h100] [--old-engine]

`calibrate` reads a `benchmarks/gpu_engine.py` result and writes
measure/calibration/<name>.json: the per-step costs of our engine timing candidates one at a
time (its "isolated" run: one worker, nothing else on the GPU), which is what the simulator
takes as given. `check` replays each report's measuring on the simulated GPU so calibrated:
its tasks' candidates (as many as each task measured, in rounds of 64, latencies drawn around
the task's best), the run's timing rules, the DOP its engine reached; and prints what emerges
against what the real run reported, in the spans after the first (the first waited for the
workers' start): GPU busy share, waiting per candidate and candidates per second, each as a
ratio (the target is within 30%). `--old-engine` simulates the engine those reports came
from: the check a second shared hold after the timing, all workers started up front.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path
from typing import Any

from _common import ROOT

CALIBRATION = ROOT / "measure" / "calibration"


def calibrate(engine_file: Path, name: str) -> Path:
    figures = json.loads(engine_file.read_text())["engine"]
    alone = figures["engines"]["isolated"]
    steps = alone["step_s"]
    out = CALIBRATION / f"{name}.json"
    out.write_text(
        json.dumps(
            {
                "source": f"benchmarks/results/{engine_file.name}: our engine alone (one worker, "
                f"DOP 1, no racing) on {alone['candidates']} built candidates, "
                f"{figures['device']}",
                "how": "load_s, check_s: its mean load and check per candidate; prepare_s: "
                "allocate + warm_up + check (one shared hold); worker_start_s: its worker's "
                "start; shared_contention: 0 (not measured apart from the host's load)",
                "simulated_gpu": {
                    "load_s": round(steps["load"], 6),
                    "prepare_s": round(steps["allocate"] + steps["warm_up"] + steps["check"], 6),
                    "prepare_spread": 0.3,
                    "check_s": round(steps["check"], 6),
                    "worker_start_s": round(alone["workers_ready_s"]["first"], 2),
                    "shared_contention": 0.0,
                    "noise": 0.01,
                },
            },
            indent=2,
        )
        + "\n"
    )
    return out


def rounds_of(report: dict[str, Any], seed: int = 0) -> tuple[list, dict[str, float]]:
    """The run's measuring as rounds: (inputs, the task's best) per round of up to 64, and
    each candidate's latency, drawn log-normally above the task's best (most candidates are
    slower than the best; the real runs raced 55-62% of theirs)."""
    from tune_orchestrator.measure import MeasureInput

    rng, latency, rounds = random.Random(seed), {}, []
    for task in report["tasks"]:
        best = task["best_s"] or task["untuned_s"]
        for start in range(0, task["trials"], 64):
            names = [f"{task['name']}-{start + i}" for i in range(min(64, task["trials"] - start))]
            for name in names:
                latency[name] = best * math.exp(abs(rng.gauss(0.0, 1.0)))
            rounds.append(([MeasureInput(n, (("float32", (4,)),)) for n in names], best))
    rng.shuffle(rounds)
    return rounds, latency


def steady(measurement: dict[str, Any], spans: bool = True) -> dict[str, float]:
    """Busy share and candidates per second over the spans after the first, or (`spans`
    False, or reports that did not time their spans) over the whole measure phase."""
    later = measurement["batches"][1:]
    if not spans or not all("seconds" in s for s in later):
        return {"busy": measurement["busy"], "candidates_per_s": measurement["candidates_per_s"]}
    seconds = sum(s["seconds"] for s in later)
    busy = sum(s["busy"] * s["seconds"] for s in later) / seconds
    return {"busy": busy, "candidates_per_s": sum(s["candidates"] for s in later) / seconds}


def check(report_file: Path, name: str, old_engine: bool) -> dict[str, Any]:
    from tune_orchestrator.measure import DopConfig, DopController, SimulatedEngine, SimulatedGpu
    from tune_orchestrator.measure._timing import TimingPlan

    report = json.loads(report_file.read_text())
    real = report["measurement"]
    m = report["settings"]["measure"]
    plan = TimingPlan(
        repeat_ms=m["gpu_repeat_ms"],
        min_repeats=m["min_repeats"],
        max_repeats=m["max_repeats"],
        max_rel_ci=m["max_rel_ci"],
        race=m["race"],
        race_after=m["race_after"],
        race_margin=m["race_margin"],
    )
    gpu = SimulatedGpu.calibrated(name, check_after_timing=old_engine)
    rounds, latency = rounds_of(report)
    engine = SimulatedEngine(
        gpu,
        DopController(DopConfig(max_dop=real["ceiling"]), seed=0),
        plan=plan,
        latency=lambda item: latency[item.artifact],
        warm=None if old_engine else 1,
    )
    for inputs, best in rounds:
        engine.measure(inputs, best_s=best)
    simulated = engine.stats()
    spans = all("seconds" in s for s in real["batches"][1:])
    ours, theirs = steady(simulated, spans), steady(real, spans)
    rows = {
        "busy": (ours["busy"], theirs["busy"]),
        "candidates_per_s": (ours["candidates_per_s"], theirs["candidates_per_s"]),
        "wait_s": (simulated["step_s"]["wait"], real["step_s"]["wait"]),
        "timed_s": (simulated["step_s"]["timed"], real["step_s"]["timed"]),
        "repeats": (simulated["repeats"], real["repeats"]),
    }
    return {
        "report": report_file.name,
        "device": report["target"]["device"],
        "calibration": name,
        "old_engine": old_engine,
        "over": "the spans after the first" if spans else "the whole measure phase",
        "figures": {k: {"simulated": s, "real": r, "ratio": s / r} for k, (s, r) in rows.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate")
    cal.add_argument("engine", type=Path)
    cal.add_argument("--name", required=True)
    chk = sub.add_parser("check")
    chk.add_argument("reports", type=Path, nargs="+")
    chk.add_argument("--name", default="nvidia-h100")
    chk.add_argument("--old-engine", action="store_true")
    chk.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.command == "calibrate":
        print(f"wrote {calibrate(args.engine, args.name).relative_to(ROOT)}")
        return
    results = [check(r, args.name, args.old_engine) for r in args.reports]
    for r in results:
        print(f"{r['report']} ({r['device']}), simulated with {r['calibration']}, {r['over']}:")
        for key, f in r["figures"].items():
            flag = (
                ""
                if key in ("timed_s", "repeats")
                else ("  within 30%" if abs(f["ratio"] - 1) <= 0.3 else "  NOT within 30%")
            )
            print(f"  {key:<18}{f['simulated']:>10.4g} simulated {f['real']:>10.4g} real "
                  f"ratio {f['ratio']:.2f}{flag}")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
