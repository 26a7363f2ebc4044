"""Builders and engines from the settings, and the untuned latency of tasks."""

from __future__ import annotations

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


def make_engine(settings: Settings, target: ResolvedTarget, logs: Path | None) -> Engine:
    m = settings.measure
    timer = TimerConfig(
        number=m.number,
        repeat=m.repeat,
        min_repeat_ms=m.min_repeat_ms,
        cpu_cache_flush=m.cpu_cache_flush,
    )
    return LocalEngine(
        device_type=target.device_type,
        timer=timer,
        timeout_s=m.timeout_s,
        log_path=logs / "measure.log" if logs else None,
    )


def untuned_workload(task: Task, target: ResolvedTarget) -> Any:
    """The task as the model runs it without tuning: as lowered on CPUs, with the same
    default GPU schedules `compile_relax` falls back to on GPUs."""
    if target.device_type != "cuda":
        return task.workload
    from tvm.s_tir import dlight as dl

    with target.target:
        return dl.ApplyDefaultSchedule(
            dl.gpu.Matmul(),
            dl.gpu.GEMV(),
            dl.gpu.Reduction(),
            dl.gpu.GeneralReduction(),
            dl.gpu.Fallback(),
        )(task.workload)


def measure_untuned_tasks(
    tasks: Sequence[Task], target: ResolvedTarget, builder: Builder, engine: Engine
) -> list[Measurement]:
    """Each task's untuned kernel, timed (or its build or run error)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    mods = [untuned_workload(task, target) for task in tasks]
    builds = builder.build([BuildInput(mod, target.target) for mod in mods])
    inputs = [
        MeasureInput(b.artifact, arg_specs(ArgInfo.from_entry_func(mod, remove_preproc=True)))
        for mod, b in zip(mods, builds, strict=True)
        if b.artifact
    ]
    timed = iter(engine.measure(inputs))
    builder.release(builds)
    return [next(timed) if b.artifact else Measurement(None, b.error) for b in builds]
