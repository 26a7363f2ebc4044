"""Vanilla MetaSchedule `tune_relax` against `orchestrate`, same model, target, trial cap and seed.

    python benchmarks/vs_vanilla.py [--model examples/smallcnn.onnx|NAME] [--trials 128] [--seed 0]
                                    [--filter xgb|none] [--target llvm|cuda]
                                    [--fraction N] [--resume benchmarks/work/FOLDER]
                                    [--finals-only]

Each side runs in a fresh process, one after the other, and is timed as a whole call, as a
user would wait for it: vanilla from the ONNX import through `tune_relax` to `compile_relax`
(tune_relax with its defaults, except a builder timeout long enough that builds succeed on a
small loaded host: `--builder-timeout`; the same resolved target as ours, the host's -mcpu
included); ours the whole `tune_orchestrator.tune` call (import, untuned timing, tuning,
compile, output check). With `--fraction N`, ours runs a third time with a time budget of
vanilla's whole call / N (recorded as refused where that is below our up-front minimum).
Then every database is compiled with stock `compile_relax` and timed side by side,
interleaved, in this process, with the model.so each of our runs shipped.
Prints the wall times, end-to-end latencies and their ratios, and writes the raw figures to
benchmarks/results/vs_vanilla-<model>-<trials>trials-<cpu|cuda>-<label>-<date>.json. Each
side's figures are kept in its run folder as it ends: `--resume benchmarks/work/<folder>`
tunes only the sides that folder lacks. `--finals-only` skips the checkpoints' databases (on a
large model each costs a compile): time to quality is then each side's whole call where its
final database reaches the mark.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import time
from pathlib import Path

from _common import (
    QUALITY_TOLERANCE,
    ROOT,
    prefix_database,
    reached,
    run_child,
    scratch,
    time_databases,
    tune_ours,
    tune_vanilla,
)
from models import MODELS, write


def main() -> None:
    """Tunes one side when started as a child (`--side`), else both sides in turn, times
    their databases, prints the table and writes the result file."""
    args = parse_args()
    if args.side:  # a child process: tune one side, print its figures as JSON
        run_side_child(args)
        return

    from tune_orchestrator.model.targets import resolve_target

    resolved = resolve_target(args.target)
    target_json = json.dumps(resolved.to_json())
    base = (
        args.resume.resolve()
        if args.resume
        else ROOT / "benchmarks" / "work" / time.strftime("%Y%m%d-%H%M%S")
    )
    works, figures = tune_sides(args, base, target_json)
    latency, quality = time_sides(args, works, figures, target_json, resolved.device_type)
    machine = f"{platform.processor() or platform.machine()}, {resolved.describe()}"
    print_table(args, machine, figures, latency, quality)
    out = write_result(args, machine, resolved.device_type, figures, latency, quality)
    print(
        f"  (time to quality: until a checkpoint's database compiles to a model within "
        f"{QUALITY_TOLERANCE:.0%} of vanilla's final latency, seconds since the call began)"
    )
    print(f"raw figures: {out.relative_to(ROOT)}; run directories: {base.relative_to(ROOT)}")


def parse_args() -> argparse.Namespace:
    """The command line: the user's flags, and the hidden ones a child process is given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        type=model_path,
        default=ROOT / "examples" / "smallcnn.onnx",
        help="an .onnx path or a benchmarks/models.py name",
    )
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--filter", default="xgb", help="orchestrate's --filter")
    parser.add_argument("--target", default="llvm", help="llvm (this host's CPU) or cuda")
    parser.add_argument("--repeats", type=int, default=30, help="latency samples per side")
    parser.add_argument(
        "--builder-timeout", type=float, default=600.0, help="vanilla LocalBuilder's timeout_sec"
    )
    parser.add_argument(
        "--fraction", type=float, default=0, help="also run ours for vanilla's wall / FRACTION"
    )
    parser.add_argument(
        "--per-iter", type=int, default=64, help="vanilla's num_trials_per_iter (TVM's: 64)"
    )
    parser.add_argument("--label", default=platform.node() or "host", help="machine, for the file")
    parser.add_argument(
        "--resume", type=Path, help="a run folder under benchmarks/work: keep the sides it finished"
    )
    parser.add_argument(
        "--finals-only",
        action="store_true",
        help="time only the final databases and shipped libraries, not every checkpoint's "
        "(time to quality is then the whole call where the final reaches it: an upper bound)",
    )
    parser.add_argument("--budget", help=argparse.SUPPRESS)
    parser.add_argument("--side", choices=["vanilla", "ours"], help=argparse.SUPPRESS)
    parser.add_argument("--target-json", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    return parser.parse_args()


def run_side_child(args: argparse.Namespace) -> None:
    """In a child process: tunes the side `--side` names and prints its figures as one JSON
    line. Ours with a budget below our up-front minimum prints {"refused": why} instead."""
    if args.side == "vanilla":
        print(
            json.dumps(
                tune_vanilla(
                    str(args.model),
                    args.target_json,
                    args.trials,
                    args.seed,
                    args.work,
                    args.builder_timeout,
                    args.per_iter,
                )
            )
        )
        return
    from tune_orchestrator.errors import BudgetTooSmall

    try:
        figures = tune_ours(
            str(args.model),
            args.target_json,
            args.trials,
            args.seed,
            args.work,
            [f"candidate_filter={args.filter}"],
            budget=args.budget,
        )
    except BudgetTooSmall as refused:  # a tenth of vanilla's wall below our minimum
        figures = {"refused": str(refused)}
    print(json.dumps(figures))


def tune_sides(
    args: argparse.Namespace, base: Path, target_json: str
) -> tuple[dict[str, Path], dict[str, dict]]:
    """Tunes vanilla, then ours, then with `--fraction` ours again for vanilla's whole call /
    FRACTION, each in its folder under `base`: side -> run folder, and side -> its figures.
    A run of ours refused up front keeps its figures but has no folder to time."""
    works = {"vanilla": base / "vanilla", "ours": base / "ours"}
    figures = {}
    for side in ("vanilla", "ours"):
        figures[side] = tune_side(args, side, works[side], target_json)
    if args.fraction:
        budget = f"{figures['vanilla']['whole_s'] / args.fraction:.0f}s"
        works["ours-time"] = base / "ours-time"
        figures["ours-time"] = tune_side(args, "ours-time", works["ours-time"], target_json, budget)
        if "refused" in figures["ours-time"]:
            del works["ours-time"]  # nothing to time
    return works, figures


def tune_side(
    args: argparse.Namespace, side: str, work: Path, target_json: str, budget: str | None = None
) -> dict:
    """One side's figures: those kept in `work` by an earlier run (for --resume), else those
    of a child process that tunes it into `work`, then kept there."""
    print(f"tuning with {side}{f' for {budget}' if budget else ''} ...", flush=True)
    kept = work / "figures.json"  # a side finished before, for --resume
    if kept.is_file():
        return json.loads(kept.read_text())
    child = ["--side", side.split("-")[0], "--model", str(args.model), "--trials",
             str(args.trials), "--seed", str(args.seed), "--filter", args.filter,
             "--builder-timeout", str(args.builder_timeout), "--target-json", target_json,
             "--per-iter", str(args.per_iter),
             "--work", str(work)]  # fmt: skip
    figures = run_child(Path(__file__), child + (["--budget", budget] if budget else []))
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(figures))
    return figures


def time_sides(
    args: argparse.Namespace,
    works: dict[str, Path],
    figures: dict[str, dict],
    target_json: str,
    device_type: str,
) -> tuple[dict[str, dict], dict]:
    """Every checkpoint's database, both sides, timed with the finals and the libraries we
    shipped in one interleaved pass: the latency of each final database and shipped library
    (name -> figures), and time to quality."""
    prefixes = {} if args.finals_only else checkpoint_databases(works, figures)
    shipped = {f"{side}.so": Path(f["library"]) for side, f in figures.items() if f.get("library")}
    timed = time_databases(
        args.model,
        target_json,
        {**works, **{name: folder for name, (_, folder) in prefixes.items()}},
        args.repeats,
        device_type=device_type,
        jobs=os.cpu_count() or 1,
        libraries={name: path for name, path in shipped.items() if path.is_file()},
    )
    latency = {name: timed[name] for name in [*works, *shipped] if name in timed}
    finals = {"vanilla": figures["vanilla"]["whole_s"], "ours": figures["ours"]["total_s"]}
    return latency, time_to_quality(prefixes, timed, finals)


def print_table(
    args: argparse.Namespace,
    machine: str,
    figures: dict[str, dict],
    latency: dict[str, dict],
    quality: dict,
) -> None:
    """Prints the run's heading, vanilla against ours as a table, a line per further run of
    ours, and where vanilla's and our time went."""
    v, o = figures["vanilla"], figures["ours"]
    print(f"\n{args.model.name}, {args.trials} trials, seed {args.seed}, {machine}")
    for row in table_rows(args.filter, v, o, latency, quality):
        print(f"  {row[0]:<20}{row[1]:>20}{row[2]:>22}{row[3]:>16}")
    phases = ", ".join(
        f"{k} {s:.1f}s" for k, s in sorted(o["phases"].items(), key=lambda kv: -kv[1])
    )
    for side, f in figures.items():
        if side != "vanilla":
            print(side_line(side, f, latency))
    print(
        f"  (vanilla: tune_relax {v['tune_s']:.1f} s of its whole call, builder timeout "
        f"{v['builder_timeout_s']:.0f} s; ours by phase: {phases})"
    )


def table_rows(
    filter_name: str, v: dict, o: dict, latency: dict[str, dict], quality: dict
) -> list[tuple[str, str, str, str]]:
    """The table's rows, heading first: each figure for vanilla (`v`), ours (`o`) and their
    ratio."""
    lv, lo = latency["vanilla"]["median_s"], latency["ours"]["median_s"]
    return [
        ("", "vanilla", f"orchestrate ({filter_name})", "vanilla / ours"),
        (
            "whole call",
            f"{v['whole_s']:.1f} s",
            f"{o['total_s']:.1f} s",
            f"{v['whole_s'] / o['total_s']:.2f}x",
        ),
        (
            "whole process",
            f"{v['process_s']:.1f} s",
            f"{o['process_s']:.1f} s",
            f"{v['process_s'] / o['process_s']:.2f}x",
        ),
        ("end-to-end latency", f"{lv * 1e3:.3f} ms", f"{lo * 1e3:.3f} ms", f"{lv / lo:.3f}"),
        (
            "time to quality",
            fmt_s(quality["vanilla_s"]),
            fmt_s(quality["ours_s"]),
            f"{quality['ratio']:.2f}x" if quality["ratio"] else "not reached",
        ),
        ("measured", str(v["checkpoints"][-1][1]), str(o["trials"]), ""),
        ("failed", str(v["failed"]), str(o["failed"]), ""),
    ]


def side_line(side: str, f: dict, latency: dict[str, dict]) -> str:
    """A run of ours in one line: refused up front, or its wall, trials, tasks tuned, the
    latency of its database against vanilla's and that of the model.so it shipped."""
    if "refused" in f:
        return f"  {side}: refused up front: {f['refused']}"
    lv = latency["vanilla"]["median_s"]
    so = latency.get(f"{side}.so", {}).get("median_s")
    return (
        f"  {side}: {f['total_s']:.1f} s, {f['trials']} trials, {f['tasks_tuned']} of "
        f"{f['tasks']} tasks tuned, {latency[side]['median_s'] * 1e3:.3f} ms from its "
        f"database (vanilla / it {lv / latency[side]['median_s']:.3f})"
        + (f", {so * 1e3:.3f} ms its model.so ({f['shipped']})" if so else "")
    )


def write_result(
    args: argparse.Namespace,
    machine: str,
    device_type: str,
    figures: dict[str, dict],
    latency: dict[str, dict],
    quality: dict,
) -> Path:
    """Writes the raw figures to
    benchmarks/results/vs_vanilla-<model>-<trials>trials-<device>-<label>-<date>.json; its path."""
    out = (
        ROOT
        / "benchmarks"
        / "results"
        / (
            f"vs_vanilla-{args.model.stem}-{args.trials}trials-{device_type}-{args.label}-{dt.date.today().isoformat()}.json"
        )
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "model": args.model.name,
                "trials": args.trials,
                "fraction": args.fraction,
                "seed": args.seed,
                "filter": args.filter,
                "target": args.target,
                "machine": machine,
                "compared": "whole calls: vanilla import + tune_relax + compile_relax, ours tune()",
                "tuning": figures,
                "latency": latency,
                "time_to_quality": quality,
            },
            indent=2,
        )
    )
    return out


def model_path(text: str) -> Path:
    """A benchmarks/models.py name, written to benchmarks/work/, or else a path."""
    return write(text, ROOT / "benchmarks" / "work") if text in MODELS else Path(text)


def checkpoint_databases(
    works: dict[str, Path], figures: dict[str, dict]
) -> dict[str, tuple[float, Path]]:
    """name -> (seconds since the call began, a database of the records committed by then), for
    every checkpoint of both sides but the last (the final database is timed as it is). Ours'
    database begins with one default-schedule record per task, kept in every prefix."""
    journal = [json.loads(line) for line in (works["ours"] / "journal.jsonl").open()]
    defaults = len({e["task"] for e in journal if e["type"] == "baseline" and e["record_key"]})
    out = {}
    for side, skip in (("vanilla", 0), ("ours", defaults)):
        for seconds, records in figures[side]["checkpoints"][:-1]:
            name = f"{side}@{records}"
            out[name] = (seconds, prefix_database(works[side], skip + records, scratch()))
    return out


def time_to_quality(
    prefixes: dict[str, tuple[float, Path]], timed: dict[str, dict], finals: dict[str, float]
) -> dict:
    """Each side's first checkpoint whose model is within QUALITY_TOLERANCE of vanilla's final
    latency, else its whole call if its final model is, and the ratio of the two times."""
    target_s = timed["vanilla"]["median_s"]
    times = {}
    for side, whole_s in finals.items():
        points = sorted(
            (s, timed[name]["median_s"])
            for name, (s, _) in prefixes.items()
            if name.startswith(side + "@")
        )
        points.append((whole_s, timed[side]["median_s"]))
        times[side] = reached(points, target_s)
    return {
        "target_s": target_s,
        "tolerance": QUALITY_TOLERANCE,
        "checkpoints": {
            name: {"seconds": s, "median_s": timed[name]["median_s"]}
            for name, (s, _) in prefixes.items()
        },
        "vanilla_s": times["vanilla"],
        "ours_s": times["ours"],
        "ratio": times["vanilla"] / times["ours"] if times["vanilla"] and times["ours"] else None,
    }


def fmt_s(seconds: float | None) -> str:
    """Seconds as the table shows them; "-" for none."""
    return "-" if seconds is None else f"{seconds:.1f} s"


if __name__ == "__main__":
    main()
