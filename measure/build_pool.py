"""A parallel build pool whose workers live for the whole run.

MetaSchedule's LocalBuilder starts a fresh pool on every `build()` call, and each fresh worker
pays TVM's import plus `tvm.s_tir.tensor_intrin` (~19 s on 2 cores); here workers start once,
import only what a build needs, and are restarted only after a crash, a timeout, or
`recycle_after` builds.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path

from . import _worker
from ._pool import WorkerPool
from .base import Build, Builder, BuildInput


class BuildPool(Builder):
    """Builds candidates in `workers` long-lived processes; artifacts go to a private folder."""

    def __init__(
        self,
        *,
        workers: int,
        timeout_s: float = 30.0,
        recycle_after: int = 256,
        log_path: str | Path | None = None,
    ) -> None:
        self.workers = workers
        self._pool = WorkerPool(
            workers=workers,
            timeout_s=timeout_s,
            log_path=log_path,
            initializer=_worker.warm_up,
            recycle_after=recycle_after,
        )
        self._dir = tempfile.mkdtemp(prefix="orchestrate-builds-")
        # Start every worker now, so its start-up overlaps the caller's own work.
        self._started = [self._pool.submit(os.getpid) for _ in range(workers)]

    def build(
        self, inputs: Sequence[BuildInput], until: Callable[[], bool] | None = None
    ) -> list[Build]:
        futures = [
            self._pool.submit(_worker.build, item.mod, item.target, self._dir) for item in inputs
        ]
        if until is not None:
            _stop_starting(futures, until)
        builds = []
        for future in futures:
            if future.cancelled():  # never started: so were none after it
                break
            value, error = self._pool.outcome(future, "build")
            builds.append(Build(None, error) if error else Build(value[0], None, value[1]))
        return builds

    def release(self, builds: Sequence[Build]) -> None:
        """Delete artifacts that are no longer needed."""
        for item in builds:
            if item.artifact and item.artifact.startswith(self._dir):
                Path(item.artifact).unlink(missing_ok=True)

    def close(self) -> None:
        self._pool.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def _stop_starting(futures: Sequence[Future], until: Callable[[], bool]) -> None:
    """Wait until every future is done or `until()` is true; then cancel those not started.
    Workers take jobs in order, and cancelling from the last keeps the started ones a
    prefix."""
    pending = list(futures)
    while pending and not until():
        wait(pending, timeout=_POLL_S, return_when=FIRST_COMPLETED)
        pending = [f for f in pending if not f.done()]
    for future in reversed(pending):
        future.cancel()


# How often a build waiting on its deadline looks at the clock.
_POLL_S = 0.1
