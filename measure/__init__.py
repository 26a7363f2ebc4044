"""Building candidates and timing them on the device."""

from ._timing import TimingPlan
from .base import ArgSpec, Build, Builder, BuildInput, Engine, MeasureInput, Measurement
from .build_pool import BuildPool
from .cuda import CudaEngine, cuda_available
from .dop import DopConfig, DopController
from .local import LocalEngine, TimerConfig
from .parallel import ParallelEngine
from .rpc import RpcEngine
from .simulated import SimulatedEngine, SimulatedGpu

__all__ = [
    "ArgSpec",
    "Build",
    "BuildInput",
    "BuildPool",
    "Builder",
    "CudaEngine",
    "DopConfig",
    "DopController",
    "Engine",
    "LocalEngine",
    "MeasureInput",
    "Measurement",
    "ParallelEngine",
    "RpcEngine",
    "SimulatedEngine",
    "SimulatedGpu",
    "TimerConfig",
    "TimingPlan",
    "cuda_available",
]
