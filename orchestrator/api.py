"""The Python API: `tune(model, budget, target=..., out=..., **options)` returns a `Result`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import exits
from .options import Options

Event = dict[str, Any]


# The key, in a finished run's report handed back to a session that asked for the same run,
# of that session's answer (the report as written to report.json has none).
ANSWER = "answer"


@dataclasses.dataclass(frozen=True)
class TaskResult:
    name: str
    weight: int
    flops: float
    trials: int
    untuned_s: float | None
    best_s: float | None
    speedup: float | None
    retired: str | None  # why the task got no more rounds, if it was retired
    schedule: str  # what the model runs: "tuned" (its best record) or "default" (untuned)


@dataclasses.dataclass(frozen=True)
class Result:
    """What a run produced; every number here is also in `report.json`.

    The latencies are medians of the untuned and the tuned model timed in turn at the end of
    the run; `untuned_latency` / `tuned_latency` hold their spread (median_s, min_s, max_s,
    repeats). `change` is "faster" or "slower" only when every timing of one model beats
    every timing of the other, else "no change" (None: not timed); `speedup` is the speedup
    claimed: the ratio of the medians for "faster" / "slower", exactly 1.0 for "no change"
    (None: not timed). `measured_ratio` is the ratio of the medians as measured, noise
    included: not a claim.

    `shipped` says which build model.so is: "tuned", "untuned", or "none" (no model.so: no
    build passed its check). `shipped_checked` is True where model.so's outputs matched
    onnxruntime's (`checked_on` says where); False with `unchecked_reason` where nothing could
    run it (no device here and no fleet, --simulate) or the comparison was turned off
    (output_check=False). `check_status` is the tuned build's check: "matched", "differs",
    "failed" (it failed when run), "not checkable" (an output NaN everywhere), "unchecked" (the
    fleet could not be reached), "skipped" (it ran; the comparison was off), None (nothing
    could run it); `tuned_not_shipped` says why model.so is not the tuned build. A tuned build that
    failed its check (`check_ok` False, exit code 4) or could not be checked (exit code 5)
    never ships; one whose outputs differ is kept aside as `mismatch_library`.
    """

    run_dir: Path
    model: str
    target: str
    untuned_latency_s: float | None
    tuned_latency_s: float | None
    speedup: float | None
    measured_ratio: float | None
    change: str | None
    shipped: str
    shipped_checked: bool
    checked_on: str | None
    unchecked_reason: str | None
    mismatch_library: Path | None
    untuned_latency: Mapping[str, Any] | None
    tuned_latency: Mapping[str, Any] | None
    kept_default: tuple[str, ...]  # tuned tasks whose default schedule stayed faster
    kernels: Mapping[str, Any] | None  # CUDA kernels compiled by nvcc on a GPU-less host
    trials: int
    rounds: int
    wall_s: float
    device_h: float
    usd: float | None
    energy_j: float | None
    phases: Mapping[str, float]
    stop_reason: str
    stop: str  # why it stopped, one of budget.base.STOP_CODES: branch on this, not the text
    interrupted: bool
    budget_too_small: bool
    check_ok: bool | None
    check_status: str | None
    tuned_not_shipped: str | None
    max_rel_error: float | None
    tasks: tuple[TaskResult, ...]
    paths: Mapping[str, Path]
    report: Mapping[str, Any] = dataclasses.field(repr=False)

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> Result:
        summary = report["summary"]
        tuned = report.get("tuned") or {}
        check = tuned.get("check") or {}
        return cls(
            run_dir=Path(report["paths"]["run_dir"]),
            model=report["model"]["name"],
            target=report["target"]["description"],
            untuned_latency_s=summary["untuned_latency_s"],
            tuned_latency_s=summary["tuned_latency_s"],
            speedup=summary["speedup"],
            measured_ratio=summary["measured_ratio"],
            change=summary["change"],
            shipped=summary["shipped"],
            shipped_checked=summary["shipped_checked"],
            checked_on=summary["checked_on"],
            unchecked_reason=summary["unchecked_reason"],
            mismatch_library=_path(summary["mismatch_library"]),
            untuned_latency=(report.get("untuned") or {}).get("latency"),
            tuned_latency=tuned.get("latency"),
            kept_default=tuple(summary.get("kept_default", ())),
            kernels=tuned.get("kernels"),
            trials=summary["trials"],
            rounds=summary["rounds"],
            wall_s=summary["wall_s"],
            device_h=summary["device_h"],
            usd=summary["usd"],
            energy_j=summary["energy_j"],
            phases=dict(report["spend"]["phases"]),
            stop_reason=summary["stop_reason"],
            stop=summary.get("stop", ""),
            interrupted=summary["interrupted"],
            budget_too_small=summary["budget_too_small"],
            check_ok=check.get("ok"),
            check_status=summary.get("check_status"),
            tuned_not_shipped=summary.get("tuned_not_shipped"),
            max_rel_error=check.get("max_rel_error"),
            tasks=tuple(
                TaskResult(
                    name=t["name"],
                    weight=t["weight"],
                    flops=t["flops"],
                    trials=t["trials"],
                    untuned_s=t["untuned_s"],
                    best_s=t["best_s"],
                    speedup=t["speedup"],
                    retired=t["retired"],
                    schedule=t.get("schedule", "tuned" if t["best_s"] else "default"),
                )
                for t in report["tasks"]
            ),
            paths={k: Path(v) for k, v in report["paths"].items()},
            report=report,
        )

    @property
    def exit_code(self) -> int:
        """The exit code `orchestrate` ends with for this result (exits.py)."""
        from .budget.base import NOTHING_RAN
        from .deploy.check import SKIPPED

        if self.interrupted:
            return exits.INTERRUPTED
        if self.budget_too_small:
            return exits.BUDGET_TOO_SMALL
        if self.stop == NOTHING_RAN:  # a broken toolchain or device, or our bug
            return exits.INTERNAL
        if self.check_ok is False:
            return exits.CHECK_FAILED
        if self.check_ok is None and self.check_status not in (None, SKIPPED):  # none could tell
            return exits.UNCHECKED
        return exits.OK

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, as in the `finished` event."""
        out = dataclasses.asdict(self)
        del out["report"]
        out["run_dir"] = str(self.run_dir)
        out["tasks"] = list(out["tasks"])
        out["kept_default"] = list(self.kept_default)
        out["paths"] = {k: str(v) for k, v in self.paths.items()}
        out["mismatch_library"] = _path_text(self.mismatch_library)
        return out


def _path(text: str | None) -> Path | None:
    return None if text is None else Path(text)


def _path_text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def tune(
    model: str | Path,
    budget: Any = None,
    *,
    target: str | None = None,
    out: str | Path | None = None,
    options: Options | None = None,
    on_event: Callable[[Event], None] | None = None,
    **option_fields: Any,
) -> Result:
    """Tune `model` (an ONNX file) within `budget` for `target`, compile it and check it;
    the run directory `out` (default runs/<model>-<time>) holds the shipped model.so, a stock
    MetaSchedule database, the journal and the report, and is resumed when it exists.

    `budget` is a string ("5min", "2gpu-h,$5", "500trials") or a `budget.Budget` (default: the
    configuration's); `target` "auto", "llvm", "cuda", a TVM tag or a JSON target. Everything
    else is an `Options` (`options`, or its fields as keyword arguments: `tune(m, "5min",
    seed=1)`). `on_event` receives every event (orchestrator/events.schema.json).

    Raises InputError for bad input (nothing in an existing run directory is touched then) and
    BudgetTooSmall, before any work, when the budget cannot cover the fixed phases; its
    message names the budget that would.
    """
    return run(
        model, budget, target=target, out=out, options=Options.of(options, **option_fields),
        on_event=on_event,
    )  # fmt: skip


def run(
    model: str | Path,
    budget: Any,
    *,
    target: str | None,
    out: str | Path | None,
    options: Options,
    on_event: Callable[[Event], None] | None = None,
    env: Mapping[str, str] | None = None,
    started: float | None = None,
    command: Sequence[str] | None = None,
) -> Result:
    """`tune()`, with what the CLI adds: ORCHESTRATE_* variables from `env` (default:
    os.environ), the budget counted from `started` (a time.monotonic() reading: the process's
    start) rather than from the call, and the `command` line the report says started it. One
    run at a time in a process (run/alone.py): a call made while another runs waits for it,
    and its spend counts from then."""
    if on_event is not None and not callable(on_event):
        raise TypeError(f"on_event must be a function of one event (a dict), not {on_event!r}")
    from .collector import run_scope
    from .events import Emitter
    from .run.alone import alone

    def waiting() -> None:
        Emitter(on_event)(
            "warning",
            message="waiting for the run in another thread of this process to finish: TVM "
            "runs one model at a time per process (tune in parallel with processes)",
        )

    with alone(waiting), run_scope():
        return _run(model, budget, target, out, options, on_event, env, started, command)


def _run(
    model: str | Path,
    budget: Any,
    target: str | None,
    out: str | Path | None,
    options: Options,
    on_event: Callable[[Event], None] | None,
    env: Mapping[str, str] | None,
    started: float | None,
    command: Sequence[str] | None,
) -> Result:
    # Spend counts from here: importing, checking and reading the model are part of it.
    called = time.monotonic() if started is None else started
    from ._tvm import check_home
    from .host import limit_tvm_threads

    check_home()  # before the first module that imports TVM
    limit_tvm_threads()  # before TVM's runtime starts its threads, here or in a worker
    from .events import Emitter
    from .model.importer import import_for_tuning
    from .run import prepare
    from .run.interrupt import on_signals
    from .run.session import Session, fingerprint
    from .rundir import RunDir

    env = os.environ if env is None else env
    given = prepare.describe(model, budget, target, out, options, env=env, command=command)
    emit = Emitter(on_event, given.invocation.logger, on_gone=given.stopping.interrupt.request)
    out_dir = given.invocation.out
    if given.invocation.fresh:
        aside = RunDir.move_aside(out_dir)
        if aside is not None:
            emit("warning", message=f"started over: the earlier run in {out_dir} is now {aside}")
    if given.invocation.claim:  # runs/<model>-<time>: made now, another run cannot take it
        out_dir, fresh = prepare.claim(out_dir), True
    else:
        fresh = not out_dir.exists()  # describe made sure it can be reached
    prints = fingerprint(given.model, given.target)
    with (
        RunDir.open(out_dir, fingerprint=prints, simulated=given.target.simulated) as run_dir,
        on_signals(given.stopping.interrupt, options.handle_signals),
        _refusal(out_dir, fresh, emit),
        _pools(given, run_dir) as pools,  # their imports overlap the model's
    ):
        imported = import_for_tuning(given.model, given.target.target, started=called)
        report = Session(given, imported, run=run_dir, emit=emit, pools=pools).execute()
    result = Result.from_report(report)
    emit("finished", result=result.to_dict(), exit_code=result.exit_code)
    return result


def _pools(given: Any, run_dir: Any) -> Any:
    """The build and measuring workers, started before the model's import; none to compile."""
    from .run.measuring import RunPools

    if given.invocation.build_only:
        return contextlib.nullcontext()
    return RunPools(given.settings, given.target, run_dir[run_dir.LOGS], given.fleet)


@contextlib.contextmanager
def _refusal(path: Path, fresh: bool, emit: Callable[..., None]) -> Iterator[None]:
    """A budget refused up front ends the event stream with a `refused` event (a pipeline
    reading events sees why, and the budget that would do); then, as after a model TVM cannot
    import, the run directory made for it is removed again: nothing ran."""
    from .errors import BudgetTooSmall, InputError

    try:
        yield
    except (BudgetTooSmall, InputError) as exc:  # refused, or a model TVM cannot import
        if isinstance(exc, BudgetTooSmall):
            emit(
                "refused",
                reason=str(exc),
                minimum=exc.minimum,
                needed_s=round(exc.needed_s, 1),
                exit_code=exits.BUDGET_TOO_SMALL,
            )
        if fresh:
            shutil.rmtree(path, ignore_errors=True)
        raise
