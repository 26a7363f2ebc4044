"""What each schedule costs MetaSchedule's search, step by step, and how many survive, per task.

    python benchmarks/search_steps.py [--models vggish,resnetish] [--target nvidia/nvidia-h100]
                                      [--tasks 3] [--samples 200] [--mutations 60]
                                      [--label vm-2core]

Every schedule the evolutionary search makes, a fresh random sample or a mutation of a valid
one, is replayed from its trace on the task's workload and then run through the target's
postprocessors; a postprocessor that rejects it ends it, and it has cost what it took so far.
TVM does this in C++ inside SampleInitPopulation and EvolveWithCostModel and does not say
where the time goes. Here the same steps run one at a time on one thread, for the heaviest
tasks of each model: the milliseconds per schedule of the replay and of each postprocessor,
which postprocessor rejects how many, and so the CPU time the search pays for each valid fresh
sample and each valid mutation. On a GPU target the search's precheck
(orchestrator/search/gpu_precheck.py) also judges every schedule first; TVM's steps then run
anyway, so the cost per valid schedule with and without the precheck comes from the same
schedules, and any schedule it turns away that TVM accepts is counted. The mutators are drawn
with the probabilities the target's search uses. Models are benchmarks/models.py's names or
.onnx paths. A CUDA target needs no GPU: nothing is built or run. Raw figures go to
benchmarks/results/search_steps-<target>-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import platform
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT

PARENTS = 5  # valid samples the mutations start from
PRECHECK = "GpuPrecheck"  # the step name of orchestrator/search/gpu_precheck.py's check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vggish,resnetish", help="names or .onnx paths")
    parser.add_argument("--target", default="nvidia/nvidia-h100", help="a TVM tag, llvm, ...")
    parser.add_argument("--tasks", type=int, default=3, help="the heaviest tasks of each model")
    parser.add_argument("--samples", type=int, default=200, help="fresh samples per task")
    parser.add_argument("--mutations", type=int, default=60, help="mutations per task")
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    args = parser.parse_args()

    from models import write

    from tune_orchestrator import _tvm
    from tune_orchestrator.model import fuse_for_tuning, import_to_relax, load_model
    from tune_orchestrator.targets import resolve_target
    from tune_orchestrator.tasks import extract_tasks

    target = resolve_target(args.target, build_only=True).target
    _tvm.load_tensor_intrinsics()
    rows = []
    for name in args.models.split(","):
        path = Path(name) if name.endswith(".onnx") else write(name, ROOT / "benchmarks" / "work")
        model = load_model(path)
        name = path.stem
        tasks = extract_tasks(fuse_for_tuning(import_to_relax(model), target), target)
        for task in tasks[: args.tasks]:
            row = profile(task, target, args.samples, args.mutations)
            row["model"] = name
            rows.append(row)
            show(row)
    kind = re.sub(r"\W+", "-", args.target)
    out = (
        ROOT / "benchmarks" / "results" / f"search_steps-{kind}-{args.label}-{dt.date.today()}.json"
    )
    out.write_text(
        json.dumps(
            {"target": str(target), "machine": args.label, "args": vars(args), "tasks": rows},
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}")


class Steps:
    """Seconds per step, rejections by step, and the outcome of each schedule tried. The GPU
    precheck's verdict is taken and TVM's postprocessors then run anyway, so that both costs
    come from the same schedules: `spared` is what TVM's steps took on the schedules the
    precheck turns away (the search with the precheck does not pay it)."""

    def __init__(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self.rejected: collections.Counter[str] = collections.Counter()
        self.tried = 0
        self.valid = 0
        self.prechecked = 0  # turned away by the precheck
        self.wrongly = 0  # turned away by the precheck although TVM accepts them
        self.spared = 0.0

    def figures(self) -> dict[str, Any]:
        check = self.seconds.get(PRECHECK, 0.0)
        tvm = sum(self.seconds.values()) - check
        return {
            "tried": self.tried,
            "valid": self.valid,
            "valid_share": self.valid / self.tried if self.tried else None,
            "ms_per_try": {k: 1e3 * v / max(1, self.tried) for k, v in self.seconds.items()},
            "rejected_by": dict(self.rejected),
            "ms_per_valid": 1e3 * tvm / self.valid if self.valid else None,
            "prechecked": self.prechecked,
            "prechecked_wrongly": self.wrongly,
            "ms_per_valid_prechecked": (
                1e3 * (tvm - self.spared + check) / self.valid if self.valid else None
            ),
        }


def profile(task: Any, target: Any, samples: int, mutations: int) -> dict[str, Any]:
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule import _ffi_api

    from tune_orchestrator.search.gpu_precheck import violation

    ctx = ms.TuneContext(
        mod=task.workload,
        target=target,
        space_generator="post-order-apply",
        search_strategy="evolutionary",
        task_name=task.name,
        rand_state=0,
        num_threads=1,
    )
    spaces = ctx.generate_design_space()
    postprocs = list(ctx.space_generator.postprocs)
    gpu = "VerifyGPUCode" in [type(p).__name__ for p in postprocs]
    limits = {
        "max_shared_bytes": int(target.attrs.get("max_shared_memory_per_block", 0)),
        "warp_size": int(target.attrs.get("thread_warp_size", 0)),
    }
    mutators = list(ctx.space_generator.mutator_probs.items())
    # TVM 0.27's own hooks (the search calls them in C++): a mutator needs its context, and
    # its FFI entry takes the random state that the Python `apply` does not.
    for mutator, _ in mutators:
        mutator._initialize_with_tune_context(ctx)

    def attempt(trace: Any, seed: int, steps: Steps) -> Any:
        """The schedule `trace` makes once postprocessed, None if a step rejects it."""
        steps.tried += 1
        sch = s_tir.Schedule(task.workload, seed=seed, debug_mask=0)
        start = time.perf_counter()
        try:
            trace.apply_to_schedule(sch, remove_postproc=True)
        except Exception:
            steps.seconds["replay"] += time.perf_counter() - start
            steps.rejected["replay"] += 1
            return None
        steps.seconds["replay"] += time.perf_counter() - start
        turned_away = False
        if gpu:
            start = time.perf_counter()
            turned_away = violation(sch.mod["main"], **limits) is not None
            steps.seconds[PRECHECK] += time.perf_counter() - start
            steps.prechecked += turned_away
        sch.enter_postproc()
        tvm_start = time.perf_counter()
        for postproc in postprocs:
            step, start = type(postproc).__name__, time.perf_counter()
            ok = postproc.apply(sch)
            steps.seconds[step] += time.perf_counter() - start
            if not ok:
                steps.rejected[step] += 1
                steps.spared += (time.perf_counter() - tvm_start) if turned_away else 0.0
                return None
        steps.spared += (time.perf_counter() - tvm_start) if turned_away else 0.0
        steps.wrongly += turned_away
        steps.valid += 1
        return sch

    sampled, parents = Steps(), []
    for i in range(samples):  # a design space with its decisions left to chance, as TVM samples
        design = spaces[i % len(spaces)].trace
        sch = attempt(s_tir.Trace(design.insts, {}), seed=i + 1, steps=sampled)
        if sch is not None and len(parents) < PARENTS:
            parents.append(sch.trace.simplified(remove_postproc=True))
    mutated, unchanged = Steps(), 0
    rng = np.random.default_rng(0)
    weights = np.array([float(p) for _, p in mutators])
    for j in range(mutations if parents else 0):
        mutator = mutators[rng.choice(len(mutators), p=weights / weights.sum())][0]
        child = _ffi_api.MutatorApply(mutator, parents[j % len(parents)], j + 1)
        if child is None:  # nothing this mutator can change: TVM draws again
            unchanged += 1
            continue
        attempt(child, seed=j + 1, steps=mutated)
    return {
        "task": task.name,
        "flops": task.flops,
        "design_spaces": len(spaces),
        "postprocs": [type(p).__name__ for p in postprocs],
        "mutators": {type(m).__name__: float(p) for m, p in mutators},
        "samples": sampled.figures(),
        "mutations": {**mutated.figures(), "no_change": unchanged},
    }


def show(row: dict[str, Any]) -> None:
    print(f"{row['model']} {row['task']} ({row['flops'] / 1e9:.2f} GFLOP)")
    for kind in ("samples", "mutations"):
        f = row[kind]
        if not f["tried"]:
            print(f"  {kind}: none tried (no valid sample to mutate)")
            continue
        steps = ", ".join(f"{k} {v:.1f}" for k, v in f["ms_per_try"].items() if v >= 0.05)
        per_valid = f"{f['ms_per_valid']:.0f} ms" if f["ms_per_valid"] else "none valid"
        if f["ms_per_valid"] and f["prechecked"]:
            per_valid += (
                f", {f['ms_per_valid_prechecked']:.0f} ms with the precheck (it turned away "
                f"{f['prechecked']}, {f['prechecked_wrongly']} of them valid)"
            )
        print(
            f"  {kind}: {f['valid']}/{f['tried']} valid ({f['valid_share']:.1%}), rejected by "
            f"{f['rejected_by'] or 'none'}; ms per try: {steps}; per valid one: {per_valid}"
        )


if __name__ == "__main__":
    main()
