"""What this host has, for precise skips: tests of GPU-less behaviour skip where a GPU is."""

from tune_orchestrator.model.targets import gpu_visible

GPU = gpu_visible()
