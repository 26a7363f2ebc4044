"""The model a run ships: compiled with the tuning database, exported, loaded and checked against
onnxruntime (library.py), its CUDA kernels compiled by nvcc where no GPU can run them
(kernels.py), timed end to end (timing.py); a session's untuned and tuned builds, checked and
timed at the end on this host's device or a fleet's (devices.py), so that only a build whose
outputs match ships, the faster of two (builds.py)."""

from .library import (
    Check,
    Checker,
    compare,
    compile_model,
    export_library,
    load_vm,
    random_inputs,
    run_onnxruntime,
    run_vm,
    time_model,
)

__all__ = [
    "Check",
    "Checker",
    "compare",
    "compile_model",
    "export_library",
    "load_vm",
    "random_inputs",
    "run_onnxruntime",
    "run_vm",
    "time_model",
]
