"""The features of library records, kept beside the library (`features.npz`), so that
starting the cost model on a library costs a run its fit, not reading each record's trace
into TVM and extracting its features again (~15 ms a record on the 2-core VM: a 2-minute run
trained on ~350 of a 650-record library within its 5% share of the clock).

It is a cache. An entry is a record's MetaSchedule per-store features and its workload's
key, under a digest of the record's workload line and trace. Entries come from a run that
read a record to train on it (run.py: RunLibrary.train), and from a run that measured it
(what its cost model learned, kept in its run directory: rundir/learned.py; added with its
records). A file that is missing,
unreadable, or written for another TVM, tune-orchestrator, feature width or target reads as
empty and is written again. Entries of records the library no longer holds go when a run
that read records writes it. Writers take the library's lock and merge with the file as they
find it; readers take none (the file is replaced whole).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import zipfile
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..rundir.atomic import write_atomic
from .files import trace_key

FEATURES = "features.npz"


def shelf_tag(target: Any) -> str:
    """What the features depend on beyond the record: TVM's version and feature width, this
    package's version (its rules for which records are trusted), the target."""
    import tvm

    from tune_orchestrator import __version__
    from tune_orchestrator.predictor import feature_width

    parts = [tvm.__version__, str(feature_width()), __version__, str(target)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


class RecordNames:
    """Records' names in the cache, for the workload lines of one database (as its file holds
    them, a list that may grow): a digest of a record's workload line and its trace. The run's
    database and the library name records with this one scheme, so that what a run kept of a
    record (rundir/learned.py) finds it in the library. Each line is hashed once: a module is
    tens of kB, a trace a few."""

    def __init__(self, workloads: Sequence[Any]) -> None:
        self.workloads = workloads
        self._lines: dict[int, Any] = {}  # workload line -> its hash so far

    def __call__(self, line: int, record: Any) -> str:
        """The name of `record` (JSON, as the file holds it) of workload line `line`."""
        if line not in self._lines:
            text = json.dumps(self.workloads[line], separators=(",", ":")) + "\n"
            self._lines[line] = hashlib.sha256(text.encode())
        named = self._lines[line].copy()
        named.update(trace_key(record).encode())
        return named.hexdigest()[:32]


class FeatureShelf:
    """The cache as read once (`entries`), and what a run adds to it (`put`)."""

    def __init__(self, path: Path, tag: str) -> None:
        self.path = path
        self.tag = tag
        self.new: dict[str, tuple[str, np.ndarray]] = {}

    @functools.cached_property
    def entries(self) -> dict[str, tuple[str, np.ndarray]]:
        """The file's entries, read when first asked for (`write` reads the file anew)."""
        return _read(self.path, self.tag)

    def __contains__(self, digest: str) -> bool:
        return digest in self.entries

    def get(self, digest: str) -> tuple[str, np.ndarray]:
        """A record's workload key (task_key) and features."""
        return self.entries[digest]

    def put(self, digest: str, key: str, features: np.ndarray) -> None:
        self.entries[digest] = self.new[digest] = (key, features)

    def write(self, keep: Collection[str] | None = None) -> None:
        """Add the new entries to the file as it is now, less those whose digest is not in
        `keep` (the library's records; None: keep all); the caller holds the library's lock.
        Nothing is written where nothing was added."""
        if not self.new:
            return
        for stale in self.path.parent.glob(f".{FEATURES}.*"):  # a writer killed before its rename
            stale.unlink(missing_ok=True)
        merged = {**_read(self.path, self.tag), **self.new}
        kept = {d: entry for d, entry in merged.items() if keep is None or d in keep}
        write_atomic(self.path, _npz(self.tag, kept))
        self.new = {}


def _npz(tag: str, entries: dict[str, tuple[str, np.ndarray]]) -> bytes:
    matrices = [features for _, features in entries.values()]
    width = matrices[0].shape[1] if matrices else 0
    buffer = io.BytesIO()
    np.savez(
        buffer,
        tag=np.array(tag),
        digests=np.array(list(entries), dtype=str),
        keys=np.array([key for key, _ in entries.values()], dtype=str),
        offsets=np.cumsum([0] + [len(m) for m in matrices], dtype=np.int64),
        rows=np.concatenate(matrices) if matrices else np.zeros((0, width), np.float32),
    )
    return buffer.getvalue()


def _read(path: Path, tag: str) -> dict[str, tuple[str, np.ndarray]]:
    """The file's entries; none where it is missing, of another tag, or not such a file."""
    try:
        with np.load(path, allow_pickle=False) as data:
            if data["tag"].ndim != 0 or str(data["tag"]) != tag:
                return {}
            return dict(_entries(data["digests"], data["keys"], data["offsets"], data["rows"]))
    except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile):
        return {}


def _entries(
    digests: np.ndarray, keys: np.ndarray, offsets: np.ndarray, rows: np.ndarray
) -> Iterator[tuple[str, tuple[str, np.ndarray]]]:
    count = len(digests)
    ok = rows.ndim == 2 and rows.dtype == np.float32 and len(keys) == count
    ok = ok and offsets.shape == (count + 1,) and offsets[0] == 0 and offsets[-1] == len(rows)
    if not ok or (count and np.diff(offsets).min() < 1):
        raise ValueError("not a features file")
    for i in range(count):
        yield str(digests[i]), (str(keys[i]), rows[offsets[i] : offsets[i + 1]])
