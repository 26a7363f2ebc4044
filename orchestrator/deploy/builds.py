"""A session's builds of the model: the untuned one at the start (the baseline of progress
estimates), the tuned one at the end. With the workers gone, both are checked against
onnxruntime and timed in turn, on this host's device or a server of the run's fleet, by one
rule (devices.check_on): a build that fails when run fails its check, one the fleet could not
run stays unchecked. model.so is only ever a build whose outputs matched (shipment.choose);
only where nothing can run the model does the tuned build ship unchecked, and the report says
so."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tune_orchestrator.budget import Ledger

from ..config import Settings
from ..host import ensure_temp_room
from ..model.loading import OnnxModel
from ..model.targets import ResolvedTarget
from ..model.tasks import Task
from ..rundir import RunDir
from ..rundir.atomic import install
from . import kernels
from . import library as deploy
from . import samples as check_samples
from .check import DIFFERS, MATCHED, NOT_CHECKABLE, SKIPPED, Checker, one_line
from .devices import FleetDevice, LocalDevice, check_on
from .shipment import (
    NONE,
    TUNED,
    UNTUNED,
    Shipment,
    check_ok,
    choose,
    shippable,
    why_not_tuned,
)
from .timing import Timing, change, claimed_speedup, time_models

RAN = (MATCHED, DIFFERS, NOT_CHECKABLE, SKIPPED)  # checks of a build that ran: it can be timed

__all__ = ["NONE", "TUNED", "UNTUNED", "ModelBuilds", "Shipment", "choose"]


class ModelBuilds:
    """Compiles, checks and times the model for one session of a run directory."""

    def __init__(
        self,
        *,
        model: OnnxModel,
        relax_mod: Any,
        target: ResolvedTarget,
        settings: Settings,
        run: RunDir,
        emit: Callable[..., None],
        device: LocalDevice | FleetDevice | None = None,
        checker: Checker | None = None,
        tasks: Sequence[Task] = (),
    ) -> None:
        """`device` checks and times the builds at the end (None: nothing can run them) by
        `checker` (None: on random samples, as `settings` say); `tasks`: the model's, which fall
        back to their default schedules where their tuned CUDA kernels do not compile."""
        self.model = model
        self.tasks = list(tasks)
        self.relax_mod = relax_mod
        self.target = target
        self.run = run
        self.emit = emit
        self.device = device
        if checker is None:
            samples = check_samples.for_run(model, settings)
            checker = Checker.for_model(model, samples=samples, settings=settings.check)
        self.checker = checker
        self.timing = Timing.from_settings(settings.check)
        self._checked: set[str] = set()  # builds this session's checker compared

    def library(self, label: str) -> Path:
        return self.run[RunDir.LOGS] / f"{label}.so"

    def build(self, database: Any, ledger: Ledger, label: str, *, timed: bool) -> dict[str, Any]:
        """Compile with `database` to logs/<label>.so; check its CUDA kernels where no GPU
        can load it; where the device is here, check its outputs (and time it). A fleet's
        device checks it at the end (finish)."""
        result: dict[str, Any] = {}
        library = self.library(label)
        ensure_temp_room(self.model.weight_bytes())  # LLVM aborts where it fills
        start = time.monotonic()
        with ledger.phase("compile"):
            executable = deploy.compile_model(self.relax_mod, self.target.target, database)
        if self.target.device_type == "cuda" and not self.target.device_present:
            executable, check = self._compiling_kernels(executable, database, ledger, label)
            result["kernels"] = check.to_dict()
        with ledger.phase("compile"):
            deploy.export_library(executable, library)
        result["compile_s"] = time.monotonic() - start
        self._checked.discard(label)  # a new build: checked anew
        if self.device is not None and not self.device.remote:
            start = time.monotonic()
            self._check(result, label, ledger)
            if timed and result["check"]["status"] in RAN:
                with ledger.phase("check"):
                    loaded = self.device.load(library)
                    (latency,) = time_models([loaded], self.checker.inputs, self.timing)
                result["latency"] = latency.to_dict()
            result["check_s"] = time.monotonic() - start
        self.emit(
            "compiled",
            label=label,
            library=str(library),
            check=result.get("check"),
            latency=result.get("latency"),
            kernels=result.get("kernels"),
        )
        return result

    def finish(
        self,
        database: Any,
        ledger: Ledger,
        untuned: dict[str, Any] | None,
        *,
        tuned_schedules: bool = True,
    ) -> Shipment:
        """Build the tuned model, check both builds against onnxruntime and time them in turn
        on `device`, and ship model.so: a build whose outputs matched, the untuned one where
        it is faster beyond the spread of the timings or the tuned one did not match. With no
        device, the tuned build ships marked unchecked. Without `tuned_schedules` (every task
        runs its default schedule) the tuned build is the untuned one: built, checked and
        timed once, not compared with itself."""
        build = self.build(database, ledger, TUNED, timed=not tuned_schedules)
        found = Shipment(tuned=build, untuned=untuned, default_schedules=not tuned_schedules)
        failure = None
        if self.device is not None:
            failure = self._on_device(found, ledger, both=tuned_schedules)
        self._ship(found, failure)
        if found.comparison is not None:
            found.comparison["shipped"] = found.shipped
            self.emit("compared", **found.comparison)
        self.emit("shipped", **found.to_dict())
        return found

    def _on_device(self, found: Shipment, ledger: Ledger, *, both: bool = True) -> str | None:
        """Check both builds (the untuned one first: it is what ships when the tuned one does
        not), then time them where both ran and the tuned one matched; only the tuned one
        without `both`. Returns why the timing was cut short by a fleet (on this host, a
        failure to time is a bug and raised)."""
        from tvm.s_tir import meta_schedule as ms

        assert self.device is not None
        if both and (found.untuned is None or not self.library(UNTUNED).is_file()):
            again = self.build(ms.database.MemoryDatabase(), ledger, UNTUNED, timed=False)
            found.untuned = {**(found.untuned or {}), **again}
        try:
            if both:
                self._check(found.untuned, UNTUNED, ledger)
            self._check(found.tuned, TUNED, ledger)
            # A wrong model's speed is no result; a build that did not run has none.
            if both and shippable(found.tuned) and found.untuned["check"]["status"] in RAN:
                try:
                    found.comparison = self._compare(found, ledger)
                except Exception as exc:
                    if not self.device.remote:
                        raise
                    return f"the RPC fleet failed while timing the builds ({one_line(exc)})"
        finally:
            self.device.close()
        return None

    def check_again(self, result: dict[str, Any], label: str, ledger: Ledger) -> bool:
        """Check an earlier session's build `label` with this session's samples and rtol,
        into `result`; False where it cannot be now (no device here, or its library gone)."""
        if self.device is None or self.device.remote or not self.library(label).is_file():
            return False
        self._checked.discard(label)
        self._check(result, label, ledger)
        return True

    def _check(self, result: dict[str, Any], label: str, ledger: Ledger) -> None:
        """Compare the outputs with onnxruntime's on this session's samples, unless done in
        this session already (a check restored from an earlier one is done again)."""
        assert self.device is not None
        if label in self._checked:
            return
        with ledger.phase("check"):
            check = check_on(self.device, self.library(label), self.checker, label)
        result["check"] = check.to_dict()
        self._checked.add(label)

    def _compare(self, found: Shipment, ledger: Ledger) -> dict[str, Any]:
        """Time both builds in turn; the verdict and the speedup claimed from it."""
        assert self.device is not None and found.untuned is not None
        with ledger.phase("check"):
            untuned_latency, tuned_latency = time_models(
                [self.device.load(self.library(UNTUNED)), self.device.load(self.library(TUNED))],
                self.checker.inputs,
                self.timing,
            )
        start = found.untuned.get("start_latency", found.untuned.get("latency"))
        found.untuned = {**found.untuned, "latency": untuned_latency.to_dict()}
        if start is not None:  # timed at the start of the run: progress estimates only
            found.untuned["start_latency"] = start
        found.tuned["latency"] = tuned_latency.to_dict()
        verdict = change(untuned_latency, tuned_latency)
        return {
            "change": verdict,
            "speedup": claimed_speedup(verdict, untuned_latency, tuned_latency),
            "measured_ratio": untuned_latency.median_s / tuned_latency.median_s,
            "repeats": len(tuned_latency.samples),
            "untuned": found.untuned["latency"],
            "tuned": found.tuned["latency"],
        }

    def _ship(self, found: Shipment, failure: str | None) -> None:
        """model.so becomes the build chosen, checked or with the reason it is not; the report
        says why the tuned build did not ship; `failure` is why the fleet timed less than it
        should have (None: it timed all)."""
        found.shipped = choose(found)
        self._place(found)
        found.tuned_not_shipped = why_not_tuned(found, kept=str(self.library(TUNED)))
        shipped = {TUNED: found.tuned, UNTUNED: found.untuned}.get(found.shipped)
        if shipped is not None and check_ok(shipped) is None:  # its outputs were not compared
            why = (shipped.get("check") or {}).get("reason")  # the check was off (--no-check)
            found.unchecked_reason = why or self._nothing_runs_it()
        elif shipped is not None and self.device is not None:
            found.checked_on = self.device.where
        if failure:
            self.emit("warning", message=f"the end of the run was cut short: {failure}")

    def _place(self, found: Shipment) -> None:
        """The files: a tuned build whose outputs differ is kept aside under a name nobody
        deploys; model.so is the shipped build, or absent where none ships."""
        aside = self.run[RunDir.MISMATCH]
        aside.unlink(missing_ok=True)  # set aside by an earlier session: stale now
        if (found.tuned.get("check") or {}).get("status") == DIFFERS:
            install(self.library(TUNED), aside)
            found.mismatch_library = str(aside)
        if found.shipped == NONE:
            self.run[RunDir.LIBRARY].unlink(missing_ok=True)
        else:
            self._install(found.shipped)

    def _install(self, label: str) -> None:
        """model.so becomes the tuned library (moved) or a copy of the untuned one (kept for
        the next session), replaced in one step."""
        target = self.run[RunDir.LIBRARY]
        if label == TUNED:
            install(self.library(TUNED), target, point="model")
            return
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        try:
            shutil.copyfile(self.library(UNTUNED), tmp)
            install(tmp, target, point="model")
        finally:
            tmp.unlink(missing_ok=True)

    def _nothing_runs_it(self) -> str:
        """Why no device checks the model: --build-only without the GPU, or --simulate."""
        if self.target.simulated:
            return "a simulated GPU gave the timings and no GPU ran the model"
        if self.target.device_type == "cpu":
            return (
                f"the target is {self.target.device_name}, which this host's CPU lacks, and no "
                "RPC fleet (--rpc) runs it"
            )
        return (
            f"no {self.target.device_type.upper()} device here and no RPC fleet (--rpc) "
            "to run it on"
        )

    def _compiling_kernels(
        self, executable: Any, database: Any, ledger: Ledger, label: str
    ) -> tuple[Any, kernels.KernelCheck]:
        """The build's CUDA kernels compiled by nvcc; where those of tuned tasks do not, the
        model built again with those tasks' default schedules (fallback.py), until they do."""
        from . import fallback  # TVM's database classes: imported once TVM is

        arch = self.target.target.attrs.get("arch")
        keep = self.run[RunDir.LOGS] / "kernels.cu"
        reverted: list[Task] = []
        first_error = None
        while True:
            with ledger.phase("check"):
                check = kernels.check_cuda(executable, str(arch) if arch else None, keep=keep)
            names = {t.name for t in reverted}
            more = [t for t in fallback.tasks_of(check.failed, self.tasks) if t.name not in names]
            if check.error is None or not more:
                break
            first_error = first_error or check.error
            reverted += more
            with ledger.phase("compile"):
                executable = deploy.compile_model(
                    self.relax_mod, self.target.target, fallback.WithoutTasks(database, reverted)
                )
        if check.error:
            raise kernels.KernelError(
                f"the CUDA kernels TVM generated for {self.model.name} do not compile "
                f"({check.compiler}, {check.arch}): {check.error}. "
                f"{self.run[RunDir.LIBRARY].name} was not written. This is a bug in "
                f"tune-orchestrator, not in your model: please report it with {keep}"
            )
        if reverted:
            names = ", ".join(t.name for t in reverted)
            self.emit(
                "warning",
                message=f"the {label} CUDA kernels of {names} do not compile with "
                f"{check.compiler} ({first_error}): TVM wrote code nvcc rejects for their tuned "
                "schedules, so they run TVM's default schedules",
            )
        return executable, dataclasses.replace(check, reverted=tuple(t.name for t in reverted))
