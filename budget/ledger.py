"""The ledger: what a run has spent so far, in every unit, carried across resumed sessions.

Wall time is the base: device-hours = wall x GPUs held, core-hours = wall x host cores,
dollars = wall x the run's price per hour. GPU energy comes from an injected meter (NVML on a
real GPU), trials from the loop. Earlier sessions' spend is carried in; time between
sessions (the machine was down) is not spend.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .grammar import DEVICE_HOURS, DOLLARS, ENERGY, TRIALS, WALL

EnergyMeter = Callable[[], float | None]  # cumulative joules of the held GPUs, None if unknown


@dataclasses.dataclass(frozen=True)
class RoundCost:
    """One round's wall time split into what does not scale with candidates and what does."""

    fixed_s: float  # search, learning: paid once per round
    per_candidate_s: float  # build + measure, per candidate
    candidates: int

    @property
    def total_s(self) -> float:
        return self.fixed_s + self.per_candidate_s * self.candidates


@dataclasses.dataclass(frozen=True)
class Point:
    """A point of the convergence curve: spend after a round and the model latency estimate."""

    wall_s: float
    device_h: float
    usd: float | None
    trials: int
    energy_j: float | None
    latency_s: float

    def spent(self, kind: str) -> float | None:
        return _spent(self, kind)

    @classmethod
    def at(cls, spend: Spend, latency_s: float) -> Point:
        return cls(spend.wall_s, spend.device_h, spend.usd, spend.trials, spend.energy_j, latency_s)


@dataclasses.dataclass(frozen=True)
class Spend:
    """A snapshot of spend; `to_dict()` goes into the journal, `from_dict()` restores it."""

    wall_s: float = 0.0
    device_h: float = 0.0
    core_h: float = 0.0
    usd: float | None = None  # unknown until a price is known
    energy_j: float | None = None
    trials: int = 0
    rounds: int = 0
    phases: Mapping[str, float] = dataclasses.field(default_factory=dict)
    round_costs: tuple[RoundCost, ...] = ()
    # Work done in the background while the loop waited on something else (measurement),
    # by phase; it is not in `phases`, which split the wall time.
    overlapped: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # The longest single block of work the run could not stop inside: (phase, seconds).
    longest_step: tuple[str, float] | None = None

    def spent(self, kind: str) -> float | None:
        return _spent(self, kind)

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 3),
            "device_h": round(self.device_h, 6),
            "core_h": round(self.core_h, 6),
            "usd": None if self.usd is None else round(self.usd, 6),
            "energy_j": None if self.energy_j is None else round(self.energy_j, 3),
            "trials": self.trials,
            "rounds": self.rounds,
            "phases": {k: round(v, 3) for k, v in self.phases.items()},
            "overlapped": {k: round(v, 3) for k, v in self.overlapped.items()},
            "round_costs": [
                [round(c.fixed_s, 3), round(c.per_candidate_s, 4), c.candidates]
                for c in self.round_costs
            ],
            "longest_step": None
            if self.longest_step is None
            else {"phase": self.longest_step[0], "seconds": round(self.longest_step[1], 3)},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Spend:
        return cls(
            wall_s=float(data["wall_s"]),
            device_h=float(data.get("device_h", 0.0)),
            core_h=float(data.get("core_h", 0.0)),
            usd=None if data.get("usd") is None else float(data["usd"]),
            energy_j=None if data.get("energy_j") is None else float(data["energy_j"]),
            trials=int(data["trials"]),
            rounds=int(data["rounds"]),
            phases={str(k): float(v) for k, v in data["phases"].items()},
            overlapped={str(k): float(v) for k, v in data.get("overlapped", {}).items()},
            round_costs=tuple(
                RoundCost(float(f), float(p), int(n)) for f, p, n in data.get("round_costs", ())
            ),
            longest_step=_longest(data.get("longest_step")),
        )


def _longest(data: Mapping[str, Any] | None) -> tuple[str, float] | None:
    return None if not data else (str(data["phase"]), float(data["seconds"]))


def _spent(spend: Spend | Point, kind: str) -> float | None:
    """Spend in the base unit of a budget kind (grammar.WALL, DOLLARS, ...)."""
    return {
        WALL: spend.wall_s,
        DEVICE_HOURS: spend.device_h,
        DOLLARS: spend.usd,
        TRIALS: float(spend.trials),
        ENERGY: spend.energy_j,
    }[kind]


class Ledger:
    """Meters for one session on top of the spend carried from earlier sessions.

    The clock and the energy meter are injected, so tests drive them with fakes.
    """

    _KEEP_ROUNDS = 8

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        carried: Spend | None = None,
        devices: int = 0,
        cores: int = 1,
        usd_per_hour: float | None = None,
        energy: EnergyMeter | None = None,
        earlier_s: float = 0.0,
    ) -> None:
        self._clock = clock
        self.clock = clock  # what the loop times rounds with (simulated runs add device time)
        # Work of this session done before the ledger existed counts as if it had.
        self._start = clock() - earlier_s
        self._carried = carried or Spend()
        self._phases: dict[str, float] = dict(self._carried.phases)
        self._overlapped: dict[str, float] = dict(self._carried.overlapped)
        self._round_costs: list[RoundCost] = list(self._carried.round_costs)
        self._lock = threading.Lock()  # phases are charged from background threads too
        self._energy = energy
        self._energy_start = energy() if energy is not None else None
        self.trials = self._carried.trials
        self.rounds = self._carried.rounds
        self.devices = devices
        self.cores = cores
        self.usd_per_hour = usd_per_hour
        # Seconds the run keeps back for its final phase (compile, check, report), and what
        # sets them anew from each point of the curve (None: they stay as set).
        self.reserved_s = 0.0
        self.reserve: Callable[[float], float] | None = None
        # Seconds and trials of work already started and not yet charged (a round being
        # measured while the next is prepared): what is left of the budget is that much smaller.
        self.committed_s = 0.0
        self.committed_trials = 0
        # What a round costs before this run has timed one (from the task's size and target).
        self.prior_round: RoundCost | None = None
        # Candidates of a first round the up-front check accepted the budget for: measured
        # while the budget has seconds left after the final phase's, even when the fixed phases
        # took longer than forecast and the round no longer fits whole (refused up front, or
        # tuned). 0: no promise (a resumed run, or the check skipped).
        self.promised_round = 0
        self._longest = self._carried.longest_step
        # The convergence curve, one point per round (earlier sessions' points included).
        self.history: list[Point] = []

    # -- meters ----------------------------------------------------------------------------

    @property
    def session_s(self) -> float:
        return self._clock() - self._start

    @property
    def wall_s(self) -> float:
        return self._carried.wall_s + self.session_s

    @property
    def earlier_wall_s(self) -> float:
        """Wall-clock seconds earlier sessions spent (carried in)."""
        return self._carried.wall_s

    @property
    def device_h(self) -> float:
        """Device-hours: the devices are held for the whole run, busy or not."""
        return self._carried.device_h + self.session_s / 3600.0 * self.devices

    @property
    def core_h(self) -> float:
        return self._carried.core_h + self.session_s / 3600.0 * self.cores

    @property
    def usd(self) -> float | None:
        if self.usd_per_hour is None:
            return self._carried.usd
        carried = self._carried.usd
        if carried is None:  # earlier sessions had no price: charge them at today's
            carried = self._carried.wall_s / 3600.0 * self.usd_per_hour
        return carried + self.session_s / 3600.0 * self.usd_per_hour

    @property
    def energy_j(self) -> float | None:
        if self._energy is None or self._energy_start is None:
            return self._carried.energy_j
        now = self._energy()
        if now is None:
            return self._carried.energy_j
        return (self._carried.energy_j or 0.0) + (now - self._energy_start)

    @property
    def phases(self) -> dict[str, float]:
        return dict(self._phases)

    @property
    def overlapped(self) -> dict[str, float]:
        return dict(self._overlapped)

    def spent(self, kind: str) -> float | None:
        return _spent(self.snapshot(), kind)

    # -- charging --------------------------------------------------------------------------

    @contextlib.contextmanager
    def phase(self, name: str, *, overlapped: bool = False) -> Iterator[None]:
        """Charge the wall time spent inside the block to `name`; `overlapped`: the block ran
        in the background, beside the phase the run was in."""
        start = self._clock()
        try:
            yield
        finally:
            self.charge_phase(name, self._clock() - start, overlapped=overlapped)

    def charge_phase(self, name: str, seconds: float, *, overlapped: bool = False) -> None:
        """Charge `seconds`, timed outside a `phase()` block, to `name`."""
        phases = self._overlapped if overlapped else self._phases
        with self._lock:
            phases[name] = phases.get(name, 0.0) + seconds
            if self._longest is None or seconds > self._longest[1]:
                self._longest = (name, seconds)

    @property
    def longest_step(self) -> tuple[str, float] | None:
        """The longest block charged to one phase: the most a stop can have to wait."""
        return self._longest

    def charge_round(self, *, trials: int, seconds: float, fixed_s: float | None = None) -> None:
        """Count a round; `fixed_s` is the part of `seconds` that does not scale with trials."""
        self.trials += trials
        self.rounds += 1
        fixed = seconds if fixed_s is None else min(fixed_s, seconds)
        per_candidate = (seconds - fixed) / trials if trials else 0.0
        cost = RoundCost(fixed, per_candidate, trials)
        self._round_costs = (self._round_costs + [cost])[-self._KEEP_ROUNDS :]

    def record_point(self, latency_s: float | None) -> None:
        """Add the model latency estimate after a round to the convergence curve; `reserve`
        keeps back what the final phase needs at that latency."""
        if latency_s is not None:
            self.history.append(Point.at(self.snapshot(), latency_s))
            if self.reserve is not None:
                self.reserved_s = self.reserve(latency_s)

    # -- forecasts -------------------------------------------------------------------------

    # A round's forecast is padded by this much: overshooting a budget is worse than
    # stopping a little early.
    FORECAST_MARGIN = 1.1

    def forecast_round(self, candidates: int) -> float | None:
        """Seconds a round of `candidates` may take: the largest fixed and per-candidate costs
        of recent rounds (before the first: `prior_round`), plus a margin. None when neither
        is known."""
        recent = self._round_costs[-3:] or ([self.prior_round] if self.prior_round else [])
        if not recent:
            return None
        fixed = max(c.fixed_s for c in recent)
        per_candidate = max(c.per_candidate_s for c in recent)
        return (fixed + per_candidate * candidates) * self.FORECAST_MARGIN

    def joules_per_second(self) -> float | None:
        """Mean GPU power over this session, for forecasting energy."""
        if self._energy is None or self._energy_start is None or self.session_s <= 0:
            return None
        now = self._energy()
        return None if now is None else (now - self._energy_start) / self.session_s

    def snapshot(self) -> Spend:
        return Spend(
            wall_s=self.wall_s,
            device_h=self.device_h,
            core_h=self.core_h,
            usd=self.usd,
            energy_j=self.energy_j,
            trials=self.trials,
            rounds=self.rounds,
            phases=self.phases,
            round_costs=tuple(self._round_costs),
            overlapped=self.overlapped,
            longest_step=self._longest,
        )
