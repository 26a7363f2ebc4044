"""End to end on one GPU: what tuning buys for a fixed GPU time, against vanilla MetaSchedule.

    python benchmarks/gpu_e2e.py [--models vggish,resnet50ish] [--minutes 30] [--seed 0]
                                 [--simulate]

For each model (made by benchmarks/models.py: 224x224, fp32, batch 1), side by side in one run:
  - the untuned latency (TVM's default GPU schedules, dlight);
  - vanilla `tune_relax` (its defaults, a build timeout long enough for a fresh builder worker)
    stopped once it has used the GPU for `--minutes`;
  - `orchestrate` with a budget of `--minutes` GPU-minutes, and of a third of it.
Each tuning runs in a fresh process. Then every database is compiled with stock `compile_relax`
and the models are timed interleaved. Printed: latencies, speedups over untuned, and ours at a
third of the time against vanilla at the full time; targets: >= 2x (VGG-class) and >= 1.5x
(ResNet-50-class) over untuned within 30 GPU-minutes, never slower than untuned, and ours at a
third of the time within 2% of vanilla at the full time.

`--simulate` runs it on a host without a GPU: search and CUDA builds are real, timings come from
the simulated GPU (orchestrator/simulate.py) on both sides (vanilla's LocalRunner is simulated
as serial, at the 5.9 candidates/s it measured on an H100), and end-to-end latencies are the
weighted sums of the chosen kernels' simulated latencies. Its figures say nothing about a real
GPU; it checks that the benchmark and the GPU path run. Raw figures go to
benchmarks/results/gpu_e2e-<device>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import re
import statistics
import time
from pathlib import Path
from typing import Any

from _common import ROOT, run_child, time_databases

# Vanilla LocalRunner on the lent H100 (2026-11-22): 5.9 candidates/s; its evaluator times each
# candidate for at least min_repeat_ms = 100 ms (number=3), the rest is loading and launching.
_RUNNER_MIN_S, _RUNNER_OVERHEAD_S = 0.100, 0.069


def signature(mod: Any) -> tuple:
    """A PrimFunc's arguments (dtype, shape): the same for a workload and its schedules."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from tune_orchestrator.model.tasks import arg_specs

    return arg_specs(ArgInfo.from_entry_func(mod, remove_preproc=True))


def tune_vanilla(model: str, target_json: str, seconds: float, seed: int, work: str,
                 simulate: bool) -> dict[str, Any]:  # fmt: skip
    """`tune_relax` with its defaults until `seconds` of GPU time are used (wall time, plus the
    simulated runner's time when simulating).

    The clock is read each time TVM's scheduler asks a task for its next batch: once the time
    left is shorter than the last batch took (search, build and hand-over to the runner), every
    task answers that it is done, and the scheduler ends as it does at its trial cap, collecting
    what it measured into its database (its measure callbacks run only when it joins a task's
    results, and it first searches and builds every task once before joining any, which on a GPU
    host outlasts a few minutes). The wall can still pass `seconds` by a batch slower than the
    one before; it is reported as `gpu_s`."""
    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
    from tune_orchestrator.model.loading import load_model
    from tune_orchestrator.model.tasks import extract_tasks, structural_key
    from tune_orchestrator.simulate import Landscape

    target = tvm.target.Target(json.loads(target_json))
    fused = fuse_for_tuning(import_to_relax(load_model(model)), target)
    inner = ms.builder.LocalBuilder(timeout_sec=300)  # a fresh worker's start outlasts 30 s
    tasks = {signature(t.workload): t for t in extract_tasks(fused, target)}
    landscape = Landscape(seed=seed)
    labels: dict[str, tuple] = {}
    best: dict[str, float] = {}  # simulated: the fastest kernel measured per task key
    virtual, measured = [0.0], [0]
    start = time.perf_counter()

    def used() -> float:
        return time.perf_counter() - start + virtual[0]

    cycle: list[Any] = [0.0, None]  # seconds between the last two batches, when the last began

    @derived_object
    class UntilTimeIsUp(ms.search_strategy.PySearchStrategy):
        """TVM's evolutionary search (its defaults) that has nothing more once time is up."""

        def __init__(self, search=None):
            self.search = search or ms.search_strategy.EvolutionarySearch()

        def _initialize_with_tune_context(self, context):
            self.search._initialize_with_tune_context(context)

        def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database,
                       cost_model):  # fmt: skip
            self.search.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database,
                                   cost_model)  # fmt: skip

        def post_tuning(self):
            self.search.post_tuning()

        def generate_measure_candidates(self):
            now = used()
            if now + cycle[0] >= seconds:
                return None
            if cycle[1] is not None:
                cycle[0] = now - cycle[1]
            cycle[1] = now
            return self.search.generate_measure_candidates()

        def notify_runner_results(self, measure_candidates, results):
            self.search.notify_runner_results(measure_candidates, results)

        def clone(self):
            return UntilTimeIsUp(self.search.clone())

    @derived_object
    class LabellingBuilder(ms.builder.PyBuilder):
        """LocalBuilder; when simulating, notes which task each artifact is for."""

        def build(self, build_inputs):
            results = inner.build(build_inputs)
            for item, result in zip(build_inputs, results, strict=True):
                task = tasks.get(signature(item.mod))
                if result.artifact_path and task is not None:
                    labels[result.artifact_path] = (task.key, task.flops, structural_key(item.mod))
            return results

    @derived_object
    class Done(ms.runner.PyRunnerFuture):
        def __init__(self, result):
            super().__init__()
            self._result = result

        def done(self):
            return True

        def result(self):
            return self._result

    @derived_object
    class SimulatedRunner(ms.runner.PyRunner):
        def run(self, runner_inputs):
            futures = []
            for item in runner_inputs:
                label = labels.get(item.artifact_path)
                if label is None:
                    futures.append(Done(ms.runner.RunnerResult(None, "unknown task")))
                    continue
                latency = landscape.latency(label)
                best[label[0]] = min(latency, best.get(label[0], math.inf))
                measured[0] += 1
                virtual[0] += _RUNNER_OVERHEAD_S + max(_RUNNER_MIN_S, 3 * latency)
                futures.append(Done(ms.runner.RunnerResult([latency], None)))
            return futures

    ms.relax_integration.tune_relax(
        mod=fused,
        params={},
        target=target,
        work_dir=work,
        max_trials_global=1_000_000,
        seed=seed,
        builder=LabellingBuilder() if simulate else inner,
        runner=SimulatedRunner() if simulate else "local",
        strategy=UntilTimeIsUp(),
    )
    records = len(ms.database.JSONDatabase(work_dir=work).get_all_tuning_records())
    trials = measured[0] if simulate else records
    return {"gpu_s": used(), "trials": trials, "records": records, "best_by_task": best}


def tune_ours(model: str, target: str, seconds: float, seed: int, work: str,
              simulate: bool) -> dict[str, Any]:  # fmt: skip
    from tune_orchestrator import tune
    from tune_orchestrator.errors import BudgetTooSmall

    start = time.perf_counter()
    try:
        result = tune(model, budget=f"{seconds:.0f}s", target=target, out=work, seed=seed,
                      simulate=simulate, handle_signals=False, library=False)  # fmt: skip
    except BudgetTooSmall as exc:  # refused up front: the model ships untuned
        return {"process_tune_s": time.perf_counter() - start, "gpu_s": 0.0, "trials": 0,
                "refused": str(exc)}  # fmt: skip
    return {
        "process_tune_s": time.perf_counter() - start,
        "gpu_s": result.wall_s,
        "trials": result.trials,
        "stop_reason": result.stop_reason,
        "phases": dict(result.phases),
        "search": result.report.get("search", {}),
    }


def simulated_latency(model: Path, target_json: str, seed: int,
                      paths: tuple[Path, Path] | None = None,
                      best_by_task: dict[str, float] | None = None) -> dict[str, float]:  # fmt: skip
    """What the compiled model costs on the simulated GPU: per task, the kernel compile_relax
    would pick (the database's best record, or the best in `best_by_task`, or the default
    schedule without one)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
    from tune_orchestrator.model.loading import load_model
    from tune_orchestrator.model.tasks import extract_tasks
    from tune_orchestrator.simulate import Landscape

    target = tvm.target.Target(json.loads(target_json))
    tasks = extract_tasks(fuse_for_tuning(import_to_relax(load_model(model)), target), target)
    landscape = Landscape(seed=seed)
    db = None
    if paths is not None and all(p.is_file() for p in paths):  # none: refused, nothing tuned
        db = ms.database.JSONDatabase(path_workload=str(paths[0]), path_tuning_record=str(paths[1]))
    total = 0.0
    for task in tasks:
        latency = landscape.latency((task.key, task.flops, None))
        if best_by_task and task.key in best_by_task:
            latency = best_by_task[task.key]
        if db is not None and db.has_workload(task.workload):
            best = db.get_top_k(db.commit_workload(task.workload), 1)
            if best and all(s < 1e9 for s in best[0].run_secs):
                latency = statistics.fmean(float(s) for s in best[0].run_secs)
        total += task.weight * latency
    return {"median_s": total, "min_s": total, "max_s": total}


def simulated_latencies(model: Path, target_json: str, seed: int, base: Path,
                        runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:  # fmt: skip
    sim = "SIMULATED_database_{}.json"
    return {
        "untuned": simulated_latency(model, target_json, seed, None),
        # What its runner measured, collected by TVM or not (see tune_vanilla).
        "vanilla": simulated_latency(
            model, target_json, seed, best_by_task=runs["vanilla"]["best_by_task"]
        ),
        **{
            side: simulated_latency(
                model, target_json, seed,
                (Path(runs[side]["work"]) / sim.format("workload"),
                 Path(runs[side]["work"]) / sim.format("tuning_record")),
            )
            for side in ("ours", "ours-third")
        },
    }  # fmt: skip


def summary(latency: dict[str, dict[str, float]]) -> dict[str, float]:
    """The ratios the targets are stated in (latency ratios: under 1 is faster)."""
    un, vanilla = latency["untuned"]["median_s"], latency["vanilla"]["median_s"]
    return {
        "ours_over_untuned": un / latency["ours"]["median_s"],
        "ours_third_over_untuned": un / latency["ours-third"]["median_s"],
        "vanilla_over_untuned": un / vanilla,
        "ours_vs_vanilla": latency["ours"]["median_s"] / vanilla,
        "ours_third_vs_vanilla": latency["ours-third"]["median_s"] / vanilla,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vggish,resnet50ish")
    parser.add_argument("--minutes", type=float, default=30.0, help="GPU time of the full budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--repeats", type=int, default=30, help="latency samples per model")
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        side, model, target, seconds, work, seed = args.child
        if side == "vanilla":
            figures = tune_vanilla(model, target, float(seconds), int(seed), work, args.simulate)
        else:
            figures = tune_ours(model, target, float(seconds), int(seed), work, args.simulate)
        print(json.dumps(figures))
        return

    from models import write

    from tune_orchestrator.model.targets import resolve_target

    resolved = resolve_target("nvidia/nvidia-h100" if args.simulate else "cuda",
                              simulate=args.simulate)  # fmt: skip
    target_json = json.dumps(resolved.to_json())
    spec = resolved.spec if args.simulate else target_json
    device = "simulated-h100" if args.simulate else re.sub(r"\W+", "-", resolved.device_name)
    base = ROOT / "benchmarks" / "work" / f"gpu-e2e-{time.strftime('%Y%m%d-%H%M%S')}"
    seconds = args.minutes * 60.0
    results: dict[str, Any] = {}
    out = ROOT / "benchmarks" / "results" / f"gpu_e2e-{device}-{dt.date.today().isoformat()}.json"

    def save() -> None:
        """Written after every step, so that a run cut short keeps what it measured."""
        out.write_text(json.dumps({
            "device": resolved.describe(),
            "host": f"{platform.node()}, {platform.processor() or platform.machine()}, "
                    f"{os.cpu_count()} cores",
            "simulated": args.simulate,
            "minutes": args.minutes,
            "seed": args.seed,
            "models": results,
        }, indent=2))  # fmt: skip

    for name in args.models.split(","):
        model = write(name, ROOT / "benchmarks" / "work")
        runs: dict[str, dict[str, Any]] = {}
        results[name] = {"runs": runs}
        for side, share in (("vanilla", 1.0), ("ours", 1.0), ("ours-third", 1 / 3)):
            work = base / f"{name}-{side}"
            print(f"{name}: tuning with {side} for {args.minutes * share:.1f} GPU-minutes ...",
                  flush=True)  # fmt: skip
            child = ["--child", "vanilla" if side == "vanilla" else "ours", str(model),
                     target_json if side == "vanilla" else spec, str(seconds * share), str(work),
                     str(args.seed)] + (["--simulate"] if args.simulate else [])  # fmt: skip
            runs[side] = run_child(Path(__file__), child) | {"work": str(work)}
            work.mkdir(parents=True, exist_ok=True)  # refused up front: no folder, untuned
            save()
        if args.simulate:
            latency = simulated_latencies(model, target_json, args.seed, base / name, runs)
        else:
            empty = base / f"{name}-untuned"
            empty.mkdir(parents=True, exist_ok=True)
            folders = {"untuned": empty, **{side: Path(r["work"]) for side, r in runs.items()}}
            print(f"{name}: compiling {len(folders)} databases at once and timing them ...",
                  flush=True)  # fmt: skip
            latency = time_databases(model, target_json, folders, args.repeats, "cuda",
                                     jobs=len(folders))  # fmt: skip
        results[name]["latency"] = latency
        results[name]["ratios"] = ratios = summary(latency)
        save()
        print(f"\n{name} on {resolved.describe()}, {args.minutes:g} GPU-minutes")
        un = latency["untuned"]["median_s"]
        for side in ("untuned", "vanilla", "ours", "ours-third"):
            lat, run = latency[side]["median_s"], runs.get(side, {})
            note = "  refused up front" if run.get("refused") else ""
            print(f"  {side:<12}{lat * 1e3:>10.3f} ms  {un / lat:>6.2f}x over untuned  "
                  f"{run.get('trials', 0):>6} trials  {run.get('gpu_s', 0):>6.0f} s{note}")  # fmt: skip
        print(f"  ours at a third of the time / vanilla at the full time: "
              f"{ratios['ours_third_vs_vanilla']:.3f} (target <= 1.02); ours / vanilla at the "
              f"full time: {ratios['ours_vs_vanilla']:.3f} (target < 1)")  # fmt: skip
    print(f"raw figures: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
