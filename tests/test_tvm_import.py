"""The fast tensor-intrinsic import registers exactly what TVM's own import registers."""

import json
import subprocess
import sys

PROBE = r"""
import hashlib, json, sys
import tvm
from tvm.s_tir import TensorIntrin
names = []
register = TensorIntrin.register
TensorIntrin.register = staticmethod(lambda name, *a, **k: (names.append(name), register(name, *a, **k))[1])
if sys.argv[1] == "fast":
    from orchestrator import _tvm
    _tvm.load_tensor_intrinsics()
else:
    import tvm.s_tir.tensor_intrin
digests = {}
for name in names:
    intrin = TensorIntrin.get(name)
    text = tvm.ir.save_json(intrin.desc) + tvm.ir.save_json(intrin.impl)
    digests[name] = hashlib.sha256(text.encode()).hexdigest()
print(json.dumps(digests))
"""


def registered(mode: str) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fast_import_registers_the_same_intrinsics():
    fast, plain = registered("fast"), registered("plain")
    assert len(plain) > 100
    assert fast == plain
