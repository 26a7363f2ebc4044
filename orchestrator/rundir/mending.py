"""Mending the journal on open, before anything is appended to it.

A kill in the middle of an append leaves a torn last line; the next append would glue its entry
to those bytes and make one corrupt line in the middle of the file. So a torn tail is cut off
(its bytes kept in logs/repairs.log) and a whole last line without its newline is ended. A line
that is torn bytes followed by a whole entry (as appends after a torn tail made them before
journals were mended) gives back its entry. Anything else broken is left for the reader, which
refuses it with one line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .atomic import open_append, write_atomic

ENTRY_START = b'{"v":'


def mend_journal(path: Path, logs: Path) -> list[str]:
    """Mend the journal at `path`; what was mended, for the run's warnings."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with its newline
    kept, repairs, cut = [], [], []
    for number, line in enumerate(lines, start=1):
        entry = _entry(line)
        if entry is not None and entry != line:
            cut.append(line[: len(line) - len(entry)])
            repairs.append(f"took the entry out of torn bytes at line {number} of {path.name}")
        kept.append(line if entry is None else entry)
    if tail.strip():
        if parses(tail):
            kept.append(tail)
            repairs.append(f"ended the last line of {path.name}")
        else:
            cut.append(tail)
            repairs.append(f"cut a torn last line ({len(tail)} bytes) from {path.name}")
    if not repairs:
        return []
    if cut:
        logs.mkdir(exist_ok=True)
        with open_append(logs / "repairs.log") as fh:
            for piece in cut:
                fh.write(b"torn bytes of " + path.name.encode() + b": " + piece + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
    write_atomic(path, b"".join(line + b"\n" for line in kept))
    return repairs


def _entry(line: bytes) -> bytes | None:
    """The line, or the whole entry at its end when torn bytes precede it; None when neither
    parses (an empty line, or damage this cannot mend)."""
    if not line.strip() or parses(line):
        return line if line.strip() else None
    start = line.rfind(ENTRY_START)
    if start > 0 and parses(line[start:]):
        return line[start:]
    return None


def parses(line: bytes) -> bool:
    """Whether a line is whole JSON (a torn write is not)."""
    try:
        json.loads(line)
    except ValueError:
        return False
    return True
