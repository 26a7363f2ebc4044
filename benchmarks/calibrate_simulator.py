"""The simulated GPU against the real one: write its calibration from one real run's report,
and check what it predicts against the reports of other real runs.

    python benchmarks/calibrate_simulator.py calibrate REPORT.json --name nvidia-h100
    python benchmarks/calibrate_simulator.py check REPORT.json [REPORT.json ...]
                                             [--name nvidia-h100] [--seeds 5] [--out F.json]

`calibrate` reads the report of a real tuning run on a GPU (`orchestrate ... --report`) and
writes measure/calibration/<name>.json: the step costs the simulated GPU takes as given, read
from the report or fitted by replaying it (measure/replay.py says which). `check` replays each
report's measuring on the simulated GPU so calibrated and prints what emerges against what the
real run reported: the window's busy share, candidates per second and the wait per candidate
(the target is within 30% each), as the mean over `--seeds` replays (each draws its own
latencies); the timed seconds and repeats per candidate follow, for context.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from _common import ROOT

CALIBRATION = ROOT / "measure" / "calibration"


def calibrate(report_file: Path, name: str) -> Path:
    from tune_orchestrator.measure.replay import calibration

    report = json.loads(report_file.read_text())
    out = CALIBRATION / f"{name}.json"
    out.write_text(
        json.dumps(
            {
                "source": f"benchmarks/results/{report_file.name}",
                "device": report["target"]["device"],
                "how": "python benchmarks/calibrate_simulator.py calibrate "
                f"benchmarks/results/{report_file.name} --name {name} "
                "(see measure/replay.py: calibration)",
                "simulated_gpu": calibration(report),
            },
            indent=2,
        )
        + "\n"
    )
    return out


def check(report_file: Path, name: str, seeds: int) -> dict[str, Any]:
    from tune_orchestrator.measure import SimulatedGpu
    from tune_orchestrator.measure.replay import compare

    report = json.loads(report_file.read_text())
    runs = [compare(report, SimulatedGpu.calibrated(name), seed) for seed in range(seeds)]
    figures = {
        key: {
            "simulated": statistics.fmean(r[key]["simulated"] for r in runs),
            "real": runs[0][key]["real"],
            "ratios": [r[key]["ratio"] for r in runs],
        }
        for key in runs[0]
    }
    for f in figures.values():
        f["ratio"] = f["simulated"] / f["real"]
    return {
        "report": report_file.name,
        "device": report["target"]["device"],
        "calibration": name,
        "seeds": seeds,
        "figures": figures,
    }


def main() -> None:
    from tune_orchestrator.measure.replay import EMERGENT

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate")
    cal.add_argument("report", type=Path)
    cal.add_argument("--name", required=True)
    chk = sub.add_parser("check")
    chk.add_argument("reports", type=Path, nargs="+")
    chk.add_argument("--name", default="nvidia-h100")
    chk.add_argument("--seeds", type=int, default=5)
    chk.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.command == "calibrate":
        print(f"wrote {calibrate(args.report, args.name).relative_to(ROOT)}")
        return
    results = [check(r, args.name, args.seeds) for r in args.reports]
    for r in results:
        print(f"{r['report']} ({r['device']}), simulated with {r['calibration']}, "
              f"mean of {r['seeds']} replays:")  # fmt: skip
        for key, f in r["figures"].items():
            flag = ""
            if key in EMERGENT:
                flag = "  within 30%" if abs(f["ratio"] - 1) <= 0.3 else "  NOT within 30%"
            spread = f"{min(f['ratios']):.2f}-{max(f['ratios']):.2f}"
            print(f"  {key:<18}{f['simulated']:>10.4g} simulated {f['real']:>10.4g} real "
                  f"ratio {f['ratio']:.2f} (replays {spread}){flag}")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
