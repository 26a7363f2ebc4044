"""The fixed phases a run pays whatever its budget, forecast before any work against what they
took, and whether a budget the up-front check refuses would really not have fitted.

    python benchmarks/fixed_phases.py [--models smallcnn,mlpish,...] [--trials 16]
                                      [--refusals] [--label vm-2core]
    python benchmarks/fixed_phases.py --accepted [--models ...] [--label vm-2core]

For each model (benchmarks/models.py, or smallcnn: the example), on this CPU (llvm):
1. a run of `--trials` trials (`orchestrate --budget NtrialS --no-library`), whose report says
   what each phase took;
2. the forecast that run made before any work (orchestrator/forecast/overheads.py, from the
   tasks and what its import took): the untuned baseline, the compile phase (the untuned and
   the tuned model: two compiles), the check phase (two checks, the untuned model timed once at
   the start and both in turn at the end), the report; and the budget the up-front check asks
   for; the error of each, (forecast - actual) / actual (the target: within 30%);
3. with --refusals, a run at 90% of the budget the check asks for, the check switched off (in
   a child process that skips Session._refuse_too_small): a refusal is right when that run
   does not fit (it overshoots its budget or tunes nothing), false when it tunes within it.
With --accepted, only the promise "refused up front, or tuned" is checked, the check on: a run
refused at 1 s says what it needs in all (its `refused` event's `needed_s`); a run at that plus
5% must measure a first round (>= 16 trials) and exit 0, a run at that minus 5% must be refused
(exit 3). Raw figures go to benchmarks/results/fixed_phases-<label>-<date>.json (with
--accepted, fixed_phases-accepted-<label>-<date>.json).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import ROOT, scratch

MODELS = (
    "smallcnn,mlpish,resnetish,smallvgg,mobilenetish,tinybert,resnet18ish,squeezenetish,"
    "mobilenetv2ish,inceptionish,densenetish"
)
TOLERANCE = 0.3


def model_file(name: str) -> Path:
    if name == "smallcnn":
        return ROOT / "examples" / "smallcnn.onnx"
    from models import write

    return write(name, ROOT / "benchmarks" / "work")


def forecast(model: Path, import_s: float) -> dict[str, Any]:
    """The run's own forecast of its fixed phases and the budget its up-front check asks for,
    from the tasks and the ONNX graph; `import_s`, what the run's import took, counts in it."""
    from tune_orchestrator.config import Settings
    from tune_orchestrator.deploy.timing import Timing
    from tune_orchestrator.forecast import overheads
    from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
    from tune_orchestrator.model.loading import load_model
    from tune_orchestrator.model.targets import resolve_target
    from tune_orchestrator.model.tasks import extract_tasks

    target = resolve_target("llvm").target
    onnx_model = load_model(model)
    tasks = extract_tasks(fuse_for_tuning(import_to_relax(onnx_model), target), target)
    settings = Settings.load()
    fixed = overheads.forecast_fixed(
        tasks,
        device_type="cpu",
        device_present=True,
        timing=Timing.from_settings(settings.check),
        graph_ops=onnx_model.op_counts(),
    )
    first = overheads.upfront_first_round_s(
        settings,
        tasks=len(tasks),
        untuned_s=fixed.untuned_s,
        gpus=1,
        filtered=settings.tune.filter != "none",
        device_type="cpu",
    )
    minimum = overheads.upfront_minimum_s(
        fixed, baseline=True, untuned_model=True, first_round=first
    )
    return {
        "tasks": len(tasks),
        "calls": sum(t.weight for t in tasks),
        "gflop": sum(t.weight * t.flops for t in tasks) / 1e9,
        "import_s": import_s,
        "phases": {
            "untuned": fixed.untuned_s,
            "compile": 2 * fixed.compile_s,
            "check": 2 * fixed.check_s + 3 * fixed.timing_s,
            "report": fixed.report_s,
        },
        "upfront_s": import_s + minimum,
    }


def orchestrate(model: Path, budget: str, out: Path, refuse: bool = True) -> dict[str, Any]:
    """A run in a child process: its exit code, wall, trials and phases (or, when refused, the
    seconds its refusal said it needs)."""
    code = (
        "import sys\n"
        "from tune_orchestrator.run.session import Session\n"
        + ("" if refuse else "Session._refuse_too_small = lambda *a, **k: None\n")
        + "from tune_orchestrator.cli.commands import main\n"
        "main()\n"
    )
    command = [sys.executable, "-c", code, "--budget", budget, "--out", str(out), "--json"]
    start = time.monotonic()
    done = subprocess.run(
        [*command, "--no-library", "-q", str(model)], capture_output=True, text=True
    )
    wall = time.monotonic() - start
    report = out / "report.json"
    if not report.is_file():
        refused = [e for e in _events(done.stdout) if e.get("event") == "refused"]
        needed = refused[0]["needed_s"] if refused else None
        return {"exit": done.returncode, "wall_s": wall, "trials": 0, "needed_s": needed}
    data = json.loads(report.read_text())
    return {
        "exit": done.returncode,
        "wall_s": wall,
        "spent_s": data["spend"]["wall_s"],
        "trials": data["summary"]["trials"],
        "phases": data["phases"],
    }


def _events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def errors(predicted: dict[str, float], actual: dict[str, float]) -> dict[str, float | None]:
    return {
        phase: (p - actual[phase]) / actual[phase] if actual.get(phase) else None
        for phase, p in predicted.items()
    }


def refusal(model: Path, upfront_s: float) -> dict[str, Any]:
    """A run at 90% of what the check asks for, with the check off: does it fit?"""
    seconds = max(1, int(0.9 * upfront_s))
    run = orchestrate(model, f"{seconds}s", scratch() / "refused", refuse=False)
    fits = run["exit"] == 0 and run["trials"] > 0 and run["wall_s"] <= seconds * 1.05
    return {"budget_s": seconds, **run, "would_have_fitted": fits}


def accepted(model: Path) -> dict[str, Any]:
    """The run's own minimum (refused at 1 s), then runs at it plus and minus 5%."""
    needed = orchestrate(model, "1s", scratch() / "asked")["needed_s"]
    above = orchestrate(model, f"{1.05 * needed:.1f}s", scratch() / "above")
    below = orchestrate(model, f"{0.95 * needed:.1f}s", scratch() / "below")
    return {
        "needed_s": needed,
        "above": above,
        "below": below,
        "tuned_above": above["exit"] == 0 and above["trials"] >= 16,
        "refused_below": below["exit"] == 3,
    }


def check_accepted(names: list[str], out: Path) -> None:
    rows = {}
    for name in names:
        row = rows[name] = accepted(model_file(name))
        above, below = row["above"], row["below"]
        print(f"{name}: needs {row['needed_s']:.1f} s; at +5%: exit {above['exit']}, "
              f"{above['trials']} trials in {above['wall_s']:.1f} s; at -5%: exit {below['exit']}",
              flush=True)  # fmt: skip
        out.write_text(json.dumps({"machine": platform.processor(), "rows": rows}, indent=2))
    tuned = [n for n, r in rows.items() if r["tuned_above"]]
    refused = [n for n, r in rows.items() if r["refused_below"]]
    print(f"at +5%: {len(tuned)} of {len(rows)} measured a first round and shipped; "
          f"at -5%: {len(refused)} of {len(rows)} refused")  # fmt: skip
    print(f"raw figures: {out.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--refusals", action="store_true")
    parser.add_argument("--accepted", action="store_true")
    parser.add_argument("--label", default=platform.node() or "host")
    args = parser.parse_args()
    results = ROOT / "benchmarks" / "results"
    if args.accepted:
        out = results / f"fixed_phases-accepted-{args.label}-{dt.date.today()}.json"
        return check_accepted(args.models.split(","), out)
    out = results / f"fixed_phases-{args.label}-{dt.date.today()}.json"
    rows = {}
    for name in args.models.split(","):
        model = model_file(name)
        run = orchestrate(model, f"{args.trials}trials", scratch() / "run")
        made = forecast(model, run["phases"]["import"])
        actual = {phase: run["phases"].get(phase, 0.0) for phase in made["phases"]}
        row = {**made, "actual": actual, "errors": errors(made["phases"], actual), "run": run}
        if args.refusals:
            row["refusal"] = refusal(model, made["upfront_s"])
        rows[name] = row
        shown = ", ".join(
            f"{p} {made['phases'][p]:.1f}/{actual[p]:.1f} s ({e:+.0%})"
            for p, e in row["errors"].items()
            if e is not None
        )
        print(f"{name} ({made['tasks']} tasks): forecast/actual {shown}", flush=True)
        if args.refusals:
            r = row["refusal"]
            print(f"  at {r['budget_s']} s (the check asks {made['upfront_s']:.0f} s), the check "
                  f"off: exit {r['exit']}, {r['trials']} trials, {r['wall_s']:.0f} s: "
                  f"{'a false refusal' if r['would_have_fitted'] else 'rightly refused'}",
                  flush=True)  # fmt: skip
        out.write_text(json.dumps({"machine": platform.processor(), "rows": rows}, indent=2))
    within = [
        abs(e) <= TOLERANCE for r in rows.values() for e in r["errors"].values() if e is not None
    ]
    models = [
        all(abs(e) <= TOLERANCE for e in r["errors"].values() if e is not None)
        for r in rows.values()
    ]
    print(f"{sum(within)} of {len(within)} phase forecasts within {TOLERANCE:.0%}; every phase "
          f"within it on {sum(models)} of {len(models)} models")  # fmt: skip
    if args.refusals:
        false = [n for n, r in rows.items() if r["refusal"]["would_have_fitted"]]
        print(f"false refusals: {len(false)} of {len(rows)} ({', '.join(false) or 'none'})")
    print(f"raw figures: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
