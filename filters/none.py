"""The pass-through filter: every proposed candidate is built and measured."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Filter, Selection


class NoFilter(Filter):
    name = "none"

    def select(self, task, candidates: Sequence) -> Selection:
        return Selection(tuple(range(len(candidates))))
