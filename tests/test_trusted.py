"""Replayed traces are checked: every trace MetaSchedule's search makes for llvm and for CUDA
(which builds without a GPU) passes, and one holding what no schedule rule emits does not."""

from __future__ import annotations

import pytest
import tvm
from tvm import s_tir, te, topi
from tvm.s_tir import meta_schedule as ms

from tune_orchestrator import _tvm
from tune_orchestrator.model.defaults import default_rules
from tune_orchestrator.search.trusted import untrusted

LLVM = tvm.target.Target({"kind": "llvm", "num-cores": 2})
CUDA = tvm.target.Target(
    {
        "kind": "cuda",
        "arch": "sm_80",
        "max_threads_per_block": 1024,
        "max_shared_memory_per_block": 49152,
        "thread_warp_size": 32,
    }
)


def conv(dtype="float32"):
    x = te.placeholder((1, 8, 14, 14), dtype, name="x")
    w = te.placeholder((16, 8, 3, 3), dtype, name="w")
    y = topi.nn.relu(topi.nn.conv2d_nchw(x, w, 1, 1, 1))
    return tvm.IRModule({"main": te.create_prim_func([x, w, y])})


def matmul(dtype="float32"):
    a = te.placeholder((128, 128), dtype, name="a")
    b = te.placeholder((128, 128), dtype, name="b")
    return tvm.IRModule({"main": te.create_prim_func([a, b, topi.matmul(a, b)])})


def softmax():
    x = te.placeholder((4, 1000), name="x")
    return tvm.IRModule({"main": te.create_prim_func([x, topi.nn.softmax(x)])})


def proposed(mod, target):
    """Each design space of `mod` with its decisions sampled and the target's postprocessors
    applied: the traces the search measures and the database keeps."""
    _tvm.load_tensor_intrinsics(target)
    context = ms.TuneContext(
        mod=mod, target=target, space_generator="post-order-apply", logger=_tvm.quiet_logger()
    )
    traces = []
    for space in context.space_generator.generate_design_space(mod):
        sch = s_tir.Schedule(mod, seed=1)
        space.trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=None)
        sch.enter_postproc()
        if all(p.apply(sch) for p in context.space_generator.postprocs):
            traces.append(sch.trace)
    return traces


@pytest.mark.slow
@pytest.mark.parametrize(
    "target, mods",
    [(LLVM, [conv(), softmax()]), (CUDA, [conv(), softmax(), matmul("float16")])],
    ids=["llvm", "cuda"],
)
def test_every_trace_the_search_makes_for_the_target_is_trusted(target, mods):
    traces = [trace for mod in mods for trace in proposed(mod, target)]
    assert len(traces) >= 3
    assert [untrusted(trace, target) for trace in traces] == [None] * len(traces)


def test_the_default_gpu_schedules_are_trusted():
    """dlight's schedules are the run database's default records on GPUs: a warm start or a
    resume reads them back."""
    for mod in (conv(), softmax(), matmul("float16")):
        with CUDA:
            spaces = [r.apply(mod["main"], CUDA, False) for r in default_rules()]
        space = next(s for s in spaces if s is not None)
        sch = space[0] if isinstance(space, list) else space
        assert untrusted(sch.trace, CUDA) is None


def tiled(mod):
    sch = s_tir.Schedule(mod)
    block = sch.get_sblock("T_matmul")
    i, _, _ = sch.get_loops(block)
    sch.split(i, [None, 8])
    return sch, block


@pytest.mark.parametrize("key", ["pragma_import_llvm", "pragma_import_c"])
def test_an_annotation_that_imports_foreign_code_is_rejected(key):
    sch, block = tiled(matmul())
    assert untrusted(sch.trace, LLVM) is None
    outer = sch.get_loops(block)[0]
    sch.annotate(outer, key, "define void @evil() { ret void }")
    assert untrusted(sch.trace, LLVM) == (
        f"Annotate with key {key!r}, which no schedule rule emits for CPU targets"
    )


def test_an_instruction_no_rule_emits_for_the_target_is_rejected():
    sch, block = tiled(matmul())
    sch.loop_partition(sch.get_loops(block)[2], [None, 32])
    assert "instruction LoopPartition" in untrusted(sch.trace, LLVM)
    gpu, block = tiled(matmul())
    gpu.bind(gpu.get_loops(block)[0], "blockIdx.x")
    assert untrusted(gpu.trace, CUDA) is None
    assert "instruction Bind, which no schedule rule emits for CPU targets" in untrusted(
        gpu.trace, LLVM
    )


def test_an_allowed_key_with_an_expression_for_its_value_is_rejected():
    sch, block = tiled(matmul())
    outer = sch.get_loops(block)[0]
    sch.annotate(outer, "pragma_auto_unroll_max_step", tvm.tirx.call_extern("int32", "system"))
    assert "Annotate 'pragma_auto_unroll_max_step' with a value of type Call" in untrusted(
        sch.trace, LLVM
    )
