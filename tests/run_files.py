"""Reading a run directory in tests: its journal, and what its files hold."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def journal(run: Path) -> list[dict]:
    """The run's journal lines, parsed."""
    return [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file's hash, except the run directory's lock (it holds the last owner's pid)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }
