"""A parallel build pool whose workers live for the whole run.

MetaSchedule's LocalBuilder starts a fresh pool on every `build()` call, and each fresh worker
pays TVM's import plus `tvm.s_tir.tensor_intrin` (~19 s on 2 cores); here workers start once,
import only what a build needs, and are restarted only after a crash, a timeout, or
`recycle_after` builds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO

from . import _worker
from .base import Build, Builder, BuildInput, short_error


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
        if workers < 1:
            raise ValueError(f"workers must be at least 1 but got {workers}.")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive but got {timeout_s}.")
        from tvm.support.popen_pool import PopenPoolExecutor

        self.workers = workers
        self.timeout_s = timeout_s
        self._dir = tempfile.mkdtemp(prefix="orchestrate-builds-")
        self._log: IO[bytes] | int = open(log_path, "ab") if log_path else subprocess.DEVNULL
        self._pool = PopenPoolExecutor(
            max_workers=workers,
            timeout=timeout_s,
            initializer=_worker.warm_up,
            maximum_process_uses=recycle_after,
            stdout=self._log,
            stderr=self._log,
        )
        # Start every worker now, so its start-up overlaps the caller's own work.
        self._started = [self._pool.submit(os.getpid) for _ in range(workers)]

    def build(self, inputs: Sequence[BuildInput]) -> list[Build]:
        futures = [
            self._pool.submit(_worker.build, item.mod, item.target, self._dir) for item in inputs
        ]
        return [self._collect(future) for future in futures]

    def release(self, builds: Sequence[Build]) -> None:
        """Delete artifacts that are no longer needed."""
        for item in builds:
            if item.artifact and item.artifact.startswith(self._dir):
                Path(item.artifact).unlink(missing_ok=True)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if not isinstance(self._log, int):
            self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _collect(self, future: Future) -> Build:
        try:
            path, seconds = future.result()
        except TimeoutError:
            return Build(None, f"build timed out after {self.timeout_s:g} s")
        except ChildProcessError:
            return Build(None, "build worker died (crashed or was killed)")
        except Exception as exc:  # a compile error of this candidate: data, not a crash
            return Build(None, f"build failed: {short_error(exc)}")
        return Build(path, None, seconds)
