"""What a run asks of the library, as TVM objects: the match of a task (its fastest records,
how many trials the library holds of it, whether they reached a plateau), records to train the
cost model on, and the best records of other workloads (what transfer-tuning replays).

Only what a question needs is turned into TVM objects: a workload's module and a record's
trace are parsed when first asked for, so a large library costs a run little. A record that
cannot be used (no run times, another target's, one TVM cannot read, a trace no schedule rule
makes: search/trusted.py) is left out when first met and counted in the run's Skipped tally.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Collection, Sequence
from typing import Any

from ..model.tasks import database_key
from ..run.skipped import Skipped
from ..search.transfer import one_line
from ..search.trusted import untrusted
from .features import RecordNames
from .files import Contents, mean_s, run_secs


def plateaued(
    latencies: Sequence[float], *, min_trials: int, share: float, min_gain: float
) -> bool:
    """Whether trials of a task, in the order they were measured, reached a plateau: there
    are `min_trials` or more, and none of the last `share` of them beat the best before
    them by `min_gain` (relative) or more."""
    if len(latencies) < min_trials:
        return False
    cut = len(latencies) - max(1, math.ceil(share * len(latencies)))
    before, after = min(latencies[:cut], default=math.inf), min(latencies[cut:])
    return math.isfinite(before) and after > before * (1.0 - min_gain)


@dataclasses.dataclass(frozen=True)
class Match:
    """A task's workload as the library knows it."""

    key: str  # the workload's structural hash, as the library's workload line holds it
    records: list[Any]  # its fastest records that ran (TuningRecords), fastest first
    trials: int  # records the library holds of it, failures included
    best_s: float | None  # the fastest of them, as measured when it was added
    plateau: bool


class LibraryView:
    """Questions about one read of a library (files.Contents) for a run on `target`; what
    cannot be used is counted in `skipped` under `kind` (a library's records, or a
    --warm-start run directory's), traces that must not be replayed under unsafe_traces."""

    def __init__(
        self,
        contents: Contents,
        *,
        target: Any,
        skipped: Skipped | None = None,
        kind: str = "library_records",
    ) -> None:
        self.contents = contents
        self.target = target
        self.skipped = skipped if skipped is not None else Skipped()
        self.kind = kind
        self._left_out: set[int] = set()  # positions of records counted as skipped
        self._digests: dict[int, str] = {}  # position -> the record's name (features.py)
        self._names = RecordNames(contents.workloads)
        if contents.broken:
            self.skipped.add(
                kind, f"{contents.broken} lines that are not JSON records (a torn write?)",
                contents.broken,
            )  # fmt: skip
        # workload key -> positions of its records in `contents.records`, in measured order
        self.by_workload: dict[str, list[int]] = {}
        for position, (line, _) in enumerate(contents.records):
            key = contents.workloads[line][0]
            self.by_workload.setdefault(key, []).append(position)
        self._lines = {w[0]: i for i, w in enumerate(contents.workloads) if w is not None}
        self._parsed: dict[str, Any] = {}

    @property
    def records(self) -> int:
        return len(self.contents.records)

    def match(
        self, mod: Any, *, top: int, min_trials: int, share: float, min_gain: float
    ) -> Match | None:
        """The library's knowledge of workload `mod`; None when it holds no record of it."""
        key = database_key(mod)
        positions = self.by_workload.get(key)
        if not positions or not self._same(key, mod):
            return None
        latencies = [mean_s(self.contents.records[p][1]) for p in positions]
        ran = [p for p, secs in zip(positions, latencies, strict=True) if secs < math.inf]
        ran.sort(key=lambda p: mean_s(self.contents.records[p][1]))
        best = min(latencies)
        return Match(
            key=key,
            records=self._parse(ran, top),
            trials=len(positions),
            best_s=best if math.isfinite(best) else None,
            plateau=plateaued(latencies, min_trials=min_trials, share=share, min_gain=min_gain),
        )

    def training(self, limit: int, first: Collection[str] = ()) -> list[int]:
        """Positions of at most `limit` records to train the cost model on: the workloads in
        `first` (this model's), then the others, the most recently added first; each
        workload's share spread evenly over its range of latencies, fastest and slowest
        included. Ordered so that any prefix is such a choice too (the workloads in turn,
        each coarse to fine over its latencies): training may stop early."""
        if limit <= 0 or not self.by_workload:
            return []
        order = sorted(self.by_workload, key=lambda k: (k not in first, -self.by_workload[k][-1]))
        share = max(16, math.ceil(limit / len(order)))
        picks: list[list[int]] = []
        left = limit
        for key in order:
            ranked = sorted(
                self.by_workload[key], key=lambda p: mean_s(self.contents.records[p][1])
            )
            take = min(share, len(ranked), left)
            if take <= 0:
                break
            step = (len(ranked) - 1) / max(1, take - 1)
            picks.append(coarse_to_fine([ranked[round(i * step)] for i in range(take)]))
            left -= take
        return [p for turn in itertools.zip_longest(*picks) for p in turn if p is not None]

    def parse(self, positions: Sequence[int]) -> list[Any]:
        """TuningRecords of the records at `positions` (those TVM can read)."""
        return self._parse(positions, len(positions))

    def parsed(self, positions: Sequence[int]) -> list[tuple[int, Any]]:
        """(position, TuningRecord) of the records at `positions` that TVM can read."""
        return self._pairs(positions, len(positions))

    def digest(self, position: int) -> str:
        """The name of the record at `position` in the library's features cache."""
        if position not in self._digests:
            line, record = self.contents.records[position]
            self._digests[position] = self._names(line, record)
        return self._digests[position]

    def latency(self, position: int) -> float | None:
        """The mean run time (inf: failed) of the record at `position`, read without TVM;
        None (counted) where the record is of no use to this run (_unusable)."""
        line, record = self.contents.records[position]
        why = _unusable(record, str(self.target.kind.name))
        if why is not None:
            self._leave_out([position], f"a record of workload {line}: {why}")
            return None
        return mean_s(record)

    def keys(self) -> list[str]:
        """The library's workload keys, the most recently added first."""
        return sorted(self.by_workload, key=lambda k: -self.by_workload[k][-1])

    def best(self, key: str, most: int) -> list[Any]:
        """The fastest `most` records that ran of the library's workload `key`."""
        positions = self.by_workload.get(key, [])
        ran = [p for p in positions if mean_s(self.contents.records[p][1]) < math.inf]
        ran.sort(key=lambda p: mean_s(self.contents.records[p][1]))
        return self._parse(ran, most)

    def others(self, mod: Any, per_workload: int = 4) -> list[Any]:
        """For transfer-tuning: the fastest `per_workload` records that ran of every library
        workload but `mod`'s, workload by workload, the most recently added first. Each
        record's `workload.mod` is the PrimFunc its trace was tuned on."""
        found = []
        for key in self.keys():
            if self.workload(key) is not None and not self._same(key, mod):
                found += self.best(key, per_workload)
        return found

    def workload(self, key: str) -> Any | None:
        """The library's Workload of this key (parsed once); None when TVM cannot read it."""
        if key not in self._parsed:
            from tvm.s_tir.meta_schedule.database import Workload

            try:
                self._parsed[key] = Workload.from_json(self.contents.workloads[self._lines[key]])
            except Exception as error:  # written by another TVM version, say
                self._parsed[key] = None
                why = f"workload {key}: this TVM cannot read it ({one_line(error)})"
                self._leave_out(self.by_workload.get(key, []), why)
        return self._parsed[key]

    def _same(self, key: str, mod: Any) -> bool:
        """Whether the library's workload of `key` is `mod` (hashes can collide)."""
        import tvm_ffi

        workload = self.workload(key)
        return workload is not None and bool(tvm_ffi.structural_equal(workload.mod, mod))

    def _parse(self, positions: Sequence[int], most: int) -> list[Any]:
        return [record for _, record in self._pairs(positions, most)]

    def _pairs(self, positions: Sequence[int], most: int) -> list[tuple[int, Any]]:
        """(position, TuningRecord) of the records at `positions`, at most `most`; one that
        cannot be used is left out (and counted once)."""
        out = []
        for position in positions:
            if len(out) >= most:
                break
            if position not in self._left_out:
                record = self._record(position)
                if record is not None:
                    out.append((position, record))
        return out

    def _record(self, position: int) -> Any | None:
        """The TuningRecord at `position`, or None (counted) where it has no run times, was
        tuned for another kind of target, cannot be read or must not be replayed."""
        from tvm.s_tir.meta_schedule.database import TuningRecord

        line, record = self.contents.records[position]
        workload = self.workload(self.contents.workloads[line][0])
        if workload is None:  # counted with its workload
            return None
        why = _unusable(record, str(self.target.kind.name))
        if why is None:
            try:
                parsed = TuningRecord.from_json(record, workload)
            except Exception as error:  # written by another TVM version, say
                why = f"this TVM cannot read it ({one_line(error)})"
        if why is not None:
            self._leave_out([position], f"a record of workload {line}: {why}")
            return None
        unsafe = untrusted(parsed.trace, self.target)
        if unsafe is not None:
            self._leave_out([position], f"a record of workload {line} holds {unsafe}", unsafe=True)
            return None
        return parsed

    def _leave_out(self, positions: Sequence[int], why: str, *, unsafe: bool = False) -> None:
        new = [p for p in positions if p not in self._left_out]
        self._left_out.update(new)
        self.skipped.add("unsafe_traces" if unsafe else self.kind, why, len(new))


def _unusable(record: Any, kind: str) -> str | None:
    """Why a record (JSON) is of no use to a run on a `kind` target before TVM reads it: no
    run times (TVM accepts [] and null), or another kind of target."""
    secs = record[1] if isinstance(record, list) and len(record) > 1 else None
    if not isinstance(secs, list) or not secs:
        return f"no run times ({json.dumps(secs)})"
    if run_secs(record) is None:
        return "run times that are not positive, finite numbers"
    theirs = record[2] if len(record) > 2 else None
    if isinstance(theirs, dict) and theirs.get("kind") not in (None, kind):
        return f"tuned for a {theirs.get('kind')} target, not {kind}"
    return None


def coarse_to_fine(items: Sequence[Any]) -> list[Any]:
    """`items` reordered so that every prefix spans them: the first and the last, then the
    middle, then the middles of each half, and so on."""
    if len(items) <= 2:
        return list(items)
    order, spans = [0, len(items) - 1], [(0, len(items) - 1)]
    while spans:
        halves = []
        for low, high in spans:
            if high - low > 1:
                middle = (low + high) // 2
                order.append(middle)
                halves += [(low, middle), (middle, high)]
        spans = halves
    return [items[i] for i in order]
