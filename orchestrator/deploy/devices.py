"""Where the end of a run checks and times the compiled model: the device of this host, or a
server of the RPC fleet that measured the candidates (one session for every check and timing,
so that both builds are timed on the same server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import library as deploy


class LocalDevice:
    """The target's device on this host."""

    remote = False

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.where = "this host"

    def load(self, library: Path) -> tuple[Any, Any]:
        return deploy.load_vm(library, self.device_type)

    def close(self) -> None:
        pass


class FleetDevice:
    """The first device of a server lent by the tracker under `key`; libraries are uploaded
    to it and run there, the results copied back."""

    remote = True

    def __init__(self, *, tracker: str, key: str, device_type: str, timeout_s: float) -> None:
        self.tracker, self.key = tracker, key
        self.device_type = device_type
        self.timeout_s = timeout_s
        self.where = f"a server of the RPC fleet (key {key!r} at {tracker})"
        self._session: Any = None
        self._loaded: dict[Path, tuple[Any, Any]] = {}

    def load(self, library: Path) -> tuple[Any, Any]:
        if library not in self._loaded:
            self._loaded[library] = self._upload(library)
        return self._loaded[library]

    def close(self) -> None:
        for library in self._loaded:
            try:
                self._session.remove(library.name)
            except Exception:  # the server may be gone; nothing of ours is left here
                pass
        self._loaded.clear()
        self._session = None

    def _upload(self, library: Path) -> tuple[Any, Any]:
        from tvm import relax, rpc

        from tune_orchestrator.measure.rpc import parse_tracker

        if self._session is None:
            host, port = parse_tracker(self.tracker)
            self._session = rpc.connect_tracker(host, port).request(
                self.key, priority=1, session_timeout=int(self.timeout_s)
            )
        self._session.upload(str(library), library.name)
        dev = self._session.device(self.device_type, 0)
        return relax.VirtualMachine(self._session.load_module(library.name), dev), dev


def for_run(target: Any, fleet: Any, *, timeout_s: float) -> LocalDevice | FleetDevice | None:
    """Where the end of the run runs the model: the target's device on this host, else a
    server of the run's RPC fleet, else None (nothing can: --build-only without the GPU,
    --simulate)."""
    if target.device_present:
        return LocalDevice(target.device_type)
    if fleet is not None and fleet.rpc and not target.simulated:
        return FleetDevice(
            tracker=fleet.rpc,
            key=fleet.rpc_key or "",
            device_type=target.device_type,
            timeout_s=timeout_s,
        )
    return None
