"""The parallel engine's figures: candidates per second, how busy the GPUs' timed windows were
over the measure phase, where a candidate's time went by step, and how many were raced."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from ._workers import STEPS, Job, Outcome

# Timed windows a GPU's figures keep before those of earlier measure() calls are folded into
# its held seconds: a two-GPU-hour run measures 10,000-20,000 candidates
# (docs/how-it-works.md, Long runs), each of which would otherwise stay a window.
KEEP_WINDOWS = 4096


def covered(intervals: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] covered by the union of `intervals`."""
    total, reach = 0.0, lo
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, hi)
        if end > start:
            total += end - start
            reach = end
    return total


class Span:
    """Candidates measured at one DOP, between two pacing decisions; it may run over several
    measure() calls, and only time inside them counts."""

    def __init__(self, lanes: int) -> None:
        self.windows: list[list[tuple[float, float]]] = [[] for _ in range(lanes)]
        self.segments: list[tuple[float, float]] = []  # (start, end) of each call's share
        self.cycles: list[float] = []
        self.waits: list[float] = []
        self.timed: list[float] = []
        self._opened: float | None = None

    @property
    def count(self) -> int:
        return len(self.cycles)

    def open(self, now: float) -> None:
        self._opened = now

    @property
    def seconds(self) -> float:
        """Time inside measure() calls so far (closed calls only)."""
        return sum(hi - lo for lo, hi in self.segments)

    def close(self, now: float) -> None:
        if self._opened is not None:
            self.segments.append((self._opened, now))
            self._opened = None

    def add(self, job: Job, outcome: Outcome, now: float) -> None:
        if outcome.window is not None:
            self.windows[job.lane].append(outcome.window)
        wait = outcome.steps.get("wait", 0.0)
        self.cycles.append(max(0.0, now - job.started - wait))
        self.waits.append(wait)
        self.timed.append(outcome.steps.get("timed", 0.0))

    def busy(self) -> float:
        """Share of the span the timed windows were held, mean over GPUs. Each call counts
        from a GPU's first window in it: filling an empty pipeline costs one preparation
        whatever the DOP, so it is no reason to change the DOP."""
        shares = []
        for windows in self.windows:
            held = total = 0.0
            for lo, hi in self.segments:
                first = self._first(windows, lo, hi)
                held += covered(windows, first, hi)
                total += hi - first
            shares.append(held / total if total > 0 else 0.0)
        return statistics.fmean(shares)

    def filling_s(self) -> float:
        """Seconds the span's calls waited for a first timed window, mean over GPUs: worker
        starts and first preparations, which `busy` leaves out."""
        return statistics.fmean(
            sum(self._first(windows, lo, hi) - lo for lo, hi in self.segments)
            for windows in self.windows
        )

    @staticmethod
    def _first(windows: list[tuple[float, float]], lo: float, hi: float) -> float:
        return min((w[0] for w in windows if lo <= w[0] <= hi), default=hi)


class Figures:
    """Totals over every measure() call of an engine."""

    def __init__(self, lanes: int) -> None:
        self.windows: list[list[tuple[float, float]]] = [[] for _ in range(lanes)]
        self.phase_s = 0.0  # time inside measure() calls: the measure phase
        self.candidates = 0  # results reported
        self.runs = 0  # jobs run, re-runs included
        self.raced = 0
        self.failed = 0
        self.held_s = [0.0] * lanes  # per GPU, the windows folded away (see fold)
        self._repeats = [0, 0]  # repeats of the timed runs, timed runs
        self.steps = dict.fromkeys(STEPS, 0.0)

    def fold(self) -> None:
        """Between measure() calls, whose windows never overlap another call's: a GPU keeping
        more than KEEP_WINDOWS windows adds their union to its held seconds and drops them."""
        for lane, windows in enumerate(self.windows):
            if len(windows) > KEEP_WINDOWS:
                self.held_s[lane] += covered(windows, -float("inf"), float("inf"))
                windows.clear()

    def ran(self, job: Job, outcome: Outcome) -> None:
        self.runs += 1
        if outcome.window is not None:
            self.windows[job.lane].append(outcome.window)
        for step in STEPS:
            self.steps[step] += outcome.steps.get(step, 0.0)
        if outcome.run_secs:
            self._repeats[0] += len(outcome.run_secs)
            self._repeats[1] += 1

    def reported(self, ok: bool, raced: bool) -> None:
        self.candidates += 1
        self.failed += not ok
        self.raced += raced

    def busy_per_gpu(self) -> list[float]:
        if self.phase_s <= 0:
            return [0.0 for _ in self.windows]
        # Windows are disjoint per GPU in exclusive mode; the union also counts overlapping
        # timings (overlap mode) once. Measure phases are disjoint and hold every window.
        return [
            min(1.0, (held + covered(w, -float("inf"), float("inf"))) / self.phase_s)
            for held, w in zip(self.held_s, self.windows, strict=True)
        ]

    def to_dict(self) -> dict[str, Any]:
        busy = self.busy_per_gpu()
        runs = self.runs or 1
        return {
            "candidates": self.candidates,
            "measure_s": self.phase_s,
            "candidates_per_s": self.candidates / self.phase_s if self.phase_s > 0 else None,
            "busy": statistics.fmean(busy) if busy else 0.0,
            "busy_per_gpu": busy,
            "step_s": {step: total / runs for step, total in self.steps.items()},
            "runs": self.runs,
            "repeats": self._repeats[0] / self._repeats[1] if self._repeats[1] else None,
            "raced": self.raced,
            "failed": self.failed,
        }
