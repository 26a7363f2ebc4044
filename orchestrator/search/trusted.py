"""What a replayed MetaSchedule trace may hold: the instruction kinds and annotation keys that
TVM 0.27's own schedule rules, postprocessors and default (dlight) schedules emit.

A trace read from a file (the tuning library, a --warm-start run directory, waiting.jsonl) is a
program: an Annotate with `pragma_import_llvm` links its value, LLVM IR, into the kernel that
is built and run, and could reach model.so. Only a trace the search itself could have made is
replayed. The lists come from TVM's sources (src/s_tir/meta_schedule/schedule_rule/, postproc/,
schedule/, python/tvm/s_tir/dlight/gpu/) and from the traces its search proposes for llvm and
CUDA targets (tests/test_trusted.py proposes them again, so a TVM that emits more fails there).
"""

from __future__ import annotations

from typing import Any

# Every target: looking up blocks and loops, sampling, loop and block transformations,
# caching, inlining, reductions, tensorization, the postprocessors' mark.
_KINDS = frozenset(
    {
        "GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers",
        "SamplePerfectTile", "SamplePartitionedTile", "SampleCategorical",
        "SampleComputeLocation", "Split", "Fuse", "Reorder", "AddUnitLoop", "ComputeAt",
        "ReverseComputeAt", "ComputeInline", "ReverseComputeInline", "CacheRead", "CacheWrite",
        "ReIndex", "RFactor", "DecomposeReduction", "Annotate", "Unannotate", "Unroll",
        "Vectorize", "Blockize", "Tensorize", "PadEinsum", "TransformLayout",
        "TransformBlockLayout", "StorageAlign", "SetScope", "EnterPostproc",
    }
)  # fmt: skip
_CPU_KINDS = _KINDS | {"Parallel"}
_GPU_KINDS = _KINDS | {"Bind", "ReadAt", "WriteAt"}

# Annotation keys: tiling, compute location, unrolling, tensorization, layout rewriting, and
# "schedule_rule", which ApplyCustomRule removes from a workload's blocks.
_KEYS = frozenset(
    {
        "meta_schedule.tiling_structure", "meta_schedule.random_compute_producer",
        "meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit",
        "meta_schedule.auto_tensorize", "meta_schedule.auto_tensorize_init",
        "meta_schedule.layout_rewrite_preproc", "pragma_auto_unroll_max_step",
        "pragma_unroll_explicit", "schedule_rule",
    }
)  # fmt: skip
_CPU_KEYS = _KEYS | {"meta_schedule.parallel", "meta_schedule.vectorize"}
_GPU_KEYS = _KEYS | {
    "meta_schedule.cooperative_fetch", "meta_schedule.thread_extent_low_inclusive",
    "meta_schedule.thread_extent_high_inclusive", "software_pipeline_stage",
    "software_pipeline_order", "software_pipeline_async_stages", "permuted_layout",
    "vector_bytes", "local_stage", "double_buffer_scope",
    "tirx.manifest_shared_memory_local_stage", "warp_execution", "pragma_vectorize",
}  # fmt: skip
_ANNOTATIONS = ("Annotate", "Unannotate")


def family(target: Any) -> str:
    """What a trace is checked for: "gpu" where the target's keys say so (cuda), else "cpu"."""
    return "gpu" if "gpu" in {str(k) for k in target.keys} else "cpu"


def untrusted(trace: Any, target: Any) -> str | None:
    """Why `trace` (a tvm.s_tir.Trace) must not be replayed for `target`: an instruction or an
    annotation key that no schedule rule emits for its kind of target, or an annotation whose
    value is more than a number, a string, a sampled variable or a list of those. None when
    every instruction is one the search could have made."""
    gpu = family(target) == "gpu"
    kinds, keys = (_GPU_KINDS, _GPU_KEYS) if gpu else (_CPU_KINDS, _CPU_KEYS)
    where = "GPU" if gpu else "CPU"
    for inst in trace.insts:
        name = str(inst.kind.name)
        if name not in kinds:
            return f"instruction {name}, which no schedule rule emits for {where} targets"
        if name not in _ANNOTATIONS:
            continue
        key = str(inst.attrs[0])
        if key not in keys:
            return f"{name} with key {key!r}, which no schedule rule emits for {where} targets"
        if name == "Annotate" and not _plain(inst.inputs[1]):
            return f"Annotate {key!r} with a value of type {type(inst.inputs[1]).__name__}"
    return None


def _plain(value: Any) -> bool:
    """A number, a string, a sampled variable (tirx.Var), or a list of those."""
    from tvm import tirx
    from tvm_ffi import Array

    if isinstance(value, (bool, int, float, str, tirx.IntImm, tirx.FloatImm, tirx.Var)):
        return True
    if isinstance(value, (list, tuple, Array)):
        return all(_plain(v) for v in value)
    return False
