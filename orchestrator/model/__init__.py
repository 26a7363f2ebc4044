"""The model: ONNX import to Relax, names, shape arithmetic folded, LSTM and GRU unrolled,
targets, tasks and their default schedules."""
