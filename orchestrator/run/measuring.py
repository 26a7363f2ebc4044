"""Builders and engines from the settings, where they measure (the Fleet, checked from the
command line), and the untuned latency of tasks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tune_orchestrator.measure import (
    Builder,
    BuildInput,
    BuildPool,
    DopController,
    Engine,
    LocalEngine,
    MeasureInput,
    Measurement,
    TimerConfig,
    TimingPlan,
)

from ..config import Settings
from ..errors import InputError
from ..host import host_cores, workers_that_fit
from ..model.targets import ResolvedTarget, cores_text, resolve_target, visible_gpus
from ..model.tasks import Task, arg_specs


def build_workers(settings: Settings) -> int:
    """The build pool's processes: as configured, else one per host core, as many as fit the
    memory limit."""
    return settings.build.workers or workers_that_fit(host_cores())


def make_builder(settings: Settings, logs: Path | None, fleet: Fleet | None = None) -> Builder:
    """The build pool on this host; with [build] rpc_key, a run's fleet's build servers under
    that key (InputError when the fleet is not an RPC one or has none). Without a fleet (the
    estimate command measures here) always this host's pool."""
    b = settings.build
    if b.rpc_key and fleet is not None:
        return _remote_builder(settings, fleet)
    return BuildPool(
        workers=build_workers(settings),
        timeout_s=b.timeout_s,
        adaptive_timeout=b.adaptive_timeout,
        min_timeout_s=min(b.timeout_s, 5.0),
        recycle_after=b.recycle_after,
        log_path=logs / "build.log" if logs else None,
    )


def _remote_builder(settings: Settings, fleet: Fleet) -> Builder:
    from tune_orchestrator.measure.rpc import parse_tracker, tracker_keys
    from tune_orchestrator.measure.rpc_build import RpcBuilder

    key = settings.build.rpc_key
    if not fleet.rpc:
        raise InputError(
            f"[build] rpc_key = {key!r} builds on a fleet's build servers, but this run has "
            'no --rpc: give --rpc HOST:PORT, or set rpc_key to "" to build on this host'
        )
    tracker = parse_tracker(fleet.rpc)
    servers = tracker_keys(*tracker).get(key, 0)
    if not servers:
        raise InputError(
            f"no build server is registered under [build] rpc_key {key!r} with the tracker "
            f"{fleet.rpc}; start some (python -m tune_orchestrator.measure.build_server "
            f'--tracker {fleet.rpc} --key {key}) or set rpc_key to ""'
        )
    b = settings.build
    return RpcBuilder(
        tracker=tracker,
        key=key,
        servers=servers,
        timeout_s=b.timeout_s,
        adaptive_timeout=b.adaptive_timeout,
        min_timeout_s=min(b.timeout_s, 5.0),
    )


@dataclasses.dataclass(frozen=True)
class Fleet:
    """Where candidates are measured: which GPUs and how parallel, or an RPC fleet."""

    gpus: tuple[int, ...] = (0,)
    parallelism: int | None = None  # None: the DOP controller chooses
    rpc: str | None = None  # tracker HOST:PORT
    rpc_key: str | None = None
    servers: int = 0  # registered under rpc_key when the run started

    def devices(self, device_type: str) -> int:
        """GPUs the run holds (device-hours accrue on these): the chosen local GPUs, or one
        per server of a GPU fleet."""
        if device_type != "cuda":
            return 0
        return self.servers if self.rpc else len(self.gpus)

    def smallest_memory(self) -> tuple[int, int]:
        """(index, bytes of memory) of the local GPU with the least, of those it measures on."""
        import tvm

        sizes = [(g, int(tvm.cuda(g).total_global_memory)) for g in self.gpus]
        return min(sizes, key=lambda size: size[1])

    def claims(self, device_type: str) -> list[str]:
        """Names of the local devices this run measures on, for DeviceClaim (none on a
        fleet: the tracker lends each server to one session at a time)."""
        from tune_orchestrator.measure.telemetry import physical_gpu

        if self.rpc:
            return []
        if device_type == "cuda":
            return [f"cuda-{physical_gpu(g)}" for g in self.gpus]
        return ["cpu"]


def timer_config(settings: Settings) -> TimerConfig:
    """TVM's time evaluator settings (CPUs), raced as on GPUs."""
    m = settings.measure
    return TimerConfig(
        number=m.number,
        repeat=m.repeat,
        min_repeat_ms=m.min_repeat_ms,
        cpu_cache_flush=m.cpu_cache_flush,
        race=m.race,
        race_after=m.race_after,
        race_margin=m.race_margin,
    )


def timing_plan(settings: Settings, device_type: str) -> TimingPlan:
    """How a candidate is timed on a GPU (adaptive, raced), or on a CPU fleet over RPC (the
    CPU's fixed repeats, raced, as on this host)."""
    m = settings.measure
    if device_type == "cuda":
        return TimingPlan(
            min_repeats=m.min_repeats,
            max_repeats=m.max_repeats,
            max_rel_ci=m.max_rel_ci,
            repeat_ms=m.gpu_repeat_ms,
            min_launches=m.number,
            race=m.race,
            race_after=m.race_after,
            race_margin=m.race_margin,
            flush_l2=m.gpu_l2_flush,
        )
    return timer_config(settings).plan()


class RunPools:
    """A run's build pool and measuring engine, started before the model is imported: their
    processes import TVM (8-10 s for 16 builders on a 16-core GPU host) while this process
    reads the model. The session closes them when measuring ends; closing twice is harmless.
    `lock_files`: why a lock file the engine shares with other users' runs could not be used,
    for the session to count (it starts after the pools)."""

    def __init__(self, settings: Settings, target: ResolvedTarget, logs: Path, fleet: Fleet):
        self.lock_files: list[str] = []
        self.builder: Builder = make_builder(settings, logs, fleet)
        try:
            self.engine: Engine = make_engine(
                settings, target, logs, fleet, on_skip=self.lock_files.append
            )
        except BaseException:
            self.builder.close()
            raise
        self._open = True

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self.engine.close()
            finally:
                self.builder.close()

    def __enter__(self) -> RunPools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_engine(
    settings: Settings,
    target: ResolvedTarget,
    logs: Path | None,
    fleet: Fleet | None = None,
    *,
    on_skip: Callable[[str], None] | None = None,
) -> Engine:
    """An RPC engine for a fleet; the parallel CUDA engine on GPUs (when cupy can use them);
    otherwise one candidate at a time in an isolated worker. `on_skip` hears why a GPU's
    timed window is not the one other users' runs share."""
    from tune_orchestrator.measure.cuda import CudaEngine, cuda_available
    from tune_orchestrator.measure.rpc import RpcEngine

    fleet = fleet or Fleet()
    m = settings.measure
    log = logs / "measure.log" if logs else None
    if target.simulated:
        from tune_orchestrator.measure import SimulatedEngine

        from ..simulate import Landscape, stand_in_gpu

        return SimulatedEngine(
            stand_in_gpu(settings.tune.seed),
            controller=DopController(settings.dop, seed=settings.tune.seed),
            gpus=len(fleet.gpus),
            fixed_dop=fleet.parallelism,
            overlap_timing=settings.dop.overlap_timing,
            plan=timing_plan(settings, "cuda"),
            latency=Landscape(seed=settings.tune.seed).of_input,
            warm=fleet.parallelism or settings.dop.start,  # as many as the real engine starts
        )
    if fleet.rpc:
        return RpcEngine(
            tracker=fleet.rpc,
            key=fleet.rpc_key or "",
            device_type=target.device_type,
            plan=timing_plan(settings, target.device_type),
            cpu_cache_flush=m.cpu_cache_flush,
            timeout_s=max(60.0, m.timeout_s),
            workers=fleet.parallelism,  # None: one in flight per registered server
        )
    if target.device_type == "cuda" and target.device_present and cuda_available():
        return CudaEngine(
            gpus=fleet.gpus,
            controller=DopController(settings.dop, seed=settings.tune.seed),
            fixed_dop=fleet.parallelism,
            plan=timing_plan(settings, "cuda"),
            timeout_s=m.timeout_s,
            overlap_timing=settings.dop.overlap_timing,
            log_path=log,
            on_skip=on_skip,
        )
    return LocalEngine(
        device_type=target.device_type,
        timer=timer_config(settings),
        timeout_s=m.timeout_s,
        log_path=log,
    )


def target_and_fleet(
    target: str,
    *,
    build_only: bool = False,
    gpus: Sequence[int] | str | None = None,
    parallelism: int | str = "auto",
    rpc: str | None = None,
    rpc_key: str | None = None,
    simulate: bool = False,
) -> tuple[ResolvedTarget, Fleet]:
    """Check --target, --gpus, --parallelism, --rpc and --rpc-key together: the resolved
    target and the Fleet that measures it. With --rpc the fleet is checked first, so that a
    CUDA target is accepted on a head node without a GPU (`cuda` is read from a server).
    With `simulate`, simulated GPUs measure (--gpus 0,1 sets how many)."""
    from tune_orchestrator.measure.rpc import parse_tracker, remote_cuda

    dop = _parallelism(parallelism)
    if simulate and rpc:
        raise InputError("--simulate stands in for the GPUs that --rpc would use; give one")
    if rpc:
        if gpus not in (None, ""):
            raise InputError(
                "--gpus picks GPUs of this host; with --rpc the servers under --rpc-key "
                "measure, so leave --gpus out"
            )
        fleet = _rpc_fleet(rpc, rpc_key, dop)
        host, port = parse_tracker(fleet.rpc or "")
        resolved = resolve_target(
            target,
            build_only=build_only,
            remote=lambda: remote_cuda(host, port, rpc_key or ""),
        )
        return resolved, fleet
    if rpc_key:
        raise InputError(
            "--rpc-key names the servers of an RPC fleet; give the fleet's tracker with --rpc "
            "HOST:PORT, or leave --rpc-key out to measure on this host"
        )
    resolved = resolve_target(target, build_only=build_only, simulate=simulate)
    return resolved, _local_fleet(resolved, gpus, dop)


def _parallelism(parallelism: int | str) -> int | None:
    text = str(parallelism).strip().lower()
    if text == "auto":
        return None
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise InputError(f"--parallelism must be auto or a positive whole number, not {parallelism!r}")


def _rpc_fleet(rpc: str, rpc_key: str | None, dop: int | None) -> Fleet:
    from tune_orchestrator.measure.rpc import parse_tracker, tracker_keys

    if not rpc_key:
        raise InputError("--rpc needs --rpc-key KEY, the key its servers registered with")
    try:
        host, port = parse_tracker(rpc)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    try:
        keys = tracker_keys(host, port)
    except Exception as exc:
        raise InputError(f"cannot reach the RPC tracker at {rpc} ({exc}); check --rpc") from None
    if rpc_key not in keys:
        there = ", ".join(sorted(keys)) or "none"
        raise InputError(
            f"no server is registered under key {rpc_key!r} at {rpc} (keys there: {there})"
        )
    return Fleet(rpc=f"{host}:{port}", rpc_key=rpc_key, parallelism=dop, servers=keys[rpc_key])


def _local_fleet(resolved: ResolvedTarget, gpus: Any, dop: int | None) -> Fleet:
    if resolved.device_type != "cuda":
        if gpus not in (None, ""):
            raise InputError(
                f"--gpus applies to CUDA targets; this run tunes for {resolved.describe()}"
            )
        if dop is not None:
            raise InputError(
                f"--parallelism applies to GPU targets and RPC fleets (--rpc); this run tunes "
                f"for {resolved.describe()}, where candidates are timed one at a time, so leave "
                "it out"
            )
        return Fleet()
    visible = visible_gpus()
    if gpus in (None, "") or str(gpus).strip().lower() == "all":
        chosen = tuple(visible) or (0,)
    else:
        try:
            chosen = tuple(int(g) for g in (gpus.split(",") if isinstance(gpus, str) else gpus))
        except ValueError:
            raise InputError(
                f"--gpus {gpus!r} is not 'all' or a list of GPU indices like 0,1"
            ) from None
        missing = [g for g in chosen if resolved.device_present and g not in visible]
        if missing or len(set(chosen)) != len(chosen) or not chosen or min(chosen) < 0:
            raise InputError(
                f"--gpus {gpus!r}: give distinct indices of visible GPUs (visible: "
                f"{', '.join(map(str, visible)) or 'none'})"
            )
    return Fleet(gpus=chosen, parallelism=dop)


def cpu_caveat(cores: int, threads: int) -> str | None:
    """The honest caveat for CPU measurement on a machine too small to keep work apart (the
    kernels run on `threads` threads, TVM's runtime's)."""
    if cores >= 4:
        return None
    share = "all of them" if threads >= cores else f"{threads} of them"
    return (
        f"this host has {cores_text(cores)} and the kernels run on {share}: builds are kept out "
        "of the way by never running during measurement, but anything else running on the "
        "machine disturbs the timings"
    )


def untuned_workload(task: Task, target: ResolvedTarget) -> Any:
    """The task as the model runs it without tuning: as lowered on CPUs, with the same
    default GPU schedules `compile_relax` falls back to on GPUs."""
    from ..model.defaults import default_schedule

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
        MeasureInput(
            b.artifact,
            arg_specs(ArgInfo.from_entry_func(mod, remove_preproc=True)),
            label=(task.key, task.flops, None),  # a simulated device's default schedule
        )
        for task, mod, b in zip(tasks, mods, builds, strict=True)
        if b.artifact
    ]
    # One call per task: an engine cuts short what is clearly slower than the best of its
    # call (racing), and these are different tasks' kernels.
    timed = iter([m for item in inputs for m in engine.measure([item])])
    builder.release(builds)
    return [next(timed) if b.artifact else Measurement(None, b.error) for b in builds]
