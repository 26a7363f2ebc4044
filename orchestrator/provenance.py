"""Where a report came from: when, which versions, which host and GPU, started by what."""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import socket
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from tune_orchestrator.measure.telemetry import driver_version

from .host import cgroup_cpus, host_cores

API = "python API"


def provenance(
    *, started: str, command: Sequence[str] | None, gpu: str | None, local_gpu: bool
) -> dict[str, Any]:
    """The report's `provenance` block. `started` is the run's first session's start (ISO
    8601 UTC); `command` the CLI's argv (None: the Python API started it); `gpu` the name of
    the GPU measured on (None: none was), `local_gpu` whether it is on this host (a fleet's
    driver is not known from here)."""
    import tvm

    driver = driver_version() if gpu is not None and local_gpu else None
    return {
        "started": started,
        "ended": utc_now(),
        "package": _version("tune-orchestrator"),
        "tvm": str(tvm.__version__),
        "python": platform.python_version(),
        "host": {
            "name": socket.gethostname(),
            "cpu": cpu_model(),
            "cores": host_cores(),
            "cpu_quota": cgroup_cpus(),
            "tvm_threads": os.environ.get("TVM_NUM_THREADS"),
        },
        "gpu": None if gpu is None else {"name": gpu, "driver": driver},
        "command": API if command is None else shlex.join(command),
    }


def tvm_version() -> str:
    """The installed TVM's version, from its package metadata (no import) where it has one."""
    found = _version("apache-tvm")
    if found is None:  # a TVM built from source
        import tvm

        found = str(tvm.__version__)
    return found


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name (Linux), else what `platform` knows."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # not Linux
        pass
    return platform.processor() or platform.machine() or "unknown"


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:  # run from a source tree never installed
        return None
