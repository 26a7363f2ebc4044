"""How the tuning library grows with the runs that add to it, with each workload's records
kept to `[library] keep_per_workload` and without a bound.

    python benchmarks/library_growth.py --runs RUN_DIR [RUN_DIR ...] [--label vm-2core]

Each RUN_DIR is a run directory (its database_workload.json and database_tuning_record.json).
For each side, a fresh library in a scratch folder takes the runs' records in turn, as the end
of each run adds them (Library.add_files); after each, a new process reads the library as a
run does before its first round (Library.read), and its seconds and peak memory are taken.
Prints a row per run and side; writes results/library_growth-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import write_result

READ = """
import json, sys, time
from pathlib import Path
from tune_orchestrator.library import Library
start = time.perf_counter()
contents = Library(Path(sys.argv[1])).read()
seconds = time.perf_counter() - start
# VmHWM: this process's peak resident memory (ru_maxrss keeps the forking parent's across exec)
status = Path("/proc/self/status").read_text().splitlines()
peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) * 1024
print(json.dumps({"records": len(contents.records), "read_s": seconds, "peak_bytes": peak}))
"""


def read_in_a_new_process(folder: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", READ, str(folder)], check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout.splitlines()[-1])


def grow(runs: list[Path], keep: int, folder: Path) -> list[dict[str, float]]:
    from tune_orchestrator.library import Library
    from tune_orchestrator.library.files import RECORDS, WORKLOADS

    library = Library(folder)
    rows = []
    for run in runs:
        start = time.perf_counter()
        added = library.add_files(run / WORKLOADS, run / RECORDS, keep=keep)
        add_s = time.perf_counter() - start
        size = sum((folder / name).stat().st_size for name in (WORKLOADS, RECORDS))
        row = {"run": run.name, "added": added, "add_s": add_s, "bytes": size}
        row.update(read_in_a_new_process(folder))
        rows.append(row)
        print(
            f"  {run.name:32s} +{added:5d} -> {row['records']:6d} records "
            f"{size / 1e6:6.1f} MB  add {add_s:5.2f} s  read {row['read_s']:5.2f} s  "
            f"peak {row['peak_bytes'] / 2**20:5.0f} MiB",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    parser.add_argument("--label", default="vm-2core")
    args = parser.parse_args()

    from tune_orchestrator.config import Settings

    keep = Settings.load(None).library.keep_per_workload
    scratch = Path(tempfile.mkdtemp(prefix="library-growth-"))
    sides = {}
    try:
        for name, bound in (("unbounded", 0), (f"keep {keep}", keep)):
            print(f"{name}:")
            sides[name] = grow(args.runs, bound, scratch / name.replace(" ", "-"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    last = {name: rows[-1] for name, rows in sides.items()}
    unbounded, bounded = last["unbounded"], last[f"keep {keep}"]
    print(
        f"after {len(args.runs)} runs: {bounded['bytes'] / unbounded['bytes']:.2f}x the bytes, "
        f"read in {bounded['read_s'] / unbounded['read_s']:.2f}x the time, "
        f"{bounded['peak_bytes'] / unbounded['peak_bytes']:.2f}x the peak memory"
    )
    payload = {"keep_per_workload": keep, "runs": [str(r) for r in args.runs], "sides": sides}
    write_result("library_growth", args.label, payload)


if __name__ == "__main__":
    main()
