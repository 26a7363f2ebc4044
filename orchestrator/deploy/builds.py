"""A session's builds of the model: the untuned one at the start (the baseline of progress
estimates), the tuned one at the end; with the workers gone, the two are timed in turn and
the faster ships as model.so."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tune_orchestrator.budget import Ledger

from ..config import Settings
from ..model import OnnxModel
from ..rundir import RunDir
from ..targets import ResolvedTarget
from . import kernels
from . import library as deploy
from .timing import SLOWER, Timing, change, time_models

UNTUNED, TUNED = "untuned", "tuned"


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
    ) -> None:
        self.model = model
        self.relax_mod = relax_mod
        self.target = target
        self.run = run
        self.emit = emit
        self.checker = deploy.Checker(model, seed=settings.tune.seed, rtol=settings.check.rtol)
        self.timing = Timing.from_settings(settings.check)

    def library(self, label: str) -> Path:
        return self.run[RunDir.LOGS] / f"{label}.so"

    def build(self, database: Any, ledger: Ledger, label: str, *, timed: bool) -> dict[str, Any]:
        """Compile with `database` to logs/<label>.so; check its CUDA kernels where no GPU
        can load it; where the device is here, check its outputs (and time it)."""
        result: dict[str, Any] = {}
        library = self.library(label)
        start = time.monotonic()
        with ledger.phase("compile"):
            executable = deploy.compile_model(self.relax_mod, self.target.target, database)
        if self.target.device_type == "cuda" and not self.target.device_present:
            with ledger.phase("check"):
                result["kernels"] = self._check_kernels(executable).to_dict()
        with ledger.phase("compile"):
            deploy.export_library(executable, library)
        result["compile_s"] = time.monotonic() - start
        if self.target.device_present:
            start = time.monotonic()
            with ledger.phase("check"):
                vm, dev = deploy.load_vm(library, self.target.device_type)
                result["check"] = self.checker.check(vm, dev).to_dict()
                if timed:
                    (latency,) = time_models([(vm, dev)], self.checker.inputs, self.timing)
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
        self, database: Any, ledger: Ledger, untuned: dict[str, Any] | None
    ) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
        """Build the tuned model and ship model.so: (tuned, untuned, comparison).

        Where the device is here, the untuned and the tuned library are timed in turn; the
        untuned one ships only when it is faster beyond the spread of the timings.
        """
        from tvm.s_tir import meta_schedule as ms

        tuned = self.build(database, ledger, TUNED, timed=False)
        if not self.target.device_present:
            os.replace(self.library(TUNED), self.run[RunDir.LIBRARY])
            return tuned, untuned, None
        if untuned is None or not self.library(UNTUNED).is_file():
            again = self.build(ms.database.MemoryDatabase(), ledger, UNTUNED, timed=False)
            untuned = {**(untuned or {}), **again}
        with ledger.phase("check"):
            untuned_latency, tuned_latency = time_models(
                [self._load(UNTUNED), self._load(TUNED)], self.checker.inputs, self.timing
            )
        verdict = change(untuned_latency, tuned_latency)
        shipped = UNTUNED if verdict == SLOWER else TUNED
        self._ship(shipped)
        start = untuned.get("start_latency", untuned.get("latency"))
        untuned = {**untuned, "latency": untuned_latency.to_dict()}
        if start is not None:  # timed at the start of the run: progress estimates only
            untuned["start_latency"] = start
        tuned["latency"] = tuned_latency.to_dict()
        comparison = {
            "change": verdict,
            "speedup": untuned_latency.median_s / tuned_latency.median_s,
            "shipped": shipped,
            "repeats": len(tuned_latency.samples),
            "untuned": untuned["latency"],
            "tuned": tuned["latency"],
        }
        self.emit("compared", **comparison)
        return tuned, untuned, comparison

    def _load(self, label: str) -> tuple[Any, Any]:
        return deploy.load_vm(self.library(label), self.target.device_type)

    def _ship(self, label: str) -> None:
        """model.so becomes the tuned library (moved) or a copy of the untuned one (kept for
        the next session), replaced in one step."""
        target = self.run[RunDir.LIBRARY]
        if label == TUNED:
            os.replace(self.library(TUNED), target)
            return
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        try:
            shutil.copyfile(self.library(UNTUNED), tmp)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)

    def _check_kernels(self, executable: Any) -> kernels.KernelCheck:
        arch = self.target.target.attrs.get("arch")
        keep = self.run[RunDir.LOGS] / "kernels.cu"
        check = kernels.check_cuda(executable, str(arch) if arch else None, keep=keep)
        if check.error:
            raise kernels.KernelError(
                f"the CUDA kernels TVM generated for {self.model.name} do not compile "
                f"({check.compiler}, {check.arch}): {check.error}. "
                f"{self.run[RunDir.LIBRARY].name} was not written. This is a bug in "
                f"tune-orchestrator, not in your model: please report it with {keep}"
            )
        return check
