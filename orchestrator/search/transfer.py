"""Transfer-tuning: replay the tuned schedule of one task on another task of the same kind.

A MetaSchedule trace holds its random choices as decisions. Replayed on a workload of other
shapes, TVM keeps the inner tile factors that still divide the new loop and, silently, gives
the first that does not all that is left, leaving 1 to the factors outside it: (1, ..., 1, L)
where the innermost no longer divides. Here the decisions are re-derived
before TVM sees them: tile factors move to the nearest divisors of the new extent, innermost
first, so the new schedule keeps the source's tiling where the shapes let it. A split whose
only re-derivation is trivial where the source's was not is a failure, as is any instruction
or postprocessor that rejects the schedule: failures are data (`Replayed`), not exceptions.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from .. import _tvm

AS_IS, RE_DERIVED, FAILED = "as-is", "re-derived", "failed"
_TILES = ("SamplePerfectTile", "SamplePartitionedTile")
_ITER_KINDS = {0: "S", 2: "R"}  # data-parallel, reduction; anything else is "O"
_MODULUS = 2147483647  # of TVM's random engine


@dataclasses.dataclass(frozen=True)
class Replayed:
    """What replaying a trace on a target workload gave."""

    schedule: Any | None  # tvm.s_tir.Schedule of the target, postprocessed; None if it failed
    outcome: str  # AS_IS, RE_DERIVED or FAILED
    changed: int  # decisions re-derived
    detail: str  # one line: why it failed, or which decisions changed


class _Rejected(Exception):
    """A decision that cannot be carried to the target workload."""


def same_kind(source_workload: Any, target_workload: Any) -> bool:
    """Whether a trace of the source may replay on the target: the same blocks, by name, with
    the same pattern of spatial and reduction iterators (a trace finds its blocks by name and
    splits their loops in order); extents may differ."""
    return blocks(source_workload) == blocks(target_workload)


def blocks(workload: Any) -> tuple[tuple[str, str], ...]:
    """(name, iterator kinds such as "SSSSRRR") of every block of the workload's PrimFuncs."""
    from tvm import s_tir, tirx

    found = []
    for gvar, func in sorted(workload.functions.items(), key=lambda item: item[0].name_hint):
        if not isinstance(func, tirx.PrimFunc):
            continue
        sch = s_tir.Schedule(func)
        # The outermost block: "root", or the one block of an extern call (TopK's call_packed).
        todo = [sch.get_sblock(func.body.block.name_hint)]
        while todo:
            rv = todo.pop(0)
            block = sch.get(rv)
            kinds = "".join(_ITER_KINDS.get(int(iv.iter_type), "O") for iv in block.iter_vars)
            found.append((f"{gvar.name_hint}/{block.name_hint}", kinds))
            todo.extend(sch.get_child_blocks(rv))
    return tuple(found)


def retile(factors: Sequence[int], extent: int, max_innermost: int = -1) -> list[int]:
    """Tile factors whose product is `extent`, close to `factors`: innermost first, each factor
    kept where it divides what is left, else moved to the nearest divisor (by ratio) of it;
    the outermost takes the rest. Where that ends trivial (one factor above 1) and `factors`
    was not, a second pass leaves room for the outer factors."""
    factors = [int(f) for f in factors]
    if math.prod(factors) == extent:
        return factors
    tiles = _greedy(factors, extent, max_innermost, leave_room=False)
    if trivial(tiles) and not trivial(factors):
        tiles = _greedy(factors, extent, max_innermost, leave_room=True)
    return tiles


def _greedy(factors: list[int], extent: int, max_innermost: int, *, leave_room: bool) -> list[int]:
    tiles = [1] * len(factors)
    rest = extent
    for i in range(len(factors) - 1, 0, -1):
        want = factors[i]
        cap = max_innermost if i == len(factors) - 1 and max_innermost > 0 else rest
        options = [d for d in divisors(rest) if d <= cap]
        if leave_room and want > 1 and any(f > 1 for f in factors[:i]):
            # Keep something above 1 for the outer factors the source also tiled.
            options = [d for d in options if 1 < d < rest] or options
        tiles[i] = min(options, key=lambda d: (abs(math.log(d / want)), d))
        rest //= tiles[i]
    tiles[0] = rest
    return tiles


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def trivial(tiles: Sequence[int]) -> bool:
    """A split that tiles nothing: every factor 1 but at most one."""
    return sum(1 for t in tiles if t > 1) <= 1


class _Provider:
    """The decision provider for Trace.apply_to_schedule: re-derives tile decisions for the
    target's extents, keeps the others, and notes what it supplied."""

    def __init__(self, sch: Any, *, allow_trivial: bool) -> None:
        self.sch = sch
        self.allow_trivial = allow_trivial
        self.at = ""  # the instruction being applied, for the failure's detail
        # (instruction, what it decides, decision) per sampling instruction
        self.supplied: list[tuple[str, str, Any]] = []
        self.changes: list[str] = []
        self.rejected = ""  # why a decision could not be carried over

    def __call__(self, inst: Any, inputs: Any, attrs: Any, decision: Any) -> Any:
        self.at = str(inst.kind.name)
        if decision is None:
            return None
        if self.at in _TILES:
            try:
                decision = self._tile(inputs[0], attrs, plain(decision))
            except _Rejected as rejected:
                self.rejected = str(rejected)
                raise
        self.supplied.append((self.at, self._label(inputs), plain(decision)))
        return decision

    def _label(self, inputs: Any) -> str:
        if self.at == "SampleComputeLocation":
            return f"compute location of {self.sch.get(inputs[0]).name_hint}"
        return self.at

    def _tile(self, loop_rv: Any, attrs: Any, old: list[int]) -> list[int]:
        from tvm import tirx

        loop = self.sch.get(loop_rv)
        name = loop.loop_var.name
        if not isinstance(loop.extent, tirx.IntImm) or min(old) < 1:
            raise _Rejected(f"{name}: a loop of dynamic extent (in the source or the target)")
        extent = int(loop.extent.value)
        max_innermost = int(attrs[1]) if self.at == "SamplePerfectTile" else -1
        new = retile(old, extent, max_innermost)
        if new == old:
            return old
        change = f"{name} {math.prod(old)}->{extent}: {old}->{new}"
        if extent > 1 and trivial(new) and not trivial(old):
            why = "prime" if len(divisors(extent)) == 2 else "no room"
            if not (self.allow_trivial and why == "prime"):
                raise _Rejected(f"{change} is a trivial split ({why} extent)")
            change += f" (trivial: {why} extent)"
        if self.at == "SamplePartitionedTile":
            position, factor = int(attrs[1]), int(attrs[2])
            if math.prod(new[position:]) % factor:
                raise _Rejected(f"{change}: inner part not a multiple of {factor}")
        self.changes.append(change)
        return new


def replay(
    trace: Any,
    target_workload: Any,
    target: Any,
    *,
    postprocs: Sequence[Any] | None = None,
    rand_state: int = 0,
    allow_trivial: bool = False,
) -> Replayed:
    """Apply a tuning record's trace to the target workload, with its decisions re-derived for
    the target's extents, then the postprocessors (`postprocs`, else the target's defaults).

    `rand_state` seeds the schedule (only a sampling instruction without a decision draws).
    `allow_trivial`: a split left trivial by a prime extent counts as re-derived, not failed
    (every schedule of that loop splits it trivially); one left trivial for want of room fails.
    """
    from tvm import s_tir

    if rand_state < 0:
        raise ValueError(f"rand_state cannot be negative but got {rand_state}.")
    # As TVM normalizes a TuneContext's rand_state: the schedule itself refuses 0.
    sch = s_tir.Schedule(target_workload, seed=rand_state % _MODULUS or 1)
    provider = _Provider(sch, allow_trivial=allow_trivial)
    # 1. Replay, re-deriving tiles as the instructions come.
    try:
        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    except Exception as error:  # ours, or TVM's for an instruction the loop nest does not fit
        # TVM's FFI turns an exception raised in the provider into a RuntimeError.
        return _failed(f"{provider.at}: {provider.rejected or one_line(error)}")
    # 2. Decisions TVM changed after us (a compute location at a loop now of extent 1).
    moved = _moved(provider.supplied, sch.trace)
    if moved is None:
        return _failed("the replayed trace does not line up with the source's decisions")
    changes = provider.changes + moved
    # 3. Postprocess as the search does its candidates.
    why = _postprocess(sch, target_workload, target, postprocs)
    if why:
        return _failed(why)
    if not changes:
        return Replayed(sch, AS_IS, 0, "every decision kept")
    return Replayed(sch, RE_DERIVED, len(changes), "; ".join(changes))


def _failed(detail: str) -> Replayed:
    return Replayed(None, FAILED, 0, detail)


def _moved(supplied: list[tuple[str, str, Any]], trace: Any) -> list[str] | None:
    """What TVM decided otherwise than supplied, or None where the two do not line up. TVM
    moves a compute location that is no longer one (now a loop of extent 1, say) to the
    nearest one further out: a valid placement, if not the source's."""
    taken = [
        (str(inst.kind.name), plain(trace.decisions[inst]))
        for inst in trace.insts
        if inst in trace.decisions
    ]
    if [kind for kind, _ in taken] != [kind for kind, _, _ in supplied]:
        return None
    return [
        f"{label} {old}->{new} (by TVM)"
        for (_, label, old), (_, new) in zip(supplied, taken, strict=True)
        if old != new
    ]


def _postprocess(sch: Any, workload: Any, target: Any, postprocs: Any) -> str | None:
    """Why a postprocessor rejected the schedule, or None when all accepted it."""
    from tvm.s_tir import meta_schedule as ms

    _tvm.load_tensor_intrinsics(target)
    context = ms.TuneContext(
        mod=workload, target=target, space_generator="post-order-apply", logger=_tvm.quiet_logger()
    )
    if postprocs is None:
        postprocs = context.space_generator.postprocs
    else:  # the caller's, initialized for this target without touching theirs
        postprocs = [p.clone() for p in postprocs]
        for p in postprocs:
            p._initialize_with_tune_context(context)
    sch.enter_postproc()
    for p in postprocs:
        name = type(p).__name__
        try:
            if not p.apply(sch):
                return f"postprocessor {name} rejected the schedule"
        except Exception as error:
            return f"postprocessor {name}: {one_line(error)}"
    return None


def plain(decision: Any) -> Any:
    """A decision as Python data: an int, or a list of ints for tiles."""
    if isinstance(decision, int) or not hasattr(decision, "__len__"):
        return int(decision)
    return [int(d) for d in decision]


def one_line(error: BaseException) -> str:
    """The last non-empty line of an error, where TVM puts what went wrong."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__
