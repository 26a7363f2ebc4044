"""A crash at every durable write of a run, and kill -9 at random moments: records lost or
doubled, resumes refused.

    python benchmarks/crash_points.py [--kills 50] [--seed 7] [--parts points,soak]
                                      [--label vm-2core]

Part 1 runs tests/test_crash_points.py with CRASH_POINTS=full: for each of the run's durable
write points (journal, config, workload, record, learned, spend, waiting, predictor, filter,
library, model, report) the process ends (os._exit) at its first, middle and last write of a
clean run, once torn half-way and once right after it; each time the run is resumed twice and
must keep every record exactly once and exit 0 both times. Part 2 is the kill -9 soak of
tests/test_durability.py with `--kills` kills. The figures go to
benchmarks/results/crash_points-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import time

from _common import ROOT


def pytest(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "-rA"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    return done, time.monotonic() - start


def crash_cases(stdout: str) -> dict[str, list[str]]:
    """Each crash case's outcome from pytest's -rA summary: passed and failed case ids."""
    out: dict[str, list[str]] = {"passed": [], "failed": []}
    for line in stdout.splitlines():
        found = re.match(r"(PASSED|FAILED|ERROR) \S+::test_a_crash_at_a_write\S*\[(\S+)\]", line)
        if found:
            out["passed" if found.group(1) == "PASSED" else "failed"].append(found.group(2))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--parts", default="points,soak", help="points, soak or both")
    parser.add_argument("--label", default=platform.node() or "host")
    args = parser.parse_args()
    out = ROOT / "benchmarks" / "results" / f"crash_points-{args.label}-{dt.date.today()}.json"
    # A part not run keeps the figures an earlier run of the same day wrote.
    result = json.loads(out.read_text()) if out.is_file() else {}
    result.update(date=str(dt.date.today()), host=platform.node(), cpus=os.cpu_count())
    parts = args.parts.split(",")
    if "points" in parts:
        result["crash_points"] = crash_points()
    if "soak" in parts:
        result["kill_soak"] = kill_soak(args.kills, args.seed)
    out.write_text(json.dumps(result, indent=2) + "\n")
    ok = all(result[p]["ok"] for p in ("crash_points", "kill_soak") if p in result)
    print(f"{'passed' if ok else 'FAILED'}; raw figures: {out.relative_to(ROOT)}")
    sys.exit(0 if ok else 1)


def crash_points() -> dict:
    done, seconds = pytest(["tests/test_crash_points.py"], {**os.environ, "CRASH_POINTS": "full"})
    cases = crash_cases(done.stdout)
    print(f"crash points: {len(cases['passed'])} cases passed, {len(cases['failed'])} failed "
          f"({seconds / 60:.0f} min)")  # fmt: skip
    tail = done.stdout[-4000:] if done.returncode else None
    return {**cases, "seconds": seconds, "ok": done.returncode == 0, "tail": tail}


def kill_soak(kills: int, seed: int) -> dict:
    env = {**os.environ, "KILL_TEST_KILLS": str(kills), "KILL_TEST_SEED": str(seed)}
    done, seconds = pytest(["tests/test_durability.py", "-k", "kill_9", "-s"], env)
    figure = next((x for x in done.stdout.splitlines() if x.startswith("kill harness:")), None)
    print(figure or done.stdout[-3000:])
    tail = done.stdout[-4000:] if done.returncode else None
    return {"kills": kills, "seed": seed, "figure": figure, "seconds": seconds,
            "ok": done.returncode == 0, "tail": tail}  # fmt: skip


if __name__ == "__main__":
    main()
