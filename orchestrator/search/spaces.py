"""A task's design spaces: which one a schedule comes from, and keeping each of them in play.

MetaSchedule gives a task a few design spaces (on a CPU convolution: its fused epilogue left
outside the tiles, or computed inside them at one of two tile levels) and samples a search's
first population from all of them, but no mutation moves a schedule from one space to another.
A search whose first rounds' fastest came from the weaker space evolves inside it from then on:
in one of three 3-minute runs of the example model a convolution stayed at 156 us through 252
trials, its epilogue outside the tiles, where the other two runs reached 95 and 109 us with
it inside (2026-11-28); none of the best schedule's one-step neighbours in its own space did
better than 155 us.

So a space whose fastest schedule is within `BAND` of the task's best stays in play: its
fastest schedules remain parents, and each round proposes its best-ranked schedule (a fresh
one where the cost model ranked none of it). A space's key lives in one process only (Python
salts the hash of its strings).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

# A space stays in play while its fastest measured schedule is within this factor of the best.
BAND = 2.0
# Each space in play keeps this many of its fastest measured schedules as parents.
PER_SPACE = 4


def space_of(sch: Any) -> int:
    """The design space `sch` comes from: its trace's instructions before postprocessing, with
    their random variables numbered in order, constants and decisions left out (a mutation
    changes only those)."""
    numbered: dict[int, int] = {}
    shape = []
    for inst in sch.trace.insts:
        kind = inst.kind.name
        if kind == "EnterPostproc":
            break
        inputs = tuple(numbered.get(_handle(x), -1) for x in inst.inputs)
        for output in inst.outputs:
            numbered[_handle(output)] = len(numbered)
        shape.append((kind, inputs))
    return hash(tuple(shape))


def _handle(value: Any) -> int:
    """A random variable's identity: TVM objects hash by handle (a constant's is never an
    instruction's output, so it is left out)."""
    try:
        return hash(value)
    except TypeError:
        return -2


def in_play(elites: Sequence[tuple[float, Any, int]]) -> list[int]:
    """The spaces whose fastest of `elites` ((seconds, schedule, space), fastest first) is
    within BAND of the fastest: the leader's first."""
    if not elites:
        return []
    limit = elites[0][0] * BAND
    spaces: list[int] = []
    for secs, _, space in elites:
        if secs > limit:
            break
        if space not in spaces:
            spaces.append(space)
    return spaces


def keep(ranked: Sequence[tuple[float, Any, int]], most: int) -> list[tuple[float, Any, int]]:
    """The `most` fastest of `ranked` (fastest first), and past them each space's PER_SPACE
    fastest, so that a slower space's parents survive."""
    kept = list(ranked[:most])
    count: dict[int, int] = {}
    for elite in kept:
        count[elite[2]] = count.get(elite[2], 0) + 1
    for elite in ranked[most:]:
        if count.get(elite[2], 0) < PER_SPACE:
            count[elite[2]] = count.get(elite[2], 0) + 1
            kept.append(elite)
    return kept


def parents(elites: Sequence[tuple[float, Any, int]], n: int) -> list[Any]:
    """`n` schedules of `elites` as the evolution's parents: each space in play's PER_SPACE
    fastest first, then the fastest of the rest."""
    playing = set(in_play(elites))
    first = keep([e for e in elites if e[2] in playing], 0)
    taken = {id(e[1]) for e in first}
    rest = [e for e in elites if id(e[1]) not in taken]
    return [sch for _, sch, _ in (first + rest)[: max(n, len(first))]]


def every_space_first(
    bests: Sequence[Any],
    fresh: Sequence[Any],
    playing: Iterable[int],
    head: int,
    new: Callable[[Any], bool],
) -> tuple[list[Any], int]:
    """`bests` (ranked by the cost model) with, for each space in `playing` but the leader's
    (the first) that has no `new` schedule in the first `head`, its highest-ranked new one
    moved to the front, or where the ranking holds none of it, a new one of the fresh random
    samples: the round proposes each space's best guess. Returns the list and how many lead
    it that were not the ranking's choice."""
    wanted = list(playing)[1:]
    if not wanted:
        return list(bests), 0
    ranked = _first_of_each(bests, wanted, new)
    sampled = _first_of_each(fresh, [s for s in wanted if s not in ranked], new)
    moved = {i for i in ranked.values() if i >= head}
    extra = [fresh[i] for i in sorted(sampled.values())]
    lead = extra + [bests[i] for i in sorted(moved)]
    return lead + [b for i, b in enumerate(bests) if i not in moved], len(lead)


def _first_of_each(
    schedules: Sequence[Any], wanted: Sequence[int], new: Callable[[Any], bool]
) -> dict[int, int]:
    """Space -> index in `schedules` of its first `new` schedule, for each space in `wanted`
    that has one."""
    found: dict[int, int] = {}
    for i, sch in enumerate(schedules):
        if len(found) == len(wanted):
            break
        space = space_of(sch)
        if space in wanted and space not in found and new(sch):
            found[space] = i
    return found
