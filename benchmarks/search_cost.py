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
  - `sized-1x2`, `sized-2x3`, `sized-4x3`: population 1x / 2x / 4x the round's proposals,
    2 / 3 / 3 iterations;
  - `sized-warm64`, `sized-4x3-warm64`: the cost model guides the search once it has seen 64
    measurements (one round) instead of 100;
  - `sized-unchecked`: the sized search without the GPU precheck (GPU targets: TVM's
    postprocessors alone judge every schedule);
  - `sized-verify-all`: GPU targets: VerifyGPUCode lowers every schedule of the evolution,
    not only the evolution's picks (`[search] late_verify = false`).
Then every run's final database is compiled with stock `compile_relax` and all are timed
interleaved. Prints per run: wall time of the whole call, the time the run waited on search
and its share of the run's wall (the run's own clock): the search phase plus search's part of
the waits for rounds prepared in the background (GPU runs), search time per search and its
breakdown (sampling, mutation, prediction, features, and on GPU targets the late
VerifyGPUCode of the evolution's picks; summed over every search, background ones included),
and the final latency; then time to quality, since a preset that searches longer can win at
equal trials and lose at equal time (from each run's own estimate of the model's latency after
every round: its estimate when the seed's shortest run ended, and when it first came within 2%
of the first preset's final estimate); then per preset the medians and their ratios to the
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

from _common import ROOT, reached, run_child, time_databases, tune_ours

_PARTS = ("sampling", "mutation", "prediction", "features", "verify")  # of a search's time

PRESETS = {
    "tvm-default": '[search]\npopulation = 512\ngenetic_num_iters = 4\ncost_model = "tvm-xgb"\n',
    "sized": "",
    "sized-tvm-xgb": '[search]\ncost_model = "tvm-xgb"\n',
    "sized-1x2": "[search]\npopulation_per_candidate = 1\ngenetic_num_iters = 2\n",
    "sized-2x3": "[search]\npopulation_per_candidate = 2\ngenetic_num_iters = 3\n",
    "sized-4x3": "[search]\npopulation_per_candidate = 4\ngenetic_num_iters = 3\n",
    "sized-warm64": "[search]\ncost_model_warmup = 64\n",
    "sized-4x3-warm64": "[search]\npopulation_per_candidate = 4\ncost_model_warmup = 64\n",
    "sized-unchecked": "[search]\ngpu_precheck = false\n",
    "sized-verify-all": "[search]\nlate_verify = false\n",
}


def main() -> None:
    """Tunes one run when started as a child (`--child`), else every preset x seed in turn,
    times their databases, prints the tables and writes the result file."""
    args = parse_args()
    if args.child:  # one run in a fresh process: print its figures as JSON
        run_preset_child(args)
        return

    from tune_orchestrator.model.targets import resolve_target

    spec = args.target or ("nvidia/nvidia-h100" if args.simulate else "llvm")
    resolved = resolve_target(spec, simulate=args.simulate)
    target_json = json.dumps(resolved.to_json())
    base = ROOT / "benchmarks" / "work" / f"search-{time.strftime('%Y%m%d-%H%M%S')}"
    base.mkdir(parents=True)
    presets = args.presets.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = tune_runs(args, base, target_json, presets, seeds)
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
    print_runs(args, resolved.describe(), runs, latency)
    if not args.simulate:
        print_equal_wall(runs, presets, seeds)
    summary = summarize(runs, presets, args.simulate)
    print_summary(summary, presets[0], seeds)
    out = write_result(args, resolved.describe(), presets, seeds, runs, summary)
    print(f"raw figures: {out.relative_to(ROOT)}")


def parse_args() -> argparse.Namespace:
    """The command line: the user's flags, and the hidden one a child process is given."""
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
    return parser.parse_args()


def run_preset_child(args: argparse.Namespace) -> None:
    """In a child process: tunes the one run `--child TARGET_JSON SEED CONFIG WORK` names and
    prints its figures as one JSON line."""
    target_json, seed, config, work = args.child
    extra = [f"candidate_filter={args.filter}", f"config={config}"]
    figures = tune_ours(
        str(args.model), target_json, args.trials, int(seed), work, extra, args.simulate
    )
    print(json.dumps(figures))


def tune_runs(
    args: argparse.Namespace, base: Path, target_json: str, presets: list[str], seeds: list[int]
) -> dict[str, dict]:
    """Tunes every preset x seed, each in a child process with its preset's config file and its
    folder under `base`: "<preset>-seed<seed>" -> its figures, with its preset and seed."""
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
    return runs


def print_runs(
    args: argparse.Namespace, target: str, runs: dict[str, dict], latency: dict[str, dict | None]
) -> None:
    """Prints the heading and a line per run: its wall, the time it waited on search and its
    share of the run, search time per search and by part, and its latency (`target` describes
    the resolved target). Stores each run's `latency` and `search_share` in the run."""
    print(f"\n{args.model.name}, {args.trials} trials, filter {args.filter}, {target}")
    print(
        f"  {'run':<26}{'wall':>8}{'search':>8}{'share':>7}{'per search':>11}"
        f"{'sampling':>9}{'mutation':>9}{'predict':>8}{'features':>9}{'verify':>8}"
        f"{'latency':>10}"
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
            f"{s.get('features', 0):>8.1f}s{s.get('verify', 0):>7.1f}s{shown}"
        )


def summarize(runs: dict[str, dict], presets: list[str], simulate: bool) -> dict[str, dict]:
    """Per preset, the medians over its seeds: wall, search time and share, latency (none when
    simulated) and the time-to-quality ratios print_equal_wall stored in the runs."""
    summary = {}
    for preset in presets:
        mine = [r for r in runs.values() if r["preset"] == preset]
        summary[preset] = {
            "wall_s": statistics.median(r["total_s"] for r in mine),
            "search_s": statistics.median(search_on_critical_path(r) for r in mine),
            "search_share": statistics.median(r["search_share"] for r in mine),
            "latency_s": (
                None if simulate else statistics.median(r["latency"]["median_s"] for r in mine)
            ),
            "at_equal_wall": _median([r.get("at_equal_wall") for r in mine]),
            "to_first_final": _median([r.get("to_first_final") for r in mine]),
        }
    return summary


def print_summary(summary: dict[str, dict], first: str, seeds: list[int]) -> None:
    """Prints a line per preset: its medians, and their ratios to the `first` preset's."""
    print(f"  medians over seeds {seeds}, as ratios to {first}:")
    for preset, m in summary.items():
        f = summary[first]
        quality = (
            f", latency {m['latency_s'] * 1e6:.0f}us ({m['latency_s'] / f['latency_s']:.3f})"
            if m["latency_s"]
            else ""
        )
        if m["at_equal_wall"]:
            quality += f", estimate at equal wall {m['at_equal_wall']:.3f}"
        if m["to_first_final"]:
            quality += f", time to {first}'s final {m['to_first_final']:.2f}"
        print(
            f"  {preset:<26} wall {m['wall_s']:.0f}s ({m['wall_s'] / f['wall_s']:.2f}), search "
            f"{m['search_s']:.0f}s ({m['search_s'] / max(f['search_s'], 1e-9):.2f}, "
            f"{m['search_share']:.0%} of the run){quality}"
        )


def write_result(
    args: argparse.Namespace,
    target: str,
    presets: list[str],
    seeds: list[int],
    runs: dict[str, dict],
    summary: dict[str, dict],
) -> Path:
    """Writes the raw figures to benchmarks/results/search_cost-<model>-<trials>trials
    [-simulated]-<presets>-<label>-<date>.json; its path."""
    machine = f"{platform.processor() or platform.machine()}, {target}"
    kind = ("-simulated" if args.simulate else "") + "-" + "-vs-".join(presets)
    out = (
        ROOT
        / "benchmarks"
        / "results"
        / f"search_cost-{args.model.stem}-{args.trials}trials{kind}-{args.label}-{dt.date.today()}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
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
    return out


def print_equal_wall(runs: dict[str, dict], presets: list[str], seeds: list[int]) -> None:
    """Time to quality, from each run's own estimate of the model's latency after every round
    (its tasks' best measured latencies): per seed, each run's estimate when the seed's
    shortest run ended, and the wall at which it first came within 2% of the first preset's
    final estimate; both as ratios to the first preset's run of the seed. Stored in the runs
    (`at_equal_wall`, `to_first_final`)."""
    print(f"  time to quality (the runs' own estimates), as ratios to {presets[0]}'s run:")
    print(f"  {'run':<26}{'at wall':>9}{'estimate':>10}{'ratio':>7}{'within 2%':>11}{'ratio':>7}")
    for seed in seeds:
        mine = {p: runs[f"{p}-seed{seed}"] for p in presets}
        if not all(r["estimates"] for r in mine.values()):
            continue
        wall = min(r["estimates"][-1][0] for r in mine.values())
        base = mine[presets[0]]
        final = base["estimates"][-1][1]
        base_at, base_to = _estimate_at(base, wall), reached(base["estimates"], final)
        for preset, r in mine.items():
            at, to = _estimate_at(r, wall), reached(r["estimates"], final)
            r["at_equal_wall"] = at / base_at if at and base_at else None
            r["to_first_final"] = to / base_to if to and base_to else None
            print(
                f"  {preset + f'-seed{seed}':<26}{wall:>8.0f}s"
                + (
                    f"{at * 1e6:>8.0f}us{_ratio(r['at_equal_wall'], 3)}"
                    if at
                    else f"{'-':>10}{'':>7}"
                )
                + (
                    f"{to:>10.0f}s{_ratio(r['to_first_final'], 2)}"
                    if to
                    else f"{'never':>11}{'':>7}"
                )
            )


def _ratio(value: float | None, digits: int) -> str:
    """A ratio in a 7-wide column; '-' where the first preset's run has none to compare."""
    return f"{value:>7.{digits}f}" if value is not None else f"{'-':>7}"


def _estimate_at(run: dict, wall: float) -> float | None:
    """The run's estimate after its last round that ended by `wall`."""
    before = [latency for at, latency in run["estimates"] if at <= wall]
    return before[-1] if before else None


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def search_on_critical_path(run: dict) -> float:
    """Seconds the run waited on search: the search phase (the main thread searching), plus
    search's share of the `ahead` phase, the waits that measuring did not hide for background
    work: a search running ahead, or on GPU runs a whole round searched, filtered and built
    while the last one was measured."""
    from tune_orchestrator.budget.render import background_work

    phases, work = run["phases"], background_work(run.get("overlapped", {}))
    background = sum(work.values())
    ahead = phases.get("ahead", 0.0) * work["search"] / background if background else 0.0
    return phases.get("search", 0.0) + ahead


if __name__ == "__main__":
    main()
