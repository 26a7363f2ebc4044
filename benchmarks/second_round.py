"""Does a task's second round follow from what was measured, or from chance?

    python benchmarks/second_round.py --run DIR --task NAME [--noise 0.01] [--threads 1]
                                      [--replicas 3] [--label vm-2core]

Rebuilds, in this process, a finished run's state just before the task's second round: a fresh
learned model given every record the run committed before that round (the other tasks' first
rounds) and the task's own first round, proposed again from the run's seed and timed as the
run timed it (the proposals are checked against the run's). Then the second round is proposed
twice from identical data, and `--replicas` times with each time multiplied by 1 + N(0, noise)
(timing noise between runs on one host: three runs timed the same candidates mostly within 1%
of each other, some 3-7% apart). The search and the model use `--threads` threads (a run uses every core). Prints how
many of each second round's candidates every other one shares; nothing is built or timed.
Raw figures go to benchmarks/results/second_round-<model>-<task>-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT
from neighbours import _task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, type=Path, help="a finished run directory")
    parser.add_argument("--task", required=True, help="the task's name, as the journal has it")
    parser.add_argument("--noise", type=float, default=0.01)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--label", default=platform.node() or "host")
    args = parser.parse_args()

    state = _RunState(args.run, args.task, args.threads)
    rounds = {"same-a": state.second_round(0.0, 0), "same-b": state.second_round(0.0, 0)}
    for k in range(args.replicas):
        rounds[f"noise-{k + 1}"] = state.second_round(args.noise, k + 1)
    names = list(rounds)
    shared = [[len(rounds[a]["keys"] & rounds[b]["keys"]) for b in names] for a in names]
    print(f"{args.task}: second rounds' candidates shared, {args.threads} thread(s), "
          f"noise {args.noise:.0%}")  # fmt: skip
    for a, row in zip(names, shared, strict=True):
        print(f"  {a:8s} " + " ".join(f"{n:3d}" for n in row))
    figures = {
        "run": str(args.run),
        "task": args.task,
        "threads": args.threads,
        "noise": args.noise,
        "first_round_not_the_runs": {a: r["unmatched"] for a, r in rounds.items()},
        "rounds": names,
        "shared": shared,
    }
    model = Path(state.config["model"]["path"]).stem
    name = f"second_round-{model}-{args.task}-{args.label}-{dt.date.today()}.json"
    out = ROOT / "benchmarks" / "results" / name
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"raw figures: {out.relative_to(ROOT)}")


class _RunState:
    """What the run had measured before the task's second round, as features and times."""

    def __init__(self, run: Path, name: str, threads: int) -> None:
        from tune_orchestrator.config import Settings
        from tune_orchestrator.model.targets import resolve_target
        from tune_orchestrator.predictor import record_features
        from tune_orchestrator.prior import load_prior, prior_for

        self.config = json.loads((run / "config.json").read_text())
        resolved = resolve_target(json.dumps(self.config["target"]["tvm"]))
        self.target, self.threads = resolved.target, threads
        self.task = _task(Path(self.config["model"]["path"]), self.target, name)
        self.settings = Settings.load()
        self.prior = load_prior(prior_for(resolved))
        others, first = _before_second_round(run, self.task)
        self.keys, self.features, self.latencies = record_features(others, self.target)
        self.first = {
            _key(r.as_measure_candidate().sch): statistics.fmean(r.run_secs) for r in first
        }

    def second_round(self, noise: float, seed: int) -> dict[str, Any]:
        """The second round's candidates (structural keys), from the run's data with `noise`,
        and how many of the first round's proposals the run did not measure."""
        from tvm.s_tir import meta_schedule as ms
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        from tune_orchestrator.filters import Predictor
        from tune_orchestrator.search.cost_model import make_cost_model

        rng = np.random.default_rng(seed)
        predictor = Predictor(
            seed=0, min_samples=self.settings.filter.min_samples, threads=self.threads
        )
        model = make_cost_model(self.settings, predictor)
        model.prior = self.prior
        for key in dict.fromkeys(self.keys):  # NaN: a record without times, skipped
            mine = [
                i for i, k in enumerate(self.keys) if k == key and not np.isnan(self.latencies[i])
            ]
            times = _noisy([self.latencies[i] for i in mine], noise, rng)
            predictor.add(key, [self.features[i] for i in mine], times)
        database = ms.database.MemoryDatabase()
        search = self._search(database, model, 32)
        first = search.propose(32)
        keys = [_key(mc.sch) for mc in first]
        times = _noisy([self.first.get(k, float("inf")) for k in keys], noise, rng)
        measured = list(zip(first, times, strict=True))
        ok = [i for i, t in enumerate(times) if t < float("inf")]
        search.learn(measured)
        model.update(
            search.ctx, [first[i] for i in ok], [RunnerResult([times[i]], None) for i in ok]
        )
        second = self._search(database, model, 16)
        second.learn(measured)
        return {
            "unmatched": sum(k not in self.first for k in keys),
            "keys": {_key(mc.sch) for mc in second.propose(16)},
        }

    def _search(self, database: Any, model: Any, proposals: int) -> Any:
        from tune_orchestrator.search.strategy import TaskSearch

        return TaskSearch(self.task, target=self.target, settings=self.settings,
                          database=database, cost_model=model, rand_state=0,
                          threads=self.threads, proposals=proposals)  # fmt: skip


def _before_second_round(run: Path, task: Any) -> tuple[list[Any], list[Any]]:
    """The run's records in commit order up to the task's second round: the other tasks',
    and the task's first round (after its default schedule's record)."""
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from tune_orchestrator.model.tasks import task_key

    journal = [json.loads(line) for line in (run / "journal.jsonl").open()]
    index = next(t["index"] for t in journal[0]["tasks"] if t["name"] == task.name)
    size = next(e["trials"] for e in journal if e["type"] == "round" and e["task"] == index)
    workloads = [
        Workload.from_json(json.loads(line)) for line in (run / "database_workload.json").open()
    ]
    others, own = [], []
    mine = task_key(task.workload)
    for line in (run / "database_tuning_record.json").open():
        at, obj = json.loads(line)
        record = TuningRecord.from_json(obj, workloads[at])
        if task_key(record.workload.mod) != mine:
            others.append(record)
        elif len(own) <= size:
            own.append(record)
        else:
            break
    return others, own[1:]


def _noisy(times: list[float], noise: float, rng: Any) -> list[float]:
    return [t * (1 + rng.normal(0, noise)) if np.isfinite(t) else t for t in times]


def _key(sch: Any) -> int:
    from tune_orchestrator.model.tasks import structural_key

    return structural_key(sch.mod)


if __name__ == "__main__":
    main()
