"""Do MetaSchedule searches scale in threads on this host? One search at a time, or several at once.

    python benchmarks/search_threads.py [--model vggish] [--target nvidia/nvidia-h100]
                                        [--tasks 4] [--layouts 1x1,1xC,2xC/2] [--repeats 2]
                                        [--label vm-2core]

The loop searches the next tasks in background threads while the device measures (`[search]
ahead`, one per 4 cores), each search with its share of the cores; TVM runs a search's
sampling, mutation, postprocessing and feature extraction on its own C++ threads, and calls
back into Python (the GPU precheck, our cost model) under Python's lock. This benchmark
searches one round of each of the model's heaviest tasks in several layouts, `KxT`: K searches
at once in Python threads, T TVM threads each (C stands for this host's cores), and sets
their wall times side by side: if K searches at once with T threads take about as long as one
at a time with K x T threads, threads are enough and searches need no processes of their own.

Two kinds of round: `cold`, the cost model not yet trained (it scores at random, as in a
task's first rounds), and `guided`, after it has learned one round of each task (the features
of every schedule it scores are extracted). The latencies it learns come from the simulated
GPU's landscape (orchestrator/simulate.py): which schedules it favours does not matter here,
what it costs to guide the search does. Each search starts from the same state (the task's
learned round as parents); layouts are interleaved, `--repeats` times. A CUDA target needs no
GPU: nothing is built or run. Raw figures go to
benchmarks/results/search_threads-<model>-<target>-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import os
import platform
import re
import statistics
import time
from pathlib import Path
from typing import Any

from _common import ROOT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vggish", help="a benchmarks/models.py name or .onnx")
    parser.add_argument("--target", default="nvidia/nvidia-h100", help="a TVM tag, llvm, ...")
    parser.add_argument("--tasks", type=int, default=4, help="the heaviest tasks of the model")
    parser.add_argument("--proposals", type=int, default=64, help="candidates a round proposes")
    parser.add_argument(
        "--layouts",
        default="1x1,1xC,2xC/2",
        help="KxT: K searches at once, T TVM threads each; C is this host's cores",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    args = parser.parse_args()

    from models import write

    from tune_orchestrator import _tvm
    from tune_orchestrator.model import fuse_for_tuning, import_to_relax, load_model
    from tune_orchestrator.targets import resolve_target
    from tune_orchestrator.tasks import extract_tasks

    cores = os.cpu_count() or 1
    layouts = [parse_layout(text, cores) for text in args.layouts.split(",")]
    target = resolve_target(args.target, build_only=True).target
    _tvm.load_tensor_intrinsics()
    path = (
        Path(args.model)
        if args.model.endswith(".onnx")
        else write(args.model, ROOT / "benchmarks" / "work")
    )
    tasks = extract_tasks(fuse_for_tuning(import_to_relax(load_model(path)), target), target)
    tasks = tasks[: args.tasks]
    bench = Bench(tasks, target, args.proposals)
    runs: list[dict[str, Any]] = []
    for mode in ("cold", "guided"):
        bench.prepare(guided=mode == "guided")
        for repeat in range(args.repeats):
            for searches, threads in layouts:
                run = bench.run(searches, threads)
                run.update(mode=mode, repeat=repeat)
                runs.append(run)
                print(
                    f"{mode:>6} {searches}x{threads}: {run['wall_s']:6.1f} s wall, "
                    f"{run['cpu_s']:6.1f} s CPU, per search {fmt(run['search_s'])}",
                    flush=True,
                )
    summary = summarize(runs, layouts)
    print(f"\n{path.name}, {len(tasks)} tasks, {target.kind.name}, {cores} cores ({args.label})")
    first = "vs " + summary[0]["vs"]
    print(f"  {'round':<8}{'layout':<10}{'wall (median)':>15}{first:>10}{'CPU busy':>10}")
    for row in summary:
        print(
            f"  {row['mode']:<8}{row['layout']:<10}{row['wall_s']:>13.1f} s"
            f"{row['speedup']:>9.2f}x{row['cores_busy']:>10.2f}"
        )
    kind = re.sub(r"\W+", "-", args.target)
    out = (
        ROOT
        / "benchmarks"
        / "results"
        / f"search_threads-{path.stem}-{kind}-{args.label}-{dt.date.today()}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "model": path.name,
                "target": str(target),
                "cores": cores,
                "machine": f"{platform.processor() or platform.machine()}, {args.label}",
                "args": vars(args),
                "tasks": [t.name for t in tasks],
                "summary": summary,
                "runs": runs,
            },
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}")


def parse_layout(text: str, cores: int) -> tuple[int, int]:
    """A layout such as "2xC/2" -> (2, cores // 2): searches at once, TVM threads each."""
    searches, _, threads = text.partition("x")
    value = threads.replace("C", str(cores))
    number, _, divisor = value.partition("/")
    return int(searches), max(1, int(number) // int(divisor or 1))


class Bench:
    """The tasks' searches, each started afresh per run from the same learned state."""

    def __init__(self, tasks: list[Any], target: Any, proposals: int) -> None:
        from tvm.s_tir import meta_schedule as ms

        from tune_orchestrator.config import Settings
        from tune_orchestrator.filters._predictor import Predictor
        from tune_orchestrator.search.cost_model import SharedCostModel
        from tune_orchestrator.simulate import Landscape

        self.tasks, self.target, self.proposals = tasks, target, proposals
        self.settings = Settings.load()
        self.database = ms.database.MemoryDatabase()
        self.predictor = Predictor(seed=0)
        self.model = SharedCostModel(self.predictor, warmup=0, seed=0)
        self.landscape = Landscape(seed=0)
        self.learned: dict[int, list[tuple[Any, float]]] = {}

    def search(self, task: Any, threads: int) -> Any:
        from tune_orchestrator.search.strategy import TaskSearch

        search = TaskSearch(
            task,
            target=self.target,
            settings=self.settings,
            database=self.database,
            cost_model=self.model,
            rand_state=1,
            threads=threads,
            proposals=self.proposals,
        )
        search.learn(self.learned.get(task.index, []))
        return search

    def prepare(self, *, guided: bool) -> None:
        """One round of each task, timed on the landscape, as every run's parents; `guided`:
        the cost model learns them and scores the runs' schedules (else it scores at random)."""
        from tune_orchestrator.filters._predictor import Fitted
        from tune_orchestrator.search.cost_model import candidate_features
        from tune_orchestrator.tasks import structural_key

        self.predictor.fitted = Fitted(objective=self.predictor.objective)  # untrained
        for task in self.tasks:
            search = self.search(task, os.cpu_count() or 1)
            proposed = search.propose()
            latencies = [
                self.landscape.latency((task.key, task.flops, structural_key(mc.sch.mod)))
                for mc in proposed
            ]
            self.learned[task.index] = list(zip(proposed, latencies, strict=True))
            if guided:
                features = candidate_features(self.model, search.ctx, proposed)
                self.predictor.add(task.key, features, latencies)
        if guided:
            self.model.fit()

    def run(self, searches: int, threads: int) -> dict[str, Any]:
        """Every task's search, `searches` at once with `threads` TVM threads each."""
        built = {task.index: self.search(task, threads) for task in self.tasks}

        def one(task: Any) -> tuple[float, dict[str, Any]]:
            start = time.perf_counter()
            built[task.index].propose()
            return time.perf_counter() - start, built[task.index].last.to_dict()

        cpu, start = time.process_time(), time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(searches) as pool:
            results = list(pool.map(one, self.tasks))
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        return {
            "searches": searches,
            "threads": threads,
            "wall_s": wall,
            "cpu_s": cpu,
            "search_s": [s for s, _ in results],
            "parts": [parts for _, parts in results],
        }


def summarize(runs: list[dict[str, Any]], layouts: list[tuple[int, int]]) -> list[dict]:
    """Per round kind and layout: the median wall, its speedup over the first layout (one
    search at a time on one thread by default), and the cores kept busy (CPU s / wall)."""
    rows = []
    for mode in ("cold", "guided"):
        base = None  # the first layout's wall: the ratios are against it (1x1 by default)
        for searches, threads in layouts:
            mine = [
                r
                for r in runs
                if r["mode"] == mode and (r["searches"], r["threads"]) == (searches, threads)
            ]
            wall = statistics.median(r["wall_s"] for r in mine)
            busy = statistics.median(r["cpu_s"] / r["wall_s"] for r in mine)
            base = base or wall
            rows.append(
                {
                    "mode": mode,
                    "layout": f"{searches}x{threads}",
                    "wall_s": wall,
                    "speedup": base / wall,
                    "vs": "{}x{}".format(*layouts[0]),
                    "cores_busy": busy,
                    "runs": len(mine),
                }
            )
    return rows


def fmt(seconds: list[float]) -> str:
    return ", ".join(f"{s:.1f}" for s in seconds)


if __name__ == "__main__":
    main()
