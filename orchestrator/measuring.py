"""Builders and engines from the settings, and the untuned latency of tasks."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from measure import (
    Builder,
    BuildInput,
    BuildPool,
    Engine,
    LocalEngine,
    MeasureInput,
    Measurement,
    TimerConfig,
)

from .config import Settings
from .targets import ResolvedTarget, host_cores
from .tasks import Task, arg_specs


def make_builder(settings: Settings, logs: Path | None) -> BuildPool:
    b = settings.build
    return BuildPool(
        workers=b.workers or host_cores(),
        timeout_s=b.timeout_s,
        recycle_after=b.recycle_after,
        log_path=logs / "build.log" if logs else None,
    )


@dataclasses.dataclass(frozen=True)
class Fleet:
    """Where candidates are measured: which GPUs and how parallel, or an RPC fleet."""

    gpus: tuple[int, ...] = (0,)
    parallelism: int | None = None  # None: the DOP controller chooses
    rpc: str | None = None  # tracker HOST:PORT
    rpc_key: str | None = None


def timer_config(settings: Settings) -> TimerConfig:
    m = settings.measure
    return TimerConfig(
        number=m.number,
        repeat=m.repeat,
        min_repeat_ms=m.min_repeat_ms,
        cpu_cache_flush=m.cpu_cache_flush,
    )


def make_engine(
    settings: Settings, target: ResolvedTarget, logs: Path | None, fleet: Fleet | None = None
) -> Engine:
    """An RPC engine for a fleet; the parallel CUDA engine on GPUs (when cupy can use them);
    otherwise one candidate at a time in an isolated worker."""
    from measure.cuda import CudaEngine, cuda_available
    from measure.dop import DopConfig, DopController
    from measure.rpc import RpcEngine

    fleet = fleet or Fleet()
    m, d = settings.measure, settings.dop
    timer = timer_config(settings)
    log = logs / "measure.log" if logs else None
    if fleet.rpc:
        return RpcEngine(
            tracker=fleet.rpc,
            key=fleet.rpc_key or "",
            device_type=target.device_type,
            timer=timer,
            timeout_s=max(60.0, m.timeout_s),
            workers=fleet.parallelism,  # None: one in flight per registered server
        )
    if target.device_type == "cuda" and target.device_present and cuda_available():
        controller = DopController(
            DopConfig(
                start=d.start,
                max_dop=d.max_dop,
                step=d.step,
                backoff=d.backoff,
                max_rel_error=d.max_rel_error,
                max_failure_rate=d.max_failure_rate,
                sample_share=d.sample_share,
            ),
            seed=settings.tune.seed,
        )
        return CudaEngine(
            gpus=fleet.gpus,
            controller=controller,
            fixed_dop=fleet.parallelism,
            timer=timer,
            timeout_s=m.timeout_s,
            flush_l2=m.gpu_l2_flush,
            overlap_timing=d.overlap_timing,
            log_path=log,
        )
    return LocalEngine(
        device_type=target.device_type, timer=timer, timeout_s=m.timeout_s, log_path=log
    )


def cpu_caveat(cores: int) -> str | None:
    """The honest caveat for CPU measurement on a machine too small to keep work apart."""
    if cores >= 4:
        return None
    return (
        f"this host has {cores} cores and the kernels use all of them: builds are kept out of "
        "the way by never running during measurement, but anything else running on the "
        "machine disturbs the timings"
    )


def untuned_workload(task: Task, target: ResolvedTarget) -> Any:
    """The task as the model runs it without tuning: as lowered on CPUs, with the same
    default GPU schedules `compile_relax` falls back to on GPUs."""
    from .defaults import default_schedule

    return default_schedule(task, target).mod


def measure_untuned_tasks(
    tasks: Sequence[Task],
    target: ResolvedTarget,
    builder: Builder,
    engine: Engine,
    workloads: Sequence[Any] | None = None,
) -> list[Measurement]:
    """Each task's untuned kernel, timed (or its build or run error). `workloads` are the
    untuned kernels when the caller has them already (`untuned_workload` of each task)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    mods = (
        list(workloads) if workloads is not None else [untuned_workload(t, target) for t in tasks]
    )
    builds = builder.build([BuildInput(mod, target.target) for mod in mods])
    inputs = [
        MeasureInput(b.artifact, arg_specs(ArgInfo.from_entry_func(mod, remove_preproc=True)))
        for mod, b in zip(mods, builds, strict=True)
        if b.artifact
    ]
    timed = iter(engine.measure(inputs))
    builder.release(builds)
    return [next(timed) if b.artifact else Measurement(None, b.error) for b in builds]
