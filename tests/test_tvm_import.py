"""The fast tensor-intrinsic import registers exactly what TVM's own import registers."""

import functools
import json
import subprocess
import sys

import pytest

PROBE = r"""
import hashlib, json, sys
import tvm
from tvm.s_tir import TensorIntrin
names = []
register = TensorIntrin.register
TensorIntrin.register = staticmethod(lambda name, *a, **k: (names.append(name), register(name, *a, **k))[1])
if sys.argv[1] == "fast":
    from tune_orchestrator import _tvm
    _tvm.load_tensor_intrinsics()
elif sys.argv[1] == "cpu-then-cuda":
    from tune_orchestrator import _tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm import te

    a = te.placeholder((64,), name="a")
    add = te.create_prim_func([a, te.compute((64,), lambda i: a[i] + 1.0, name="b")])

    cpu = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    _tvm.load_tensor_intrinsics(cpu)
    print(json.dumps({"cuda_loaded": "tvm.s_tir.tensor_intrin.cuda" in sys.modules,
                      "after_cpu": len(names)}))
    # TVM's own `import tvm.s_tir.tensor_intrin` in TuneContext must not load the rest.
    ctx = ms.TuneContext(mod=tvm.IRModule({"main": add}), target=cpu, task_name="add",
                         space_generator="post-order-apply")
    assert ctx.generate_design_space()
    print(json.dumps({"cuda_loaded": "tvm.s_tir.tensor_intrin.cuda" in sys.modules}))
    _tvm.load_tensor_intrinsics(tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))
else:
    import tvm.s_tir.tensor_intrin
digests = {}
for name in names:
    intrin = TensorIntrin.get(name)
    text = tvm.ir.save_json(intrin.desc) + tvm.ir.save_json(intrin.impl)
    digests[name] = hashlib.sha256(text.encode()).hexdigest()
print(json.dumps(digests))
"""


def probe(mode: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], check=True, capture_output=True, text=True
    )
    return [json.loads(line) for line in out.stdout.strip().splitlines() if line.startswith("{")]


@functools.cache
def registered(mode: str) -> dict[str, str]:
    return probe(mode)[-1]


@pytest.mark.slow
def test_fast_import_registers_the_same_intrinsics():
    fast, plain = registered("fast"), registered("plain")
    assert len(plain) > 100
    assert fast == plain


def test_a_cpu_target_skips_cudas_intrinsics_until_a_cuda_target_needs_them():
    """CUDA's intrinsics are 3.3 s of the 4.2 s import (2-core VM), on a CPU run's first
    round; a later CUDA target in the same process still gets every intrinsic."""
    after_cpu, after_context, final = probe("cpu-then-cuda")
    assert after_cpu["cuda_loaded"] is False and after_cpu["after_cpu"] > 10
    assert after_context["cuda_loaded"] is False
    assert final == registered("fast")  # all of them, as the plain import (above)
