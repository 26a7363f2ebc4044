"""The soak: a run killed with `kill -9` at random moments, resumed each time, and checked for
lost, doubled or torn records and for spend that went uncounted.

    python benchmarks/kill_soak.py [--kills 20] [--seed 7] [--label vm-2core]

It runs tests/test_durability.py's kill harness (the CLI in a fresh process group, SIGKILL to
the whole group after a round at first, then at a random moment 1-20 s in: import, baseline, a
round, compiling) with `--kills` kills, then a final session that finishes the run. The
harness asserts, after every kill and at the end: what the database held stays unchanged,
nothing is measured twice, the trial budget is never exceeded, the report and the database
agree, the spend counts every killed session, and stock TVM reads the database. Its one-line
figure goes to benchmarks/results/kill_soak-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time

from _common import ROOT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--label", default=platform.node() or "host")
    args = parser.parse_args()
    env = {**os.environ, "KILL_TEST_KILLS": str(args.kills), "KILL_TEST_SEED": str(args.seed)}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_durability.py", "-k", "kill_9", "-s", "-q",
         "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    figure = next(
        (line for line in done.stdout.splitlines() if line.startswith("kill harness:")), None
    )
    result = {
        "kills": args.kills,
        "seed": args.seed,
        "passed": done.returncode == 0,
        "figure": figure,
        "seconds": time.monotonic() - start,
        "tail": done.stdout[-3000:] if done.returncode else None,
    }
    out = ROOT / "benchmarks" / "results" / f"kill_soak-{args.label}-{dt.date.today()}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(figure or done.stdout[-3000:])
    print(f"{'passed' if result['passed'] else 'FAILED'}; raw figures: {out.relative_to(ROOT)}")
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
