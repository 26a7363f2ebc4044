"""A pipeline step: tune a model, keep every event as JSON lines, exit with orchestrate's code.

    python examples/pipeline_step.py examples/smallcnn.onnx --budget 3min --out runs/step

Nothing is scraped from text: events go to <out>.events.jsonl and the result to
<out>.result.json, beside the run directory (which orchestrate owns).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tune_orchestrator import BudgetTooSmall, InputError, tune


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--budget", default="3min")
    parser.add_argument("--out", type=Path, default=Path("runs/step"))
    parser.add_argument("--config", type=Path)
    args = parser.parse_args()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    events = (args.out.parent / f"{args.out.name}.events.jsonl").open("a")

    def on_event(event: dict) -> None:
        events.write(json.dumps(event) + "\n")
        events.flush()
        if event["event"] == "round":  # a pipeline would log this to its tracker
            spend = event["spend"]
            print(
                f"round {event['round']}: model ~{event['model_latency_s'] * 1e3:.3f} ms, "
                f"{spend['trials']} trials, {spend['wall_s']:.0f} s",
                file=sys.stderr,
            )

    try:
        result = tune(
            args.model, budget=args.budget, out=args.out, config=args.config, on_event=on_event
        )
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BudgetTooSmall as exc:  # refused before any work; exc.minimum is a budget that would do
        print(f"error: {exc}", file=sys.stderr)
        return 3
    (args.out.parent / f"{args.out.name}.result.json").write_text(
        json.dumps(result.to_dict(), indent=2)
    )
    if result.speedup is not None:  # timed: the speedup claimed (1.0 for "no change")
        print(f"{result.change}: speedup {result.speedup:.2f}x", file=sys.stderr)
    checked = "checked" if result.shipped_checked else f"UNCHECKED ({result.unchecked_reason})"
    shipped = f"the {result.shipped} build, {checked}"
    if result.shipped == "none":
        shipped = "not written, no build's outputs match onnxruntime's"
    print(f"model.so: {shipped}; stopped: {result.stop_reason}", file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
