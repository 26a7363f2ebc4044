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

Within a space, schedules fall into tile families: the innermost factor of each spatial tile
(the register tile the kernel's inner loops compute). Mutation moves between them, but the
evolution's parents and the cost model's ranking soon favour the first one that measured well:
on squeezenetish's heaviest convolution, six 3-minute runs from the same first round ended at
54-57 us or 91-94 us, after about 128 trials each, as their later rounds kept to one register
tile or another (2026-12-05). So up to `FAMILIES` other families of a space in play, each
within `FAMILY_BAND` of the best, stay in play as the spaces do. A family is the pair
(space, tile).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

# A space stays in play while its fastest measured schedule is within this factor of the best.
BAND = 2.0
# Each family in play keeps this many of its fastest measured schedules as parents.
PER_SPACE = 4
# Other tile families of a space in play, at most, whose fastest is within FAMILY_BAND of the
# best: each of them costs a round one of its places.
FAMILIES = 2
FAMILY_BAND = 1.5

Family = tuple[int, tuple[int, ...]]  # (design space, innermost factor of each spatial tile)


def family_of(sch: Any) -> Family:
    """The design space and tile family `sch` comes from."""
    return space_of(sch), tile_of(sch)


def tile_of(sch: Any) -> tuple[int, ...]:
    """The innermost factor of each spatial loop's tile: MultiLevelTiling splits a spatial
    loop into more levels than a reduction loop, so those are the widest SamplePerfectTile
    decisions of the trace."""
    tiles: list[tuple[int, int]] = []
    trace = sch.trace
    for inst in trace.insts:
        kind = inst.kind.name
        if kind == "EnterPostproc":
            break
        if kind == "SamplePerfectTile":
            decision = trace.get_decision(inst)
            if decision is not None and len(decision):
                tiles.append((len(decision), int(decision[-1])))
    widest = max((n for n, _ in tiles), default=0)
    return tuple(factor for n, factor in tiles if n == widest)


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


def in_play(elites: Sequence[tuple[float, Any, Family]]) -> list[Family]:
    """The families of `elites` ((seconds, schedule, family), fastest first) in play, the
    leader's first: each space's fastest family within BAND of the fastest, and up to FAMILIES
    more of those spaces within FAMILY_BAND."""
    if not elites:
        return []
    limit, near = elites[0][0] * BAND, elites[0][0] * FAMILY_BAND
    playing: list[Family] = []
    more = 0
    for secs, _, family in elites:
        if secs > limit:
            break
        if family in playing:
            continue
        if all(space != family[0] for space, _ in playing):
            playing.append(family)
        elif secs <= near and more < FAMILIES:
            playing.append(family)
            more += 1
    return playing


def keep(ranked: Sequence[tuple[float, Any, Family]], most: int) -> list[tuple[float, Any, Family]]:
    """The `most` fastest of `ranked` (fastest first), and past them each space's and each
    family in play's PER_SPACE fastest, so that their parents survive."""
    playing = set(in_play(ranked))
    kept = list(ranked[:most])
    count: dict[Any, int] = {}
    for elite in kept:
        for key in _counted(elite[2], playing):
            count[key] = count.get(key, 0) + 1
    for elite in ranked[most:]:
        keys = _counted(elite[2], playing)
        if any(count.get(key, 0) < PER_SPACE for key in keys):
            for key in keys:
                count[key] = count.get(key, 0) + 1
            kept.append(elite)
    return kept


def _counted(family: Family, playing: set[Family]) -> list[Any]:
    """What an elite of `family` counts towards in `keep`: its space, and its family in play."""
    return [family[0], family] if family in playing else [family[0]]


def parents(elites: Sequence[tuple[float, Any, Family]], n: int) -> list[Any]:
    """`n` schedules of `elites` as the evolution's parents: each family in play's PER_SPACE
    fastest first, then the fastest of the rest."""
    first: list[tuple[float, Any, Family]] = []
    for family in in_play(elites):
        first += [e for e in elites if e[2] == family][:PER_SPACE]
    taken = {id(e[1]) for e in first}
    rest = [e for e in elites if id(e[1]) not in taken]
    return [sch for _, sch, _ in (first + rest)[: max(n, len(first))]]


def every_family_first(
    bests: Sequence[Any],
    fresh: Sequence[Any],
    playing: Iterable[Family],
    head: int,
    new: Callable[[Any], bool],
) -> tuple[list[Any], int]:
    """`bests` (ranked by the cost model) with, for each family in `playing` but the leader's
    (the first) that has no `new` schedule in the first `head`, its highest-ranked new one
    moved to the front, or where the ranking holds none of it, a new one of the fresh random
    samples: the round proposes each family's best guess. Returns the list and how many lead
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
    schedules: Sequence[Any], wanted: Sequence[Family], new: Callable[[Any], bool]
) -> dict[Family, int]:
    """Family -> index in `schedules` of its first `new` schedule, for each family in `wanted`
    that has one."""
    found: dict[Family, int] = {}
    for i, sch in enumerate(schedules):
        if len(found) == len(wanted):
            break
        family = family_of(sch)
        if family in wanted and family not in found and new(sch):
            found[family] = i
    return found
