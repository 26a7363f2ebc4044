"""What a run passed over: records and files it read that were broken, foreign or unsafe.

Files on disk are input: a tuning library, a parked proposal, a record of an earlier session or
a saved predictor may be torn, from another TVM version or target, or written by someone else.
A run skips what it cannot use and goes on; the report counts each kind (`skipped`), and the
first reason of each kind is one warning.
"""

from __future__ import annotations

from collections.abc import Callable

# The kinds a report counts, with what each counts.
KINDS = {
    "library_records": "tuning-library records that could not be read, replayed or trusted",
    "library_files": "tuning-library files that could not be read",
    "run_records": "records of earlier sessions that no longer replay",
    "waiting": "parked proposals (waiting.jsonl) that could not be read or replayed",
    "warm_start": "--warm-start sources that could not be used",
    "warm_start_records": "records of a --warm-start run directory that could not be read, "
    "replayed or trusted",
    "prior": "the prior shipped with the package, where it could not be loaded (another TVM's "
    "features)",
    "filter_state": "saved filter state (filter.json) that could not be read",
    "unsafe_traces": "replayed schedules with instructions or annotations no schedule rule emits",
    "lock_files": "lock files shared with other users' runs (device claims, GPU timed windows) "
    "that were not safe to use",
}


class Skipped:
    """Counts by kind; `warn` hears the first reason of each kind."""

    def __init__(self, warn: Callable[[str], None] | None = None) -> None:
        self._warn = warn
        self._counts: dict[str, int] = {}
        self._first: dict[str, str] = {}  # kind -> its first reason

    def listen(self, warn: Callable[[str], None]) -> None:
        """Send warnings to `warn` from now on, the first reason of each kind counted before
        at once: what was read before the session (a filter's saved state) is told too."""
        self._warn = warn
        for kind, why in self._first.items():
            warn(_message(kind, why))

    def add(self, kind: str, why: str, count: int = 1) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)} but got {kind!r}.")
        if count <= 0:
            return
        if kind in self._counts:
            self._counts[kind] += count
            return
        self._counts[kind] = count
        self._first[kind] = why
        if self._warn is not None:
            self._warn(_message(kind, why))

    def count(self, kind: str) -> int:
        return self._counts.get(kind, 0)

    def to_dict(self) -> dict[str, int]:
        return dict(sorted(self._counts.items()))


def _message(kind: str, why: str) -> str:
    return f"skipped {KINDS[kind]}: {why}"


def reason(error: BaseException) -> str:
    """An error as the reason a file was skipped: its first non-empty line (xgboost's and
    json's put what went wrong there; TVM's last, see search.transfer.one_line)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
