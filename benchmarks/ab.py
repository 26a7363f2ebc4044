"""This checkout against an earlier commit of it: the same `orchestrate` runs with each, in turn,
and the libraries they shipped timed side by side at the end.

    python benchmarks/ab.py --old REV [--models smallcnn:5min,resnetish:128trials]
                            [--rounds 1] [--repeats 30] [--label vm-2core]

The earlier commit's package is taken from git (`git archive REV`) into a scratch folder and
run from there (`python -m orchestrator`, or `python -m tune_orchestrator` where REV has
the one import namespace); this checkout runs as installed. Each MODEL:BUDGET runs with
both, old first, `--rounds` times alternating, each in a fresh process with its own run
directory and no tuning library. Then every shipped model.so is timed interleaved. Printed:
per model and version, the median latency over its runs (and slowest / fastest), trials and
wall; the ratio new / old (under 1 is faster). Raw figures go to
benchmarks/results/ab-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from _common import ROOT, head_rev, scratch, time_databases


def unpack(rev: str) -> tuple[Path, str]:
    """REV's tree in a scratch folder, and the module its CLI runs as."""
    folder = scratch() / rev
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    if (folder / "orchestrator" / "__main__.py").is_file() and not _namespaced(folder):
        return folder, "orchestrator"
    # One namespace: lay the package out as pip installs it (pyproject's package-dir).
    site = folder.parent / f"{rev}-site"
    package = site / "tune_orchestrator"
    site.mkdir()
    subprocess.run(["cp", "-r", str(folder / "orchestrator"), str(package)], check=True)
    for sub in ("budget", "configs", "filters", "measure"):
        subprocess.run(["cp", "-r", str(folder / sub), str(package / sub)], check=True)
    return site, "tune_orchestrator"


def _namespaced(folder: Path) -> bool:
    return "tune_orchestrator" in (folder / "pyproject.toml").read_text()


class RunFailed(RuntimeError):
    """A run that left no report: its exit code and the last line it wrote to stderr."""


def run(
    python_path: Path | None,
    module: str,
    model: Path,
    budget: str,
    out: Path,
    extra: tuple[str, ...] = (),
) -> dict:
    """One cold run; `extra`: more options for `orchestrate`."""
    out = out.resolve()
    # Cold on both sides: a tuning library of its own, empty (older commits have no --no-library).
    env = {**os.environ, "XDG_CACHE_HOME": str(out) + "-cache"}
    if python_path is not None:
        env["PYTHONPATH"] = str(python_path)
    command = [sys.executable, "-m", module, "--budget", budget, "--out", str(out), "--json"]
    command += ["--no-library"] if module == "tune_orchestrator" and python_path is None else []
    command += list(extra)
    start = time.perf_counter()
    # From the tree it runs: `python -m` puts the working directory first on sys.path, and
    # this checkout's own orchestrator/ folder would shadow the earlier commit's.
    done = subprocess.run(
        [*command, str(model.resolve())],
        env=env,
        cwd=python_path or ROOT,
        capture_output=True,
        text=True,
    )
    if not (out / "report.json").is_file():  # refused up front, or failed before a report
        said = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise RunFailed(f"{model.stem} --budget {budget}: exit {done.returncode}: {said}")
    report = json.loads((out / "report.json").read_text())
    return {
        "exit": done.returncode,
        "wall_s": time.perf_counter() - start,
        "trials": report["summary"]["trials"],
        "library": str(out / "model.so"),
        "convergence": report.get("convergence", []),
        "filter": (report.get("filter") or {}).get("total"),
    }


def model_file(name: str) -> Path:
    if name == "smallcnn":
        return ROOT / "examples" / "smallcnn.onnx"
    from models import write

    return write(name, ROOT / "benchmarks" / "work")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="a git revision of this repository")
    parser.add_argument("--models", default="smallcnn:5min,resnetish:128trials")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--label", default=platform.node() or "host")
    args = parser.parse_args()

    from tune_orchestrator.model.targets import resolve_target

    old_path, old_module = unpack(args.old)
    target_json = json.dumps(resolve_target("llvm").to_json())
    base = ROOT / "benchmarks" / "work" / f"ab-{time.strftime('%Y%m%d-%H%M%S')}"
    results = {}
    for item in args.models.split(","):
        name, budget = item.split(":")
        model = model_file(name)
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for k in range(args.rounds):
            for side, path, module in (
                ("old", old_path, old_module),
                ("new", None, "tune_orchestrator"),
            ):
                print(f"{name} {budget}: {side} ({k + 1}/{args.rounds}) ...", flush=True)
                out = base / f"{name}-{budget}-{side}-{k}"  # one folder per run: not a resume
                runs[side].append(run(path, module, model, budget, out))
        libraries = {
            f"{side}-{k}": Path(r["library"]) for side in runs for k, r in enumerate(runs[side])
        }
        timed = time_databases(model, target_json, {}, args.repeats, libraries=libraries)
        summary = {}
        for side in runs:
            latencies = [timed[f"{side}-{k}"]["median_s"] for k in range(args.rounds)]
            summary[side] = {
                "latency_s": statistics.median(latencies),
                "spread": max(latencies) / min(latencies),  # slowest over fastest
                "trials": statistics.median(r["trials"] for r in runs[side]),
                "wall_s": statistics.median(r["wall_s"] for r in runs[side]),
            }
        ratio = summary["new"]["latency_s"] / summary["old"]["latency_s"]
        results[item] = {"runs": runs, "timed": timed, "summary": summary, "new_over_old": ratio}
        print(f"{name} {budget}: " + "; ".join(
            f"{side} {s['latency_s'] * 1e3:.3f} ms ({s['spread']:.2f}x apart), "
            f"{s['trials']:.0f} trials, {s['wall_s']:.0f} s"
            for side, s in summary.items()) + f"; new / old {ratio:.3f}", flush=True)  # fmt: skip
    out = ROOT / "benchmarks" / "results" / f"ab-{args.label}-{dt.date.today()}.json"
    out.write_text(json.dumps({"old": args.old, "new": head_rev(), "models": results}, indent=2))
    print(f"raw figures: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
