"""A run's seconds in Python's cycle collector with the library's parsed records frozen (the
product: orchestrator/collector.py) against the same run with every pass walking them.

    python benchmarks/collector_ab.py --runs RUN_DIR [RUN_DIR ...] [--model smallcnn]
        [--budget 1min] [--pairs 3] [--label vm-2core]

One library takes the records of the RUN_DIRs (run directories of any models, unbounded: a
library of many models), without a features file, so each run extracts what it trains on.
Each pair runs the same command in a child process on a fresh copy of it, once each way
(the side that goes first alternates); the "walked" side replaces the collector's two
contexts with ones that do nothing, as before they were. Each child counts the collector's
passes and seconds with gc.callbacks. Prints each run's library phase, collector seconds and
trials and the ratio of the medians; writes results/collector_ab-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from _common import ROOT, head_rev, run_child, write_result

CHILD = Path(__file__).parent / "_collector_run.py"


def library(runs: list[Path], root: Path) -> Path:
    """A library root holding this host's target folder with every run's records."""
    from tune_orchestrator.library import Library
    from tune_orchestrator.library.files import RECORDS, WORKLOADS
    from tune_orchestrator.model.targets import resolve_target

    folder = Library.for_target(resolve_target("llvm"), root)
    for run in runs:
        folder.add_files(run / WORKLOADS, run / RECORDS)
    size = sum((folder.path / name).stat().st_size for name in (WORKLOADS, RECORDS))
    print(f"library: {len(folder.read().records)} records, {size / 1e6:.1f} MB", flush=True)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    parser.add_argument("--model", default="smallcnn")
    parser.add_argument("--budget", default="1min")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--label", default="vm-2core")
    args = parser.parse_args()

    model = ROOT / "examples" / f"{args.model}.onnx"
    scratch = Path(tempfile.mkdtemp(prefix="collector-ab-"))
    sides: dict[str, list[dict]] = {"frozen": [], "walked": []}
    try:
        base = library(args.runs, scratch / "base")
        for pair in range(args.pairs):
            order = ["frozen", "walked"] if pair % 2 == 0 else ["walked", "frozen"]
            for side in order:
                root, out = scratch / f"{side}{pair}-lib", scratch / f"{side}{pair}-run"
                shutil.copytree(base, root)
                row = run_child(CHILD, [side, str(model), args.budget, str(root), str(out)])
                sides[side].append(row)
                print(
                    f"pair {pair} {side:6s}: library phase {row['library_s']:5.2f} s, "
                    f"collector {row['collector_s']:5.2f} s in {row['passes']} passes "
                    f"({row['full_passes']} full), {row['trials']} trials",
                    flush=True,
                )
                shutil.rmtree(root)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {
        side: {k: statistics.median(r[k] for r in rows) for k in ("library_s", "collector_s")}
        for side, rows in sides.items()
    }
    frozen, walked = medians["frozen"], medians["walked"]
    print(
        f"medians: library phase {frozen['library_s']:.2f} s against {walked['library_s']:.2f} s "
        f"({frozen['library_s'] / walked['library_s']:.2f}x), collector "
        f"{frozen['collector_s']:.2f} s against {walked['collector_s']:.2f} s"
    )
    payload = {
        "commit": head_rev(),
        "model": args.model,
        "budget": args.budget,
        "runs": [str(r) for r in args.runs],
        "sides": sides,
        "medians": medians,
    }
    write_result("collector_ab", args.label, payload)


if __name__ == "__main__":
    main()
