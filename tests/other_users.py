"""Other users on this host, for tests of what several users share: a forked child drops to
another uid (possible as root, as CI runs), runs a function and sends back its result or the
exception it raised."""

from __future__ import annotations

import functools
import multiprocessing
import os
from collections.abc import Callable
from typing import Any

# Two unprivileged users; 65534 is `nobody` on most systems, the other need not exist.
ALICE, BOB = 65534, 65533
TEAM = 4242  # a group both may be members of (it need not exist either)


def _become(uid: int, groups: tuple[int, ...]) -> None:
    os.setgroups(list(groups))
    os.setgid(uid)
    os.setuid(uid)


def _child(
    uid: int, groups: tuple[int, ...], umask: int, results: Any, fn: Callable[..., Any], args: tuple
) -> None:
    try:
        _become(uid, groups)
        os.umask(umask)
        results.put(("ok", fn(*args)))
    except BaseException as exc:  # sent back to the test, which raises it
        results.put(("raised", exc))


class AsUser:
    """`fn(*args)` running in a child process as `uid`, a member of `groups`, with `umask`;
    result() waits for it."""

    def __init__(
        self,
        uid: int,
        fn: Callable[..., Any],
        *args: Any,
        umask: int = 0o022,
        groups: tuple[int, ...] = (),
    ):
        ctx = multiprocessing.get_context("fork")
        self._results = ctx.Queue()
        child_args = (uid, groups, umask, self._results, fn, args)
        self._proc = ctx.Process(target=_child, args=child_args)
        self._proc.start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def result(self, timeout_s: float = 60.0) -> Any:
        kind, value = self._results.get(timeout=timeout_s)
        self._proc.join(timeout_s)
        if kind == "raised":
            raise value
        return value


def as_user(
    uid: int, fn: Callable[..., Any], *args: Any, umask: int = 0o022, groups: tuple[int, ...] = ()
) -> Any:
    """Run `fn(*args)` as `uid` and return what it returns (or raise what it raised)."""
    return AsUser(uid, fn, *args, umask=umask, groups=groups).result()


@functools.cache
def can_switch_users() -> bool:
    """Whether this process may run code as another user (root with CAP_SETUID/SETGID)."""
    if os.geteuid() != 0:
        return False
    try:
        return as_user(ALICE, os.geteuid) == ALICE
    except OSError:
        return False


def events(count: int) -> list[Any]:
    """Events the test and the children it forks can set and wait for."""
    ctx = multiprocessing.get_context("fork")
    return [ctx.Event() for _ in range(count)]
