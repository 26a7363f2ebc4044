"""The tuning library: per target, a stock MetaSchedule database that every real run adds
its records to (files.py), what a run asks of it (records.py), and how a run uses it: exact
reuse before the first round, the cost model started on it, records added at the end (run.py).

For transfer-tuning, `LibraryView.others(workload)` gives the best records of every other
workload the library holds: the traces to replay on a task it has no exact match for.
"""

from .files import Contents, Library, default_root, target_key, trace_key
from .records import LibraryView, Match, plateaued
from .run import RunLibrary

__all__ = [
    "Contents",
    "Library",
    "LibraryView",
    "Match",
    "RunLibrary",
    "default_root",
    "plateaued",
    "target_key",
    "trace_key",
]
