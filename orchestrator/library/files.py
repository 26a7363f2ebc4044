"""The tuning library's files: one stock MetaSchedule database per target, shared by runs.

`<root>/<target-key>/` holds `database_workload.json` and `database_tuning_record.json`, as
TVM's JSONDatabase names them, so `JSONDatabase(work_dir=...)` and `compile_relax` read it as
it is. A record line names its workload by the workload's line number, so no writer appends
in place: under an exclusive flock a writer re-reads both files (a torn or broken line is
skipped), merges its records, and replaces each file whole (temp file, fsync, rename), the
workload file first. Workloads only join at the end, so a reader that opens the pair between
the two renames (stock TVM takes no lock) still finds each record's workload at its line.
Readers take a shared flock, so they always see a pair one writer left.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import math
import os
import re
import tempfile
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..collector import parsing
from ..rundir import faults
from ..rundir.atomic import NOT_WRITABLE, on_read_only_disk, sync_dir

# Told where a reader or writer has waited WAITING_SAID_AFTER_S for the library's lock: another
# process holds it (a run writing it takes a fraction of a second; one stopped with Ctrl-Z as it
# wrote holds it until it goes on).
Waiting = Callable[[], None] | None
WAITING_SAID_AFTER_S = 3.0

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
LOCK = ".lock"


def default_root(env: Mapping[str, str] = os.environ) -> Path:
    """Where libraries live unless --library says: $XDG_CACHE_HOME (when absolute, as the XDG
    spec asks) or ~/.cache, then tune-orchestrator/library."""
    cache = env.get("XDG_CACHE_HOME", "")
    base = Path(cache) if os.path.isabs(cache) else Path.home() / ".cache"
    return base / "tune-orchestrator" / "library"


def target_key(target: Any) -> str:
    """A readable, filesystem-safe name for a resolved target (targets.ResolvedTarget): kind,
    arch and GPU on CUDA, mcpu and cores on CPUs, then a digest of those, so that two names
    that read alike after cleaning still differ."""
    attrs = target.target.attrs
    if target.device_type == "cuda":
        parts = [target.kind, str(attrs.get("arch") or ""), target.device_name]
    else:
        cores = attrs.get("num-cores")
        parts = [target.kind, str(attrs.get("mcpu") or "generic"), f"{cores or 0}cores"]
    slug = "-".join(re.sub(r"[^a-z0-9_.]+", "-", p.lower()).strip("-.") for p in parts if p)
    digest = hashlib.sha256("|".join(parts).encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def json_lines(data: bytes) -> list[tuple[Any, bytes]]:
    """Each line's JSON value and text (the last, empty line dropped); None where a line does
    not parse, such as a last line torn by a crash. Kept in place, so line numbers stay
    right."""
    lines = data.split(b"\n")
    if lines and not lines[-1].strip():
        lines.pop()
    values = []
    with parsing():
        for line in lines:
            try:
                values.append((json.loads(line), line))
            except (ValueError, RecursionError):  # nested deeper than Python's stack
                values.append((None, line))
    return values


# MetaSchedule's run time of a candidate that failed (kMaxMeanTime).
FAILED_RUN_SECS = 1e10


def run_secs(record: Any) -> list[float] | None:
    """A record's (JSON) run times where they are a list of finite, positive numbers; None
    where it has none, or any is not such a number (a file another tool or a bad disk wrote)."""
    secs = record[1] if isinstance(record, list) and len(record) > 1 else None
    ok = isinstance(secs, list) and bool(secs) and all(_is_time(s) for s in secs)
    return secs if ok else None


def _is_time(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf


def mean_s(record: Any) -> float:
    """Mean run time of a record (JSON); inf for a failure or a record without usable times."""
    secs = run_secs(record)
    if secs is None or any(s >= FAILED_RUN_SECS for s in secs):
        return math.inf
    return sum(secs) / len(secs)


def trace_key(record: Any) -> str:
    """What makes two records of one workload the same schedule: the trace, a record's first
    item, as the files hold it (`record_json` for a TuningRecord)."""
    return json.dumps(record[0], separators=(",", ":"))


def record_json(record: Any) -> list:
    """A TuningRecord as JSON, as TVM writes it to a database file. TVM's `as_json` cannot
    convert a trace that holds an IndexMap (the layout transforms of CUDA schedules do): the
    file holds its JSON graph as a string, indented, and so does this."""
    from tvm.s_tir.meta_schedule import _ffi_api

    return _file_form(_ffi_api.TuningRecordAsJSON(record))


def _file_form(value: Any) -> Any:
    """TVM's JSON objects as a database file holds them (record_json)."""
    import tvm
    from tvm.tirx import FloatImm, IntImm
    from tvm_ffi import Array, Map

    def form(value: Any) -> Any:
        if value is None or isinstance(value, (int, float, str)):
            return int(value) if isinstance(value, bool) else value  # Python's bools as 0/1
        if isinstance(value, IntImm) and str(value.ty) == "bool":
            return bool(value.value)  # and TVM's boolean expressions as false/true
        if isinstance(value, (IntImm, FloatImm)):
            return value.value
        if isinstance(value, Array):
            return [form(v) for v in value]
        if isinstance(value, Map):
            return {form(k): form(v) for k, v in value.items()}
        return json.dumps(json.loads(tvm.ir.save_json(value)), indent=2)

    return form(value)


@dataclasses.dataclass
class Contents:
    """A database's lines as JSON: workloads ([structural hash, module]) in line order, and
    readable records as (workload line, record). `broken` counts the lines skipped; `texts`
    holds each record's line as read (None: new or moved), written back as it is."""

    workloads: list[Any]
    records: list[tuple[int, Any]]
    broken: int = 0
    texts: list[bytes | None] = dataclasses.field(default_factory=list)

    @classmethod
    def parse(cls, workloads: bytes, records: bytes) -> Contents:
        shelf = [w if _is_workload(w) else None for w, _ in json_lines(workloads)]
        rows, texts, broken = [], [], sum(w is None for w in shelf)
        for row, text in json_lines(records):
            ok = isinstance(row, list) and len(row) == 2 and type(row[0]) is int
            ok = ok and isinstance(row[1], list) and len(row[1]) > 0  # a record: [trace, ...]
            if ok and 0 <= row[0] < len(shelf) and shelf[row[0]] is not None:
                rows.append((row[0], row[1]))
                texts.append(text)
            else:
                broken += 1
        return cls(shelf, rows, broken, texts)

    def _texts(self) -> list[bytes | None]:
        """Each record's line as read (None: new or moved), also where no line was kept."""
        return self.texts or [None] * len(self.records)

    def record_lines(self) -> Iterator[bytes]:
        """Each record's line, as read where it did not move."""
        texts = self._texts()
        for (line, record), text in zip(self.records, texts, strict=True):
            yield text if text is not None else json.dumps([line, record]).encode()

    def merged(
        self, workloads: Sequence[Any], records: Sequence[tuple[int, Any]]
    ) -> tuple[Contents, int]:
        """These contents with new records (each naming its workload by index into
        `workloads`) that are not here yet; and how many joined. Broken workload lines are
        dropped (the only case where lines move)."""
        out = self._compacted()
        lines = {w[0]: i for i, w in enumerate(out.workloads)}
        incoming = {lines.get(workloads[i][0]) for i, _ in records}
        # Only the records of the workloads offered can be met again: their keys alone.
        seen = {(out.workloads[i][0], trace_key(r)) for i, r in out.records if i in incoming}
        added = 0
        for index, record in records:
            workload = workloads[index]
            key = (workload[0], trace_key(record))
            if key in seen:
                continue
            if workload[0] not in lines:
                lines[workload[0]] = len(out.workloads)
                out.workloads.append(workload)
            out.records.append((lines[workload[0]], record))
            out.texts.append(None)
            seen.add(key)
            added += 1
        return out, added

    def bounded(self, keep: int) -> tuple[Contents, list[int]]:
        """These contents with at most `keep` records of each workload, and the positions
        (into these records) of those kept: of a workload past it, its `keep // 2` fastest and
        an even spread over the latencies of the rest, slowest included; in file order."""
        by_workload: dict[int, list[int]] = {}
        for position, (line, _) in enumerate(self.records):
            by_workload.setdefault(line, []).append(position)
        kept: set[int] = set()
        for positions in by_workload.values():
            if len(positions) <= keep:
                kept.update(positions)
                continue
            ranked = sorted(positions, key=lambda p: mean_s(self.records[p][1]))
            fast, rest = ranked[: keep // 2], ranked[keep // 2 :]
            take = keep - len(fast)
            step = (len(rest) - 1) / max(1, take - 1)
            kept.update(fast, (rest[round(i * step)] for i in range(take)))
        order = sorted(kept)
        texts = self._texts()
        records = [self.records[p] for p in order]
        return Contents(self.workloads, records, texts=[texts[p] for p in order]), order

    def _compacted(self) -> Contents:
        moved, kept = {}, []
        for line, workload in enumerate(self.workloads):
            if workload is not None:
                moved[line] = len(kept)
                kept.append(workload)
        texts = self._texts()
        return Contents(
            kept,
            [(moved[i], r) for i, r in self.records],
            texts=[
                t if moved[i] == i else None for (i, _), t in zip(self.records, texts, strict=True)
            ],
        )


def _flock(fd: int, how: int, waiting: Waiting) -> None:
    """Take `how` on `fd`, telling `waiting` (from a timer's thread) where that takes long."""
    if waiting is None:
        fcntl.flock(fd, how)
        return
    timer = threading.Timer(WAITING_SAID_AFTER_S, waiting)
    timer.daemon = True
    timer.start()
    try:
        fcntl.flock(fd, how)
    finally:
        timer.cancel()


def _is_workload(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)


@dataclasses.dataclass(frozen=True)
class Library:
    """One target's library folder. `waiting` is told (from a timer's thread) where its lock
    is long in coming (WAITING_SAID_AFTER_S): another process holds it."""

    path: Path
    waiting: Waiting = dataclasses.field(default=None, compare=False, repr=False)

    @classmethod
    def for_target(cls, target: Any, root: Path | None = None) -> Library:
        return cls((root or default_root()) / target_key(target))

    def read(self) -> Contents:
        """Both files, as one writer left them; empty when the library does not exist yet."""
        if not (self.path / WORKLOADS).is_file():
            return Contents([], [])
        with self._locked(fcntl.LOCK_SH):
            return Contents.parse(*self._bytes())

    def add(
        self, workloads: Sequence[Any], records: Sequence[tuple[int, Any]], keep: int = 0
    ) -> int:
        """Merge records (workload index into `workloads`, record JSON) into the library,
        skipping those it holds; with `keep`, each workload is then cut back to that many
        records (Contents.bounded). Returns how many of the records joined and stayed."""
        return self.merge(workloads, records, keep)[1]

    def merge(
        self, workloads: Sequence[Any], records: Sequence[tuple[int, Any]], keep: int = 0
    ) -> tuple[Contents, int]:
        """`add`, returning also the library's contents as it left them."""
        self.path.mkdir(parents=True, exist_ok=True)
        with self._locked(fcntl.LOCK_EX):
            # A temp file here now was left by a writer killed before its rename.
            for stale in self.path.glob(".database_*"):
                stale.unlink(missing_ok=True)
            current = Contents.parse(*self._bytes())
            merged, added = current.merged(workloads, records)
            order = range(len(merged.records))
            if keep:
                merged, order = merged.bounded(keep)
            stayed = sum(p >= len(current.records) for p in order)  # new ones come last
            # Lines written again: records joined or cut, or a torn line mended.
            if added or current.broken or len(order) < len(current.records) + added:
                self._replace(WORKLOADS, (json.dumps(w).encode() for w in merged.workloads))
                self._replace(RECORDS, merged.record_lines())
        return merged, stayed

    def add_files(
        self, workloads: Path, records: Path, skip: Collection[str] = (), keep: int = 0
    ) -> int:
        """Add the records of a JSONDatabase's two files (a run's), in the order they were
        measured, but those whose trace_key is in `skip`; returns how many joined and stayed
        (add)."""
        return self.merge_files(workloads, records, skip, keep)[1]

    def merge_files(
        self, workloads: Path, records: Path, skip: Collection[str] = (), keep: int = 0
    ) -> tuple[Contents, int]:
        """`add_files`, returning also the library's contents as it left them."""
        found = Contents.parse(_read(workloads), _read(records))
        rows = [(i, r) for i, r in found.records if trace_key(r) not in skip]
        return self.merge(found.workloads, rows, keep)

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """The library's lock, held alone: no other writer, and no reader, while it is."""
        return self._locked(fcntl.LOCK_EX)

    def read_only(self) -> str | None:
        """Why this user may read the library but not write it (a read-only disk, another
        user's folder, an image's library); None where it may write (its files are replaced
        whole, so their own modes do not matter)."""
        folder = self.path if self.path.exists() else self.path.parent
        if on_read_only_disk(folder):
            return "it is on a read-only file system"
        if not os.access(folder, os.W_OK):
            return f"{'its folder' if folder == self.path else folder} is not writable by you"
        return None

    @contextlib.contextmanager
    def _locked(self, how: int) -> Iterator[None]:
        fd = self._lock_file(how)
        try:
            if fd is not None:
                _flock(fd, how, self.waiting)
            yield
        finally:
            if fd is not None:
                os.close(fd)  # closing releases the lock

    def _lock_file(self, how: int) -> int | None:
        """The lock file, open to take `how` on it. One this user may not write (another
        user's, in a library folder a team shares) is opened for reading: flock takes either
        lock on it. A reader takes none where no writer made the file yet and it cannot be
        made (as stock TVM reads, without a lock: each file is replaced whole)."""
        path = self.path / LOCK
        try:  # never through a link: one in a shared folder would have this user make a file
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as exc:
            if exc.errno not in NOT_WRITABLE:
                raise
            cannot = exc
        if path.exists():
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        if how == fcntl.LOCK_SH:
            return None
        raise cannot

    def _bytes(self) -> tuple[bytes, bytes]:
        return _read(self.path / WORKLOADS), _read(self.path / RECORDS)

    def _replace(self, name: str, lines: Iterator[bytes]) -> None:
        faults.before("library", append=False)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=self.path)
        try:
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "wb") as fh:
                for line in lines:
                    fh.write(line + b"\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        sync_dir(self.path)  # the rename itself survives a power cut
        faults.after("library")


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.is_file() else b""
