"""Worker processes for builds and measurements: TVM's PopenPool, logged, failures as messages."""

from __future__ import annotations

import functools
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

from . import _worker
from .base import short_error

# A job that returns a dict with this key set asks for its worker process to be replaced
# (e.g. its CUDA context is broken); the result still counts.
RESTART = "restart_worker"


class WorkerPool:
    """`workers` processes that run picklable functions with a per-call timeout.

    A worker that crashes or times out is killed and replaced on its next job; its output
    goes to `log_path` (or nowhere).
    """

    def __init__(
        self,
        *,
        workers: int,
        timeout_s: float,
        log_path: str | Path | None = None,
        initializer: Callable[[], None] | None = None,
        recycle_after: int | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1 but got {workers}.")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive but got {timeout_s}.")
        self._log: IO[bytes] | int = open(log_path, "ab") if log_path else subprocess.DEVNULL
        self._executor = _executor_class()(
            max_workers=workers,
            timeout=timeout_s,
            initializer=functools.partial(_worker.detached, initializer),
            maximum_process_uses=recycle_after,
            stdout=self._log,
            stderr=self._log,
        )
        # Per worker started by start(): seconds until it could take a job.
        self.ready_s: list[float] = []

    @property
    def timeout_s(self) -> float:
        """Seconds a job may run; a new value holds for jobs started from then on."""
        return self._executor._timeout

    @timeout_s.setter
    def timeout_s(self, seconds: float) -> None:
        if seconds <= 0:
            raise ValueError(f"timeout_s must be positive but got {seconds}.")
        # TVM's executor reads it as each job starts (PopenWorker.send's timeout).
        self._executor._timeout = seconds

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        return self._executor.submit(fn, *args)

    def start(self, workers: int) -> list[Future]:
        """Start `workers` processes now instead of at their first jobs, so that their start-up
        overlaps the caller's own work. Each one's seconds from this call until it could take
        a job (its process up, its initializer run) go to `ready_s` as it gets there; the
        futures are done when it did or failed."""
        began = time.monotonic()

        def ready(future: Future) -> None:
            if not future.cancelled() and future.exception() is None:
                self.ready_s.append(time.monotonic() - began)

        futures = [self.submit(os.getpid) for _ in range(workers)]
        for future in futures:
            future.add_done_callback(ready)
        return futures

    def outcome(self, future: Future, what: str) -> tuple[Any, str | None]:
        """(value, None) or (None, a one-line message naming `what` failed and how)."""
        value, error, _ = self.settle(future, what)
        return value, error

    def settle(self, future: Future, what: str) -> tuple[Any, str | None, str | None]:
        """(value, None, None), or (None, message, fault) with fault "timeout", "crash" or
        "error"."""
        try:
            return future.result(), None, None
        except TimeoutError:
            return None, f"{what} timed out after {self.timeout_s:g} s", "timeout"
        except ChildProcessError:
            return None, f"{what} crashed the worker process", "crash"
        except Exception as exc:  # an error of this one job: data, not the end of the run
            return None, f"{what} failed: {short_error(exc)}", "error"

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        if not isinstance(self._log, int):
            self._log.close()


def ready_summary(started: int, ready_s: Sequence[float]) -> dict[str, Any]:
    """For the report: workers started ahead (WorkerPool.start), how many were ready, and the
    seconds until the first and the last of those were."""
    ready = sorted(ready_s)
    return {
        "started": started,
        "ready": len(ready),
        "first": ready[0] if ready else None,
        "last": ready[-1] if ready else None,
    }


def _executor_class() -> type:
    """TVM's PopenPoolExecutor, replacing a worker after a job that asks for it (RESTART).
    It relies on the executor running each job in the thread that owns its worker."""
    from tvm.support.popen_pool import PopenPoolExecutor

    class Executor(PopenPoolExecutor):
        def _worker_run(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
            result = super()._worker_run(fn, args, kwargs)
            if isinstance(result, dict) and result.get(RESTART):
                with self._lock:
                    worker = self._worker_map.get(threading.get_ident())
                if worker is not None:
                    worker.kill()  # started afresh, with its initializer, by the next job
            return result

        def shutdown(self, wait: bool = True) -> None:
            # TVM's own shutdown fails on a worker caught between starting its process and
            # opening its pipes (AttributeError, with its lock still held: the executor's
            # __del__ then deadlocks the interpreter's exit), and a job thread may start a
            # worker after it has passed. So: kill what runs, let the job threads finish,
            # and kill again whatever they started meanwhile.
            try:
                self._kill_workers()
                self._threadpool.shutdown(wait=wait)
                self._kill_workers()
            finally:
                self._shutdown = True

        def _kill_workers(self) -> None:
            with self._lock:
                workers = list(self._worker_map.values())
            for worker in workers:
                try:
                    worker.kill()
                except AttributeError:  # mid-start: its process is up, its pipes not yet
                    worker._proc.kill()  # its thread's next send fails; the second pass reaps it
                except ImportError:  # at interpreter exit
                    pass

    return Executor
