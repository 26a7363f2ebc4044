"""Where the end of a run checks and times the compiled model: the device of this host, or a
server of the RPC fleet that measured the candidates (one session for every check and timing,
so that both builds are timed on the same server), and the rule that runs a check on either:
a build that fails when run fails its check; a fleet that cannot be reached leaves it
unchecked."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from . import library as deploy
from .check import FAILED, UNCHECKED, Check, Checker, one_line

REQUEST_S = 60.0  # how long the end of a run waits for the tracker to lend it a server


class Unreachable(Exception):
    """The RPC fleet could not be reached: no tracker, no server lent, or the upload failed."""


class LocalDevice:
    """The target's device on this host."""

    remote = False

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.where = "this host"

    def load(self, library: Path) -> tuple[Any, Any]:
        return deploy.load_vm(library, self.device_type)

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass


class FleetDevice:
    """The first device of a server lent by the tracker under `key`; libraries are uploaded
    to it and run there, the results copied back."""

    remote = True

    def __init__(
        self,
        *,
        tracker: str,
        key: str,
        device_type: str,
        timeout_s: float,
        request_s: float = REQUEST_S,
    ) -> None:
        self.tracker, self.key = tracker, key
        self.device_type = device_type
        self.timeout_s = timeout_s
        self.request_s = request_s
        self.where = f"a server of the RPC fleet (key {key!r} at {tracker})"
        self._session: Any = None
        self._loaded: dict[Path, tuple[Any, Any]] = {}
        self._gone: Unreachable | None = None  # once unreachable, not asked again

    def load(self, library: Path) -> tuple[Any, Any]:
        """The library's VirtualMachine there; Unreachable where no session or upload could
        be had, the server's own error where the build fails to load."""
        if library not in self._loaded:
            self._loaded[library] = self._upload(library)
        return self._loaded[library]

    def reset(self) -> None:
        """Drop the session (a build failed on it, and may have taken its server down): the
        next load asks the tracker for a server again."""
        self.close()

    def close(self) -> None:
        for library in self._loaded:
            try:
                self._session.remove(library.name)
            except Exception:  # the server may be gone; nothing of ours is left here
                pass
        self._loaded.clear()
        self._session = None

    def _upload(self, library: Path) -> tuple[Any, Any]:
        from tvm import relax

        if self._session is None:
            self._session = self._request()
        try:
            self._session.upload(str(library), library.name)
            dev = self._session.device(self.device_type, 0)
        except Exception as exc:  # the connection, not the build: nothing of it ran yet
            self._session = None
            raise Unreachable(f"the upload to {self.where} failed: {one_line(exc)}") from exc
        return relax.VirtualMachine(self._session.load_module(library.name), dev), dev

    def _request(self) -> Any:
        """A session on a server lent by the tracker, waited for at most `request_s`."""
        from tvm import rpc

        from tune_orchestrator.measure.rpc import parse_tracker

        if self._gone is not None:
            raise self._gone
        got: dict[str, Any] = {}

        def ask() -> None:
            try:
                host, port = parse_tracker(self.tracker)
                got["session"] = rpc.connect_tracker(host, port).request(
                    self.key, priority=1, session_timeout=int(self.timeout_s)
                )
            except Exception as exc:  # reported below, in one line
                got["error"] = exc

        asker = threading.Thread(target=ask, name="fleet-check", daemon=True)
        asker.start()
        asker.join(self.request_s)
        if "session" in got:
            return got["session"]
        why = (
            one_line(got["error"])
            if "error" in got
            else f"the tracker lent no server under key {self.key!r} within {self.request_s:g} s"
        )
        self._gone = Unreachable(f"{self.tracker}: {why}")
        raise self._gone


def check_on(
    device: LocalDevice | FleetDevice, library: Path, checker: Checker, label: str
) -> Check:
    """Run `library` on `device` over the check's samples and compare with onnxruntime. A build
    that fails when run fails its check (a result, not the end of the run); on a fleet it is
    tried once more on a new session first, so that a lost connection is not blamed on it."""
    failures: list[str] = []
    for _ in range(2 if device.remote else 1):
        try:
            outputs = checker.outputs(*device.load(library))
        except Unreachable as exc:
            return checker.verdict(UNCHECKED, _unreachable(label, exc, failures))
        except Exception as exc:  # the build's own failure, or its server's
            failures.append(one_line(exc))
            device.reset()
            continue
        return checker.compare(outputs)
    if device.remote:
        why = (
            f"the {label} build failed on the RPC fleet twice, the second time on a new "
            f"session: it crashed its server or raised there ({failures[-1]})"
        )
    else:
        why = f"the {label} build failed when run on {device.where} ({failures[-1]})"
    return checker.verdict(FAILED, why)


def _unreachable(label: str, exc: Unreachable, failures: list[str]) -> str:
    if not failures:
        return f"the RPC fleet is unreachable ({exc})"
    return (
        f"the RPC fleet became unreachable after the {label} build failed on its server "
        f"({failures[0]}), so the build may have crashed it; then: {exc}"
    )


def runs_model(target: Any, fleet: Any) -> bool:
    """Whether something runs the model at the end: the target's device here, or the fleet's."""
    return target.device_present or (fleet is not None and bool(fleet.rpc) and not target.simulated)


def for_run(target: Any, fleet: Any, *, timeout_s: float) -> LocalDevice | FleetDevice | None:
    """Where the end of the run runs the model: the target's device on this host, else a
    server of the run's RPC fleet, else None (nothing can: --build-only without the GPU,
    --simulate)."""
    if target.device_present:
        return LocalDevice(target.device_type)
    if runs_model(target, fleet):
        return FleetDevice(
            tracker=fleet.rpc,
            key=fleet.rpc_key or "",
            device_type=target.device_type,
            timeout_s=timeout_s,
        )
    return None
