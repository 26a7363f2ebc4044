"""Models for benchmarks, made here so nothing large is committed.

    python benchmarks/models.py --out benchmarks/work/resnetish.onnx

`resnetish`: a small ResNet (stem, three stages of two residual blocks with 16/32/64 channels,
global pooling, dense) on a 1x3x64x64 image: ~12 tuning tasks, ~0.2 GFLOP, several tasks
called more than once.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def resnetish(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    names = iter(range(10_000))

    def add(values: np.ndarray) -> str:
        name = f"p{next(names)}"
        inits.append(numpy_helper.from_array(values.astype("float32"), name))
        return name

    def conv_bn(x: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
        out = f"t{next(names)}"
        w = add(rng.standard_normal((cout, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5)
        pad = k // 2
        nodes.append(
            helper.make_node(
                "Conv",
                [x, w],
                [out + "c"],
                kernel_shape=[k, k],
                pads=[pad] * 4,
                strides=[stride, stride],
            )
        )
        bn = [
            add(1 + 0.1 * rng.standard_normal(cout)),
            add(0.1 * rng.standard_normal(cout)),
            add(0.1 * rng.standard_normal(cout)),
            add(rng.uniform(0.5, 1.5, cout)),
        ]
        nodes.append(
            helper.make_node("BatchNormalization", [out + "c", *bn], [out + "b"], epsilon=1e-5)
        )
        if not relu:
            return out + "b"
        nodes.append(helper.make_node("Relu", [out + "b"], [out]))
        return out

    def block(x: str, cin: int, cout: int, stride: int) -> str:
        y = conv_bn(x, cin, cout, 3, stride, relu=True)
        y = conv_bn(y, cout, cout, 3, 1, relu=False)
        shortcut = (
            x if stride == 1 and cin == cout else conv_bn(x, cin, cout, 1, stride, relu=False)
        )
        out = f"t{next(names)}"
        nodes.append(helper.make_node("Add", [y, shortcut], [out + "a"]))
        nodes.append(helper.make_node("Relu", [out + "a"], [out]))
        return out

    x = conv_bn("image", 3, 16, 3, 1, relu=True)
    for cin, cout, stride in [
        (16, 16, 1),
        (16, 16, 1),
        (16, 32, 2),
        (32, 32, 1),
        (32, 64, 2),
        (64, 64, 1),
    ]:
        x = block(x, cin, cout, stride)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"]))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["features"], axis=1))
    nodes.append(
        helper.make_node(
            "Gemm",
            [
                "features",
                add(rng.standard_normal((10, 64)) * 0.125),
                add(0.1 * rng.standard_normal(10)),
            ],
            ["logits"],
            transB=1,
        )
    )
    graph = helper.make_graph(
        nodes,
        "resnetish",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "work" / "resnetish.onnx"
    )
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(resnetish(), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
