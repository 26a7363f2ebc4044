"""A cheap first check of GPU schedules, run before TVM's postprocessors pay for them.

On a CUDA target, every schedule the evolutionary search makes (a fresh sample or a mutation) is
replayed and then run through the target's postprocessors. The last check, VerifyGPUCode, lowers
the schedule (~15 ms of CPU) to compare its shared memory and threads per block with the GPU's
limits, and rejects most schedules: 97-99% of fresh samples of vggish's convolutions
(benchmarks/search_steps.py, removed after 314362b). Most of those rejections can be read off
the replayed loop nest:

- a shared-memory stage placed by compute_at holds the product of the loops compute_at gave
  it, and the stages one block reads are all live at once;
- a tiled block's threads per block is the product of the threadIdx loops around it, which
  TVM checks against the block's own bounds (ThreadExtentChecker) before it lowers anything.

`GpuPrecheck` reads both in ~0.1 ms and runs before RewriteCooperativeFetch. It rejects a
schedule only when VerifyGPUCode would reject it too, so the search makes the same schedules,
in the same order, as without the check; it only pays less for the ones that fail.

`LaneCheck` runs after RewriteCooperativeFetch on workloads with bfloat16 buffers: TVM's CUDA
code generator holds bfloat16 vectors in pairs and refuses a vector of odd length ("only
support even lane for bfloat16 type"), which a cooperative fetch of 3 lanes makes. Such
schedules passed every postprocessor and failed to build: 3-7 of a round's 16 candidates of
bfloat16 convolutions. Read off the loop nest, the check agreed with the build on all 891
schedules sampled from two bfloat16 CNNs' tasks that TVM's postprocessors accepted (30
refused, each failing to build; none refused that builds). Unlike GpuPrecheck it changes what
the search keeps: schedules that would have failed to build.
"""

from __future__ import annotations

import threading
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.postproc import PyPostproc

# Block annotations MetaSchedule's tiling leaves for ThreadExtentChecker.
_LOW = "meta_schedule.thread_extent_low_inclusive"
_HIGH = "meta_schedule.thread_extent_high_inclusive"
_WARP = "warp_execution"
_THREAD_DIMS = {"threadIdx.x": 0, "threadIdx.y": 1, "threadIdx.z": 2}
VERIFY = "VerifyGPUCode"  # TVM's postprocessor that lowers a schedule to check its limits


def violation(func: Any, *, max_shared_bytes: int, warp_size: int) -> str | None:
    """Why VerifyGPUCode is certain to reject this PrimFunc, or None when it cannot tell."""
    from tvm import tirx
    from tvm.s_tir import SBlockRealize

    for_node, seq_node, int_imm = tirx.For, tirx.SeqStmt, tirx.IntImm

    def visit(stmt: Any, threads: tuple[int, int, int], bound: frozenset[str]) -> str | None:
        # A block counts as in a kernel under a blockIdx and a threadIdx or vthread loop, as
        # for RewriteUnboundBlock, which binds loops above any other block to threads later.
        in_kernel = len(bound) == 2
        while True:
            if isinstance(stmt, for_node):
                binding = stmt.thread_binding
                if binding is not None:
                    tag = str(binding.thread_tag)
                    bound = bound | {"block" if tag.startswith("blockIdx") else "thread"}
                    in_kernel = len(bound) == 2
                    dim = _THREAD_DIMS.get(tag)
                    if dim is not None:
                        if not isinstance(stmt.extent, int_imm):
                            return None  # dynamic: DisallowDynamicLoop's business
                        threads = _with(threads, dim, int(stmt.extent.value))
                stmt = stmt.body
            elif isinstance(stmt, seq_node):
                if in_kernel:
                    found = _shared_in_use(stmt.seq, max_shared_bytes)
                    if found:
                        return found
                for child in stmt.seq:
                    found = visit(child, threads, bound)
                    if found:
                        return found
                return None
            elif isinstance(stmt, SBlockRealize):
                block = stmt.block
                notes = block.annotations
                if _WARP in notes:
                    threads = _with(threads, 0, warp_size)
                if in_kernel and _LOW in notes and _HIGH in notes:
                    low, high = int(notes[_LOW]), int(notes[_HIGH])
                    product = threads[0] * threads[1] * threads[2]
                    if not low <= product <= high:
                        return f"{product} threads per block, outside [{low}, {high}]"
                stmt = block.body
            else:
                return None

    return visit(func.body, (1, 1, 1), frozenset())


def odd_bfloat16_lanes(func: Any) -> str | None:
    """Why CUDA's code generator is certain to refuse this PrimFunc: a vectorized loop of odd
    extent around a block copying into a bfloat16 buffer (a guarded copy, padding's
    if_then_else, is scalarized and builds); None otherwise."""
    from tvm import tirx
    from tvm.ir.expr import TensorLoad
    from tvm.s_tir import SBlockRealize

    def visit(stmt: Any, lanes: int) -> str | None:
        if isinstance(stmt, tirx.For):
            if stmt.kind == tirx.ForKind.VECTORIZED and isinstance(stmt.extent, tirx.IntImm):
                lanes = int(stmt.extent.value)
            return visit(stmt.body, lanes)
        if isinstance(stmt, tirx.SeqStmt):
            return next(filter(None, (visit(child, lanes) for child in stmt.seq)), None)
        if isinstance(stmt, SBlockRealize):
            body = stmt.block.body
            copy = isinstance(body, tirx.BufferStore) and isinstance(body.value, TensorLoad)
            if lanes > 1 and lanes % 2 and copy and str(body.buffer.dtype) == "bfloat16":
                return f"a vector of {lanes} bfloat16 lanes, which CUDA's code generator refuses"
            return visit(body, lanes)
        inner = getattr(stmt, "body", None)
        return visit(inner, lanes) if inner is not None else None

    return visit(func.body, 1)


def _with(threads: tuple[int, int, int], dim: int, extent: int) -> tuple[int, int, int]:
    return tuple(extent if i == dim else t for i, t in enumerate(threads))  # type: ignore[return-value]


def _shared_in_use(children: Any, limit: int) -> str | None:
    """Siblings under one loop: the shared stages written by some children and read by a later
    child's block are all allocated while that block runs."""
    staged: list[tuple[Any, int]] = []  # (buffer variable, bytes)
    for child in children:
        block, loops = _first_block(child)
        if block is None:
            continue
        size = _stage_bytes(block, loops)
        if size is not None:
            staged.append((block.block.writes[0].source, size))
            continue
        reads = [region.source for region in block.block.reads]
        in_use = sum(size for var, size in staged if any(var.same_as(r) for r in reads))
        if in_use > limit:
            return f"{in_use} bytes of shared memory per block, more than {limit}"
    return None


def _first_block(stmt: Any) -> tuple[Any, list[Any]]:
    """The block at the end of a chain of loops, with those loops (None if it branches)."""
    from tvm import tirx
    from tvm.s_tir import SBlockRealize

    loops = []
    while isinstance(stmt, tirx.For):
        loops.append(stmt)
        stmt = stmt.body
    return (stmt, loops) if isinstance(stmt, SBlockRealize) else (None, loops)


def _stage_bytes(realize: Any, loops: list[Any]) -> int | None:
    """The bytes a shared-memory stage holds at least: the region its own loops write (a
    compute_at stage writes each element of its region once), or None where that is not sure."""
    from tvm import DataType, tirx

    block = realize.block
    if len(block.writes) != 1 or not loops:
        return None
    buffer = block.writes[0].source
    if not str(buffer.scope()).startswith("shared"):
        return None
    if not isinstance(realize.predicate, tirx.IntImm) or not int(realize.predicate.value):
        return None  # a guarded stage may write less than its loops cover
    if any(int(iv.iter_type) != 0 for iv in block.iter_vars):
        return None  # only data-parallel stages write a new element per iteration
    elements = 1
    for loop in loops:
        if loop.thread_binding is not None or not isinstance(loop.extent, tirx.IntImm):
            return None
        elements *= int(loop.extent.value)
    dtype = DataType(buffer.dtype)
    return elements * ((dtype.bits * dtype.lanes + 7) // 8)


@derived_object
class GpuPrecheck(PyPostproc):
    """The check as a MetaSchedule postprocessor; `rejected` counts its rejections by reason
    (shared by the clones TVM makes for its search threads)."""

    def __init__(self, counts: dict[str, int] | None = None, lock: Any = None) -> None:
        super().__init__()
        self.max_shared_bytes = 0
        self.warp_size = 0
        self.rejected = counts if counts is not None else {"shared memory": 0, "threads": 0}
        self._lock = lock or threading.Lock()

    def _initialize_with_tune_context(self, context: Any) -> None:
        target = context.target
        self.max_shared_bytes = int(target.attrs["max_shared_memory_per_block"])
        self.warp_size = int(target.attrs["thread_warp_size"])

    def apply(self, sch: Any) -> bool:
        from tvm import tirx

        for func in sch.mod.functions.values():
            if not isinstance(func, tirx.PrimFunc):
                continue
            why = violation(func, max_shared_bytes=self.max_shared_bytes, warp_size=self.warp_size)
            if why is not None:
                with self._lock:
                    self.rejected["threads" if "threads" in why else "shared memory"] += 1
                return False
        return True

    def clone(self) -> GpuPrecheck:
        twin = GpuPrecheck(self.rejected, self._lock)
        twin.max_shared_bytes, twin.warp_size = self.max_shared_bytes, self.warp_size
        return twin


@derived_object
class LaneCheck(PyPostproc):
    """odd_bfloat16_lanes as a postprocessor, after RewriteCooperativeFetch (which makes the
    vectors); it counts into a GpuPrecheck's `rejected`, under "bfloat16 lanes"."""

    def __init__(self, precheck: GpuPrecheck) -> None:
        super().__init__()
        self.precheck = precheck

    def _initialize_with_tune_context(self, context: Any) -> None:
        pass

    def apply(self, sch: Any) -> bool:
        from tvm import tirx

        for func in sch.mod.functions.values():
            if isinstance(func, tirx.PrimFunc) and odd_bfloat16_lanes(func) is not None:
                with self.precheck._lock:
                    self.precheck.rejected[LANES] = self.precheck.rejected.get(LANES, 0) + 1
                return False
        return True

    def clone(self) -> LaneCheck:
        return LaneCheck(self.precheck)


LANES = "bfloat16 lanes"
FETCH = "RewriteCooperativeFetch"  # the postprocessor that vectorizes shared-memory copies


def with_precheck(postprocs: list[Any], precheck: Any, *, lanes: bool = False) -> list[Any]:
    """The target's postprocessors with `precheck` first after DisallowDynamicLoop, where the
    list ends in VerifyGPUCode's kind of check (GPU targets), and with `lanes` a LaneCheck
    after RewriteCooperativeFetch; unchanged otherwise."""
    names = [type(p).__name__ for p in postprocs]
    if VERIFY not in names:  # CPU targets: nothing is lowered to be checked
        return list(postprocs)
    if lanes and FETCH in names:
        at = names.index(FETCH) + 1
        postprocs = [*postprocs[:at], LaneCheck(precheck), *postprocs[at:]]
    at = names.index("DisallowDynamicLoop") + 1 if "DisallowDynamicLoop" in names else 0
    return [*postprocs[:at], precheck, *postprocs[at:]]


def space_generator(
    workload: Any, target: Any, *, verify: bool = True, counts_with: GpuPrecheck | None = None
) -> tuple[Any, GpuPrecheck | None]:
    """The design space generator TVM picks for `target` (its own rules, postprocessors and
    mutators), with a GpuPrecheck among the postprocessors on GPU targets; and that precheck,
    for its counts. Elsewhere TVM's "post-order-apply" as it is, and None.

    `verify=False` leaves VerifyGPUCode out: the caller verifies what it keeps of the
    schedules this generator's postprocessors accept. `counts_with`: a precheck whose counts
    the new one adds to."""
    from tvm.s_tir import meta_schedule as ms

    defaults = ms.TuneContext(
        mod=workload, target=target, space_generator="post-order-apply"
    ).space_generator
    precheck = (
        GpuPrecheck(counts_with.rejected, counts_with._lock) if counts_with else GpuPrecheck()
    )
    postprocs = [p.clone() for p in defaults.postprocs]
    gpu = any(type(p).__name__ == VERIFY for p in postprocs)  # else nothing is lowered to check
    postprocs = with_precheck(postprocs, precheck, lanes=gpu and _holds_bfloat16(workload))
    if len(postprocs) == len(defaults.postprocs):
        return "post-order-apply", None
    if not verify:
        postprocs = [p for p in postprocs if type(p).__name__ != VERIFY]
    generator = ms.space_generator.PostOrderApply(
        sch_rules=[rule.clone() for rule in defaults.sch_rules],
        postprocs=postprocs,
        mutator_probs={m.clone(): float(p) for m, p in defaults.mutator_probs.items()},
    )
    return generator, precheck


def _holds_bfloat16(workload: Any) -> bool:
    """Whether a PrimFunc of the workload takes or makes a bfloat16 buffer."""
    from tvm import tirx

    return any(
        "bfloat16" in func.script() for func in workload.functions.values()
        if isinstance(func, tirx.PrimFunc)
    )  # fmt: skip
