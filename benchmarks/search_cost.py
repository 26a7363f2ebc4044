"""Where search time goes, and what sizing the search costs in quality, side by side in one run.

    python benchmarks/search_cost.py [--model examples/smallcnn.onnx] [--trials 256]
                                     [--seeds 0,1] [--presets tvm-default,sized]
                                     [--filter none|xgb] [--target llvm] [--simulate]
                                     [--label vm-2core]

Each preset x seed tunes the same model with `orchestrate` (through its API, each in a fresh
process, same target, trial cap and filter). Presets:
  - `tvm-default`: MetaSchedule's own search settings (population 512, 4 genetic iterations)
    and its XGBModel as the search's cost model, driven by our loop;
  - `sized`: the defaults (population sized to the round, 3 iterations, the shared model);
  - `sized-tvm-xgb`: the sized search with MetaSchedule's XGBModel (isolates the cost model);
  - `sized-1x2`, `sized-2x3`: population 1x / 2x the round's proposals, 2 / 3 iterations;
  - `sized-unchecked`: the sized search without the GPU precheck (GPU targets: TVM's
    postprocessors alone judge every schedule; the search proposes the same ones).
Then every run's final database is compiled with stock `compile_relax` and all are timed
interleaved. Prints per run: wall time of the whole call, the time the run waited on search
and its share of the run's wall (the run's own clock): the search phase plus search's part of
the waits for rounds prepared in the background (GPU runs), search time per search and its
breakdown (sampling, mutation, prediction, features; summed over every search, background
ones included), and the final latency; then per preset the medians and their ratios to the
first preset.

`--simulate` tunes for a CUDA target without a GPU (`--target`, default nvidia/nvidia-h100):
search and CUDA builds are real, the simulated GPU times the candidates (a random landscape,
so search settings cannot differ in quality there, and no latency is timed): it gives the
search's share of a CUDA run and where its time goes. Raw figures go to
benchmarks/results/search_cost-<model>-<trials>trials[-simulated]-<presets>-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import time
from pathlib import Path

from _common import ROOT, run_child, time_databases, tune_ours

_PARTS = ("sampling", "mutation", "prediction", "features")  # of a search's time

PRESETS = {
    "tvm-default": '[search]\npopulation = 512\ngenetic_num_iters = 4\ncost_model = "tvm-xgb"\n',
    "sized": "",
    "sized-tvm-xgb": '[search]\ncost_model = "tvm-xgb"\n',
    "sized-1x2": "[search]\npopulation_per_candidate = 1\ngenetic_num_iters = 2\n",
    "sized-2x3": "[search]\npopulation_per_candidate = 2\ngenetic_num_iters = 3\n",
    "sized-unchecked": "[search]\ngpu_precheck = false\n",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "examples" / "smallcnn.onnx")
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--presets", default="tvm-default,sized")
    parser.add_argument("--filter", default="xgb")
    parser.add_argument("--target", default=None, help="llvm, or nvidia/nvidia-h100 simulated")
    parser.add_argument("--simulate", action="store_true", help="the simulated GPU, no GPU")
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    parser.add_argument("--repeats", type=int, default=20, help="latency samples per run")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:  # one run in a fresh process: print its figures as JSON
        target_json, seed, config, work = args.child
        extra = [f"filter={args.filter}", f"config={config}"]
        figures = tune_ours(
            str(args.model), target_json, args.trials, int(seed), work, extra, args.simulate
        )
        print(json.dumps(figures))
        return

    from orchestrator.targets import resolve_target

    spec = args.target or ("nvidia/nvidia-h100" if args.simulate else "llvm")
    resolved = resolve_target(spec, simulate=args.simulate)
    target_json = json.dumps(resolved.to_json())
    base = ROOT / "benchmarks" / "work" / f"search-{time.strftime('%Y%m%d-%H%M%S')}"
    base.mkdir(parents=True)
    presets = args.presets.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    runs: dict[str, dict] = {}
    for seed in seeds:  # seeds outermost: drift on the machine hits every preset alike
        for preset in presets:
            name = f"{preset}-seed{seed}"
            config = base / f"{preset}.toml"
            config.write_text(PRESETS[preset])
            print(f"tuning {name} ...", flush=True)
            runs[name] = run_child(
                Path(__file__),
                [
                    "--model", str(args.model), "--trials", str(args.trials),
                    "--filter", args.filter,
                    *(["--simulate"] if args.simulate else []),
                    "--child", target_json, str(seed), str(config), str(base / name),
                ],
            )  # fmt: skip
            runs[name]["preset"], runs[name]["seed"] = preset, seed
    latency: dict[str, dict | None] = {name: None for name in runs}
    if not args.simulate:
        latency.update(
            time_databases(
                args.model,
                target_json,
                {name: base / name for name in runs},
                args.repeats,
                device_type=resolved.device_type,
            )
        )

    print(f"\n{args.model.name}, {args.trials} trials, filter {args.filter}, {resolved.describe()}")
    print(
        f"  {'run':<26}{'wall':>8}{'search':>8}{'share':>7}{'per search':>11}"
        f"{'sampling':>9}{'mutation':>9}{'predict':>8}{'features':>9}{'latency':>10}"
    )
    for name, r in runs.items():
        s = r["search"]
        searched = search_on_critical_path(r)
        r["latency"] = latency[name]
        r["search_share"] = searched / r["wall_s"]
        shown = f"{latency[name]['median_s'] * 1e6:>8.0f}us" if latency[name] else f"{'-':>10}"
        print(
            f"  {name:<26}{r['total_s']:>7.0f}s{searched:>7.0f}s{r['search_share']:>7.0%}"
            f"{sum(s.get(p, 0.0) for p in _PARTS) / max(1, s.get('searches', 0)):>10.1f}s"
            f"{s.get('sampling', 0):>8.1f}s"
            f"{s.get('mutation', 0):>8.1f}s{s.get('prediction', 0):>7.1f}s"
            f"{s.get('features', 0):>8.1f}s{shown}"
        )
    first = presets[0]
    summary = {}
    for preset in presets:
        mine = [r for r in runs.values() if r["preset"] == preset]
        summary[preset] = {
            "wall_s": statistics.median(r["total_s"] for r in mine),
            "search_s": statistics.median(search_on_critical_path(r) for r in mine),
            "search_share": statistics.median(r["search_share"] for r in mine),
            "latency_s": (
                None if args.simulate else statistics.median(r["latency"]["median_s"] for r in mine)
            ),
        }
    print(f"  medians over seeds {seeds}, as ratios to {first}:")
    for preset, m in summary.items():
        f = summary[first]
        quality = (
            f", latency {m['latency_s'] * 1e6:.0f}us ({m['latency_s'] / f['latency_s']:.3f})"
            if m["latency_s"]
            else ""
        )
        print(
            f"  {preset:<26} wall {m['wall_s']:.0f}s ({m['wall_s'] / f['wall_s']:.2f}), search "
            f"{m['search_s']:.0f}s ({m['search_s'] / max(f['search_s'], 1e-9):.2f}, "
            f"{m['search_share']:.0%} of the run){quality}"
        )
    machine = f"{platform.processor() or platform.machine()}, {resolved.describe()}"
    kind = ("-simulated" if args.simulate else "") + "-" + "-vs-".join(presets)
    out = (
        ROOT
        / "benchmarks"
        / "results"
        / f"search_cost-{args.model.stem}-{args.trials}trials{kind}-{args.label}-{dt.date.today()}.json"
    )
    out.write_text(
        json.dumps(
            {
                "model": args.model.name,
                "trials": args.trials,
                "filter": args.filter,
                "seeds": seeds,
                "machine": machine,
                "label": args.label,
                "simulated": args.simulate,
                "presets": {p: PRESETS[p] for p in presets},
                "runs": runs,
                "summary": summary,
            },
            indent=2,
        )
    )
    print(f"raw figures: {out.relative_to(ROOT)}")


def search_on_critical_path(run: dict) -> float:
    """Seconds the run waited on search: the search phase (the main thread searching), plus
    search's share of the `ahead` phase, the waits that measuring did not hide for background
    work: a search running ahead, or on GPU runs a whole round searched, filtered and built
    while the last one was measured."""
    from budget.render import background_work

    phases, work = run["phases"], background_work(run.get("overlapped", {}))
    background = sum(work.values())
    ahead = phases.get("ahead", 0.0) * work["search"] / background if background else 0.0
    return phases.get("search", 0.0) + ahead


if __name__ == "__main__":
    main()
