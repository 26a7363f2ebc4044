"""Candidate filters: which proposed candidates are worth building and measuring."""

from __future__ import annotations

from .base import Filter, Selection
from .none import NoFilter

_FILTERS: dict[str, type[Filter]] = {NoFilter.name: NoFilter}

NAMES = tuple(_FILTERS)


def make_filter(name: str) -> Filter:
    """A filter by its short name; ValueError listing the known names otherwise."""
    try:
        return _FILTERS[name]()
    except KeyError:
        raise ValueError(f"unknown filter {name!r}; choose one of: {', '.join(_FILTERS)}") from None


__all__ = ["NAMES", "Filter", "NoFilter", "Selection", "make_filter"]
