"""A parallel build pool whose workers live for the whole run.

MetaSchedule's LocalBuilder starts a fresh pool on every `build()` call, and each fresh worker
pays TVM's import plus `tvm.s_tir.tensor_intrin` (~19 s on 2 cores); here workers start once,
import only what a build needs, and are restarted only after a crash, a timeout, or
`recycle_after` builds. Artifacts go to a temporary folder named after the process, removed on
close; a pool also removes the folders that killed processes left behind.

A round waits for its slowest build. Build times are heavy-tailed: smallcnn's random
candidates build in 0.26 s (median) on 2 cores, a few in 5-16 s, and rarely one for over a
minute (heavily unrolled code: 78.7 s seen once); under a fixed 30 s timeout such a build holds
its round for 30 s (twice in three smallcnn runs of 512 trials). Once the run has timed enough
builds, a build may take `adaptive_timeout` times their median (within [`min_timeout_s`,
`timeout_s`]) before it is cut, and counts as a failed one.
"""

from __future__ import annotations

import collections
import errno
import os
import shutil
import stat
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

from . import _worker
from ._pool import WorkerPool, ready_summary
from .base import Build, Builder, BuildInput


class BuildPool(Builder):
    """Builds candidates in `workers` long-lived processes; artifacts go to a private folder."""

    def __init__(
        self,
        *,
        workers: int,
        timeout_s: float = 30.0,
        adaptive_timeout: float = 0.0,
        min_timeout_s: float = 5.0,
        recycle_after: int = 256,
        log_path: str | Path | None = None,
    ) -> None:
        if adaptive_timeout < 0:
            raise ValueError(f"adaptive_timeout cannot be negative but got {adaptive_timeout}.")
        if not 0 < min_timeout_s <= timeout_s:
            raise ValueError(
                f"need 0 < min_timeout_s <= timeout_s but got {min_timeout_s}, {timeout_s}."
            )
        self.workers = workers
        self.max_timeout_s = timeout_s
        self.adaptive_timeout = adaptive_timeout
        self.min_timeout_s = min_timeout_s
        self._seconds: collections.deque[float] = collections.deque(maxlen=RECENT_BUILDS)
        self._pool = WorkerPool(
            workers=workers,
            timeout_s=timeout_s,
            log_path=log_path,
            initializer=_worker.warm_up,
            recycle_after=recycle_after,
        )
        sweep_stale_build_dirs(Path(tempfile.gettempdir()))
        self._dir = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
        self._pool.start(workers)

    def build(
        self, inputs: Sequence[BuildInput], until: Callable[[], bool] | None = None
    ) -> list[Build]:
        futures = [
            self._pool.submit(_worker.build, item.mod, item.target, self._dir) for item in inputs
        ]
        builds = started_builds(futures, until, self._build_of)
        self._seconds.extend(b.seconds for b in builds if b.ok)
        self._pool.timeout_s = self.timeout_s
        return builds

    def _build_of(self, future: Future) -> Build:
        value, error, fault = self._pool.settle(future, "build")
        if fault == "timeout":  # it held its worker for the whole timeout
            return Build(None, error, self._pool.timeout_s, timed_out=True)
        if error:
            self._refuse_full_disk(error)
            return Build(None, error)
        return Build(value[0], None, value[1])

    def _refuse_full_disk(self, error: str) -> None:
        """Raise the full disk's OSError where a build failed for its folder's disk, not for
        its candidate: LLVM ends a worker whose disk fills ("IO failure on output stream"),
        which reads as a crash, and a candidate recorded as failing would stay so, in the run
        and in the library. The run stops; freed, it resumes and builds the candidate."""
        said = full_disk(error, self._dir)
        if said is not None:
            raise OSError(errno.ENOSPC, said, tempfile.gettempdir())

    @property
    def timeout_s(self) -> float:
        """Seconds the next build may take: `adaptive_timeout` x the median of the run's recent
        builds, within [min_timeout_s, the configured timeout_s]; that timeout until
        `_MIN_TIMED` builds are timed, or always when adaptive_timeout is 0."""
        return adaptive_timeout_s(
            self._seconds,
            factor=self.adaptive_timeout,
            low=self.min_timeout_s,
            high=self.max_timeout_s,
        )

    def stats(self) -> dict[str, Any]:
        return {"workers_ready_s": ready_summary(self.workers, self._pool.ready_s)}

    def release(self, builds: Sequence[Build]) -> None:
        """Delete artifacts that are no longer needed."""
        for item in builds:
            if item.artifact and item.artifact.startswith(self._dir):
                Path(item.artifact).unlink(missing_ok=True)

    def close(self) -> None:
        self._pool.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def adaptive_timeout_s(recent: Sequence[float], *, factor: float, low: float, high: float) -> float:
    """`factor` x the median of `recent` build seconds, within [`low`, `high`]; `high` while
    fewer than _MIN_TIMED builds are timed or when `factor` is 0."""
    if not factor or len(recent) < _MIN_TIMED:
        return high
    return min(high, max(low, factor * statistics.median(recent)))


def sweep_stale_build_dirs(root: Path, idle_s: float = 3600.0) -> list[Path]:
    """Remove the artifact folders under `root` of build pools whose process is gone (a run
    killed with SIGKILL never closes its pool) and that have not changed for `idle_s`: a
    process in another PID namespace sharing `root` looks gone, but a live pool writes to its
    folder every round. Only this user's own folders (not links) are touched, even by root.
    Returns what was removed."""
    removed = []
    for folder in root.glob(f"{_PREFIX}*-*"):
        pid = folder.name[len(_PREFIX) :].split("-", 1)[0]
        try:
            if not pid.isdigit() or _alive(int(pid)):
                continue
            info = folder.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            if time.time() - info.st_mtime < idle_s:
                continue
        except OSError:  # gone meanwhile
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def started_builds(
    futures: Sequence[Future],
    until: Callable[[], bool] | None,
    build_of: Callable[[Future], Build],
) -> list[Build]:
    """The builds of `futures`, in order, once done; with `until`, those not started when it
    became true are cancelled and left out."""
    if until is not None:
        stop_starting(futures, until)
    builds = []
    for future in futures:
        if future.cancelled():  # never started: so were none after it
            break
        builds.append(build_of(future))
    return builds


def full_disk(error: str, folder: str) -> str | None:
    """Where a build that failed with `error` failed for the disk of its `folder`, what says
    so: the error's own words, or the space left (under LEAST_ROOM_BYTES); else None."""
    said = os.strerror(errno.ENOSPC)
    if said in error:
        return said
    try:
        short = short_of_room(folder)
    except OSError:  # the folder is gone: the build's own error says why
        return None
    return f"a build failed with {short}" if short is not None else None


def short_of_room(folder: str) -> str | None:
    """The space left on the disk of `folder` ("3.2 MiB free") where it is under
    LEAST_ROOM_BYTES, else None; OSError where it cannot be looked at."""
    free = shutil.disk_usage(folder).free
    return f"{free / (1 << 20):.1f} MiB free" if free < LEAST_ROOM_BYTES else None


def stop_starting(futures: Sequence[Future], until: Callable[[], bool]) -> None:
    """Wait until every future is done or `until()` is true; then cancel those not started.
    Workers take jobs in order, and cancelling from the last keeps the started ones a
    prefix."""
    pending = list(futures)
    while pending and not until():
        wait(pending, timeout=_POLL_S, return_when=FIRST_COMPLETED)
        pending = [f for f in pending if not f.done()]
    for future in reversed(pending):
        future.cancel()


_PREFIX = "orchestrate-builds-"
# A build that failed where its folder's disk has less free than this failed for the disk:
# the example model's candidates took 0.6 MB at most, all workers' builds together.
LEAST_ROOM_BYTES = 16 << 20
# How often a build waiting on its deadline looks at the clock.
_POLL_S = 0.1
# Builds timed before the timeout adapts to them, and how many recent ones it follows.
_MIN_TIMED = 16
RECENT_BUILDS = 256
