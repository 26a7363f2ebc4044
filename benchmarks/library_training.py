"""What starting the cost model on a tuning library costs a run, with the records' features
kept beside the library (features.npz) and without.

    python benchmarks/library_training.py [--library DIR] [--repeats 3] [--label vm-2core]

DIR is one target's library folder (default: this host's under $XDG_CACHE_HOME or ~/.cache).
It is copied to a scratch folder, and each pass trains a fresh predictor on the copy as a run
does before its first round (RunLibrary.train, fit included), with no clock share, so every
record a run would pick is learned: "read" with no features file (every record read into TVM
and its features extracted), "kept" with the file the read pass left. One read pass first is
not counted (TVM's first feature extraction loads its intrinsics); then the two alternate.
Prints the seconds and records of each pass and the median ratio; writes
results/library_training-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import tempfile
import time
from pathlib import Path

from _common import side_by_side

RESULTS = Path(__file__).parent / "results"


def train_once(library: object, target: object) -> dict[str, float]:
    from tune_orchestrator.config import Settings
    from tune_orchestrator.library import RunLibrary
    from tune_orchestrator.predictor import Predictor

    one = RunLibrary(library, Settings.load(None))
    one.read(target=target.target)
    start = time.perf_counter()
    one.train([Predictor()], target.target, [], fit=True)
    return {"seconds": time.perf_counter() - start, "records": one.trained_records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=Path, help="a target's library folder")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--label", default="vm-2core")
    args = parser.parse_args()

    from tune_orchestrator.library import Library
    from tune_orchestrator.library.features import FEATURES
    from tune_orchestrator.model.targets import resolve_target

    target = resolve_target("llvm")
    source = args.library or Library.for_target(target).path
    scratch = Path(tempfile.mkdtemp(prefix="library-training-"))
    copy = scratch / source.name
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns(FEATURES, ".lock"))
    library = Library(copy)
    train_once(library, target)  # not counted: TVM's first extraction
    passes: dict[str, list[dict[str, float]]] = {"read": [], "kept": []}
    for _ in range(args.repeats):
        (copy / FEATURES).unlink(missing_ok=True)
        passes["read"].append(train_once(library, target))
        passes["kept"].append(train_once(library, target))
    shutil.rmtree(scratch)
    seconds = {kind: [p["seconds"] for p in runs] for kind, runs in passes.items()}
    median = side_by_side(seconds, "kept", "read")
    ratio = median["kept"] / median["read"]
    print("records learned:", {kind: [p["records"] for p in runs] for kind, runs in passes.items()})
    stamp = datetime.date.today().isoformat()
    out = RESULTS / f"library_training-{args.label}-{stamp}.json"
    out.write_text(
        json.dumps(
            {
                "library": str(source),
                "records": sum(1 for _ in (source / "database_tuning_record.json").open()),
                "target": str(target.target),
                "passes": passes,
                "median_s": median,
                "kept_over_read": ratio,
                "label": args.label,
                "date": stamp,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
