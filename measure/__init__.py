"""Building candidates and timing them on the device."""

from .base import ArgSpec, Build, Builder, BuildInput, Engine, MeasureInput, Measurement
from .build_pool import BuildPool
from .local import LocalEngine, TimerConfig

__all__ = [
    "ArgSpec",
    "Build",
    "BuildInput",
    "BuildPool",
    "Builder",
    "Engine",
    "LocalEngine",
    "MeasureInput",
    "Measurement",
    "TimerConfig",
]
