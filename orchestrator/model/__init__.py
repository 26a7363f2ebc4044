"""The model: ONNX import to Relax, names, targets, tasks and their default schedules."""
