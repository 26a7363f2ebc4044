"""Models for benchmarks, made here so nothing large is committed.

    python benchmarks/models.py [--model resnetish|vggish|resnet50ish|mlpish|mobilenetish|
                                         smallvgg|resnet18ish|tinybert]
                                [--out PATH]

`resnetish`: a small ResNet (stem, three stages of two residual blocks with 16/32/64 channels,
global pooling, dense) on a 1x3x64x64 image: ~12 tuning tasks, ~0.2 GFLOP, several tasks
called more than once.
`vggish`: VGG-11's convolutions (64 to 512 channels, five max-pools) on a 1x3x224x224 image,
then global pooling and a 1000-way dense layer instead of VGG's 4096-wide ones (which hold
most of its weights and little of its time): ~15 GFLOP (7.6 G multiply-adds), fp32, batch 1;
15 tuning tasks.
`resnet50ish`: ResNet-50's layout (bottleneck blocks 3-4-6-3, 64 to 2048 channels) on a
1x3x224x224 image, batch-normalised, 1000-way dense: ~8 GFLOP (4.1 G multiply-adds), fp32,
batch 1; 28 tuning tasks.
`mlpish`: three dense layers (768 -> 1024 -> 1024 -> 10, ReLU between) on a flattened
1x3x16x16 image: ~3.9 MFLOP, dense tasks only.
`mobilenetish`: MobileNet-v1's layout cut to six depthwise-separable blocks (a 3x3
depthwise convolution, then a 1x1 one; 32 to 512 channels), batch-normalised, on a 1x3x96x96
image, 10-way dense: ~0.09 GFLOP; 16 tuning tasks, mostly depthwise and pointwise convolutions.
`smallvgg`: a VGG of plain 3x3 convolutions with bias and ReLU (32 to 256 channels, a max-pool
after each of four stages) on a 1x3x64x64 image, 10-way dense: ~0.27 GFLOP, 13 tuning tasks;
about resnetish's work without its residual adds, 1x1 shortcuts and batch norms.
`resnet18ish`: ResNet-18's layout (a 7x7 stem and a max-pool, then four stages of two basic
blocks, 64 to 512 channels), batch-normalised, on a 1x3x64x64 image, 10-way dense: ~0.3 GFLOP,
19 tuning tasks, five of them called twice.
`tinybert`: a two-layer transformer encoder (token ids through a 1000x128 embedding, 4-head
self-attention over 32 tokens, LayerNormalization, an erf GELU in a 512-wide feed-forward
layer), mean over the tokens, 2-way dense: ~27 MFLOP; 16 tuning tasks called 36 times, most
of its time in the feed-forward matmuls.
Weights are random (seeded); the models are for timing, not for accuracy.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Graph:
    """An ONNX graph written layer by layer, with seeded random weights."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self._names = iter(range(1_000_000))

    def _name(self, prefix: str) -> str:
        return f"{prefix}{next(self._names)}"

    def param(self, values: np.ndarray) -> str:
        name = self._name("p")
        self.inits.append(numpy_helper.from_array(values.astype("float32"), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self._name("t")
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        k: int,
        stride: int = 1,
        bias: bool = False,
        group: int = 1,
    ) -> str:
        fan_in = cin // group * k * k
        w = self.param(self.rng.standard_normal((cout, cin // group, k, k)) * (2.0 / fan_in) ** 0.5)
        inputs = [x, w] + ([self.param(0.1 * self.rng.standard_normal(cout))] if bias else [])
        pad = k // 2
        return self.node(
            "Conv",
            inputs,
            kernel_shape=[k, k],
            pads=[pad] * 4,
            strides=[stride, stride],
            group=group,
        )

    def batch_norm(self, x: str, channels: int) -> str:
        scale = self.param(1 + 0.1 * self.rng.standard_normal(channels))
        shift = self.param(0.1 * self.rng.standard_normal(channels))
        mean = self.param(0.1 * self.rng.standard_normal(channels))
        var = self.param(self.rng.uniform(0.5, 1.5, channels))
        return self.node("BatchNormalization", [x, scale, shift, mean, var], epsilon=1e-5)

    def conv_bn(
        self, x: str, cin: int, cout: int, k: int, stride: int, relu: bool, group: int = 1
    ) -> str:
        y = self.batch_norm(self.conv(x, cin, cout, k, stride, group=group), cout)
        return self.node("Relu", [y]) if relu else y

    def dense(self, x: str, features: int, out: int) -> str:
        w = self.param(self.rng.standard_normal((out, features)) * features**-0.5)
        b = self.param(0.1 * self.rng.standard_normal(out))
        return self.node("Gemm", [x, w, b], transB=1)

    def head(self, x: str, features: int, classes: int) -> str:
        pooled = self.node("GlobalAveragePool", [x])
        return self.dense(self.node("Flatten", [pooled], axis=1), features, classes)

    def ints(self, values: list[int]) -> str:
        name = self._name("p")
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
        return name

    def model(self, name: str, image: str, size: int, logits: str, classes: int) -> onnx.ModelProto:
        source = helper.make_tensor_value_info(image, TensorProto.FLOAT, [1, 3, size, size])
        return self.finish(name, source, classes)

    def finish(self, name: str, source: onnx.ValueInfoProto, classes: int) -> onnx.ModelProto:
        """The graph as an ONNX model whose last node gives the `logits`."""
        self.nodes[-1].output[0] = "logits"
        graph = helper.make_graph(
            self.nodes,
            name,
            [source],
            [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
            initializer=self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def _basic_block(g: _Graph, x: str, cin: int, cout: int, stride: int) -> str:
    """ResNet's basic block: two 3x3 convolutions, batch-normalised, and a shortcut (a strided
    1x1 convolution where the shape changes)."""
    y = g.conv_bn(x, cin, cout, 3, stride, relu=True)
    y = g.conv_bn(y, cout, cout, 3, 1, relu=False)
    shortcut = x if stride == 1 and cin == cout else g.conv_bn(x, cin, cout, 1, stride, False)
    return g.node("Relu", [g.node("Add", [y, shortcut])])


def resnetish(seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)
    x = g.conv_bn("image", 3, 16, 3, 1, relu=True)
    for cin, cout, stride in [(16, 16, 1), (16, 16, 1), (16, 32, 2), (32, 32, 1), (32, 64, 2)]:
        x = _basic_block(g, x, cin, cout, stride)
    x = _basic_block(g, x, 64, 64, 1)
    g.head(x, 64, 10)
    return g.model("resnetish", "image", 64, "logits", 10)


def resnet18ish(seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)
    x = g.conv_bn("image", 3, 64, 7, 2, relu=True)
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        for i in range(2):
            x = _basic_block(g, x, cin, cout, stride if i == 0 else 1)
            cin = cout
    g.head(x, 512, 10)
    return g.model("resnet18ish", "image", 64, "logits", 10)


def _vgg(name: str, stages: list[list[int]], size: int, classes: int, seed: int) -> onnx.ModelProto:
    """A VGG: stages of 3x3 convolutions with bias and ReLU, a 2x2 max-pool after each, then
    global pooling and a dense layer."""
    g = _Graph(seed)
    x, cin = "image", 3
    for stage in stages:
        for cout in stage:
            x = g.node("Relu", [g.conv(x, cin, cout, 3, bias=True)])
            cin = cout
        x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    g.head(x, cin, classes)
    return g.model(name, "image", size, "logits", classes)


def vggish(seed: int = 0) -> onnx.ModelProto:
    return _vgg("vggish", [[64], [128], [256, 256], [512, 512], [512, 512]], 224, 1000, seed)


def smallvgg(seed: int = 0) -> onnx.ModelProto:
    return _vgg("smallvgg", [[32], [64], [128, 128], [256, 256]], 64, 10, seed)


def mobilenetish(seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)
    x = g.conv_bn("image", 3, 32, 3, 2, relu=True)
    cin = 32
    for cout, stride in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]:
        x = g.conv_bn(x, cin, cin, 3, stride, relu=True, group=cin)  # depthwise
        x = g.conv_bn(x, cin, cout, 1, 1, relu=True)  # pointwise
        cin = cout
    g.head(x, cin, 10)
    return g.model("mobilenetish", "image", 96, "logits", 10)


def mlpish(seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)
    x = g.node("Flatten", ["image"], axis=1)
    for features, out in [(768, 1024), (1024, 1024)]:
        x = g.node("Relu", [g.dense(x, features, out)])
    g.dense(x, 1024, 10)
    return g.model("mlpish", "image", 16, "logits", 10)


def tinybert(seed: int = 0) -> onnx.ModelProto:
    """Token ids -> embeddings, two post-norm encoder layers, mean over tokens -> 2 classes."""
    seq, vocab, width, heads, hidden = 32, 1000, 128, 4, 512
    g = _Graph(seed)

    def norm(x: str) -> str:
        gamma, beta = g.param(np.ones(width)), g.param(np.zeros(width))
        return g.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)

    def linear(x: str, features: int, out: int) -> str:
        w = g.param(g.rng.standard_normal((features, out)) * features**-0.5)
        return g.node("Add", [g.node("MatMul", [x, w]), g.param(np.zeros(out))])

    per_head = g.ints([1, seq, heads, width // heads])
    joined = g.ints([1, seq, width])

    def split(x: str, perm: list[int]) -> str:  # (1, seq, width) -> heads, permuted
        return g.node("Transpose", [g.node("Reshape", [x, per_head])], perm=perm)

    table = g.param(0.02 * g.rng.standard_normal((vocab, width)))
    places = g.param(0.02 * g.rng.standard_normal((1, seq, width)))
    x = norm(g.node("Add", [g.node("Gather", [table, "input_ids"], axis=0), places]))
    scale, half = g.param(np.array((width // heads) ** -0.5)), g.param(np.array(0.5))
    one, root_half = g.param(np.array(1.0)), g.param(np.array(0.5**0.5))
    for _ in range(2):
        q = split(linear(x, width, width), [0, 2, 1, 3])
        k = split(linear(x, width, width), [0, 2, 3, 1])
        v = split(linear(x, width, width), [0, 2, 1, 3])
        scores = g.node("Mul", [g.node("MatMul", [q, k]), scale])
        heads_out = g.node("MatMul", [g.node("Softmax", [scores], axis=-1), v])
        merged = g.node("Transpose", [heads_out], perm=[0, 2, 1, 3])
        attended = linear(g.node("Reshape", [merged, joined]), width, width)
        x = norm(g.node("Add", [x, attended]))
        h = linear(x, width, hidden)  # GELU, as exported: h/2 * (1 + erf(h/sqrt(2)))
        erf = g.node("Erf", [g.node("Mul", [h, root_half])])
        h = g.node("Mul", [g.node("Mul", [h, half]), g.node("Add", [erf, one])])
        x = norm(g.node("Add", [x, linear(h, hidden, width)]))
    linear(g.node("ReduceMean", [x], axes=[1], keepdims=0), width, 2)
    source = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])
    return g.finish("tinybert", source, 2)


def resnet50ish(seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)

    def bottleneck(x: str, cin: int, width: int, stride: int) -> str:
        cout = 4 * width
        y = g.conv_bn(x, cin, width, 1, 1, relu=True)
        y = g.conv_bn(y, width, width, 3, stride, relu=True)
        y = g.conv_bn(y, width, cout, 1, 1, relu=False)
        shortcut = x if stride == 1 and cin == cout else g.conv_bn(x, cin, cout, 1, stride, False)
        return g.node("Relu", [g.node("Add", [y, shortcut])])

    x = g.conv_bn("image", 3, 64, 7, 2, relu=True)
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            x = bottleneck(x, cin, width, stride if i == 0 else 1)
            cin = 4 * width
    g.head(x, 2048, 1000)
    return g.model("resnet50ish", "image", 224, "logits", 1000)


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnetish": resnetish,
    "vggish": vggish,
    "resnet50ish": resnet50ish,
    "mlpish": mlpish,
    "mobilenetish": mobilenetish,
    "smallvgg": smallvgg,
    "resnet18ish": resnet18ish,
    "tinybert": tinybert,
}


def write(name: str, folder: Path) -> Path:
    """The model saved as `folder/<name>.onnx` (made once, reused after)."""
    path = folder / f"{name}.onnx"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        onnx.save(MODELS[name](), path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="resnetish")
    parser.add_argument("--out", type=Path, help="default: benchmarks/work/<model>.onnx")
    args = parser.parse_args()
    out = args.out or Path(__file__).parent / "work" / f"{args.model}.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(MODELS[args.model](), out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
