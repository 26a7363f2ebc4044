"""Transfer-tuning's replay on real TVM: a schedule found by a few steps of MetaSchedule's search
on one convolution (or matmul) replays on the same workload unchanged, on other shapes with its
tiles re-derived (and still computes the right result), and fails, saying why, where a loop's
new extent leaves only a trivial split or the trace does not fit the workload."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import s_tir, te, topi
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.postproc import PyPostproc

import onnx_models
from tune_orchestrator import _tvm
from tune_orchestrator.model.importer import fuse_for_tuning, import_to_relax
from tune_orchestrator.model.loading import load_model
from tune_orchestrator.model.targets import resolve_target
from tune_orchestrator.model.tasks import arg_specs, extract_tasks
from tune_orchestrator.search.transfer import (
    AS_IS,
    FAILED,
    RE_DERIVED,
    replay,
    retile,
    same_kind,
    trivial,
)

TILE = "SamplePerfectTile"


def conv(*, c=8, hw=16, f=16, k=3, depthwise=False):
    x = te.placeholder((1, c, hw, hw), name="x")
    if depthwise:
        w = te.placeholder((c, 1, k, k), name="w")
        y = topi.nn.depthwise_conv2d_nchw(x, w, 1, 1, 1)
    else:
        w = te.placeholder((f, c, k, k), name="w")
        y = topi.nn.conv2d_nchw(x, w, 1, 1, 1)
    return tvm.IRModule({"main": te.create_prim_func([x, w, y])})


def matmul(m=64, n=64, k=64):
    a, b = te.placeholder((m, k), name="a"), te.placeholder((k, n), name="b")
    return tvm.IRModule({"main": te.create_prim_func([a, b, topi.matmul(a, b)])})


def pool(c=8, hw=16):
    x = te.placeholder((1, c, hw, hw), name="x")
    y = topi.nn.pool2d(x, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), "max")
    return tvm.IRModule({"main": te.create_prim_func([x, y])})


@pytest.fixture(scope="module")
def target():
    target = resolve_target("llvm").target
    _tvm.load_tensor_intrinsics(target)
    return target


def tiles(trace) -> list[list[int]]:
    """The trace's tile decisions, loop by loop, in the order the trace splits them."""
    return [
        [int(f) for f in trace.decisions[inst]] for inst in trace.insts if inst.kind.name == TILE
    ]


def searched(workload, target, *, tiled: list[int]):
    """A schedule from a few steps of MetaSchedule's evolutionary search (random cost model):
    the first proposed whose splits of the loops `tiled` (indices in trace order) all tile."""
    ctx = ms.TuneContext(
        mod=workload,
        target=target,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.EvolutionarySearch(
            population_size=16, genetic_num_iters=1, init_measured_ratio=0
        ),
        rand_state=1,
        num_threads=1,
        logger=_tvm.quiet_logger(),
    )
    ctx.pre_tuning(
        max_trials=64,
        num_trials_per_iter=8,
        design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(seed=1),
    )
    for candidate in ctx.generate_measure_candidates():
        found = tiles(candidate.sch.trace)
        if all(not trivial(found[i]) for i in tiled):
            return candidate.sch
    raise AssertionError("the search proposed no schedule that tiles the loops wanted")


@pytest.fixture(scope="module")
def conv_schedule(target):
    # Trace order of conv2d_nchw's splits: n, ff, yy, xx, rc, ry, rx.
    return searched(conv(), target, tiled=[1, 2, 3])


@pytest.fixture(scope="module")
def matmul_schedule(target):
    return searched(matmul(), target, tiled=[0, 1])  # i and j


def build(mod, target):
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    # As measure/_worker.py builds a candidate.
    return tvm.compile(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def outputs(mod, target, workload):
    """What `mod` (a schedule of `workload`) writes, on the same random inputs each time."""
    *inputs, output = arg_specs(ms.arg_info.ArgInfo.from_prim_func(workload["main"]))
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(shape).astype(dtype)) for dtype, shape in inputs]
    args.append(tvm.runtime.tensor(np.zeros(output[1], output[0])))
    build(mod, target)["main"](*args)
    return args[-1].numpy()


def assert_computes(replayed, workload, target):
    expected = outputs(workload, target, workload)  # the unscheduled loop nest
    got = outputs(replayed.schedule.mod, target, workload)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


# 1. The same workload: nothing to re-derive.


def test_on_its_own_workload_the_trace_replays_as_is_to_the_same_module(conv_schedule, target):
    replayed = replay(conv_schedule.trace, conv(), target)
    assert (replayed.outcome, replayed.changed) == (AS_IS, 0), replayed.detail
    # The postprocessors ran: the module is the search's postprocessed candidate, not the
    # bare replay of its decisions.
    assert tvm_ffi.structural_equal(replayed.schedule.mod, conv_schedule.mod)


# 2. Other shapes: the tiles follow the new extents and the schedule stays right.


def test_on_other_conv_shapes_tiles_are_re_derived_and_the_schedule_computes(conv_schedule, target):
    workload = conv(c=12, hw=12, f=24)
    replayed = replay(conv_schedule.trace, workload, target)
    assert replayed.outcome == RE_DERIVED, replayed.detail
    new = tiles(replayed.schedule.trace)
    extents = [1, 24, 12, 12, 12, 3, 3]
    assert [int(np.prod(t)) for t in new] == extents
    old = tiles(conv_schedule.trace)
    # Every loop whose extent changed got new factors, none of them a trivial fallback.
    assert replayed.changed == sum(np.prod(o) != e for o, e in zip(old, extents, strict=True))
    assert all(not trivial(t) for t in new[1:4])
    assert_computes(replayed, workload, target)


def test_on_other_matmul_shapes_tiles_are_re_derived_and_the_schedule_computes(
    matmul_schedule, target
):
    workload = matmul(m=48, n=96, k=32)
    replayed = replay(matmul_schedule.trace, workload, target)
    assert replayed.outcome == RE_DERIVED and replayed.changed == 3, replayed.detail
    assert [int(np.prod(t)) for t in tiles(replayed.schedule.trace)] == [48, 96, 32]
    assert "by TVM" not in replayed.detail  # re-derived here, not left to TVM's repair
    assert_computes(replayed, workload, target)


def test_a_compute_location_tvm_moves_off_a_unit_loop_counts_as_re_derived(conv_schedule, target):
    # pad_temp computed inside rc's inner tile; with one input channel that loop is of extent 1,
    # no longer a compute location, so TVM moves pad_temp to the nearest one further out.
    trace = conv_schedule.trace
    at = next(i for i in trace.insts if i.kind.name == "SampleComputeLocation")
    inner_rc = 15  # n0 ff0 yy0 xx0 n1 ff1 yy1 xx1 rc0 ry0 rx0 n2 ff2 yy2 xx2 rc1
    trace = trace.with_decision(at, inner_rc, remove_postproc=True)
    workload = conv(c=1)
    replayed = replay(trace, workload, target)
    assert replayed.outcome == RE_DERIVED, replayed.detail
    assert re.search(r"compute location of pad_temp 15->\d+ \(by TVM\)", replayed.detail)
    assert replayed.changed == 2  # rc's tiles too
    assert_computes(replayed, workload, target)


def test_between_the_convolutions_of_an_onnx_model(tmp_path, target):
    # Fused with their ReLU, weights rewritten to the schedule's layout by its postprocessors.
    model = onnx_models.tiny_cnn(tmp_path / "twin.onnx", twin_convs=True)
    fused = fuse_for_tuning(import_to_relax(load_model(model)), target)
    first, second = (t for t in extract_tasks(fused, target) if "conv2d" in t.name)
    assert same_kind(first.workload, second.workload)
    source = searched(first.workload, target, tiled=[])
    replayed = replay(source.trace, second.workload, target)
    assert replayed.outcome == RE_DERIVED, replayed.detail
    assert_computes(replayed, second.workload, target)


# 3. A loop whose new extent only splits trivially.


def test_a_prime_extent_is_not_split_trivially_in_silence(conv_schedule, target):
    replayed = replay(conv_schedule.trace, conv(hw=13), target)
    assert replayed.outcome == FAILED and replayed.schedule is None
    assert "yy 16->13" in replayed.detail and "trivial split (prime extent)" in replayed.detail


def test_allowed_a_trivial_split_is_re_derived_and_says_so(conv_schedule, target):
    workload = conv(hw=13)
    replayed = replay(conv_schedule.trace, workload, target, allow_trivial=True)
    assert replayed.outcome == RE_DERIVED
    assert "yy 16->13" in replayed.detail and "(trivial: prime extent)" in replayed.detail
    assert_computes(replayed, workload, target)


@pytest.mark.parametrize(
    ("factors", "extent", "expected"),
    [
        ([2, 4, 1, 16], 128, [2, 4, 1, 16]),  # same product: kept
        ([2, 8, 1, 1], 12, [2, 6, 1, 1]),  # inner ones divide, 8 moves to 6
        ([4, 2, 2, 1], 24, [6, 2, 2, 1]),  # the outermost absorbs the rest
        ([2, 1, 1, 16], 15, [3, 1, 1, 5]),  # 15 innermost would leave the outer ones 1
        ([2, 4, 1, 16], 16, [1, 2, 1, 8]),  # 16 innermost would too
        ([2, 1, 1, 2], 25, [5, 1, 1, 5]),  # 1 is nearer to 2 than 5 is, but trivial
        ([2, 8, 1, 1], 13, [1, 13, 1, 1]),  # prime: only a trivial split exists
        ([4, 1, 1, 8], 8, [2, 1, 1, 4]),
    ],
)
def test_factors_follow_the_new_extent(factors, extent, expected):
    assert retile(factors, extent) == expected


def test_the_innermost_factor_keeps_within_its_limit():
    assert retile([1, 1, 1, 64], 96, max_innermost=64) == [2, 1, 1, 48]


def partitioned(extent):
    """A loop split by SamplePartitionedTile (as tensor-core tiling does): its inner two factors
    must multiply to a multiple of 4."""
    x = te.placeholder((extent,), name="x")
    y = te.compute((extent,), lambda i: x[i] * 2.0, name="y")
    return tvm.IRModule({"main": te.create_prim_func([x, y])})


@pytest.mark.parametrize(("extent", "outcome"), [(16, AS_IS), (24, RE_DERIVED), (18, FAILED)])
def test_partitioned_tiles_keep_their_inner_part(extent, outcome, target):
    sch = s_tir.Schedule(partitioned(16))
    (loop,) = sch.get_loops(sch.get_sblock("y"))
    factors = sch.sample_partitioned_tile(
        loop, n=4, partition_pos=2, innerpart_factor=4, decision=[2, 2, 2, 2]
    )
    sch.split(loop, factors)
    replayed = replay(sch.trace, partitioned(extent), target)
    assert replayed.outcome == outcome, replayed.detail
    if outcome == FAILED:  # 18 = [1, 3, 3, 2]: 3 * 2 is no multiple of 4
        assert "inner part not a multiple of 4" in replayed.detail


# 4. Which workloads are worth trying.


def test_same_kind_across_shapes_not_across_operators():
    assert same_kind(conv(), conv(c=12, hw=12, f=24, k=5))
    assert same_kind(matmul(), matmul(m=8, n=100, k=3))
    assert not same_kind(conv(), matmul())
    assert not same_kind(conv(), pool())
    assert not same_kind(conv(), conv(depthwise=True))


# 5. Traces that do not fit: failures as data.


def test_a_trace_that_does_not_fit_fails_with_a_reason(conv_schedule, matmul_schedule, target):
    replayed = replay(matmul_schedule.trace, conv(), target)
    assert (replayed.outcome, replayed.schedule, replayed.changed) == (FAILED, None, 0)
    assert "GetSBlock" in replayed.detail and "T_matmul" in replayed.detail
    assert "\n" not in replayed.detail


@derived_object
class Refuse(PyPostproc):
    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch) -> bool:
        return False

    def clone(self):
        return Refuse()


def test_a_postprocessor_that_rejects_fails_the_replay(conv_schedule, target):
    replayed = replay(conv_schedule.trace, conv(), target, postprocs=[Refuse()])
    assert replayed.outcome == FAILED and "rejected" in replayed.detail
