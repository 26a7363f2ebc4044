"""ONNX Gather, imported as TVM's `take` in its "fast" mode, given the "clip" mode instead.

TVM 0.27's importer writes each Gather (an embedding's lookup, say) as `relax.op.take` with
mode "fast": no bounds check, so an index out of range reads outside the table and may crash
the process that runs the shipped model.so; TVM says as much on stderr ("Fast mode segfaults
when there are out-of-bounds indices") at every compile, three times a run. ONNX calls such
an index an error (onnxruntime refuses it); "clip" keeps the read inside the table, gives
the same outputs for every index in range, and adds a min and a max per index to kernels
that move memory.
"""

from __future__ import annotations

from typing import Any


def clipped(mod: Any) -> Any:
    """`mod` (a Relax IRModule) with every `take` in "fast" mode given "clip"; `mod` itself
    where there is none."""
    from tvm import relax

    found = False

    @relax.expr_functor.mutator
    class Clip(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            nonlocal found
            call = super().visit_call_(call)
            if getattr(call.op, "name", None) != "relax.take" or call.attrs.mode != "fast":
                return call
            found = True
            data, indices = call.args
            return relax.op.take(data, indices, call.attrs.axis, mode="clip")

    mutator = Clip(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get() if found else mod
