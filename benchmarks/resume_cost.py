"""What a resumed run spends reading its run directory back (rundir/restore.py), the way it
does now and the way it did before each trace was replayed once and the library's features
were used, side by side in one process.

    python benchmarks/resume_cost.py --run RUN_DIR [--repeats 2] [--label vm-2core]

RUN_DIR is a finished run whose records its session added to the tuning library (its
report names the library). Each pass restores its state with a fresh shared cost model:
"now" reads each record with one replay (RunDatabase.each_candidate) and hands the features
the library kept to the cost model; "before" reads the same database as any MetaSchedule
database (TVM's from_json, then as_measure_candidate: two replays) and extracts every
record's features again. The passes alternate; prints seconds and the median ratio and writes
results/resume_cost-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

from _common import side_by_side

RESULTS = Path(__file__).parent / "results"


class AnyDatabase:
    """The run's database with only MetaSchedule's interface: restore's path for others."""

    def __init__(self, database: object) -> None:
        self.database = database

    def get_all_tuning_records(self) -> list:
        return self.database.get_all_tuning_records()


def restore_once(run: Path, tasks: list, target: object, features: dict, *, now: bool) -> float:
    from tune_orchestrator.config import Settings
    from tune_orchestrator.predictor import Predictor
    from tune_orchestrator.rundir.database import RunDatabase
    from tune_orchestrator.rundir.restore import restore
    from tune_orchestrator.search import make_cost_model

    journal = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    database = RunDatabase(run / "database_workload.json", run / "database_tuning_record.json")
    cost_model = make_cost_model(Settings.load(None), Predictor())
    start = time.perf_counter()
    restore(
        tasks,
        journal,
        database if now else AnyDatabase(database),
        cost_model=cost_model,
        target=target,
        features=features if now else None,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--label", default="vm-2core")
    args = parser.parse_args()

    from tune_orchestrator.library.features import FEATURES, FeatureShelf, shelf_tag
    from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
    from tune_orchestrator.model.loading import load_model
    from tune_orchestrator.model.targets import resolve_target
    from tune_orchestrator.model.tasks import extract_tasks

    config = json.loads((args.run / "config.json").read_text())
    report = json.loads((args.run / "report.json").read_text())
    target = resolve_target("llvm").target
    model = import_to_relax(load_model(Path(config["model"]["path"])))
    tasks = extract_tasks(fuse_for_tuning(model, target), target)
    library = Path(report["library"]["path"])
    features = FeatureShelf(library / FEATURES, shelf_tag(target)).entries
    restore_once(args.run, tasks, target, features, now=True)  # not counted: TVM's first loads
    passes: dict[str, list[float]] = {"before": [], "now": []}
    for _ in range(args.repeats):
        passes["before"].append(restore_once(args.run, tasks, target, features, now=False))
        passes["now"].append(restore_once(args.run, tasks, target, features, now=True))
    records = report["summary"]["trials"]
    print(f"{config['model']['name']}: {records} trials")
    median = side_by_side(passes, "now", "before")
    ratio = median["now"] / median["before"]
    stamp = datetime.date.today().isoformat()
    out = RESULTS / f"resume_cost-{args.label}-{stamp}.json"
    result = {
        "run": str(args.run),
        "model": config["model"]["name"],
        "trials": records,
        "kept_features": len(features),
        "passes": passes,
        "median_s": median,
        "now_over_before": ratio,
        "label": args.label,
        "date": stamp,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
