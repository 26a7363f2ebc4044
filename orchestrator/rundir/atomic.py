"""Whole-file writes a crash cannot tear: a temporary file beside the target, its bytes forced to
disk, renamed over the target, and the folder's entry forced to disk after the rename.

Each write names its crash point (faults.py), so that the crash tests can end the process in
the middle of it or right after it. And what says a user may not write somewhere at all.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import BinaryIO

from ..errors import InputError
from . import faults

# The errnos of opening for writing what this user may only read: another user's file or
# folder, a read-only mount.
NOT_WRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def write_atomic(path: Path, data: bytes, *, point: str | None = None, mode: int = 0o644) -> Path:
    """Replace `path` with `data`: a reader sees the old or the new file, never a mix."""
    if point is not None:
        faults.before(point, path, data, append=False)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)  # mkstemp's 0600 would hide the file from other users
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    sync_dir(path.parent)
    if point is not None:
        faults.after(point)
    return path


def install(tmp: Path, path: Path, *, point: str | None = None) -> Path:
    """Move a finished file that another writer made (a compiler, xgboost) over `path`,
    its bytes forced to disk first."""
    if point is not None:
        faults.before(point, append=False)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    sync_dir(path.parent)
    if point is not None:
        faults.after(point)
    return path


def open_append(path: Path) -> BinaryIO:
    """`path` opened to append to (made where missing), never through a symbolic link: one
    planted in a run directory a team shares would have this user's run append where it
    points. The run refuses such links as it opens (RunDir); this closes the gap after."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(linked(path)) from None
        raise
    return os.fdopen(fd, "ab")


def linked(path: Path) -> str:
    """The line for a symbolic link among a run directory's files."""
    return (
        f"{path} is a symbolic link (to {os.readlink(path)}); a run writes its files in its own "
        "directory, through no link (one someone else made would have your run write where it "
        "points): replace the link with what it points to, or give another --out"
    )


def sync_dir(folder: Path) -> None:
    """Force a folder's entries (a rename, a new file) to disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def on_read_only_disk(path: Path) -> bool:
    """Whether `path` (which exists) is on a file system mounted read-only."""
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def link_to_nothing(path: Path) -> str | None:
    """Where `path` or a folder above it is a symbolic link to nothing (a disk not mounted, a
    scratch folder cleaned: making the folder fails with "File exists"), that in words."""
    path = path.absolute()
    for link in (path, *path.parents):
        if link.is_symlink() and not link.exists():
            return (
                f"{link} is a symbolic link to {os.readlink(link)}, which does not exist (a disk "
                "not mounted?)"
            )
    return None
