"""Surviving kill -9: database files checked and their torn tails cut on resume, spend
checkpointed while the run works, and other tuning processes on the same device noticed."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tune_orchestrator.budget import Spend
from tune_orchestrator.measure.lockfiles import LockFile, lock_folder, open_lock

from ..errors import InputError
from ..run.skipped import Skipped
from .atomic import open_append, write_atomic
from .directory import RunDir
from .mending import parses

CHECKPOINT = "spend.json"


def repair_database(run: RunDir) -> list[str]:
    """Check both database files line by line. A torn last line (a write cut by a crash) is
    cut off and kept in logs/repairs.log, or just ended if it is whole; any other broken line
    is an InputError. Returns what was repaired, for the journal."""
    repairs: list[str] = []
    workloads = 0
    for name in (RunDir.WORKLOAD_DB, RunDir.RECORD_DB):
        path = run[name]
        if not path.exists():
            continue
        data = path.read_bytes()
        *complete, tail = data.split(b"\n")
        rows = []
        for number, line in enumerate(complete, start=1):
            if line.strip():
                try:
                    rows.append((number, json.loads(line)))
                except ValueError:
                    raise InputError(
                        f"{path} is corrupt at line {number} (not JSON); restore it from a "
                        "backup or start a new run with another --out"
                    ) from None
        if tail.strip() and parses(tail):  # whole, only its newline is missing: keep it
            _append(path, b"\n")
            rows.append((len(complete) + 1, json.loads(tail)))
            repairs.append(f"ended the last line of {name}")
        elif tail.strip():
            _append(
                run[RunDir.LOGS] / "repairs.log",
                b"torn tail of " + name.encode() + b": " + tail + b"\n",
            )
            with open(path, "r+b") as fh:
                fh.truncate(len(data) - len(tail))
                fh.flush()
                os.fsync(fh.fileno())
            repairs.append(f"cut a torn last line ({len(tail)} bytes) from {name}")
        if name == RunDir.WORKLOAD_DB:
            workloads = len(rows)
            continue
        for number, row in rows:
            if not (
                isinstance(row, list)
                and row
                and isinstance(row[0], int)
                and 0 <= row[0] < workloads
            ):
                raise InputError(
                    f"{path} line {number} refers to a workload that {RunDir.WORKLOAD_DB} does "
                    "not have; the run directory is damaged, start a new run with another --out"
                )
    return repairs


def open_database(run: RunDir, skipped: Skipped) -> Any:
    """The run's database. TVM replays every record's trace as it loads the files and fails
    on the first that does not replay (a file edited by hand, or written by another TVM):
    such records are moved to logs/unreplayable.jsonl, counted, and the rest loaded."""
    try:
        return run.database()
    except Exception:  # noqa: BLE001 - TVM raises its own error types for a record it cannot read
        moved = _set_aside_unreplayable(run)
        if not moved:
            raise
    skipped.add(
        "run_records",
        f"{moved} record(s) of {RunDir.RECORD_DB} no longer replay on their workload; "
        "kept in logs/unreplayable.jsonl",
        moved,
    )
    return run.database()


def _set_aside_unreplayable(run: RunDir) -> int:
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    workloads = []
    for line in run[RunDir.WORKLOAD_DB].read_bytes().splitlines():
        try:
            workloads.append(Workload.from_json(json.loads(line)))
        except Exception:  # noqa: BLE001 - a workload TVM cannot read: its records go too
            workloads.append(None)
    keep, aside = [], []
    for line in run[RunDir.RECORD_DB].read_bytes().splitlines():
        try:
            index, record = json.loads(line)
            TuningRecord.from_json(record, workloads[index])
            keep.append(line)
        except Exception:  # noqa: BLE001 - any failure to replay sets the line aside
            aside.append(line)
    if aside:
        _append(run[RunDir.LOGS] / "unreplayable.jsonl", b"".join(a + b"\n" for a in aside))
        write_atomic(run[RunDir.RECORD_DB], b"".join(k + b"\n" for k in keep))
    return len(aside)


def _append(path: Path, data: bytes) -> None:
    with open_append(path) as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def checkpointed_spend(run: RunDir, from_journal: Spend) -> Spend:
    """The later of the journal's last spend and the heartbeat's checkpoint."""
    path = run[CHECKPOINT]
    if not path.exists():
        return from_journal
    try:
        saved = Spend.from_dict(json.loads(path.read_text())["spend"])
    except (ValueError, KeyError, TypeError):
        return from_journal  # a checkpoint is replaced atomically, so this is not ours: ignore
    return saved if saved.wall_s > from_journal.wall_s else from_journal


class Heartbeat:
    """Writes the current spend to spend.json every `interval_s` (atomically), so a run killed
    between journal entries loses at most that much of its spend."""

    def __init__(self, run: RunDir, snapshot: Callable[[], Spend], interval_s: float = 2.0) -> None:
        self._run = run
        self._snapshot = snapshot
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="spend-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.write()

    def write(self) -> None:
        self._run.write_json(CHECKPOINT, {"spend": self._snapshot().to_dict()})

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.write()
            except OSError:  # a full disk must not kill the tuning; the journal still has spend
                pass


def _share(fd: int, tries: int = 50) -> None:
    """A shared lock on `fd`, tried for up to half a second: the holder of a claim locks it
    alone only while it looks, and no one else (another user included) can keep a run from
    starting by holding it."""
    for _ in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except OSError:
            time.sleep(0.01)


class DeviceClaim:
    """An advisory lock per measuring device, shared by every orchestrate process on this host,
    whichever user runs it: a second tuning process on the same device spoils both runs'
    measurements. The lock file holds its holder's pid where the holder may write it;
    `on_skip` hears why the shared lock file could not be used (measure/lockfiles.py).

    A process that finds the device claimed says so on a second file, `.company`, by holding a
    shared lock on it while it runs. The holder looks there every `interval_s` and tells
    `on_joined` once when a later run measures on the device too (`joined`)."""

    def __init__(
        self,
        device: str,
        *,
        on_skip: Callable[[str], None] | None = None,
        on_joined: Callable[[], None] | None = None,
        interval_s: float = 2.0,
    ) -> None:
        stem = f"device-{device.replace('/', '_')}"
        folder = lock_folder([f"{stem}.lock", f"{stem}.company"], on_skip=on_skip)
        self.path = folder / f"{stem}.lock"
        self.shared_with: str | None = None
        self._wrote = False
        self._company: LockFile | None = None
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None
        try:
            self._lock: LockFile | None = open_lock(self.path)
        except OSError as exc:  # made unsafe since lock_folder looked: claim nothing
            self._lock = None
            if on_skip is not None:
                on_skip(f"{exc}; the device is not claimed")
            return
        with contextlib.suppress(OSError):  # without it, only later runs go unnoticed
            self._company = open_lock(folder / f"{stem}.company")
        fd = self._lock.fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.shared_with = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            if self._company is not None:
                _share(self._company.fd)
            return
        if self._lock.writable:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            self._wrote = True
        if on_joined is not None and self._company is not None:
            self._watch = threading.Thread(
                target=self._look, args=(on_joined, interval_s), name="device-company", daemon=True
            )
            self._watch.start()

    def joined(self) -> bool:
        """Whether a later orchestrate process measures on the device now (only the holder of
        the claim can tell; one that shares it knows from `shared_with`)."""
        if self._company is None or self.shared_with is not None:
            return False
        try:
            fcntl.flock(self._company.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(self._company.fd, fcntl.LOCK_UN)
        return False

    def _look(self, on_joined: Callable[[], None], interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            if self.joined():
                on_joined()
                return

    def release(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.join()
            self._watch = None
        if self._lock is not None:
            if self._wrote:  # no pid outlives its claim: the next holder may not be able to write
                os.ftruncate(self._lock.fd, 0)
            self._lock.close()
            self._lock = None
        if self._company is not None:
            self._company.close()
            self._company = None

    def __enter__(self) -> DeviceClaim:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
