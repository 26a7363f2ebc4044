"""Lock files that every user's runs on this host share: the device claims and the GPUs' timed
windows, in /tmp/tune-orchestrator (the host's /tmp, whatever TMPDIR says: pam_tmpdir gives
each user a TMPDIR of their own, a batch system each job, and runs that look in different
folders do not see each other).

That folder is sticky and world-writable (mode 1777, set explicitly: the umask of whoever made
it does not count). A folder there that is a symlink, not a directory, or writable by others
without the sticky bit is not used, nor is a lock file that is a symlink or not a regular file;
then the user's own folder ($XDG_RUNTIME_DIR, else <TMPDIR>/tune-orchestrator-<uid>, mode 0700)
holds the locks, and the caller hears why. Files are opened with O_NOFOLLOW; one another user
made is opened read-only (flock works on any descriptor), and only a file of one's own with no
other link is ever written.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHARED = "tune-orchestrator"
HOST_TMP = Path("/tmp")  # the shared folder's parent
FILE_MODE = 0o644  # readable by every user: their runs open it read-only to lock it
_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a planted FIFO cannot hang us


class Unusable(OSError):
    """A lock folder or file that is not safe to use; the message says which and why."""


@dataclass(frozen=True, kw_only=True)
class LockFile:
    """An open lock file: `writable` when it is this user's own regular file with no other
    link, the only kind this process writes (a pid) or truncates."""

    path: str
    fd: int
    writable: bool

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> LockFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def lock_folder(names: Sequence[str], *, on_skip: Callable[[str], None] | None = None) -> Path:
    """The folder for lock files `names` (made if missing): the shared one where it and each
    file in it are safe, else this user's own; `on_skip` hears why the shared one was not."""
    try:
        return _usable(HOST_TMP / SHARED, names, mode=0o1777, own=False)
    except OSError as exc:
        why = _reason(exc)
    tmp = Path(tempfile.gettempdir())
    for folder in _own_folders(tmp):
        try:
            found = _usable(folder, names, mode=0o700, own=True)
            break
        except OSError:
            continue
    else:
        found = Path(_last_resort())
        why += f"; {_own_folders(tmp)[-1]} is not safe either"
    if on_skip is not None:
        on_skip(
            f"{why}; this user's lock files are in {found}, where other users' runs do not look"
        )
    return found


def open_lock(path: str | Path) -> LockFile:
    """Open (or create, mode 0644) the lock file at `path` without following a link, read and
    write where this user may, else read-only; Unusable if it or its folder is not safe."""
    path = Path(path)
    folder = _open_folder(path.parent)
    try:
        _check_folder(path.parent, os.fstat(folder))
        fd, mode = _open_in(folder, path)
    finally:
        os.close(folder)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise Unusable(f"{path} is not a regular file")
    writable = mode == os.O_RDWR and info.st_uid == os.geteuid() and info.st_nlink == 1
    return LockFile(path=str(path), fd=fd, writable=writable)


def _open_in(folder: int, path: Path) -> tuple[int, int]:
    """(descriptor, access mode) of `path`'s file, opened relative to its folder's descriptor."""
    for _ in range(3):  # a file removed or made between the tries: try again
        try:
            try:
                return os.open(path.name, _OPEN | os.O_RDWR, dir_fd=folder), os.O_RDWR
            except PermissionError:  # another user's: locking needs no write access
                return os.open(path.name, _OPEN | os.O_RDONLY, dir_fd=folder), os.O_RDONLY
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Unusable(f"{path} is a symbolic link") from None
            raise
        try:
            fd = os.open(
                path.name, _OPEN | os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=folder
            )
        except FileExistsError:
            continue
        os.fchmod(fd, FILE_MODE)
        return fd, os.O_RDWR
    raise Unusable(f"{path} keeps appearing and disappearing")


def _usable(folder: Path, names: Sequence[str], *, mode: int, own: bool) -> Path:
    """`folder`, made or set to `mode` where it is this user's, once every lock file in it
    opens; Unusable (or the OSError met) otherwise."""
    _make_folder(folder, mode=mode, own=own)
    for name in names:
        open_lock(folder / name).close()
    return folder


def _make_folder(path: Path, *, mode: int, own: bool) -> None:
    """Make `path` with `mode` (set on the folder itself, not through the umask) or set the
    one there to it where it is this user's; `own`: it must be. open_lock checks the rest."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    fd = _open_folder(path)
    try:
        info = os.fstat(fd)
        if info.st_uid == os.geteuid():
            if stat.S_IMODE(info.st_mode) != mode:
                os.fchmod(fd, mode)
        elif own:
            raise Unusable(f"{path} belongs to another user")
    finally:
        os.close(fd)


def _open_folder(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Unusable(f"{path} is a symbolic link or not a directory") from None
        raise


def _check_folder(path: Path, info: os.stat_result) -> None:
    """A folder others may write to must be sticky, or they could swap the files in it."""
    writable_by_others = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable_by_others and not info.st_mode & stat.S_ISVTX:
        raise Unusable(f"{path} is writable by other users without the sticky bit")


def _own_folders(tmp: Path) -> list[Path]:
    """Where this user's own lock files may live, in order of preference."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    first = [Path(runtime) / SHARED] if os.path.isabs(runtime) else []
    return [*first, tmp / f"{SHARED}-{os.geteuid()}"]


@functools.cache
def _last_resort() -> str:
    """A folder of this process alone (mkdtemp: mode 0700, a fresh name) when no other is safe."""
    return tempfile.mkdtemp(prefix=f"{SHARED}-")


def _reason(exc: OSError) -> str:
    if isinstance(exc, Unusable):
        return str(exc)
    return f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
