"""Make the bundled example model, examples/smallcnn.onnx: a small image classifier.

    python examples/make_example.py [--out examples/smallcnn.onnx]

Conv-BatchNorm-ReLU x3 (the last two with stride 2), global average pooling and a dense
layer, on a 1x3x64x64 image: ~30 MFLOP, small enough to tune visibly in a few minutes on two
cores. The weights are random but fixed (seed 0), so the file is the same on every run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INPUT_SHAPE = (1, 3, 64, 64)
CLASSES = 10


def build_model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def add(name: str, values: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(values.astype("float32"), name))
        return name

    def conv_bn_relu(x: str, name: str, cin: int, cout: int, stride: int) -> str:
        w = add(f"{name}.w", rng.standard_normal((cout, cin, 3, 3)) * (2.0 / (cin * 9)) ** 0.5)
        nodes.append(
            helper.make_node(
                "Conv",
                [x, w],
                [f"{name}.conv"],
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
                strides=[stride, stride],
                name=f"{name}.conv",
            )
        )
        bn = [
            add(f"{name}.gamma", 1.0 + 0.1 * rng.standard_normal(cout)),
            add(f"{name}.beta", 0.1 * rng.standard_normal(cout)),
            add(f"{name}.mean", 0.1 * rng.standard_normal(cout)),
            add(f"{name}.var", rng.uniform(0.5, 1.5, cout)),
        ]
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                [f"{name}.conv", *bn],
                [f"{name}.bn"],
                epsilon=1e-5,
                name=f"{name}.bn",
            )
        )
        nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.out"], name=f"{name}.relu"))
        return f"{name}.out"

    x = conv_bn_relu("image", "block1", 3, 16, 1)
    x = conv_bn_relu(x, "block2", 16, 32, 2)
    x = conv_bn_relu(x, "block3", 32, 64, 2)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["features"], axis=1, name="flatten"))
    fc_w = add("fc.w", rng.standard_normal((CLASSES, 64)) * (1.0 / 64) ** 0.5)
    fc_b = add("fc.b", 0.1 * rng.standard_normal(CLASSES))
    nodes.append(
        helper.make_node("Gemm", ["features", fc_w, fc_b], ["logits"], transB=1, name="fc")
    )

    graph = helper.make_graph(
        nodes,
        "smallcnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [INPUT_SHAPE[0], CLASSES])],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17)],
        producer_name="tune-orchestrator examples",
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("smallcnn.onnx"))
    args = parser.parse_args()
    onnx.save(build_model(), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
