"""What a run learned from each candidate it measured, kept beside its database
(`learned.jsonl`): the schedule's structural key and the features its cost model learned, under
the record's digest (library/features.py). A resumed run then reads its records back without
replaying their traces in TVM or extracting their features again (9 ms and ~3 ms a record on
the example model's convolutions: 16.6 s for 1,414 records), and replays only the schedules its
searches start from.

One line per candidate, appended after each round is learned: a crash loses at most the round
being learned (its records are replayed as before). It is a cache: a line that is torn, garbled
or written for another TVM, tune-orchestrator, feature width or target is read as absent.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from . import faults
from .atomic import open_append

# A line's features unpacked are at most this many bytes (a candidate has a few to a few
# hundred stores, 164 floats each): a line that unpacks to more is read as absent.
_MOST_BYTES = 1 << 22


@dataclasses.dataclass(frozen=True)
class Learned:
    """A measured candidate as the run learned it: its schedule's structural key, its task's
    key (model/tasks.py: task_key), and its per-store features (None where its build failed:
    the cost model learned nothing of it)."""

    key: int
    task: str
    features: np.ndarray | None


class LearnedFile:
    """learned.jsonl of a run directory, for the target whose features it holds (`tag`:
    library/features.py: shelf_tag), which are `width` wide (a line's own claim is checked:
    the file is input)."""

    def __init__(self, path: Path, tag: str, width: int) -> None:
        self.path = path
        self.tag = tag
        self.width = width

    @classmethod
    def for_target(cls, path: Path, target: Any) -> LearnedFile:
        """The file at `path` as a run for `target` with this TVM writes and reads it."""
        from ..library.features import shelf_tag
        from ..predictor import feature_width

        return cls(path, shelf_tag(target), feature_width())

    def append(self, learned: Iterable[tuple[str, Learned]]) -> None:
        """Add (digest, Learned) lines; not forced to disk (the database's lines are not
        either: a cache behind them)."""
        lines = [self._line(digest, entry) for digest, entry in learned]
        if not lines:
            return
        data = "".join(lines).encode()
        faults.before("learned", self.path, data, append=True)
        with open_append(self.path) as fh:
            if fh.tell() and not _ends_line(self.path):  # a line a crash tore: end it
                fh.write(b"\n")
            fh.write(data)
        faults.after("learned")

    def read(self) -> dict[str, Learned]:
        """Every line's entry by digest (the last line of a digest wins); none where the file
        is missing or unreadable."""
        try:
            raw = self.path.read_bytes()
        except OSError:
            return {}
        found: dict[str, Learned] = {}
        for text in raw.splitlines():
            entry = self._parse(text)
            if entry is not None:
                found[entry[0]] = entry[1]
        return found

    def _line(self, digest: str, entry: Learned) -> str:
        line: dict[str, Any] = {
            "tag": self.tag,
            "digest": digest,
            "key": f"{entry.key:x}",
            "task": entry.task,
        }
        if entry.features is not None:
            rows = np.ascontiguousarray(entry.features, dtype=np.float32)
            line["width"] = rows.shape[1]
            line["features"] = base64.b64encode(zlib.compress(rows.tobytes(), 1)).decode()
        return json.dumps(line, separators=(",", ":")) + "\n"

    def _parse(self, text: bytes) -> tuple[str, Learned] | None:
        try:
            line = json.loads(text)
            if line["tag"] != self.tag:
                return None
            features = None
            if "features" in line:
                unpack = zlib.decompressobj()
                packed = unpack.decompress(base64.b64decode(line["features"]), _MOST_BYTES)
                if unpack.unconsumed_tail:  # more than a candidate's features can be
                    return None
                features = np.frombuffer(packed, np.float32).reshape(-1, self.width)
                if line["width"] != self.width or not len(features):
                    return None
            return str(line["digest"]), Learned(int(line["key"], 16), str(line["task"]), features)
        except (ValueError, KeyError, TypeError, zlib.error):  # torn, garbled, foreign: absent
            return None


def _ends_line(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, 2)
        return fh.read(1) == b"\n"
