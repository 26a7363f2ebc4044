"""Budget strings: a number and a unit, several limits joined with commas (first reached wins).

2gpu-h  90gpu-min  $5  5usd  45min  1.5h  300s  500trials  200kJ  0.1kWh

Wall-clock time may also come in parts, largest first, as the report writes it: 1h30min, 3m30s.
"""

from __future__ import annotations

import dataclasses
import math
import re

# Each limit kind is kept in one base unit: seconds, device-hours, dollars, trials, joules.
WALL, DEVICE_HOURS, DOLLARS, TRIALS, ENERGY = "wall_s", "device_h", "usd", "trials", "energy_j"

_UNITS: dict[str, tuple[str, float]] = {
    **{u: (WALL, 1.0) for u in ("s", "sec", "secs", "second", "seconds")},
    **{u: (WALL, 60.0) for u in ("m", "min", "mins", "minute", "minutes")},
    **{u: (WALL, 3600.0) for u in ("h", "hr", "hrs", "hour", "hours")},
    **{u: (DEVICE_HOURS, 1.0) for u in ("gpu-h", "gpu-hr", "gpu-hour", "gpu-hours")},
    **{u: (DEVICE_HOURS, 1 / 60) for u in ("gpu-min", "gpu-mins", "gpu-minutes")},
    **{u: (DOLLARS, 1.0) for u in ("usd", "$")},
    **{u: (TRIALS, 1.0) for u in ("trial", "trials")},
    "j": (ENERGY, 1.0),
    "kj": (ENERGY, 1e3),
    "mj": (ENERGY, 1e6),
    "wh": (ENERGY, 3600.0),
    "kwh": (ENERGY, 3.6e6),
}

_KIND_WORDS = {
    WALL: "wall-clock time",
    DEVICE_HOURS: "GPU-hours",
    DOLLARS: "dollars",
    TRIALS: "trials",
    ENERGY: "GPU energy",
}

EXAMPLES = "2gpu-h, 90gpu-min, $5, 5usd, 45min, 1.5h, 300s, 500trials, 200kJ, 0.1kWh"

_LIMIT = re.compile(
    r"^(?:\$\s*(?P<dollars>\d+(?:\.\d*)?|\.\d+)"
    r"|(?P<number>\d+(?:\.\d*)?|\.\d+)(?:e(?P<exp>[+-]?\d+))?\s*(?P<unit>[a-z$-]+))$"
)


# A duration in two or three parts (1h30min, 3m30s, 1h02m05s); each part is read by _PART.
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_PARTS = re.compile(rf"(?:{_NUMBER}\s*[a-z]+\s*){{2,3}}")
_PART = re.compile(rf"({_NUMBER})\s*([a-z]+)")


class BudgetError(ValueError):
    """A budget string that does not parse; the message says what is expected."""


@dataclasses.dataclass(frozen=True)
class Limit:
    """One limit, e.g. 90gpu-min is Limit(kind="device_h", amount=1.5, text="90gpu-min")."""

    kind: str
    amount: float
    text: str

    def __post_init__(self) -> None:
        if self.kind not in _KIND_WORDS:
            raise ValueError(f"unknown limit kind {self.kind!r}")
        if not (math.isfinite(self.amount) and self.amount > 0):
            raise ValueError(f"a limit must be a positive amount but got {self.amount}")

    @property
    def words(self) -> str:
        return _KIND_WORDS[self.kind]


@dataclasses.dataclass(frozen=True)
class Budget:
    """Several limits; the run ends at whichever is reached first."""

    limits: tuple[Limit, ...]

    def __post_init__(self) -> None:
        if not self.limits:
            raise ValueError("a budget needs at least one limit")

    def get(self, kind: str) -> float | None:
        """The amount of the limit of this kind, in its base unit, or None."""
        return next((lim.amount for lim in self.limits if lim.kind == kind), None)

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(lim.kind for lim in self.limits)

    def __str__(self) -> str:
        return ",".join(lim.text for lim in self.limits)


def parse_budget(text: str) -> Budget:
    """Parse a budget string; raise BudgetError with the expected forms on anything else."""
    if not isinstance(text, str) or not text.strip():
        raise BudgetError(f"the budget is empty; give a number and a unit, e.g. {EXAMPLES}")
    limits: list[Limit] = []
    for part in text.split(","):
        limit = _parse_limit(part.strip(), text)
        if any(seen.kind == limit.kind for seen in limits):
            raise BudgetError(f"budget {text!r} gives {limit.words} twice; keep one limit per kind")
        limits.append(limit)
    return Budget(tuple(limits))


def _parse_limit(part: str, whole: str) -> Limit:
    if not part:
        raise BudgetError(f"budget {whole!r} has an empty limit; join limits with one comma")
    if part.startswith("-"):
        raise BudgetError(f"budget {whole!r}: {part!r} must be a positive, finite amount")
    kind, amount = _amount(part, whole)
    if not (math.isfinite(amount) and amount > 0):
        raise BudgetError(f"budget {whole!r}: {part!r} must be a positive, finite amount")
    if kind == TRIALS and amount != int(amount):
        raise BudgetError(f"budget {whole!r}: a number of trials must be whole, got {part!r}")
    return Limit(kind, amount, part)


def _amount(part: str, whole: str) -> tuple[str, float]:
    """One number and its unit (or a wall-clock time in parts): the limit's kind and the
    amount in the kind's base unit."""
    match = _LIMIT.match(part.lower())
    if match is None and _PARTS.fullmatch(part.lower()):
        return WALL, _duration_s(part, whole)
    if match is None:
        raise BudgetError(
            f"budget {whole!r}: cannot read {part!r}; expected a number and a unit, "
            f"e.g. {EXAMPLES} (several joined with commas)"
        )
    if match["dollars"] is not None:
        value, unit = float(match["dollars"]), "$"
    else:
        # float() reads the exponent itself: inf or 0 where 10 ** exp would overflow.
        value = float(match["number"] + (f"e{match['exp']}" if match["exp"] else ""))
        unit = match["unit"]
    if unit not in _UNITS:
        raise BudgetError(
            f"budget {whole!r}: unknown unit {unit!r} in {part!r}; units are s, min, h, "
            f"gpu-h, gpu-min, $ / usd, trials, J, kJ, Wh, kWh (e.g. {EXAMPLES})"
        )
    kind, scale = _UNITS[unit]
    return kind, value * scale


def _duration_s(part: str, whole: str) -> float:
    """Seconds of a wall-clock time in parts, hours before minutes before seconds, each once."""
    seconds, last_scale = 0.0, math.inf
    for number, unit in _PART.findall(part.lower()):
        kind, scale = _UNITS.get(unit, ("", 0.0))
        if kind != WALL or scale >= last_scale:
            raise BudgetError(
                f"budget {whole!r}: cannot read {part!r}; a time in parts gives hours, minutes "
                "and seconds in that order, each once, e.g. 1h30min or 3m30s"
            )
        seconds += float(number) * scale
        last_scale = scale
    return seconds
