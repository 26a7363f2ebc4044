"""The model: ONNX import to Relax, names, shape arithmetic folded, targets, tasks and their
default schedules."""
