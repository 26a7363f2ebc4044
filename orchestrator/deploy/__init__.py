"""The model a run ships: compiled with the tuning database, exported, loaded and run
(library.py), its outputs checked against onnxruntime's on several samples (check.py, samples.py),
its CUDA kernels compiled by nvcc where no GPU can run them (kernels.py), timed end to end
(timing.py); a session's untuned and tuned builds, checked and timed at the end on this host's
device or a fleet's (devices.py), so that only a build whose outputs matched ships, the faster
of two (builds.py)."""

from .check import Check, Checker, compare
from .library import (
    compile_model,
    export_library,
    load_vm,
    run_onnxruntime,
    run_vm,
    time_model,
)
from .samples import Samples, load_samples, random_samples

__all__ = [
    "Check",
    "Checker",
    "Samples",
    "compare",
    "compile_model",
    "export_library",
    "load_samples",
    "load_vm",
    "random_samples",
    "run_onnxruntime",
    "run_vm",
    "time_model",
]
