"""Whether a long run stays healthy: what each round costs as rounds add up, from a long
simulated GPU run (real search and CUDA builds here, timings from the simulated H100).

    python benchmarks/long_run.py --trials 1500 --trials-per-round 16 --max-samples 512 --label vm-2core

The run is `tune()` on examples/smallcnn.onnx with `--simulate`, every task kept in play
(no early stop, no task retired on a plateau), in this process, probed after each round: the
process's resident memory, the last journal append's seconds and the journal's size, the
candidates waiting in the proposal pools, the learned model's samples held and its last
refit's seconds, the engine's per-candidate lists and the database's records (`--database
stock`: TVM's JSONDatabase instead of the run's own, to compare memory). A line fitted
to each over the second half of the rounds gives its growth per round. The learned model's
cap is set to `--max-samples` (the product's is MAX_SAMPLES, 4096) so that the run reaches it
(time compressed); a refit on the samples a two-GPU-hour run measures, capped and not, is then
timed on this run's own features (`--refit-samples`). The report's size is split by section,
per round. Writes benchmarks/results/long_run-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import gc
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT

EXAMPLE = ROOT / "examples" / "smallcnn.onnx"
KEEP_TASKS = "[stopping]\ntask_patience = 100000\n"  # no task retires: every round counts


TRIM = False  # --trim: hand the allocator's free memory back before each reading


def rss_mb() -> float:
    """This process's resident memory now (not its peak)."""
    if TRIM:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Probe:
    """Hooks into the run (benchmark only): the loop, the journal's appends, the refits."""

    def __init__(self) -> None:
        from tune_orchestrator.predictor import Predictor
        from tune_orchestrator.run.loop import TuningLoop
        from tune_orchestrator.rundir.directory import RunDir

        self.loop: Any = None
        self.predictor: Any = None  # the run's learned model, once it has fitted
        self.append_s: list[float] = []
        self.fits: list[tuple[int, float]] = []  # (samples held, seconds)
        self.rows: list[dict[str, Any]] = []
        self.journal: Path | None = None
        self.types: list[tuple[int, collections.Counter]] = []
        init, append, fit = TuningLoop.__init__, RunDir.append, Predictor.fit

        def loop_init(loop: Any, *a: Any, **k: Any) -> None:
            init(loop, *a, **k)
            self.loop = loop

        def timed_append(run: Any, entry: Any) -> None:
            start = time.perf_counter()
            append(run, entry)
            self.append_s.append(time.perf_counter() - start)
            self.journal = run.path / run.JOURNAL

        def timed_fit(model: Any) -> None:
            start = time.perf_counter()
            fit(model)
            self.fits.append((model.held, time.perf_counter() - start))
            self.predictor = model

        TuningLoop.__init__, RunDir.append, Predictor.fit = loop_init, timed_append, timed_fit

    def __call__(self, event: Any) -> None:
        if event["event"] == "round" and self.loop is not None:
            self.rows.append(self.row(event))
            if event["round"] % 20 == 0:  # what the collector tracks, by type
                self.types.append(
                    (
                        event["round"],
                        collections.Counter(type(o).__name__ for o in gc.get_objects()),
                    )
                )

    def type_growth(self, top: int = 15) -> dict[str, Any]:
        """The types whose live objects grew most between the second and last snapshot."""
        if len(self.types) < 3:
            return {}
        (r0, first), (r1, last) = self.types[1], self.types[-1]
        grown = (last - first).most_common(top)
        return {"rounds": [r0, r1], "grown": dict(grown)}

    def row(self, event: Any) -> dict[str, Any]:
        loop = self.loop
        pool = loop.proposer.pool
        figures = loop.engine.figures
        held, fit_s = self.fits[-1] if self.fits else (0, 0.0)
        return {
            "round": event["round"],
            "trials": event["spend"]["trials"],
            "rss_mb": rss_mb(),
            "append_s": self.append_s[-1] if self.append_s else 0.0,
            "journal_bytes": self.journal.stat().st_size if self.journal else 0,
            "waiting": sum(pool.size(t) for t in pool.tasks()),
            "held": held,
            "fit_s": fit_s,
            "engine_items": sum(len(w) for w in figures.windows),
            "database_records": len(loop.database),
            "curve_points": len(loop.ledger.history),
            "python_objects": len(live := gc.get_objects()),  # what the collector tracks
            "schedules": sum(type(o).__name__ == "Schedule" for o in live),  # TVM's, alive
            # of which the searches' parents and the cost model's feature cache hold
            "parents": sum(len(s._elites) for s in loop.proposer._searches.values()),
            "cached_schedules": len(getattr(loop.cost_model, "_cache", ())),
            # times a task's TVM evolution strategies started afresh (search/strategy.py)
            "search_resets": sum(s.forgotten for s in loop.proposer._searches.values()),
        }


def growth(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    """A line through `key` against the round over the second half of the rounds: its slope
    (per round), and its first and last values."""
    half = rows[len(rows) // 2 :]
    slope, _ = statistics.linear_regression([r["round"] for r in half], [r[key] for r in half])
    return {"per_round": slope, "first": rows[0][key], "last": rows[-1][key]}


def report_sections(report: dict[str, Any], rounds: int) -> dict[str, Any]:
    """The report's bytes by section, and those that grow with the run per round."""
    size = {k: len(json.dumps(v)) for k, v in report.items()}
    measurement = report.get("measurement") or {}
    lists = {
        "convergence": report.get("convergence", []),
        "measurement.batches": measurement.get("batches", []),
        "measurement.paces": measurement.get("paces", []),
        "filter.total.rounds": (report.get("filter") or {}).get("total", {}).get("rounds", []),
        "spend.round_costs": (report.get("spend") or {}).get("round_costs", []),
    }
    return {
        "bytes": len(json.dumps(report)),
        "by_section": dict(sorted(size.items(), key=lambda kv: -kv[1])),
        "lists": {
            k: {
                "items": len(v),
                "bytes": len(json.dumps(v)),
                "per_round": len(json.dumps(v)) / rounds,
            }
            for k, v in lists.items()
        },
    }


def refits(predictor: Any, counts: list[int], cap: int) -> list[dict[str, Any]]:
    """A refit's seconds on `counts` samples, capped at `cap` and not: this run's features,
    repeated to the count (time compressed: the samples of a longer run)."""
    from tune_orchestrator.predictor import Predictor

    pool = [(name, rows, lats) for name, (rows, lats) in predictor._data.items() if rows]
    out = []
    for count in counts:
        for limit in (cap, count):
            model = Predictor(seed=0, max_samples=max(limit, 16), threads=1)
            added = 0
            while added < count:
                for name, rows, lats in pool:
                    take = min(len(rows), count - added)
                    model.add(name, rows[:take], lats[:take])
                    added += take
            wall, cpu = time.perf_counter(), time.process_time()
            model.fit()
            out.append(
                {
                    "samples": count,
                    "held": model.held,
                    "fit_s": time.perf_counter() - wall,
                    "fit_cpu_s": time.process_time() - cpu,
                }
            )
            if limit == count:
                break
    return out


KEYS = (
    "rss_mb", "append_s", "journal_bytes", "waiting", "held", "fit_s", "engine_items",
    "database_records", "curve_points", "python_objects", "schedules", "parents",
    "cached_schedules", "search_resets",
)  # fmt: skip


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1500)
    parser.add_argument(
        "--trials-per-round", type=int, default=16, help="small rounds: many of them"
    )
    parser.add_argument(
        "--max-samples", type=int, default=512, help="the learned model's cap for this run"
    )
    parser.add_argument(
        "--refit-samples", default="1024,4096,16384", help="refits timed afterwards"
    )
    parser.add_argument(
        "--feature-cache", type=int, default=0, help="schedules the cost model caches (0: its own)"
    )
    parser.add_argument(
        "--database",
        choices=("run", "stock"),
        default="run",
        help="the run's own database (rundir/database.py) or TVM's JSONDatabase, for comparison",
    )
    parser.add_argument(
        "--trim",
        action="store_true",
        help="malloc_trim before each reading: memory the allocator holds free is not counted",
    )
    parser.add_argument(
        "--hold-all",
        action="store_true",
        help="TVM's evolution strategies keep every schedule they return, for comparison",
    )
    parser.add_argument("--model", type=Path, default=EXAMPLE)
    parser.add_argument("--label", default=platform.node() or "host")
    return parser.parse_args()


def use_stock_database() -> None:
    """The run directory opens TVM's JSONDatabase, which holds every record (benchmark only)."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from tune_orchestrator.rundir.directory import RunDir

    def stock(run: Any) -> Any:
        return JSONDatabase(
            path_workload=str(run[RunDir.WORKLOAD_DB]),
            path_tuning_record=str(run[RunDir.RECORD_DB]),
        )

    RunDir.database = stock


def tuned(args: argparse.Namespace, probe: Probe) -> tuple[Any, dict[str, Any], float]:
    """The long run, probed: its result, its report and its wall seconds."""
    import tune_orchestrator

    with tempfile.TemporaryDirectory(dir=ROOT / "benchmarks" / "work") as work:
        config = Path(work) / "keep.toml"
        config.write_text(KEEP_TASKS)
        start = time.perf_counter()
        result = tune_orchestrator.tune(
            args.model, f"{args.trials}trials", out=Path(work) / "run", simulate=True, library=False,
            early_stop=False, config=config, on_event=probe, handle_signals=False,
            trials_per_round=args.trials_per_round,
        )  # fmt: skip
        wall = time.perf_counter() - start
        return result, json.loads((Path(work) / "run" / "report.json").read_text()), wall


def main() -> None:
    args = arguments()
    from tune_orchestrator import predictor
    from tune_orchestrator.search import cost_model, strategy

    if args.hold_all:
        strategy._HELD_MOST = 1 << 62
    product_cap, predictor.MAX_SAMPLES = predictor.MAX_SAMPLES, args.max_samples
    cost_model._CACHE = args.feature_cache or cost_model._CACHE
    global TRIM
    TRIM = args.trim
    if args.database == "stock":
        use_stock_database()
    probe = Probe()
    result, report, wall = tuned(args, probe)
    rows = probe.rows
    out = {
        "model": args.model.name, "trials": args.trials, "label": args.label, "date": dt.date.today().isoformat(),
        "machine": platform.machine(), "wall_s": wall, "rounds": len(rows), "stop": result.stop_reason,
        "max_samples": args.max_samples, "product_max_samples": product_cap,
        "feature_cache": cost_model._CACHE, "database": args.database, "trim": args.trim,
        "hold_all": args.hold_all, "final_latency_s": report["convergence"][-1]["latency_s"],
        "growth": {k: growth(rows, k) for k in KEYS},
        "report": report_sections(report, len(rows)), "object_growth": probe.type_growth(),
        "refits": refits(probe.predictor, [int(c) for c in args.refit_samples.split(",")], product_cap),
        "per_round": rows,
    }  # fmt: skip
    path = ROOT / "benchmarks" / "results" / f"long_run-{args.label}-{out['date']}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    for key, g in out["growth"].items():
        print(f"{key:>17}: {g['first']:.4g} -> {g['last']:.4g}, {g['per_round']:+.4g} a round")
    print(json.dumps(out["report"]["lists"]), "\n", json.dumps(out["refits"]))
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
