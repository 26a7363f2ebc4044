"""Does a wall budget hold from the command to the prompt? `orchestrate --budget B` in a child
process, timed from outside (start to exit), for each budget and model.

    python benchmarks/budget_wall.py [--budgets 1,2,5,15] [--models smallcnn,resnetish]
                                     [--out benchmarks/results/budget_wall-....json]

Prints actual / budget per run and whether it ended within max(5%, 10 s) of the budget (an
early end is not an overshoot: a refused budget or an early stop ends well before it).
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

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from models import MODELS  # noqa: E402


def model_path(name: str, work: Path) -> Path:
    if name == "smallcnn":
        return ROOT / "examples" / "smallcnn.onnx"
    path = work / f"{name}.onnx"
    onnx.save(MODELS[name](), path)
    return path


def one_run(model: Path, minutes: float, work: Path) -> dict:
    budget_s = minutes * 60.0
    out = work / f"{model.stem}-{minutes:g}min"
    command = [sys.executable, "-m", "tune_orchestrator", "--budget", f"{minutes:g}min"]
    command += ["--target", "llvm", "--quiet", "--no-library", "--out", str(out), str(model)]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - start
    report = out / "report.json"
    summary = json.loads(report.read_text())["summary"] if report.is_file() else {}
    tolerance = max(0.05 * budget_s, 10.0)
    return {
        "model": model.stem,
        "budget_s": budget_s,
        "wall_s": wall,
        "ratio": wall / budget_s,
        "within": wall <= budget_s + tolerance,
        "exit_code": done.returncode,
        "metered_wall_s": summary.get("wall_s"),
        "trials": summary.get("trials"),
        "stop_reason": summary.get("stop_reason") or done.stderr.strip().splitlines()[-1:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="1,2,5,15", help="minutes, comma-separated")
    parser.add_argument("--models", default="smallcnn,resnetish")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--machine", default=f"{platform.node()}, {os.cpu_count()} cores")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="budget-wall-") as tmp:
        work = Path(tmp)
        for name in args.models.split(","):
            model = model_path(name, work)
            for minutes in [float(b) for b in args.budgets.split(",")]:
                row = one_run(model, minutes, work)
                rows.append(row)
                print(
                    f"{row['model']:<10} budget {minutes:>4g} min  wall {row['wall_s']:7.1f} s  "
                    f"ratio {row['ratio']:.3f}  {'within' if row['within'] else 'OVER'}  "
                    f"exit {row['exit_code']}  trials {row['trials']}",
                    flush=True,
                )
    result = {"machine": args.machine, "load_1min": os.getloadavg()[0], "runs": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
