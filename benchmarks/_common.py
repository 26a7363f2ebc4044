"""Shared by the benchmark scripts: tuning in child processes, database prefixes, timing."""

from __future__ import annotations

import atexit
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


# Time to quality (DESIGN): a model has reached a final latency once it is at most this much
# slower.
QUALITY_TOLERANCE = 0.02


def reached(points: Sequence[tuple[float, float]], final_s: float) -> float | None:
    """The time of the first (time, latency) point within QUALITY_TOLERANCE of `final_s`."""
    goal = final_s * (1 + QUALITY_TOLERANCE)
    return next((at for at, latency in points if latency <= goal), None)


def run_child(script: Path, args: Sequence[str]) -> dict[str, Any]:
    """Run `script args` in a fresh Python; its last stdout line is a JSON object."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures["process_s"] = time.perf_counter() - start
    return figures


def tune_vanilla(
    model_path: str,
    target_json: str,
    trials: int,
    seed: int,
    work: str,
    builder_timeout_s: float = 600.0,
    per_iter: int = 64,
) -> dict[str, Any]:
    """What a user writes by hand: import, prepare, `tune_relax`, `compile_relax`. tune_relax
    runs with its defaults except the builder's timeout: its default 30 s is shorter than a
    fresh build worker's start on a loaded 2-core host, and every build then fails; and
    `per_iter`, its candidates per task and batch (TVM's default 64 leaves most tasks of a
    many-task model untouched at a few hundred trials: it goes round the tasks once first).
    `whole_s` is the whole call (import to compiled model), as `tune_ours`'s `total_s`; each
    committed batch is timestamped (checkpoints: seconds since the call, records so far)."""
    start = time.perf_counter()
    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.measure_callback import MeasureCallback, PyMeasureCallback

    from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
    from tune_orchestrator.model.loading import load_model

    checkpoints: list[tuple[float, int]] = []

    @derived_object
    class Stamp(PyMeasureCallback):
        def apply(
            self, task_scheduler, task_id, measure_candidates, builder_results, runner_results
        ):
            done = (checkpoints[-1][1] if checkpoints else 0) + len(runner_results)
            checkpoints.append((time.perf_counter() - start, done))

    target = tvm.target.Target(json.loads(target_json))
    mod = import_to_relax(load_model(model_path))
    fused = fuse_for_tuning(mod, target)
    callbacks = MeasureCallback.create("default") + [Stamp()]
    tune_start = time.perf_counter()
    database = ms.relax_integration.tune_relax(
        mod=fused,
        params={},
        target=target,
        work_dir=work,
        max_trials_global=trials,
        num_trials_per_iter=per_iter,
        seed=seed,
        builder=ms.builder.LocalBuilder(timeout_sec=builder_timeout_s),
        measure_callbacks=callbacks,
    )
    tune_s = time.perf_counter() - tune_start
    ms.relax_integration.compile_relax(database, mod, target, params=None)
    records = database.get_all_tuning_records()
    return {
        "whole_s": time.perf_counter() - start,
        "tune_s": tune_s,
        "builder_timeout_s": builder_timeout_s,
        "per_iter": per_iter,
        "records": len(records),
        "failed": sum(1 for r in records if not measured_secs(r.run_secs)),
        "checkpoints": checkpoints,
    }


def tune_ours(
    model_path: str,
    target_json: str,
    trials: int,
    seed: int,
    work: str,
    extra: Sequence[str] = (),
    simulate: bool = False,
    budget: str | None = None,
    library: str | Path | bool = False,
) -> dict[str, Any]:
    """`orchestrate` through its API; checkpoints from the journal (spend at each round end,
    library rounds included), and the run's own estimate of the model's latency after each
    round. `budget` (a budget's text) replaces the trial cap; `simulate`: the simulated GPU
    times the candidates (a CUDA target, no GPU needed); `library`: a tuning library's root
    (default: none, a cold run)."""
    from tune_orchestrator import tune

    options: dict[str, Any] = {}
    for item in extra:
        key, _, value = item.partition("=")
        options[key] = value
    start = time.perf_counter()
    result = tune(
        model_path,
        budget=budget or f"{trials}trials",
        target=target_json,
        out=work,
        seed=seed,
        handle_signals=False,
        simulate=simulate,
        library=library,
        **options,
    )
    total = time.perf_counter() - start
    phases = dict(result.phases)
    journal = [json.loads(line) for line in (Path(work) / "journal.jsonl").read_text().splitlines()]
    rounds = [e for e in journal if e["type"] in ("round", "library_round")]
    checkpoints = [(e["spend"]["wall_s"], e["spend"]["trials"]) for e in rounds]
    # The run's own estimate of the model's latency after each round (its tasks' best measured
    # latencies, weighted): a tuning curve without compiling a database per round.
    estimates = [
        (e["spend"]["wall_s"], e["model_latency_s"]) for e in rounds if e.get("model_latency_s")
    ]
    report = result.report
    return {
        "total_s": total,  # the whole call: import, untuned, tuning, compile, check
        "wall_s": result.wall_s,  # the run's own clock (a simulated device's time included)
        # Only the five tuning phases: not comparable with a whole vanilla call.
        "phases_s": sum(
            phases.get(p, 0.0) for p in ("search", "filter", "build", "measure", "learn")
        ),
        "phases": phases,
        "overlapped": report.get("overlapped", {}),  # phases run in the background
        "trials": result.trials,
        "built": sum(t["built"] for t in report["tasks"]),
        "failed": sum(t["failures"] for t in report["tasks"]),
        "filter": report["filter"],
        "search": report.get("search", {}),
        "checkpoints": checkpoints,
        "estimates": estimates,
        "stop_reason": result.stop_reason,
        "tasks": len(report["tasks"]),
        "tasks_tuned": report["summary"].get("tasks_tuned"),
        "untouched_share": report["summary"].get("untouched_share"),
        "shipped": report["summary"].get("shipped"),
        "library": str(result.paths["library"]) if "library" in result.paths else None,
    }


def measured_secs(run_secs: Sequence[Any] | None) -> list[float]:
    """A record's repeats in seconds; empty when it has none or failed (a failed candidate is
    recorded as one repeat of orchestrator.loop.FAILED_RUN_SECS, 1e10 s)."""
    secs = [float(s) for s in (run_secs or [])]
    return secs if secs and min(secs) < 1e9 else []


def args_info(sch: Any) -> Any:
    """The ArgInfo of a schedule's entry function, as a measurement needs it."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return ArgInfo.from_entry_func(sch.mod, remove_preproc=True)


def prefix_database(run_dir: Path, records: int, into: Path) -> Path:
    """A copy of a run's database holding only its first `records` records (commit order)."""
    into.mkdir(parents=True, exist_ok=True)
    shutil.copy(run_dir / "database_workload.json", into / "database_workload.json")
    lines = (run_dir / "database_tuning_record.json").read_text().splitlines(keepends=True)
    (into / "database_tuning_record.json").write_text("".join(lines[:records]))
    return into


def compile_database(model_path: Path, target_json: str, folder: Path, library: Path) -> float:
    """Compile the model with one database (stock compile_relax) into `library`; seconds."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tune_orchestrator.model.importer import import_to_relax
    from tune_orchestrator.model.loading import load_model

    start = time.perf_counter()
    target = tvm.target.Target(json.loads(target_json))
    mod = import_to_relax(load_model(model_path))
    ex = ms.relax_integration.compile_relax(
        ms.database.JSONDatabase(work_dir=str(folder)), mod, target, params=None
    )
    ex.export_library(str(library))
    return time.perf_counter() - start


def time_databases(
    model_path: Path,
    target_json: str,
    databases: Mapping[str, Path],
    repeats: int,
    device_type: str = "cpu",
    samples: bool = False,
    jobs: int = 1,
    libraries: Mapping[str, Path] | None = None,
) -> dict[str, dict[str, Any]]:
    """Compile the model with each database (stock compile_relax, `jobs` at once in fresh
    processes) and time them all interleaved with the compiled `libraries` (e.g. a run's
    model.so), so drift on the machine hits every one alike. Median, min, max in seconds, the
    compile's seconds (and with `samples`, every timing as `samples_s`)."""
    import concurrent.futures
    import multiprocessing

    import numpy as np
    import tvm
    from tvm import relax

    from tune_orchestrator.model.loading import load_model

    model = load_model(model_path)
    rng = np.random.default_rng(0)
    dev = tvm.device(device_type, 0)
    inputs = [
        tvm.runtime.tensor(rng.standard_normal(i.shape).astype(i.dtype), device=dev)
        for i in model.inputs
    ]
    compiled = {name: scratch() / f"{name}.so" for name in databases}
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=max(1, jobs), mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        compiling = {
            name: pool.submit(compile_database, model_path, target_json, folder, compiled[name])
            for name, folder in databases.items()
        }
        compile_s = {name: future.result() for name, future in compiling.items()}
    built = {**compiled, **dict(libraries or {})}
    timers = {}
    for name, library in built.items():
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), dev)
        timers[name] = vm.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=50)
    timings: dict[str, list[float]] = {name: [] for name in built}
    for _ in range(repeats):
        for name, timer in timers.items():
            timings[name].append(timer(*inputs).mean)
    return {
        name: {
            "median_s": statistics.median(s),
            "min_s": min(s),
            "max_s": max(s),
            "compile_s": compile_s.get(name),
            **({"samples_s": s} if samples else {}),
        }
        for name, s in timings.items()
    }


def head_rev() -> str:
    """This checkout's commit, short."""
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()


def write_result(name: str, label: str, payload: Mapping[str, Any]) -> Path:
    """Write `payload` to results/<name>-<label>-<today>.json and say where."""
    import datetime

    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    out = results / f"{name}-{label}-{datetime.date.today().isoformat()}.json"
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {out}")
    return out


def scratch() -> Path:
    """A scratch folder, removed when the benchmark exits (its figures are in its results)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-db-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def side_by_side(passes: Mapping[str, Sequence[float]], new: str, old: str) -> dict[str, float]:
    """Print each kind of pass's seconds and median, then the medians' ratio `new` / `old`;
    returns the medians."""
    median = {kind: statistics.median(seconds) for kind, seconds in passes.items()}
    for kind, seconds in passes.items():
        shown = ", ".join(f"{s:.2f} s" for s in seconds)
        print(f"{kind:>6}: {shown}; median {median[kind]:.2f} s")
    print(f"{new} / {old}: {median[new] / median[old]:.2f}x")
    return median
