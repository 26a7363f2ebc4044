"""filter_benchmark.py over many seeds: does `--filter xgb` reach `--filter none`'s final
latency sooner more often than the search's luck would have it?

    python benchmarks/filter_seeds.py benchmarks/results/filter-...-seed4-....json ... [--work DIR]
                                      [--markdown]

Reads the raw figures of several filter_benchmark.py runs (one seed each) and prints, per model
and seed: when each side first came within the tolerance of `none`'s final latency, xgb's time
as a ratio of none's, the ratio of the final latencies, and the round in which the two sides'
re-timed models first differed by more than the tolerance (after the shared rounds), with the
side ahead there. Where the run directories are still there (where the figures say; older
figures do not say, and theirs are looked for under `--work`, default benchmarks/work), it
adds how many candidates xgb's filter had set aside (rejected and not audited) before and in
that round (a side that got ahead in a round before which the filter had set nothing aside
got there by the search's luck, not by the filter), and the seconds xgb spent minus none's,
by phase, until each reached none's final latency (the round it did so in is printed beside
its time). With the run directories it also finds the candidates both sides measured after the
shared rounds and compares their first repeats: drift on the host between the first-tuned side
and the second would show there.

Then, per model and over all: in how many pairs xgb was sooner, the median ratio, and the
two-sided sign-test p-value of that count against one half. The goal is `none`'s own final,
which `none` always reaches and the other side may not, so with no difference between the
sides the other is sooner in fewer than half the pairs: A/A runs say how many. The same for the
slower of each pair's two finals, a goal both sides reach, whose null is one half. And in how
many pairs the side tuned first ended with the faster model, with the same test (and how many
of the pairs' finals were within 1% of each other, which a timing can reverse). Runs of
`filter_benchmark.py --control` (A/A: the second side, `again`, is `none` too) are tabled and
counted apart, in `again`'s name.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from _common import ROOT, json_lines, measured_secs, reached
from filter_benchmark import CONFIGS, SHARED


def sign_test_p(wins: int, n: int) -> float:
    """Two-sided binomial p-value of `wins` of `n` at 1/2."""
    tail = min(wins, n - wins)
    p = sum(math.comb(n, k) for k in range(tail + 1)) / 2**n
    return min(1.0, 2 * p)


def parted(
    none: list, xgb: list, shared: int, tolerance: float, other: str = "xgb"
) -> tuple[int, str] | None:
    """The first round (1-based) after the shared ones in which the two curves' latencies
    differ by more than `tolerance`, and the side ahead; None if they never do (in the rounds
    both had: one side may have one more)."""
    for k, ((_, a), (_, b)) in enumerate(zip(none, xgb, strict=False), start=1):
        if k > shared and abs(a - b) > tolerance * min(a, b):
            return k, other if b < a else "none"
    return None


def run_directory(
    work: Path, data: dict[str, Any], model: str, config: str, figures: dict[str, Any]
) -> Path | None:
    """The run directory of one side of a benchmark run: where the raw figures say, or (older
    figures do not say) the one under `work` whose report's wall time is the figures'."""
    if "work" in data:
        run = ROOT / data["work"] / model / config
        return run if (run / "journal.jsonl").exists() else None
    for report in sorted(work.glob(f"filter-*/{model}/{config}/report.json")):
        summary = json.loads(report.read_text())["summary"]
        if abs(summary["wall_s"] - figures["wall_s"]) < 1e-6:
            return report.parent
    return None


def first_repeats(run: Path) -> dict[tuple[int, str], float]:
    """A run's measured candidates (workload index, trace) and the first repeat of each (racing
    may have cut the others short); failed ones left out."""
    out = {}
    for index, (trace, secs, *_) in json_lines(run / "database_tuning_record.json"):
        if secs := measured_secs(secs):
            out[(index, json.dumps(trace, sort_keys=True))] = secs[0]
    return out


def common_timing(runs: dict[str, Path], sides: tuple[str, ...], shared: Path) -> dict[str, Any]:
    """The candidates both sides measured after the shared rounds: how many, and the median of
    the second-tuned side's time over the first's (drift on the host between the sides would
    move it off 1)."""
    first, second = (first_repeats(runs[c]) for c in sides)
    before = first_repeats(shared) if (shared / "database_tuning_record.json").exists() else {}
    both = [k for k in first if k in second and k not in before]
    ratio = statistics.median(second[k] / first[k] for k in both) if both else None
    return {"candidates": len(both), "second_over_first": ratio}


def rounds(run: Path) -> dict[int, dict[str, Any]]:
    """A run's round events by round number."""
    from tune_orchestrator.rundir import RunDir

    return {e["round"]: e for e in RunDir(run).journal() if e.get("type") == "round"}


def set_aside(events: dict[int, dict[str, Any]], upto: int) -> int:
    """Candidates the filter rejected and did not audit in rounds 1..`upto`."""
    return sum(e["filtered"] - e["audited"] for k, e in events.items() if k <= upto)


def margin(
    events: dict[str, dict[int, dict[str, Any]]], at: dict[str, int], other: str
) -> dict[str, float]:
    """Seconds the other side (xgb) spent minus none's, by phase, up to the rounds in which
    each reached none's final latency (the shared rounds are the same on both sides)."""
    phases = {c: events[c][at[c]]["spend"]["phases"] for c in ("none", other)}
    return {p: phases[other].get(p, 0.0) - phases["none"].get(p, 0.0) for p in phases["none"]}


def rows_of(path: Path, work: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    sides = tuple(data.get("sides", CONFIGS))  # ("none", "again") for an A/A run
    other = sides[1]
    out = []
    for model, by_config in data["rows"].items():
        none, second = by_config["none"], by_config[other]
        split = parted(
            none["curve"], second["curve"], data["shared_rounds"], data["tolerance"], other
        )
        # The round (1-based) in which each side first came within the tolerance.
        at = {
            c: next(k for k, (s, _) in enumerate(by_config[c]["curve"], 1) if s == reached_s)
            for c in sides
            if (reached_s := by_config[c]["reached_none_final_s"]) is not None
        }
        runs = {c: run_directory(work, data, model, c, data["figures"][model][c]) for c in sides}
        events = {c: rounds(run) for c, run in runs.items() if run}
        out.append(
            {
                "model": model,
                "other": other,
                "seed": data["seed"],
                "first": data.get("order", CONFIGS)[0],  # older runs: none first, always
                "none_s": none["reached_none_final_s"],
                "other_s": second["reached_none_final_s"],
                "at": at,
                "final_ratio": second["final_latency_s"] / none["final_latency_s"],
                "to_slower": to_slower(none["curve"], second["curve"]),
                "recall": second["recall"],
                "audited": second["audited"],
                "parted": split,
                "set_aside": set_aside(events["xgb"], split[0])
                if "xgb" in events and split
                else None,
                "margin": margin(events, at, other) if len(events) == len(at) == 2 else None,
                "common": common_timing(
                    runs, tuple(data["order"]), next(iter(runs.values())).parent / SHARED
                )
                if all(runs.values()) and "order" in data
                else None,
            }
        )
    return out


def fmt_s(s: float | None) -> str:
    return "never" if s is None else f"{s:.0f} s"


def fmt_ratio(ratio: float) -> str:
    """xgb's time over none's; inf (xgb never got there) as `never`."""
    return "never" if math.isinf(ratio) else f"{ratio:.2f}x"


HEADER = ("model", "seed", "first", "none reached", "xgb reached", "xgb/none", "final xgb/none",
          "xgb recall (audits)", "parted (set aside by then); xgb - none by phase")  # fmt: skip


def to_slower(none: list, other: list) -> float:
    """The other side's time over none's to come within the tolerance of the slower of their
    two finals: a goal both reach, so with no difference between the sides either is as likely
    to get there first."""
    goal = max(none[-1][1], other[-1][1])
    return reached(other, goal) / reached(none, goal)


def first_faster(r: dict[str, Any]) -> bool | None:
    """Whether the side tuned first ended with the faster model (None: the same latency)."""
    if r["final_ratio"] == 1:
        return None
    return (r["final_ratio"] < 1) == (r["first"] != "none")


def cells(r: dict[str, Any]) -> list[str]:
    """One row of the table, as text cells."""
    recall = f"{r['recall']:.0%} ({r['audited']})" if r["recall"] is not None else "-"
    where = "never" if r["parted"] is None else f"round {r['parted'][0]}, {r['parted'][1]} ahead"
    if r["set_aside"] is not None:
        where += f" ({r['set_aside']})"
    if r["margin"]:
        big = sorted(
            (kv for kv in r["margin"].items() if abs(kv[1]) >= 0.5), key=lambda kv: -abs(kv[1])
        )
        where += "; " + ", ".join(f"{p} {d:+.0f} s" for p, d in big[:3])
    sides = [
        fmt_s(r[f"{key}_s"]) + (f" (r{r['at'][c]})" if c in r["at"] else "")
        for key, c in (("none", "none"), ("other", r["other"]))
    ]
    return [r["model"], str(r["seed"]), r["first"], *sides, fmt_ratio(r["ratio"]),
            f"{r['final_ratio']:.3f}x", recall, where]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="filter_benchmark.py JSON files")
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "work")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args()
    rows = sorted(
        (r for path in args.results for r in rows_of(path, args.work)),
        key=lambda r: (r["other"] != "xgb", r["model"], r["seed"]),
    )
    for r in rows:
        r["ratio"] = r["other_s"] / r["none_s"] if r["other_s"] is not None else math.inf
        if r["other"] != "xgb":  # an A/A run's rows, under a name of their own
            r["model"] = f"{r['model']} (A/A: {r['other']})"
    others = {r["other"] for r in rows}  # the columns name the other side where all rows agree
    name = others.pop() if len(others) == 1 else "xgb"
    header = [h.replace("xgb", name) for h in HEADER]
    table = [header] + [cells(r) for r in rows]
    if args.markdown:
        table.insert(1, ["---"] * len(HEADER))
        print("\n".join("| " + " | ".join(row) + " |" for row in table))
    else:
        widths = [max(len(row[i]) for row in table) for i in range(len(HEADER) - 1)]
        for row in table:
            print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=False)), row[-1])
    print()
    groups = {
        name: [r for r in rows if r["model"] == name] for name in sorted({r["model"] for r in rows})
    }
    for other, label in (("xgb", "all"), ("again", "all A/A")):
        if len(picked := [r for r in rows if r["other"] == other]) > len(picked[:1]):
            groups[label] = picked
    for name, group in groups.items():
        other = group[0]["other"]
        wins = sum(r["ratio"] < 1 for r in group)
        ties = sum(r["ratio"] == 1 for r in group)
        first = [f for r in group if (f := first_faster(r)) is not None]
        close = sum(abs(r["final_ratio"] - 1) < 0.01 for r in group)
        behind = sum(r["final_ratio"] > 1 for r in group)  # the other side's final the slower
        level = sum(r["final_ratio"] == 1 for r in group)
        common = [r["common"] for r in group if r["common"] and r["common"]["candidates"]]
        print(
            f"{name}: {other} sooner in {wins} of {len(group)} ({ties} ties), median "
            f"{other}/none {fmt_ratio(statistics.median(r['ratio'] for r in group))}, sign test "
            f"p = {sign_test_p(wins, len(group) - ties):.3f}; final latency median "
            f"{statistics.median(r['final_ratio'] for r in group):.3f}x none's (behind in "
            f"{behind} of {len(group)}, p = {sign_test_p(behind, len(group) - level):.3f}); the "
            f"side tuned first ended faster in {sum(first)} of {len(first)} (p = "
            f"{sign_test_p(sum(first), len(first)):.3f}; {close} of the finals within 1%)"
        )
        slower = sum(r["to_slower"] < 1 for r in group)
        print(
            f"  to the slower of each pair's two finals: {other} sooner in {slower} of "
            f"{len(group)} (p = {sign_test_p(slower, len(group)):.3f}), median {other}/none "
            f"{statistics.median(r['to_slower'] for r in group):.2f}x"
        )
        if common:
            counts = [c["candidates"] for c in common]
            ratios = [c["second_over_first"] for c in common]
            print(
                f"  candidates both sides measured: {min(counts)}-{max(counts)} a pair in "
                f"{len(common)} pairs, the second side's first repeat over the first's "
                f"{min(ratios):.2f}x-{max(ratios):.2f}x (medians)"
            )


if __name__ == "__main__":
    main()
