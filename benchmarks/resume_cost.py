"""What a resumed run spends reading its run directory back (rundir/restore.py): the way it
does now, and the ways it did before, side by side in one process.

    python benchmarks/resume_cost.py --run RUN_DIR [--repeats 2] [--label vm-2core]

RUN_DIR is a run whose records its session added to the tuning library (its report names the
library) and, for the "learned" pass, whose learned.jsonl was written as it measured. Each
pass restores its state with a fresh shared cost model:
- "before": the database read as any MetaSchedule database (TVM's from_json, then
  as_measure_candidate: two replays a record), every record's features extracted again;
- "library": each record replayed once (RunDatabase.each_stored), the features the library
  kept handed to the cost model;
- "learned" (now): the keys and features the run kept (learned.jsonl) and the library's;
  only each task's search's parents and the default schedules replayed.
The passes alternate; prints seconds and the median ratios and writes
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


def restore_once(run: Path, tasks: list, target: object, known: object, *, how: str) -> float:
    from tune_orchestrator.config import Settings
    from tune_orchestrator.host import host_cores
    from tune_orchestrator.predictor import Predictor
    from tune_orchestrator.rundir.database import RunDatabase
    from tune_orchestrator.rundir.restore import Known, restore
    from tune_orchestrator.search import make_cost_model
    from tune_orchestrator.search.strategy import most_parents

    settings = Settings.load(None)
    journal = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    database = RunDatabase(run / "database_workload.json", run / "database_tuning_record.json")
    cost_model = make_cost_model(settings, Predictor())
    given = {
        "before": (AnyDatabase(database), Known()),
        "library": (database, Known(library=known.library)),
        "learned": (database, known),
    }[how]
    start = time.perf_counter()
    restore(
        tasks,
        journal,
        given[0],
        cost_model=cost_model,
        target=target,
        parents=most_parents(settings),
        known=given[1],
        threads=host_cores(),
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
    from tune_orchestrator.rundir import RunDir
    from tune_orchestrator.rundir.learned import LearnedFile
    from tune_orchestrator.rundir.restore import Known

    config = json.loads((args.run / "config.json").read_text())
    report = json.loads((args.run / "report.json").read_text())
    target = resolve_target("llvm").target
    model = import_to_relax(load_model(Path(config["model"]["path"])))
    tasks = extract_tasks(fuse_for_tuning(model, target), target)
    library = Path(report["library"]["path"])
    tag = shelf_tag(target)
    known = Known(
        learned=LearnedFile.for_target(args.run / RunDir.LEARNED, target).read(),
        library=FeatureShelf(library / FEATURES, tag).entries,
    )
    restore_once(args.run, tasks, target, known, how="learned")  # not counted: TVM's first loads
    passes: dict[str, list[float]] = {"before": [], "library": [], "learned": []}
    for _ in range(args.repeats):
        for how in passes:
            passes[how].append(restore_once(args.run, tasks, target, known, how=how))
    records = report["summary"]["trials"]
    print(
        f"{config['model']['name']}: {records} trials, {len(known.learned)} kept in learned.jsonl"
    )
    median = side_by_side(passes, "learned", "before")
    ratios = {
        f"learned_over_{how}": median["learned"] / median[how] for how in ("before", "library")
    }
    print(", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items()))
    stamp = datetime.date.today().isoformat()
    out = RESULTS / f"resume_cost-{args.label}-{stamp}.json"
    result = {
        "run": str(args.run),
        "model": config["model"]["name"],
        "trials": records,
        "kept_features": len(known.library),
        "learned": len(known.learned),
        "passes": passes,
        "median_s": median,
        **ratios,
        "label": args.label,
        "date": stamp,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
