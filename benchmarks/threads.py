"""Kernels on TVM's default thread count against all the host's cores.

    python benchmarks/threads.py [--model smallcnn] [--budget 3min] [--repeats 10]
                                 [--label vm-2core]

TVM's runtime runs each kernel on half the online CPUs on x86-64 (it takes them for
hyper-threads) unless TVM_NUM_THREADS says otherwise. The model is tuned cold twice, each in a
fresh process: with TVM's default, and with TVM_NUM_THREADS = this host's cores. Each shipped
model.so is then timed at both thread counts, every timing in a fresh process (the runtime
reads the count once), in turn, `--repeats` times. Raw figures go to
benchmarks/results/threads-<label>-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from _common import ROOT, head_rev
from ab import model_file, run

# One timing: the median of TVM's timer over 5 repeats of 20 calls, on random inputs.
TIME_ONE = """
import sys, numpy as np, onnx, tvm
from tvm import relax
model = onnx.load(sys.argv[2])
dev = tvm.cpu()
vm = relax.VirtualMachine(tvm.runtime.load_module(sys.argv[1]), dev)
args = [
    tvm.runtime.tensor(np.random.default_rng(0).standard_normal(
        [d.dim_value for d in i.type.tensor_type.shape.dim]).astype("float32"), dev)
    for i in model.graph.input
]
print(vm.time_evaluator("main", dev, number=20, repeat=5)(*args).median)
"""


def timed(library: str, model: str, threads: int | None) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    if threads is not None:
        env["TVM_NUM_THREADS"] = str(threads)
    done = subprocess.run(
        [sys.executable, "-c", TIME_ONE, library, model],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smallcnn")
    parser.add_argument("--budget", default="3min")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--label", default=platform.node() or "host")
    args = parser.parse_args()

    from tune_orchestrator.host import host_cores, tvm_threads

    cores, default = host_cores(), tvm_threads({})
    model = model_file(args.model)
    base = ROOT / "benchmarks" / "work" / f"threads-{time.strftime('%Y%m%d-%H%M%S')}"
    tuned = {}
    for name, threads in (("default", None), ("cores", cores)):
        saved = os.environ.pop("TVM_NUM_THREADS", None)
        if threads is not None:
            os.environ["TVM_NUM_THREADS"] = str(threads)
        try:
            tuned[name] = run(None, "tune_orchestrator", model, args.budget, base / name)
        finally:
            os.environ.pop("TVM_NUM_THREADS", None)
            if saved is not None:
                os.environ["TVM_NUM_THREADS"] = saved
    timings: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, result in tuned.items():
            for label, threads in (("default", None), ("cores", cores)):
                key = f"tuned at {name}, timed at {label}"
                timings.setdefault(key, []).append(timed(result["library"], str(model), threads))
    medians = {k: statistics.median(v) for k, v in timings.items()}
    for key, median in medians.items():
        print(f"{key:<36} {median * 1e6:8.1f} us")
    for name in tuned:
        ratio = (
            medians[f"tuned at {name}, timed at default"]
            / medians[f"tuned at {name}, timed at cores"]
        )
        print(f"tuned at {name}: {ratio:.2f}x faster on {cores} threads than on {default}")
    out = ROOT / "benchmarks" / "results" / f"threads-{args.label}-{dt.date.today()}.json"
    out.write_text(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "rev": head_rev(),
                "host": platform.node(),
                "cores": cores,
                "tvm_default_threads": default,
                "model": args.model,
                "budget": args.budget,
                "runs": {k: {"trials": v["trials"], "exit": v["exit"]} for k, v in tuned.items()},
                "timings_s": timings,
                "medians_s": medians,
            },
            indent=1,
        )
        + "\n"
    )
    print(out)


if __name__ == "__main__":
    main()
