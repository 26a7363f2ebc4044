"""The ledger: what a run has spent so far, by phase, carried across resumed sessions."""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Spend:
    """A snapshot of spend; `to_dict()` goes into the journal, `from_dict()` restores it."""

    wall_s: float = 0.0
    trials: int = 0
    rounds: int = 0
    phases: Mapping[str, float] = dataclasses.field(default_factory=dict)
    round_s: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 3),
            "trials": self.trials,
            "rounds": self.rounds,
            "phases": {k: round(v, 3) for k, v in self.phases.items()},
            "round_s": [round(s, 3) for s in self.round_s],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Spend:
        return cls(
            wall_s=float(data["wall_s"]),
            trials=int(data["trials"]),
            rounds=int(data["rounds"]),
            phases={str(k): float(v) for k, v in data["phases"].items()},
            round_s=tuple(float(s) for s in data.get("round_s", ())),
        )


class Ledger:
    """Counts wall time (by phase), trials and rounds; the clock is injected for tests.

    `carried` is the spend of earlier sessions of the same run directory: it counts against
    the budget exactly like this session's spend.
    """

    _KEEP_ROUNDS = 8

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        carried: Spend | None = None,
        devices: int = 0,
        earlier_s: float = 0.0,
    ) -> None:
        self._clock = clock
        # Work of this session done before the ledger existed counts as if it had.
        self._start = clock() - earlier_s
        self._carried = carried or Spend()
        self._phases: dict[str, float] = dict(self._carried.phases)
        self._round_s: list[float] = list(self._carried.round_s)
        self.trials = self._carried.trials
        self.rounds = self._carried.rounds
        self.devices = devices
        # Seconds the run keeps back for its final phase (compile, check, report).
        self.reserved_s = 0.0

    @property
    def wall_s(self) -> float:
        return self._carried.wall_s + (self._clock() - self._start)

    @property
    def device_h(self) -> float:
        """Device-hours: the devices are held for the whole run, busy or not."""
        return self.wall_s / 3600.0 * self.devices

    @property
    def phases(self) -> dict[str, float]:
        return dict(self._phases)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge the wall time spent inside the block to `name`."""
        start = self._clock()
        try:
            yield
        finally:
            self.charge_phase(name, self._clock() - start)

    def charge_phase(self, name: str, seconds: float) -> None:
        """Charge `seconds`, timed outside a `phase()` block, to `name`."""
        self._phases[name] = self._phases.get(name, 0.0) + seconds

    def charge_round(self, *, trials: int, seconds: float) -> None:
        self.trials += trials
        self.rounds += 1
        self._round_s = (self._round_s + [seconds])[-self._KEEP_ROUNDS :]

    def expected_round_s(self) -> float | None:
        """A forecast of the next round's wall time: the median of recent rounds."""
        return statistics.median(self._round_s[-3:]) if self._round_s else None

    def snapshot(self) -> Spend:
        return Spend(
            wall_s=self.wall_s,
            trials=self.trials,
            rounds=self.rounds,
            phases=self.phases,
            round_s=tuple(self._round_s),
        )
