"""Which build becomes model.so, and why the tuned one did not: only a build whose outputs
matched onnxruntime's ships (the tuned one unchecked only where nothing could run either
build: no device here and no fleet, or a simulated GPU; or where the user turned the comparison
off, a build that ran)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .check import DIFFERS, FAILED, MATCHED, SKIPPED, status_of
from .timing import SLOWER

UNTUNED, TUNED, NONE = "untuned", "tuned", "none"


@dataclasses.dataclass
class Shipment:
    """What the end of a session found, and which build became model.so (filled in step by
    step by ModelBuilds.finish)."""

    tuned: dict[str, Any]
    untuned: dict[str, Any] | None
    comparison: dict[str, Any] | None = None  # both timed in turn (None: not timed)
    shipped: str = NONE  # TUNED, UNTUNED, or NONE: no model.so
    checked_on: str | None = None  # where model.so's outputs matched onnxruntime's
    unchecked_reason: str | None = None  # why model.so ships unchecked (None: it was checked)
    mismatch_library: str | None = None  # the tuned build, kept aside: its outputs differ
    tuned_not_shipped: str | None = None  # why model.so is not the tuned build
    default_schedules: bool = False  # every task of the tuned build runs its default schedule

    def to_dict(self) -> dict[str, Any]:
        return {
            "shipped": self.shipped,
            "shipped_checked": self.checked_on is not None,
            "checked_on": self.checked_on,
            "unchecked_reason": self.unchecked_reason,
            "mismatch_library": self.mismatch_library,
            "check_status": status_of(self.tuned.get("check")),
            "tuned_not_shipped": self.tuned_not_shipped,
            "default_schedules": self.default_schedules,
            "tuned_check": self.tuned.get("check"),
            "untuned_check": (self.untuned or {}).get("check"),
        }


def choose(found: Shipment) -> str:
    """The build that ships: the tuned one where it may (shippable), unless the untuned one
    may too and is faster beyond the spread; else the untuned one where it may; else nothing,
    except where nothing could run either build (the tuned one, marked unchecked)."""
    tuned_ok, untuned_ok = shippable(found.tuned), shippable(found.untuned)
    if tuned_ok:
        slower = found.comparison is not None and found.comparison["change"] == SLOWER
        return UNTUNED if untuned_ok and slower else TUNED
    if untuned_ok:
        return UNTUNED
    if status_of(found.tuned.get("check")) is None:  # no device here and no fleet
        return TUNED
    return NONE


def shippable(result: dict[str, Any] | None) -> bool:
    """Whether the build may ship: its outputs matched onnxruntime's, or it ran with the
    comparison turned off (--no-check)."""
    return check_ok(result) is True or status_of((result or {}).get("check")) == SKIPPED


def check_ok(result: dict[str, Any] | None) -> bool | None:
    """Whether the build's outputs matched onnxruntime's (None: not known either way)."""
    return ((result or {}).get("check") or {}).get("ok")


def why_not_tuned(found: Shipment, *, kept: str) -> str | None:
    """Why model.so is not the tuned build, in a phrase (None where it is); `kept` is where
    a tuned build that did not ship and was not set aside stays."""
    if found.shipped == TUNED:
        return None
    check = found.tuned.get("check") or {}
    status, reason = status_of(check), check.get("reason")
    if status in (MATCHED, SKIPPED):
        return "the untuned build is faster: every timing of it beat every timing of the tuned one"
    if status == DIFFERS:
        aside = found.mismatch_library or kept
        return f"its outputs differ from onnxruntime's ({reason}); kept aside as {aside}, not to deploy"
    if status == FAILED:
        return f"it failed when run: {reason}; it stays in {kept}, not to deploy"
    return f"its outputs could not be checked: {reason}; it stays in {kept}, unchecked"
