"""Train the prior shipped with the package (orchestrator/prior.py) on this machine.

    python benchmarks/train_prior.py [--models MODEL:BUDGET,...] [--runs DIR ...]
                                     [--out orchestrator/priors]

Each MODEL:BUDGET (by default priorcnn:640trials,priorcnn2:640trials,priorbert:480trials) is
tuned cold (`--no-library`, the prior off, a fresh process) by this
checkout; `--runs` adds earlier run directories instead of or beside them. One predictor is
trained on all their records, as a warm start trains on a run directory's, and saved as
`<out>/llvm-<arch>.json`, with `llvm-<arch>.about.json` saying what it learned from. The
corpus models (benchmarks/models.py) are of none of the benchmark models' shapes, so the
benchmarks measure what the prior carries across models, not what it remembers of them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path

from _common import ROOT, head_rev
from ab import model_file, run

_OFF = "[search]\nprior = false\n"


def tune(models: str, work: Path) -> list[Path]:
    """Run directories of the corpus models, each tuned cold with the prior off."""
    config = work / "prior-off.toml"
    config.write_text(_OFF)
    runs = []
    for item in filter(None, models.split(",")):
        name, budget = item.split(":")
        print(f"{name} {budget} ...", flush=True)
        out = work / name
        done = run(
            None, "tune_orchestrator", model_file(name), budget, out, ("--config", str(config))
        )
        print(
            f"  {done['trials']} trials in {done['wall_s']:.0f} s, exit {done['exit']}", flush=True
        )
        runs.append(out)
    return runs


def train(runs: list[Path], out: Path) -> dict:
    """One predictor trained on every run's records, saved under `out`; what it learned from."""
    from tune_orchestrator.model.targets import host_arch, resolve_target
    from tune_orchestrator.predictor import Predictor, feature_width, learn_records, run_records
    from tune_orchestrator.provenance import cpu_model, tvm_version
    from tune_orchestrator.run.skipped import Skipped

    target = resolve_target("llvm").target
    predictor = Predictor(seed=0)
    skipped = Skipped()
    sources = []
    for k, folder in enumerate(runs):
        records = run_records(folder, target, skipped)
        workloads = learn_records(
            [predictor], records, target, source=f"corpus{k}", skipped=skipped
        )
        sources.append({"run": folder.name, "records": len(records), "workloads": len(workloads)})
    predictor.fit()
    arch = host_arch()
    out.mkdir(parents=True, exist_ok=True)
    predictor.save(out / f"llvm-{arch}.json")
    about = {
        "trained_on": sources,
        "samples": predictor.samples,
        "cpu": cpu_model(),
        "tvm": tvm_version(),
        "feature_width": feature_width(),
        "rev": head_rev(),
        "date": str(dt.date.today()),
    }
    (out / f"llvm-{arch}.about.json").write_text(json.dumps(about, indent=2) + "\n")
    return about


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", default="priorcnn:640trials,priorcnn2:640trials,priorbert:480trials"
    )
    parser.add_argument("--runs", nargs="*", default=[], type=Path)
    parser.add_argument("--out", default=ROOT / "orchestrator" / "priors", type=Path)
    args = parser.parse_args()
    work = ROOT / "benchmarks" / "work" / f"prior-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True)
    runs = tune(args.models, work) + list(args.runs)
    about = train(runs, args.out)
    print(json.dumps(about, indent=2))


if __name__ == "__main__":
    main()
