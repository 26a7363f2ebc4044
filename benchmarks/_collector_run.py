"""One run for collector_ab.py: `_collector_run.py SIDE MODEL BUDGET LIBRARY OUT`; prints its
library phase, the collector's passes and seconds, and its trials as one JSON line."""

from __future__ import annotations

import contextlib
import gc
import json
import sys
import time


def main() -> None:
    side, model, budget, library, out = sys.argv[1:]
    from tune_orchestrator import collector, tune
    from tune_orchestrator.library import files

    if side == "walked":  # the collector as it was before orchestrator/collector.py
        collector.run_scope = files.parsing = contextlib.nullcontext
    passes = {"n": 0, "full": 0, "s": 0.0, "start": 0.0}

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            passes["start"] = time.perf_counter()
            return
        passes["n"] += 1
        passes["full"] += info["generation"] == 2
        passes["s"] += time.perf_counter() - passes["start"]

    gc.callbacks.append(count)
    result = tune(model, budget, out=out, library=library)
    report = json.loads(open(f"{out}/report.json").read())
    print(
        json.dumps(
            {
                "library_s": report["phases"]["library"],
                "collector_s": passes["s"],
                "passes": passes["n"],
                "full_passes": passes["full"],
                "trials": report["summary"]["trials"],
                "exit_code": result.exit_code,
            }
        )
    )


if __name__ == "__main__":
    main()
