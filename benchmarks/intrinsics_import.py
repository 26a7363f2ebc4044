"""What a run's first search pays to register TVM's tensor intrinsics, for a CPU target.

    python benchmarks/intrinsics_import.py [--repeats 3] [--label vm-2core]

`TuneContext()` needs `tvm.s_tir.tensor_intrin` imported; a run pays that once, inside its
first round's search. Each timing is a fresh interpreter that imports TVM and then calls
`orchestrator._tvm.load_tensor_intrinsics`: with no target (every intrinsic, as TVM's own
package import registers them) and with an llvm target (CUDA's left out until a CUDA target
needs them), interleaved `--repeats` times. Only the call is timed, not the interpreter's start
or TVM's import. Raw figures go to benchmarks/results/intrinsics_import-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys

from _common import ROOT

PROBE = r"""
import sys, time
import tvm
from tune_orchestrator import _tvm
target = tvm.target.Target({"kind": "llvm"}) if sys.argv[1] == "llvm" else None
start = time.perf_counter()
_tvm.load_tensor_intrinsics(target)
print(time.perf_counter() - start)
"""
MODES = ("all", "llvm")


def one(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], check=True, capture_output=True, text=True, cwd=ROOT
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.repeats):
        for mode in MODES:
            seconds[mode].append(one(mode))
    medians = {mode: statistics.median(values) for mode, values in seconds.items()}
    for mode in MODES:
        values = ", ".join(f"{s:.2f}" for s in seconds[mode])
        print(f"{mode:5s} median {medians[mode]:.2f} s  ({values})")
    print(f"llvm / all: {medians['llvm'] / medians['all']:.2f}x")
    date = dt.date.today().isoformat()
    out = ROOT / "benchmarks" / "results" / f"intrinsics_import-{args.label}-{date}.json"
    record = {
        "date": date,
        "label": args.label,
        "cores": os.cpu_count(),
        "seconds": seconds,
        "median_s": medians,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"raw figures: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
