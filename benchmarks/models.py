"""Models for benchmarks, made here so nothing large is committed.

    python benchmarks/models.py [--model resnetish|vggish|resnet50ish|mlpish|mobilenetish|
                                         smallvgg|resnet18ish|tinybert|squeezenetish|
                                         densenetish|inceptionish|mobilenetv2ish|lstmish]
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
`squeezenetish`: SqueezeNet 1.1's layout (a 3x3 stem, three 3x3 max-pools, eight fire modules:
a 1x1 squeeze to 16-64 channels, then 1x1 and 3x3 expands to 64-256 each, concatenated; a 1x1
convolution as the 10-way classifier, global pooling), no batch norms, on a 1x3x64x64 image:
~0.05 GFLOP; 27 tuning tasks (18 convolutions) called 39 times.
`densenetish`: DenseNet-121's stem and first three dense blocks (6, 12, 24 layers of BN-ReLU-1x1
convolution to 128 channels, BN-ReLU-3x3 convolution to 32, concatenated onto the layer's
input; BN-ReLU-1x1-2x2 average-pool transitions) on a 1x3x32x32 image, 10-way dense: ~0.11
GFLOP; 138 tuning tasks called 177 times, most new with each layer's wider input.
`inceptionish`: GoogLeNet's layout (7x7, 1x1 and 3x3 stem convolutions, nine Inception modules
3a-5b: 1x1, 1x1->3x3, 1x1->5x5 and 3x3 max-pool->1x1 branches concatenated) with every width
halved, no batch norms, on a 1x3x64x64 image, 10-way dense: ~0.07 GFLOP; 71 tuning tasks called
82 times.
`mobilenetv2ish`: MobileNet-V2's layout (a 3x3 stem, 17 inverted residual blocks: a 1x1
expansion x6, a 3x3 depthwise convolution, a linear 1x1 projection, a residual add where the
shape holds; 16 to 320 channels, ReLU6 as Clip, then a 1x1 to 1280), batch-normalised, on a
1x3x96x96 image, 10-way dense: ~0.12 GFLOP; 33 tuning tasks called 55 times.
`lstmish`: a bidirectional LSTM (128 a direction) and a forward LSTM (128) over 32 steps of
64 features, batch 1, then the last hidden state's 10-way dense layer: ~25 MFLOP; unrolled when
imported: 14 tuning tasks, the steps' gate kernels called 90-95 times each, beside large fused
kernels of reshapes and concatenations.
The four before it are sized to run in under 60 ms untuned on two CPU cores; each extracts as many
tasks for CUDA as for the CPU.
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


def widevgg(seed: int = 0) -> onnx.ModelProto:
    """smallvgg with every width 1.5x: the same kinds of kernels at other shapes."""
    return _vgg("widevgg", [[48], [96], [192, 192], [384, 384]], 64, 10, seed)


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
    return _bert("tinybert", seq=32, width=128, heads=4, hidden=512, seed=seed)


def smallbert(seed: int = 0) -> onnx.ModelProto:
    """tinybert's layout at other sizes: 64 tokens, width 192, 6 heads, 768 wide."""
    return _bert("smallbert", seq=64, width=192, heads=6, hidden=768, seed=seed)


def _bert(
    name: str, *, seq: int, width: int, heads: int, hidden: int, seed: int
) -> onnx.ModelProto:
    vocab = 1000
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
    return g.finish(name, source, 2)


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


def squeezenetish(seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)

    def relu_conv(x: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
        return g.node("Relu", [g.conv(x, cin, cout, k, stride, bias=True)])

    def pool(x: str) -> str:
        return g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)

    def fire(x: str, cin: int, squeeze: int, expand: int) -> str:
        s = relu_conv(x, cin, squeeze, 1)
        expanded = [relu_conv(s, squeeze, expand, 1), relu_conv(s, squeeze, expand, 3)]
        return g.node("Concat", expanded, axis=1)

    x = pool(relu_conv("image", 3, 64, 3, 2))
    x = fire(fire(x, 64, 16, 64), 128, 16, 64)
    x = fire(fire(pool(x), 128, 32, 128), 256, 32, 128)
    x = fire(fire(pool(x), 256, 48, 192), 384, 48, 192)
    x = fire(fire(x, 384, 64, 256), 512, 64, 256)
    pooled = g.node("GlobalAveragePool", [relu_conv(x, 512, 10, 1)])  # the classifier
    g.node("Flatten", [pooled], axis=1)
    return g.model("squeezenetish", "image", 64, "logits", 10)


def densenetish(seed: int = 0) -> onnx.ModelProto:
    growth = 32
    g = _Graph(seed)

    def bn_relu_conv(x: str, cin: int, cout: int, k: int) -> str:
        return g.conv(g.node("Relu", [g.batch_norm(x, cin)]), cin, cout, k)

    x = g.conv_bn("image", 3, 64, 7, 2, relu=True)
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    blocks = [6, 12, 24]  # DenseNet-121's first three; its fourth would be at 1x1 here
    for i, layers in enumerate(blocks):
        for _ in range(layers):
            y = bn_relu_conv(bn_relu_conv(x, cin, 4 * growth, 1), 4 * growth, growth, 3)
            x = g.node("Concat", [x, y], axis=1)
            cin += growth
        if i < len(blocks) - 1:  # transition: halve the channels and the image
            y = bn_relu_conv(x, cin, cin // 2, 1)
            x = g.node("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2])
            cin //= 2
    g.head(g.node("Relu", [g.batch_norm(x, cin)]), cin, 10)
    return g.model("densenetish", "image", 32, "logits", 10)


def inceptionish(seed: int = 0) -> onnx.ModelProto:
    narrow = 2  # every GoogLeNet width halved
    g = _Graph(seed)

    def relu_conv(x: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
        return g.node("Relu", [g.conv(x, cin, cout, k, stride, bias=True)])

    def pool(x: str, stride: int) -> str:
        strides = [stride, stride]
        return g.node("MaxPool", [x], kernel_shape=[3, 3], strides=strides, pads=[1, 1, 1, 1])

    def module(x: str, cin: int, widths: tuple[int, ...]) -> tuple[str, int]:
        one, reduce3, three, reduce5, five, proj = (w // narrow for w in widths)
        branches = [
            relu_conv(x, cin, one, 1),
            relu_conv(relu_conv(x, cin, reduce3, 1), reduce3, three, 3),
            relu_conv(relu_conv(x, cin, reduce5, 1), reduce5, five, 5),
            relu_conv(pool(x, 1), cin, proj, 1),
        ]
        return g.node("Concat", branches, axis=1), one + three + five + proj

    stem, cin = 64 // narrow, 192 // narrow
    x = pool(relu_conv("image", 3, stem, 7, 2), 2)
    x = pool(relu_conv(relu_conv(x, stem, stem, 1), stem, cin, 3), 2)
    stages = [  # GoogLeNet's 3a-b, 4a-e, 5a-b: 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj
        [(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64)],
        [
            (192, 96, 208, 16, 48, 64),
            (160, 112, 224, 24, 64, 64),
            (128, 128, 256, 24, 64, 64),
            (112, 144, 288, 32, 64, 64),
            (256, 160, 320, 32, 128, 128),
        ],
        [(256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)],
    ]
    for i, stage in enumerate(stages):
        x = pool(x, 2) if i else x
        for widths in stage:
            x, cin = module(x, cin, widths)
    g.head(x, cin, 10)
    return g.model("inceptionish", "image", 64, "logits", 10)


def mobilenetv2ish(seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)
    zero, six = g.param(np.array(0.0)), g.param(np.array(6.0))

    def conv_bn_relu6(x: str, cin: int, cout: int, k: int, stride: int, group: int = 1) -> str:
        y = g.conv_bn(x, cin, cout, k, stride, relu=False, group=group)
        return g.node("Clip", [y, zero, six])

    x = conv_bn_relu6("image", 3, 32, 3, 2)
    cin = 32
    for expand, cout, repeats, stride in [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]:
        for i in range(repeats):
            s = stride if i == 0 else 1
            hidden = cin * expand
            y = conv_bn_relu6(x, cin, hidden, 1, 1) if expand > 1 else x
            y = conv_bn_relu6(y, hidden, hidden, 3, s, group=hidden)  # depthwise
            y = g.conv_bn(y, hidden, cout, 1, 1, relu=False)  # linear bottleneck
            x = g.node("Add", [x, y]) if s == 1 and cin == cout else y
            cin = cout
    g.head(conv_bn_relu6(x, cin, 1280, 1, 1), 1280, 10)
    return g.model("mobilenetv2ish", "image", 96, "logits", 10)


def lstmish(seed: int = 0) -> onnx.ModelProto:
    """x[32 steps, 1, 64] -> a bidirectional LSTM (128 a direction) -> an LSTM (128) over
    its two directions -> the last hidden state -> 10 classes."""
    g = _Graph(seed)
    steps, width, hidden = 32, 64, 128
    x = "frames"
    for features, direction in [(width, "bidirectional"), (2 * hidden, "forward")]:
        dirs = 2 if direction == "bidirectional" else 1
        w = g.param(g.rng.standard_normal((dirs, 4 * hidden, features)) * features**-0.5)
        r = g.param(g.rng.standard_normal((dirs, 4 * hidden, hidden)) * hidden**-0.5)
        b = g.param(0.1 * g.rng.standard_normal((dirs, 8 * hidden)))
        y = g._name("t")  # Y [steps, dirs, 1, hidden]; Y_h [dirs, 1, hidden]
        last = g._name("t")
        g.nodes.append(
            helper.make_node(
                "LSTM", [x, w, r, b], [y, last], hidden_size=hidden, direction=direction
            )
        )
        x = g.node("Reshape", [g.node("Transpose", [y], perm=[0, 2, 1, 3]), g.ints([steps, 1, -1])])
    g.dense(g.node("Reshape", [last, g.ints([1, hidden])]), hidden, 10)
    source = helper.make_tensor_value_info("frames", TensorProto.FLOAT, [steps, 1, width])
    return g.finish("lstmish", source, 10)


def priorcnn(seed: int = 0) -> onnx.ModelProto:
    """The prior's training corpus (orchestrator/prior.py), not a benchmark: convolutions of
    kernels 1 to 7, strides 1 and 2, depthwise and dense, at widths and sizes none of the
    benchmark models has (80x80 input, 20 to 264 channels)."""
    g = _Graph(seed)
    layers = [(3, 20, 7, 2, 1), (20, 40, 3, 1, 1), (40, 40, 1, 1, 1), (40, 72, 5, 2, 1)]
    layers += [(72, 72, 3, 1, 1), (72, 72, 3, 1, 72), (72, 136, 3, 2, 1), (136, 136, 5, 1, 136)]
    layers += [(136, 136, 3, 1, 1), (136, 264, 1, 2, 1), (264, 264, 3, 1, 1)]  # down to 5x5
    g.head(_conv_layers(g, "image", layers), 264, 50)
    return g.model("priorcnn", "image", 80, "logits", 50)


def priorcnn2(seed: int = 0) -> onnx.ModelProto:
    """A second corpus model (see priorcnn): 112x112 input, a max-pool, 12 to 200 channels."""
    g = _Graph(seed)
    x = _conv_layers(g, "image", [(3, 12, 5, 2, 1)])  # 56x56
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])  # 28x28
    layers = [(12, 28, 3, 1, 1), (28, 56, 1, 1, 1), (56, 56, 3, 1, 1), (56, 100, 3, 2, 1)]
    layers += [(100, 100, 3, 1, 100), (100, 200, 1, 1, 1), (200, 200, 3, 2, 1), (200, 120, 1, 1, 1)]
    g.head(_conv_layers(g, x, layers), 120, 30)
    return g.model("priorcnn2", "image", 112, "logits", 30)


def _conv_layers(g: _Graph, x: str, layers: list[tuple[int, int, int, int, int]]) -> str:
    """A batch-normalised, ReLU'd convolution for each (cin, cout, kernel, stride, group)."""
    for cin, cout, k, stride, group in layers:
        x = g.conv_bn(x, cin, cout, k, stride, relu=True, group=group)
    return x


def priorbert(seed: int = 0) -> onnx.ModelProto:
    """A third corpus model (see priorcnn): tinybert's layout at 48 tokens, width 160, 5
    heads, 640 wide."""
    return _bert("priorbert", seq=48, width=160, heads=5, hidden=640, seed=seed)


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnetish": resnetish,
    "vggish": vggish,
    "resnet50ish": resnet50ish,
    "mlpish": mlpish,
    "mobilenetish": mobilenetish,
    "smallvgg": smallvgg,
    "resnet18ish": resnet18ish,
    "tinybert": tinybert,
    "smallbert": smallbert,
    "widevgg": widevgg,
    "squeezenetish": squeezenetish,
    "densenetish": densenetish,
    "inceptionish": inceptionish,
    "mobilenetv2ish": mobilenetv2ish,
    "lstmish": lstmish,
    "priorcnn": priorcnn,
    "priorcnn2": priorcnn2,
    "priorbert": priorbert,
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
