"""A task's fastest schedule in a run, against its neighbours under MetaSchedule's mutators.

    python benchmarks/neighbours.py --run DIR --task NAME [--per-kind 24] [--label vm-2core]

Reads the run directory's database (DIR: a finished run of `orchestrate`, e.g. one of
spread.py's under benchmarks/work/) and the model it names in config.json, takes the task's
fastest record, and mutates its trace with each of the target's mutators (one step each), then
two steps (a compute location then a tile size, and two tile sizes): up to `--per-kind`
distinct schedules each, every one postprocessed as the search does. All are built and timed
on this host with the run's timing settings, the best itself again after each batch of 16 (on
the 2-core VM a schedule's timing moved up to 20% with what ran before it, so a neighbour is
held against both the run's and this host's timing of the best). Is the task's best a local
optimum of the search (no neighbour faster), or a mutation or two away from better? Raw
figures go to benchmarks/results/neighbours-<model>-<task>-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from _common import ROOT, args_info, measured_secs

# Two-step plans beside each mutator alone: a compute location then a tile, and two tiles.
_TWO_STEPS = (("MutateComputeLocation", "MutateTileSize"), ("MutateTileSize", "MutateTileSize"))
# Draws of a plan per distinct neighbour wanted before giving up: a compute location or an
# unroll has a handful of alternatives, and most draws repeat one.
_DRAWS_PER_WANTED = 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, type=Path, help="a finished run directory")
    parser.add_argument("--task", required=True, help="the task's name, as the journal has it")
    parser.add_argument("--per-kind", type=int, default=24)
    parser.add_argument("--label", default=platform.node() or "host")
    args = parser.parse_args()

    from tune_orchestrator.model.targets import resolve_target

    config = json.loads((args.run / "config.json").read_text())
    model_path = Path(config["model"]["path"])
    target = resolve_target(json.dumps(config["target"]["tvm"])).target
    task = _task(model_path, target, args.task)
    record = _fastest(args.run, task)
    search = _Neighbourhood(task, target)
    schedules = search.neighbours(record.trace, args.per_kind)
    base_timed, timed = _timed(schedules, target)
    base_s = statistics.median(base_timed)
    kinds: dict[str, list[float]] = {}
    for (kind, _), secs in zip(schedules[1:], timed, strict=True):
        kinds.setdefault(kind, []).append(secs)
    run_best_s = statistics.fmean(measured_secs(record.run_secs))
    print(f"{args.task}: its best {run_best_s * 1e6:.1f} us in the run, {base_s * 1e6:.1f} us here")
    figures = {
        "run": str(args.run),
        "task": args.task,
        "decisions": [[i.kind.name, str(d)] for i, d in record.trace.decisions.items()],
        "run_best_s": run_best_s,
        "base_s": base_s,
        "base_timed_s": base_timed,
        "kinds": {kind: _summary(kind, secs, run_best_s, base_s) for kind, secs in kinds.items()},
        "timed_s": kinds,
    }
    name = f"neighbours-{model_path.stem}-{args.task}-{args.label}-{dt.date.today()}.json"
    out = ROOT / "benchmarks" / "results" / name
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"raw figures: {out.relative_to(ROOT)}")


def _summary(kind: str, secs: list[float], run_best_s: float, base_s: float) -> dict[str, Any]:
    """One kind of neighbour's figures, printed in a line: its fastest against the schedule's
    time, as the run and as this host timed it."""
    ok = sorted(s for s in secs if s < float("inf"))
    fastest = ok[0] if ok else None
    said = (
        f"fastest {fastest * 1e6:.1f} us ({fastest / run_best_s:.2f}x the run's best)"
        if fastest is not None
        else "none built"
    )
    print(f"  {kind:26s} {len(secs):3d} distinct, {said}")
    return {
        "neighbours": len(secs),
        "failed": len(secs) - len(ok),
        "fastest_s": fastest,
        "median_s": statistics.median(ok) if ok else None,
        "fastest_vs_run": fastest / run_best_s if ok else None,
        "fastest_vs_here": fastest / base_s if ok else None,
    }


def _task(model_path: Path, target: Any, name: str) -> Any:
    from tune_orchestrator.model.importer import import_for_tuning
    from tune_orchestrator.model.loading import load_model

    tasks = import_for_tuning(load_model(model_path), target, started=time.monotonic()).tasks
    found = [t for t in tasks if t.name == name]
    if not found:
        raise SystemExit(f"no task {name}; the model's: {', '.join(t.name for t in tasks)}")
    return found[0]


def _fastest(run: Path, task: Any) -> Any:
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    database = JSONDatabase(
        str(run / "database_workload.json"),
        str(run / "database_tuning_record.json"),
        allow_missing=False,
    )
    records = database.get_top_k(database.commit_workload(task.workload), 1)
    if not records:
        raise SystemExit(f"{run} holds no measured record of {task.name}")
    return records[0]


class _Neighbourhood:
    """The target's mutators and postprocessors, as the task's search has them."""

    def __init__(self, task: Any, target: Any) -> None:
        from tvm.s_tir import meta_schedule as ms

        self.task = task
        ctx = ms.TuneContext(
            mod=task.workload, target=target, space_generator="post-order-apply", rand_state=1
        )
        ctx.generate_design_space()
        generator = ctx.space_generator
        self.mutators = {type(m).__name__: m for m in generator.mutator_probs}
        self.postprocs = list(generator.postprocs)
        for part in [*self.mutators.values(), *self.postprocs]:
            part._initialize_with_tune_context(ctx)

    def neighbours(self, trace: Any, per_kind: int) -> list[tuple[str, Any]]:
        """("base", the trace's schedule), then up to `per_kind` distinct schedules per plan
        of mutations, each labelled with its plan."""
        from tune_orchestrator.model.tasks import structural_key

        base = self.realize(trace)
        found = [("base", base)]
        seen = {structural_key(base.mod)}
        plans = [(name,) for name in self.mutators] + list(_TWO_STEPS)
        for plan in plans:
            label = "+".join(name.removeprefix("Mutate") for name in plan)
            before = len(found)
            for _ in range(per_kind * _DRAWS_PER_WANTED):
                if len(found) - before == per_kind:
                    break
                sch = self._mutated(trace, plan)
                if sch is not None and structural_key(sch.mod) not in seen:
                    seen.add(structural_key(sch.mod))
                    found.append((label, sch))
        return found

    def _mutated(self, trace: Any, plan: tuple[str, ...]) -> Any:
        for name in plan:
            trace = self.mutators[name].apply(trace)
            if trace is None:
                return None
        return self.realize(trace)

    def realize(self, trace: Any) -> Any:
        """The trace replayed on the task and postprocessed (None: a postprocessor refused)."""
        from tvm import s_tir

        sch = s_tir.Schedule(self.task.workload, seed=1)
        try:
            trace.apply_to_schedule(sch, remove_postproc=True)
        except Exception:  # TVM's error for a decision the loop nest does not fit
            return None
        sch.enter_postproc()
        return sch if all(p.apply(sch) for p in self.postprocs) else None


def _timed(schedules: list[tuple[str, Any]], target: Any) -> tuple[list[float], list[float]]:
    """Each schedule built and timed as a run times its candidates (median of 5; inf where it
    did not build or run), in batches of 16: the first ("base") after each batch, so that it
    meets the host as each batch found it; its timings, and the others'."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.builder import BuilderInput, LocalBuilder
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, LocalRunner, RunnerInput

    # TVM's 30 s is shorter than a fresh build worker's start on a loaded 2-core host.
    builder = LocalBuilder(timeout_sec=300)
    runner = LocalRunner(evaluator_config=EvaluatorConfig(number=1, repeat=5, min_repeat_ms=15))
    base, others = schedules[0][1], [sch for _, sch in schedules[1:]]
    timed, again = [], []
    for start in range(0, len(others), 16):
        batch = [*others[start : start + 16], base]
        builds = builder.build([BuilderInput(s.mod, target) for s in batch])
        for sch, built in zip(batch, builds, strict=True):
            secs = []
            if not built.error_msg:
                inputs = [RunnerInput(built.artifact_path, "cpu", args_info(sch))]
                secs = measured_secs(runner.run(inputs)[0].result().run_secs)
                ms.utils.remove_build_dir(built.artifact_path)
            (again if sch is base else timed).append(
                statistics.median(secs) if secs else float("inf")
            )
    return again, timed


if __name__ == "__main__":
    main()
