"""A GPU run past one host, by simulation: candidates per second, GPU busy share, build-pool
and head-CPU use on 1, 2, 4 and 8 GPUs, on one host and as an RPC fleet, for heads of 16, 32
and 64 cores; checked first against the real H100 runs.

    python benchmarks/head_costs.py --model benchmarks/work/vggish.onnx --label vm-2core
    python benchmarks/head_costs.py --model benchmarks/work/resnet50ish.onnx --label vm-2core
    python benchmarks/gpu_scaling.py --costs benchmarks/results/head_costs-*-vm-2core-*.json

Measured (head_costs.py, CPU-seconds on this host): a build per candidate (TVM and NVRTC),
a round's search, a refit. Simulated: the GPUs, by the product's parallel engine on the
calibrated simulated H100 (measure/calibration/nvidia-h100.json), as `--simulate` builds it
(orchestrator/run/measuring.py), or for a fleet as the RPC engine schedules it (one candidate
at a time per server) with `--rpc-s` more per candidate for the session and the upload; and
the head's CPUs and the loop's pipeline (_head.py). Round sizes are the loop's own
(round_sizes: trials_per_round per GPU in whole waves of the build pool). One host of k GPUs
is assumed to have `--cores-per-gpu` cores (16: the H100 host measured here); a fleet's head
has `--head-cores`. A two-GPU-hour budget is 2/k hours of wall time on k GPUs; `--minutes`
caps the simulated wall. Raw figures go to benchmarks/results/gpu_scaling-<label>-<date>.json,
the plot to docs/gpu-scaling.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import statistics
from pathlib import Path
from typing import Any

import _head
from _common import ROOT

RESULTS = ROOT / "benchmarks" / "results"
REAL = {  # the real H100 runs the model is checked against (16 host cores, one GPU)
    "e2e": RESULTS / "orchestrate-vggish-cuda-3min-gpu-e2e-nvidia-h100-2026-11-27.json",
    "steady": RESULTS
    / "search_cost-vggish-512trials-simulated-sized-gpu-host-16core-2026-11-26.json",
}


@dataclasses.dataclass(frozen=True)
class Task:
    """What the engine needs of a task: its key (the landscape's), FLOPs, argument specs."""

    key: str
    flops: float
    weight: int
    args: tuple = (("float32", (16,)),)


def costs(measured: dict[str, Any], max_samples: int, measure_host_s: float) -> _head.Costs:
    """The head's costs from a head_costs.py result: every build drawn; the search per round
    as a line fitted to the rounds searched with a trained model (all rounds if none); a refit
    as a line through the measured refits against their samples (the first, which pays
    xgboost's start, left out)."""
    rounds = measured["rounds"]
    trained = [r for r in rounds if r["trained"]] or rounds
    slope, intercept = statistics.linear_regression(
        [r["candidates"] for r in trained], [r["search_s"] for r in trained]
    )
    per_sample, fixed = statistics.linear_regression(
        [r["samples"] for r in rounds[1:]], [r["fit_s"] for r in rounds[1:]]
    )
    return _head.Costs(
        build_s=tuple(b["tvm_s"] + b["nvrtc_s"] for r in rounds for b in r["builds"]),
        search_fixed_s=max(0.0, intercept),
        search_per_candidate_s=max(0.0, slope),
        fit_fixed_s=max(0.0, fixed),
        fit_per_sample_s=max(0.0, per_sample),
        max_samples=max_samples,
        measure_host_s=measure_host_s,
    )


def tasks_of(measured: dict[str, Any]) -> list[Task]:
    """The model's tasks, heaviest first (the landscape keys a task by its name here)."""
    return [Task(t["name"], t["flops"], t["weight"]) for t in measured["tasks"]]


def planner(tasks: list[Task], sizes: Any, first: int | None = None) -> Any:
    """Rounds as the scheduler serves them, roughly: a first touch of each task holding 1% or
    more of the work, then full rounds shared by the tasks holding 80% of it, in turn."""
    total = sum(t.flops * t.weight for t in tasks)
    touched = [t for t in tasks if t.flops * t.weight >= 0.01 * total]
    heavy, share = [], 0.0
    for t in tasks:
        if share < 0.8:
            heavy.append(t)
            share += t.flops * t.weight / total
    first = len(touched) if first is None else first

    def plan(i: int) -> tuple[Task, int]:
        if i < first:
            return touched[i % len(touched)], sizes.smallest
        return heavy[(i - first) % len(heavy)], sizes.largest

    return plan


def engine(gpus: int, fleet: bool, rpc_s: float, seed: int) -> Any:
    """The engine `--simulate` makes for `gpus` GPUs on this host; for a fleet, the RPC
    engine's scheduling (fixed DOP 1: one candidate per server at a time) on the same GPU with
    `rpc_s` more per candidate outside the window."""
    from tune_orchestrator.config import Settings
    from tune_orchestrator.measure import SimulatedEngine, SimulatedGpu
    from tune_orchestrator.model.targets import resolve_target
    from tune_orchestrator.run.measuring import Fleet, make_engine, timing_plan
    from tune_orchestrator.simulate import Landscape

    settings = Settings.load(None, {"tune.seed": seed})
    if not fleet:
        target = resolve_target("nvidia/nvidia-h100", simulate=True)
        return make_engine(settings, target, None, Fleet(gpus=tuple(range(gpus))))
    gpu = SimulatedGpu.calibrated("nvidia-h100", seed=seed)
    return SimulatedEngine(
        dataclasses.replace(gpu, load_s=gpu.load_s + rpc_s),
        gpus=gpus,
        fixed_dop=1,
        plan=timing_plan(settings, "cuda"),
        latency=Landscape(seed=seed).of_input,
        warm=1,
    )


def simulate(
    setup: _head.Setup,
    head_costs: _head.Costs,
    tasks: list[Task],
    rpc_s: float,
    first: int | None = None,
    before: int = 0,
) -> dict[str, Any]:
    """One configuration's run; `before` default schedules measured first (the untuned
    baseline), as a run does."""
    from tune_orchestrator.config import Settings
    from tune_orchestrator.measure import MeasureInput
    from tune_orchestrator.run.loop import round_sizes, search_ahead

    settings = Settings.load()
    sizes = round_sizes(settings, setup.build_cores or setup.cores, setup.gpus)
    measuring = engine(setup.gpus, setup.fleet, rpc_s, setup.seed)
    if before:
        measuring.measure(
            [
                MeasureInput(f"default-{t.key}.so", t.args, label=(t.key, t.flops, None))
                for t in tasks[:before]
            ]
        )
    run = _head.HeadRun(
        setup,
        head_costs,
        planner(tasks, sizes, first),
        measuring,
        search_ahead(settings.search.ahead, setup.cores),
    )
    out = run.run()
    out["round_sizes"] = [sizes.smallest, sizes.largest]
    out["log"] = run.log
    return out


def steady(out: dict[str, Any], skip: int) -> float:
    """Candidates per second over the rounds after the first `skip` (from the end of round
    `skip` to the end of the last)."""
    log = out["log"]
    if len(log) <= skip + 1:
        return out["candidates_per_s"]
    return sum(size for _, size, _, _ in log[skip + 1 :]) / (log[-1][3] - log[skip][3])


def validate(head_costs: _head.Costs, tasks: list[Task], rpc_s: float) -> dict[str, Any]:
    """The model against the real 16-core H100 host: the 3-minute run's six first rounds of 16
    (after its untuned baseline of 15), and the steady rate of the 512-trial run's rounds of
    64 (the GPU simulated there too; from its checkpoints at 64 and 448 trials)."""
    e2e = json.loads(REAL["e2e"].read_text())
    points = e2e["convergence"]
    real_span = points[-1]["wall_s"] - points[0]["wall_s"]
    setup = _head.Setup(cores=16, gpus=1, seconds=1e9, rounds=6)
    model = simulate(setup, head_costs, tasks, rpc_s, first=6, before=15)
    span = model["log"][-1][3]
    run = json.loads(REAL["steady"].read_text())["runs"]["sized-seed0"]
    (t0, n0), (t1, n1) = run["checkpoints"][0], run["checkpoints"][-2]
    real_rate = (n1 - n0) / (t1 - t0)
    setup = _head.Setup(cores=16, gpus=1, seconds=1e9, rounds=8)
    rate = steady(simulate(setup, head_costs, tasks, rpc_s, first=0), 1)
    return {
        "first_rounds": {"real_s": real_span, "model_s": span, "ratio": span / real_span},
        "steady": {"real_per_s": real_rate, "model_per_s": rate, "ratio": rate / real_rate},
    }


def study(
    head_costs: _head.Costs, tasks: list[Task], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Every configuration: one host of k GPUs with cores-per-gpu x k cores, and a fleet of k
    behind each head size; two GPU-hours each (capped at --minutes of wall)."""
    rows = []
    configs = [(k * args.cores_per_gpu, k, False, 0) for k in args.gpus]
    configs += [(c, k, True, 0) for c in args.head_cores for k in args.gpus]
    # Builds on the GPU hosts, behind the smallest head: each host's cores build.
    configs += [(min(args.head_cores), k, True, k * args.cores_per_gpu) for k in args.gpus]
    for cores, k, fleet, build_cores in configs:
        seconds = min(2 * 3600 / k, 60 * args.minutes)
        setup = _head.Setup(
            cores=cores,
            gpus=k,
            fleet=fleet,
            seconds=seconds,
            seed=args.seed,
            build_cores=build_cores,
            remote_build_s=args.rpc_s if build_cores else 0.0,
        )
        out = simulate(setup, head_costs, tasks, args.rpc_s)
        out["steady_per_s"] = steady(out, len(out["log"]) // 4)
        out.pop("log")
        rows.append(out)
        print(row_text(out), flush=True)
    return rows


def limit(row: dict[str, Any]) -> str:
    """What the loop's main thread waited on most: the GPUs, the next round's search or its
    builds, or a refit."""
    waited = row["waited"]
    return max(waited, key=waited.get).replace("gpus", "GPUs")


def row_text(row: dict[str, Any]) -> str:
    where = (
        f"fleet, head {row['cores']:>2} cores"
        if row["fleet"]
        else f"one host, {row['cores']:>3} cores"
    ) + (", builds on the GPU hosts" if row["builds_remote"] else "")
    return (
        f"{row['gpus']} GPU  {where:<46} {row['steady_per_s']:6.1f} cand/s ({row['candidates']:>6} "
        f"in {row['wall_s'] / 60:4.0f} min)  GPU busy "
        f"{row['gpu_busy']:5.1%}  build pool {row['build_pool_busy']:5.1%}  head CPU "
        f"{row['head_cpu_busy']:5.1%}  limit: {limit(row)}"
    )


def host_speed(head_costs: _head.Costs, tasks: list[Task], rpc_s: float) -> dict[str, Any]:
    """How fast the real 16-core GPU host's cores ran this work against this host's: the
    speed at which the model gives the 512-trial run's steady rate (two steps of a fixed-point
    iteration; the rate is about proportional), then both checks at that speed."""
    speed = 1.0
    for _ in range(2):
        check = validate(head_costs.on(speed), tasks, rpc_s)
        speed /= check["steady"]["ratio"]
    return {
        "speed": speed,
        "raw": validate(head_costs, tasks, rpc_s),
        "fitted": validate(head_costs.on(speed), tasks, rpc_s),
    }


def gpu_alone(tasks: list[Task], gpus: int, fleet: bool, rpc_s: float, seed: int) -> float:
    """Candidates per second the GPUs measure with a head that costs nothing: the engine's
    own limit, in rounds of the sizes a 16-core-per-GPU host gives."""
    free = _head.Costs(
        build_s=(0.0,),
        search_fixed_s=0.0,
        search_per_candidate_s=0.0,
        fit_fixed_s=0.0,
        fit_per_sample_s=0.0,
    )
    setup = _head.Setup(cores=16 * gpus, gpus=gpus, fleet=fleet, seconds=300.0, seed=seed)
    out = simulate(setup, free, tasks, rpc_s)
    return steady(out, len(out["log"]) // 4)


def fed(rows: list[dict[str, Any]], alone: dict[str, float]) -> dict[str, float]:
    """GPUs a fleet's head of each size keeps busy: its best candidates per second over the
    GPU counts, over what one GPU measures alone over RPC."""
    out = {}
    heads = [r for r in rows if r["fleet"] and not r["builds_remote"]]
    for cores in sorted({r["cores"] for r in heads}):
        best = max(r["steady_per_s"] for r in heads if r["cores"] == cores)
        out[str(cores)] = best / alone["fleet-1"]
    return out


def plot(models: dict[str, dict[str, Any]], path: Path) -> None:
    """Candidates per second (top) and the GPUs' busy share of the run (bottom) against the
    GPU count, a column per model: one host, a fleet behind each head, the GPUs alone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(models), figsize=(5.5 * len(models), 7), squeeze=False)
    for column, (name, model) in enumerate(models.items()):
        top, bottom = axes[0][column], axes[1][column]
        lines = {
            f"one host, {model['cores_per_gpu']} cores per GPU": [
                r for r in model["rows"] if not r["fleet"]
            ]
        }
        heads = [r for r in model["rows"] if r["fleet"] and not r["builds_remote"]]
        for cores in sorted({r["cores"] for r in heads}):
            lines[f"fleet, head of {cores} cores"] = [r for r in heads if r["cores"] == cores]
        remote = [r for r in model["rows"] if r["builds_remote"]]
        if remote:
            lines[f"fleet, head of {remote[0]['cores']} cores, builds on the GPU hosts"] = remote
        for label, rows in lines.items():
            gpus = [r["gpus"] for r in rows]
            top.plot(gpus, [r["steady_per_s"] for r in rows], marker="o", label=label)
            bottom.plot(gpus, [100 * r["gpu_busy"] for r in rows], marker="o", label=label)
        alone = model["gpus_alone"]
        gpus = sorted(int(k.split("-")[1]) for k in alone if k.startswith("fleet"))
        top.plot(gpus, [alone[f"host-{k}"] for k in gpus], "k--", label="the GPUs alone (one host)")
        top.plot(gpus, [alone[f"fleet-{k}"] for k in gpus], "k:", label="the GPUs alone (fleet)")
        top.set_yscale("log")
        top.set_title(f"{name}: candidates per second")
        bottom.set_title(f"{name}: GPU timed-window busy, % of the run")
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.set_xticks(gpus, [str(k) for k in gpus])
            ax.set_xlabel("GPUs (simulated H100)")
            ax.grid(alpha=0.3)
        top.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--costs", type=Path, nargs="+", required=True, help="head_costs.py results"
    )
    parser.add_argument(
        "--gpus", type=lambda s: [int(k) for k in s.split(",")], default=[1, 2, 4, 8]
    )
    parser.add_argument(
        "--head-cores", type=lambda s: [int(k) for k in s.split(",")], default=[16, 32, 64]
    )
    parser.add_argument("--cores-per-gpu", type=int, default=16)
    parser.add_argument(
        "--samples", type=int, default=4096, help="the learned model's training set (its cap)"
    )
    parser.add_argument(
        "--measure-host-s",
        type=float,
        default=0.1,
        help="host CPU-s per candidate of a GPU's workers",
    )
    parser.add_argument(
        "--rpc-s", type=float, default=0.05, help="a fleet's session and upload per candidate"
    )
    parser.add_argument("--minutes", type=float, default=120.0, help="the most wall time simulated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label", default="vm-2core")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "gpu-scaling.png")
    return parser.parse_args()


def main() -> None:
    args = arguments()
    measured = {
        json.loads(f.read_text())["model"].removesuffix(".onnx"): json.loads(f.read_text())
        for f in args.costs
    }
    here = {m: costs(d, args.samples, args.measure_host_s) for m, d in measured.items()}
    check = host_speed(here["vggish"], tasks_of(measured["vggish"]), args.rpc_s)
    print(
        f"the 16-core H100 host's cores against this host's: {check['speed']:.2f}x; {json.dumps(check['fitted'])}"
    )
    models = {}
    for name, d in measured.items():
        print(f"\n{name} (cores {check['speed']:.2f}x this host's)")
        tasks = tasks_of(d)
        alone = {
            f"{'fleet' if f else 'host'}-{k}": gpu_alone(tasks, k, f, args.rpc_s, args.seed)
            for f in (False, True)
            for k in args.gpus
        }
        rows = study(here[name].on(check["speed"]), tasks, args)
        models[name] = {
            "costs": dataclasses.asdict(here[name])
            | {"build_s": statistics.fmean(here[name].build_s)},
            "cores_per_gpu": args.cores_per_gpu,
            "gpus_alone": alone,
            "rows": rows,
            "fed": fed(rows, alone),
        }
        print(
            "GPUs alone (cand/s):",
            {k: round(v, 1) for k, v in alone.items()},
            "\nGPUs a fleet's head feeds:",
            {k: round(v, 2) for k, v in models[name]["fed"].items()},
        )
    date = dt.date.today().isoformat()
    out = RESULTS / f"gpu_scaling-{args.label}-{date}.json"
    result = {
        "date": date,
        "label": args.label,
        "settings": {k: v for k, v in vars(args).items() if k != "costs"},
        "costs_files": [f"benchmarks/results/{f.name}" for f in args.costs],
        "host_check": check,
        "models": models,
    }
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    plot(models, args.plot)
    print(f"wrote {out.relative_to(ROOT)} and {args.plot}")


if __name__ == "__main__":
    main()
