"""Builds on a fleet's build servers (measure/build_server.py), not on this host.

A run's search stays here; each candidate's scheduled module (TVM JSON) and target go to a
build server the tracker lends under the build key, which compiles it and sends the shared
library back; the library is written to a private folder, as the build pool writes its
artifacts, and the RPC engine uploads it to a measuring server as it would a local build. One
session per build (the server ends a session at its timeout, so a hung build ends with it);
as many builds at once as servers registered under the key when the run started.
"""

from __future__ import annotations

import collections
import errno
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .base import Build, Builder, BuildInput, short_error
from .build_pool import RECENT_BUILDS, adaptive_timeout_s, started_builds
from .build_server import BUILD_FUNCTION, DISK_FULL

_PREFIX = "orchestrate-remote-builds-"


class BuildServerFull(OSError):
    """A build server's temporary folder is full: its builds fail for the disk, and a
    candidate recorded as failing would stay so, in the run and in the library."""


class RpcBuilder(Builder):
    """Builds candidates on the servers registered with `tracker` (host, port) under `key`."""

    def __init__(
        self,
        *,
        tracker: tuple[str, int],
        key: str,
        servers: int,
        timeout_s: float = 30.0,
        adaptive_timeout: float = 0.0,
        min_timeout_s: float = 5.0,
    ) -> None:
        if servers < 1:
            raise ValueError(f"no build server is registered under key {key!r}")
        self.tracker = tracker
        self.key = key
        self.servers = servers
        self.workers = servers  # builds at once: the loop sizes its rounds in waves of these
        self.max_timeout_s = timeout_s
        self.adaptive_timeout = adaptive_timeout
        self.min_timeout_s = min_timeout_s
        # How long a build waits for a free server before it counts as failed.
        self.wait_s = max(60.0, 4 * timeout_s)
        self._seconds: collections.deque[float] = collections.deque(maxlen=RECENT_BUILDS)
        self._threads = ThreadPoolExecutor(servers, thread_name_prefix="remote-build")
        self._dir = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
        self._lock = threading.Lock()
        self._failed = 0
        self._bytes = 0

    @property
    def timeout_s(self) -> float:
        """As the build pool's: adaptive once enough builds are timed."""
        return adaptive_timeout_s(
            self._seconds,
            factor=self.adaptive_timeout,
            low=self.min_timeout_s,
            high=self.max_timeout_s,
        )

    def build(
        self, inputs: Sequence[BuildInput], until: Callable[[], bool] | None = None
    ) -> list[Build]:
        timeout = self.timeout_s
        futures: list[Future[Build]] = [
            self._threads.submit(self._build_one, item, timeout) for item in inputs
        ]
        builds = started_builds(futures, until, Future.result)
        self._seconds.extend(b.seconds for b in builds if b.ok)
        return builds

    def _build_one(self, item: BuildInput, timeout_s: float) -> Build:
        from tvm import ir, rpc

        start = time.perf_counter()
        try:
            mod_json = ir.save_json(item.mod)
            target_json = ir.save_json(item.target)
            tracker = rpc.connect_tracker(*self.tracker)
            # A request waits on the tracker's socket for a free server, with no timeout of
            # its own: with every build server gone it would wait for ever.
            tracker._sock.settimeout(self.wait_s)
            try:
                session = tracker.request(
                    self.key, priority=1, session_timeout=max(1, round(timeout_s)), max_retry=1
                )
            finally:
                tracker.close()
            library = bytes(session.get_function(BUILD_FUNCTION)(mod_json, target_json))
            fd, path = tempfile.mkstemp(prefix="cand-", suffix=".so", dir=self._dir)
            with os.fdopen(fd, "wb") as out:
                out.write(library)
        except Exception as exc:  # a failed build, carried with the candidate as any other
            full = [line for line in str(exc).splitlines() if DISK_FULL in line]
            if full:  # the server's disk, not the candidate: the run stops
                said = full[-1][full[-1].index(DISK_FULL) :].strip()
                raise BuildServerFull(errno.ENOSPC, said) from None
            error = _remote_error(exc)
            with self._lock:
                self._failed += 1
            return Build(None, f"remote build: {error}", time.perf_counter() - start)
        with self._lock:
            self._bytes += len(library)
        return Build(path, None, time.perf_counter() - start)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "remote": {
                    "key": self.key,
                    "servers": self.servers,
                    "failed": self._failed,
                    "library_bytes": self._bytes,
                }
            }

    def release(self, builds: Sequence[Build]) -> None:
        for item in builds:
            if item.artifact and item.artifact.startswith(self._dir):
                Path(item.artifact).unlink(missing_ok=True)

    def close(self) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self._dir, ignore_errors=True)


def _remote_error(exc: BaseException) -> str:
    """One line of a build server's error: TVM's RPC puts its own line before the server's,
    and a heading such as "Compilation error:" is followed by what failed, in its last line."""
    _, found, remote = str(exc).partition("Error caught from RPC call:")
    lines = [line.strip() for line in remote.splitlines() if line.strip()] if found else []
    if not lines:
        return short_error(exc)
    if len(lines) > 1 and lines[0].endswith(":"):
        return short_error(f"{lines[0]} {lines[-1]}")
    return short_error(lines[0] if "Traceback" not in remote else lines[-1])
