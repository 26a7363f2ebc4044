"""What a candidate costs the head's CPUs on a CUDA target, measured here in CPU-seconds: the
search per round, the build per candidate (TVM's build and NVRTC's compile to a cubin, as on a
GPU host), and the learned model's refit per round against the samples it holds.

    python benchmarks/head_costs.py --model benchmarks/work/vggish.onnx --label vm-2core

The product's own parts run in this process, one thread each (so CPU-seconds are work, not
waiting): the proposer and TaskSearch (nvidia/nvidia-h100), the shared cost model, the build
function of the build pool's workers. Each task of the heaviest `--tasks` gets rounds of
`--sizes` candidates; every `--build-every`th candidate is built; all are learned with the
simulated landscape's latencies (orchestrator/simulate.py), so the cost model is trained by the
later rounds as in a run. Without a GPU driver TVM keeps CUDA source in the artifact; the
cubin compile a GPU host runs inside the build is timed here on that source. It needs NVRTC and
the CUDA headers from PyPI (no GPU, no driver): `pip install "cuda-bindings[all]"
nvidia-cuda-cccl nvidia-cuda-runtime nvidia-cuda-crt`. Writes
benchmarks/results/head_costs-<model>-<label>-<date>.json, read by gpu_scaling.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT


def cpu_s() -> float:
    """CPU-seconds of this process and its finished children (the linker a build runs)."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def cuda_headers(work: Path) -> None:
    """Point NVRTC at the CUDA headers pip installed (TVM looks under $CUDA_PATH)."""
    import nvidia

    include = next(Path(p) / "cu13" / "include" for p in nvidia.__path__)
    if not (include / "cuda_runtime.h").is_file():
        raise SystemExit(f"no CUDA headers in {include}: pip install nvidia-cuda-runtime ...")
    root = work / "cuda-headers"
    for link in (root / "include", root / "targets" / f"{platform.machine()}-linux" / "include"):
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(include)
    os.environ["CUDA_PATH"] = str(root)


def build_cost(mod: Any, target: Any, out_dir: str) -> dict[str, float]:
    """One candidate's build as a GPU host runs it: TVM's build (the pool's function) and the
    cubin compile of its CUDA source, CPU-seconds each."""
    import tvm.driver
    from tvm.support import nvcc

    from tune_orchestrator.measure import _worker

    made, build = [], tvm.driver.build  # the built module, whose CUDA source NVRTC compiles
    tvm.driver.build = lambda *a, **k: made.append(build(*a, **k)) or made[-1]
    try:
        start = cpu_s()
        path, _ = _worker.build(mod, target, out_dir)
        built = cpu_s()
    finally:
        tvm.driver.build = build
    source = made[0].imports[0].inspect_source("")
    nvcc.compile_cuda(source, target_format="cubin", arch=target.attrs["arch"], compiler="nvrtc")
    Path(path).unlink(missing_ok=True)
    return {"tvm_s": built - start, "nvrtc_s": cpu_s() - built}


class Head:
    """The run's search side, as the loop sets it up, on one thread."""

    def __init__(self, model: Path, seed: int) -> None:
        from tvm.s_tir import meta_schedule as ms

        from tune_orchestrator.config import Settings
        from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
        from tune_orchestrator.model.loading import load_model
        from tune_orchestrator.model.targets import resolve_target
        from tune_orchestrator.model.tasks import extract_tasks
        from tune_orchestrator.predictor import Predictor
        from tune_orchestrator.search import Proposer, TaskSearch, make_cost_model
        from tune_orchestrator.simulate import Landscape

        settings = Settings.load()
        self.target = resolve_target("nvidia/nvidia-h100", simulate=True).target
        self.tasks = extract_tasks(
            fuse_for_tuning(import_to_relax(load_model(model)), self.target), self.target
        )
        self.predictor = Predictor(seed=seed, min_samples=settings.filter.min_samples, threads=1)
        self.cost_model = make_cost_model(settings, self.predictor)
        database = ms.database.MemoryDatabase()

        def search(task: Any, proposals: int) -> Any:
            return TaskSearch(
                task, target=self.target, settings=settings, database=database,
                cost_model=self.cost_model, rand_state=seed, threads=1, proposals=proposals,
            )  # fmt: skip

        self.proposer = Proposer(
            make_search=search, cost_model=self.cost_model, measured={}, proposals=512,
            ahead=0, charge=lambda *_: None,
        )  # fmt: skip
        self.landscape = Landscape(seed=seed)

    def round(self, task: Any, size: int, build_every: int, out_dir: str) -> dict[str, Any]:
        """Search, build a sample, learn: the CPU-seconds of each."""
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        trained = self.cost_model.ready
        start = cpu_s()
        waiting, _ = self.proposer.offer(task, size)
        chosen = waiting[:size]
        self.proposer.take(task, chosen)
        searched = cpu_s()
        builds = [build_cost(c.mod, self.target, out_dir) for c in chosen[::build_every]]
        latencies = [self.landscape.latency(c.label) for c in chosen]
        search = self.proposer.search(task)
        learn = cpu_s()
        search.learn([(c.measure_candidate, s) for c, s in zip(chosen, latencies, strict=True)])
        self.cost_model.add(
            search.ctx,
            [c.measure_candidate for c in chosen],
            [RunnerResult([s], None) for s in latencies],
        )
        fitted = cpu_s()
        self.cost_model.fit()
        done = cpu_s()
        return {
            "task": task.name, "size": size, "candidates": len(chosen), "trained": trained,
            "search_s": searched - start, "learn_s": fitted - learn, "fit_s": done - fitted,
            "samples": self.predictor.samples, "builds": builds,
        }  # fmt: skip


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per candidate build CPU-seconds (all builds), and search per round by size."""
    builds = [b["tvm_s"] + b["nvrtc_s"] for r in rounds for b in r["builds"]]
    by_size: dict[int, list[float]] = {}
    for r in rounds:
        by_size.setdefault(r["size"], []).append(r["search_s"])
    return {
        "build_s": {
            "median": statistics.median(builds), "mean": statistics.fmean(builds),
            "min": min(builds), "max": max(builds), "count": len(builds),
        },
        "search_s_by_size": {str(k): statistics.fmean(v) for k, v in sorted(by_size.items())},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--tasks", type=int, default=2, help="the heaviest tasks searched")
    parser.add_argument("--sizes", default="16,64,256", help="round sizes, each task in turn")
    parser.add_argument("--build-every", type=int, default=4, help="build every k-th candidate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default=platform.node() or "host", help="for the file name")
    args = parser.parse_args()
    work = ROOT / "benchmarks" / "work"
    work.mkdir(parents=True, exist_ok=True)
    cuda_headers(work)
    started, wall = cpu_s(), time.perf_counter()
    head = Head(args.model, args.seed)
    imported = cpu_s() - started
    rounds = []
    with tempfile.TemporaryDirectory(dir=work) as out_dir:
        for task in head.tasks[: args.tasks]:
            for size in (int(s) for s in args.sizes.split(",")):
                rounds.append(head.round(task, size, args.build_every, out_dir))
                r = rounds[-1]
                print(
                    f"{r['task']}: {r['candidates']} proposed in {r['search_s']:.1f} CPU-s "
                    f"(model trained: {r['trained']}), {len(r['builds'])} built "
                    f"({statistics.fmean(b['tvm_s'] + b['nvrtc_s'] for b in r['builds']):.2f} "
                    f"CPU-s each), fit on {r['samples']} samples {r['fit_s']:.2f} CPU-s",
                    flush=True,
                )
    result = {
        "model": args.model.name, "target": "nvidia/nvidia-h100", "label": args.label,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores", "date": dt.date.today().isoformat(),
        "import_s": imported, "cpu_s": cpu_s() - started, "wall_s": time.perf_counter() - wall,
        "tasks": [{"name": t.name, "weight": t.weight, "flops": t.flops} for t in head.tasks],
        "rounds": rounds, "summary": summary(rounds),
    }  # fmt: skip
    name = f"head_costs-{args.model.stem}-{args.label}-{result['date']}.json"
    out = ROOT / "benchmarks" / "results" / name
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"]), f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
