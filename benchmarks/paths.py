"""Where runs of the same command part: one task's rounds, run beside run.

    python benchmarks/paths.py --runs DIR DIR [DIR ...] [--task NAME]

Reads finished run directories of one model (e.g. spread.py's under benchmarks/work/) and, for
one task (default: the one the first run gave the most trials), prints each of its rounds in
every run: how many candidates it measured, how many of them each other run also measured in
its round of the same rank, and the task's best so far. Runs that measure the same candidates
in a round searched from the same state; the first round whose candidates differ is where
their paths part. Reads files only: nothing is built or timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", type=Path, required=True)
    parser.add_argument("--task", help="the task's name, as the journal has it")
    args = parser.parse_args()

    name = args.task or _most_tried(args.runs[0])
    paths = [_rounds(run, name) for run in args.runs]
    print(
        f"{name}: each run's candidates in a round (how many of them run 0 / 1 / ... measured in "
        "its round of the same rank), and the task's best after it, us"
    )
    for rank in range(max(len(p) for p in paths)):
        cells = []
        for i, path in enumerate(paths):
            if rank >= len(path):
                cells.append(f"run {i}: -")
                continue
            measured, best = path[rank]
            shared = "/".join(
                str(len(measured & other[rank][0])) if rank < len(other) else "-" for other in paths
            )
            cells.append(f"run {i}: {len(measured):3d} ({shared:>11}) {best * 1e6:7.1f}")
        print(f"  round {rank + 1:2d}  " + "   ".join(cells))


def _most_tried(run: Path) -> str:
    """The task whose rounds measured the most candidates in `run`."""
    session, rounds = _journal(run)
    trials: dict[int, int] = {}
    for r in rounds:
        trials[r["task"]] = trials.get(r["task"], 0) + r["trials"]
    return session["tasks"][max(trials, key=trials.__getitem__)]["name"]


def _rounds(run: Path, name: str) -> list[tuple[set[str], float]]:
    """The task's rounds in `run`, in order: the traces each measured (as text) and the task's
    best time after it. A round's records are the next ones of the task in the database (the
    first is its default schedule, recorded before any round)."""
    session, rounds = _journal(run)
    (task,) = [t for t in session["tasks"] if t["name"] == name]
    records = _records(run, int(task["key"], 16))[1:]
    out, start, best = [], 0, float("inf")
    for r in (r for r in rounds if r["task"] == task["index"]):
        chunk = records[start : start + r["trials"]]  # failed candidates are recorded too
        start += r["trials"]
        best = min([best, *(secs for _, secs in chunk)])
        out.append(({trace for trace, _ in chunk}, best))
    return out


def _journal(run: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's first session entry and its rounds."""
    entries = [json.loads(line) for line in (run / "journal.jsonl").open()]
    session = next(e for e in entries if e["type"] == "session")
    return session, [e for e in entries if e["type"] == "round"]


def _records(run: Path, key: int) -> list[tuple[str, float]]:
    """The task's records in database order: its trace as text, its mean time (inf: failed)."""
    workloads = [int(json.loads(line)[0]) for line in (run / "database_workload.json").open()]
    out = []
    for line in (run / "database_tuning_record.json").open():
        index, (trace, secs, *_) = json.loads(line)
        if workloads[index] == key:
            ok = secs and max(secs) < 1e9
            out.append((json.dumps(trace), statistics.fmean(secs) if ok else float("inf")))
    return out


if __name__ == "__main__":
    main()
