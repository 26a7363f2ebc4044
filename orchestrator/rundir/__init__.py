"""The run directory: its files, one owner and an append-only journal (directory.py), surviving
kill -9 (durability.py), and resuming from what it holds (restore.py)."""

from .directory import JOURNAL_VERSION, RunDir, RunInUse

__all__ = ["JOURNAL_VERSION", "RunDir", "RunInUse"]
