"""Convolutional zoo models (MobileNetV2, ResNet-18/50, a tiny CNN) and the graph builder they share.

Weights are seeded random, scaled so that activations keep an O(1) magnitude through
the whole depth. Each builder tracks a running estimate of the mean square (`ms`) of
every activation, and uses it the way training would have:

* ResNet keeps explicit BatchNormalization nodes. A BN's running variance is set near
  the estimated mean square of the conv output it normalizes (times a random factor in
  [0.75, 1.33]), so every BN output has a scale of about |gamma|, whatever the depth.
* MobileNetV2 has BN folded into the conv bias, as deployed models do. Each conv's
  weights are scaled so that its output reaches a target mean square (std 2 before a
  ReLU6, so the clip at 6 is reached now and then; std 1 for linear bottlenecks).

The estimates only need to be right within a small factor: see `tests/e2e` for the
measured output statistics.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import onnx
import onnx.checker
import onnx.helper
import onnx.numpy_helper
import onnx.shape_inference

OPSET = 17
IR_VERSION = 8  # the IR version that shipped with opset 17: readable by older runtimes
PRODUCER = "tensorir.benchmarks.zoo"


class GraphBuilder:
    """Appends named nodes and seeded initializers; `model()` checks and returns the ModelProto."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._names: set[str] = set()

    def _claim(self, name: str) -> str:
        if name in self._names:
            raise ValueError(f"{self.name}: duplicate name {name!r}")
        self._names.add(name)
        return name

    def input(self, name: str, shape: list[int], elem_type: int = onnx.TensorProto.FLOAT) -> str:
        self.inputs.append(onnx.helper.make_tensor_value_info(self._claim(name), elem_type, shape))
        return name

    def output(self, tensor: str, shape: list[int], elem_type: int = onnx.TensorProto.FLOAT) -> None:
        self.outputs.append(onnx.helper.make_tensor_value_info(tensor, elem_type, shape))

    def const(self, name: str, value: np.ndarray | float | list, dtype: type = np.float32) -> str:
        array = np.asarray(value, dtype=dtype)
        self.initializers.append(onnx.numpy_helper.from_array(array, self._claim(name)))
        return name

    def normal(self, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> str:
        return self.const(name, mean + std * self.rng.standard_normal(shape))

    def node(self, op: str, inputs: list[str], name: str, out: str | None = None, **attrs) -> str:
        """Add one node; its output tensor is named `out`, or after the node."""
        out = self._claim(out or name)
        self.nodes.append(onnx.helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def model(self, doc: str) -> onnx.ModelProto:
        graph = onnx.helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, initializer=self.initializers
        )
        model = onnx.helper.make_model(
            graph,
            opset_imports=[onnx.helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name=PRODUCER,
            doc_string=doc,
        )
        onnx.checker.check_model(model, full_check=False)
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        return model


class Act(NamedTuple):
    """An activation tensor: name, channels, spatial size, estimated mean and mean square."""

    name: str
    channels: int
    size: int
    mean: float
    ms: float


def _q(x: float) -> float:
    """Round a data-derived scale to 4 digits, so that a last-bit libm difference between
    platforms cannot change the float32 weights it multiplies: builds stay byte-identical."""
    return float(f"{x:.4g}")


def _avg(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def _rectified(mean: float, ms: float, shift: float = 0.0, spread: float = 1.0) -> tuple[float, float]:
    """Mean and mean square of max(z, 0), z ~ N(mean + shift * sd, (spread * sd)^2), sd**2 = ms - mean**2."""
    sd = math.sqrt(max(ms - mean * mean, 1e-12))
    mu, sd = mean + shift * sd, spread * sd
    a = mu / sd
    cdf = 0.5 * (1.0 + math.erf(a / math.sqrt(2.0)))
    pdf = math.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
    return mu * cdf + sd * pdf, (mu * mu + sd * sd) * cdf + mu * sd * pdf


# the max of k iid standard normals: mean and standard deviation
_MAX_OF = {4: (1.0294, 0.7012), 9: (1.4850, 0.5978)}


def _conv_out(size: int, k: int, stride: int) -> int:
    return (size + 2 * (k // 2) - k) // stride + 1


# ---- ResNet: conv (no bias) + explicit BatchNormalization -----------------------------
def _conv_bn(
    b: GraphBuilder,
    x: Act,
    cout: int,
    k: int,
    stride: int,
    conv: str,
    bn: str,
    gamma: tuple[float, float] = (0.6, 1.1),
) -> Act:
    fan_in = x.channels * k * k
    w = b.normal(f"{conv}.weight", (cout, x.channels, k, k), _q(math.sqrt(2.0 / fan_in)))  # He init
    p = k // 2
    y = b.node("Conv", [x.name, w], conv, kernel_shape=[k, k], strides=[stride] * 2, pads=[p] * 4)
    # zero-mean iid weights: E[conv^2] = fan_in * w_var * E[x^2], whatever x's correlations
    conv_ms = _q(2.0 * x.ms)
    g = b.rng.uniform(*gamma, cout).astype(np.float32)
    beta = (0.1 * b.rng.standard_normal(cout)).astype(np.float32)
    rm = (_q(0.1 * math.sqrt(conv_ms)) * b.rng.standard_normal(cout)).astype(np.float32)
    rv = (conv_ms * b.rng.uniform(0.75, 1.33, cout)).astype(np.float32)
    names = [b.const(f"{bn}.{s}", a) for s, a in zip(_BN_PARAMS, (g, beta, rm, rv), strict=True)]
    y = b.node("BatchNormalization", [y, *names], bn, epsilon=1e-5)
    g, beta, rm, rv = (a.tolist() for a in (g, beta, rm, rv))
    means = [be - gi * m / math.sqrt(v) for gi, be, m, v in zip(g, beta, rm, rv, strict=True)]
    variances = [gi * gi * conv_ms / v for gi, v in zip(g, rv, strict=True)]
    ms = _avg([m * m + v for m, v in zip(means, variances, strict=True)])
    return Act(y, cout, _conv_out(x.size, k, stride), _avg(means), ms)


_BN_PARAMS = ("weight", "bias", "running_mean", "running_var")


def _relu(b: GraphBuilder, x: Act, name: str) -> Act:
    mean, ms = _rectified(x.mean, x.ms)
    return x._replace(name=b.node("Relu", [x.name], name), mean=mean, ms=ms)


def _relu_maxpool(b: GraphBuilder, x: Act, k: int, stride: int, pad: int, names: tuple[str, str]) -> Act:
    """Relu then MaxPool; the estimate is that of relu(max of k*k values of x)."""
    y = b.node("Relu", [x.name], names[0])
    pads = [pad] * 4
    y = b.node("MaxPool", [y], names[1], kernel_shape=[k, k], strides=[stride] * 2, pads=pads)
    mean, ms = _rectified(x.mean, x.ms, *_MAX_OF[k * k])
    return Act(y, x.channels, (x.size + 2 * pad - k) // stride + 1, mean, ms)


def _basic_block(b: GraphBuilder, x: Act, cout: int, stride: int, name: str) -> Act:
    y = _relu(b, _conv_bn(b, x, cout, 3, stride, f"{name}.conv1", f"{name}.bn1"), f"{name}.relu1")
    y = _conv_bn(b, y, cout, 3, 1, f"{name}.conv2", f"{name}.bn2", gamma=(0.3, 0.7))
    return _residual(b, x, y, stride, name)


def _bottleneck(b: GraphBuilder, x: Act, width: int, stride: int, name: str) -> Act:
    """torchvision's Bottleneck (ResNet v1.5): the stride sits on the 3x3 conv."""
    y = _relu(b, _conv_bn(b, x, width, 1, 1, f"{name}.conv1", f"{name}.bn1"), f"{name}.relu1")
    y = _relu(b, _conv_bn(b, y, width, 3, stride, f"{name}.conv2", f"{name}.bn2"), f"{name}.relu2")
    y = _conv_bn(b, y, width * 4, 1, 1, f"{name}.conv3", f"{name}.bn3", gamma=(0.3, 0.7))
    return _residual(b, x, y, stride, name)


def _residual(b: GraphBuilder, x: Act, y: Act, stride: int, name: str) -> Act:
    if stride != 1 or x.channels != y.channels:
        x = _conv_bn(b, x, y.channels, 1, stride, f"{name}.downsample.0", f"{name}.downsample.1")
    s = b.node("Add", [y.name, x.name], f"{name}.add")
    return _relu(b, _add_stats(s, x, y), f"{name}.relu")


def _add_stats(name: str, x: Act, y: Act) -> Act:
    """x + y, the two taken as independent."""
    return Act(name, y.channels, y.size, x.mean + y.mean, x.ms + y.ms + 2 * x.mean * y.mean)


def _head(b: GraphBuilder, x: Act, classes: int, fc: str) -> str:
    """GlobalAveragePool, Flatten, Gemm (weight [classes, C], transB=1 as PyTorch exports).

    The pooled features keep about 3/4 of the mean square (per-channel offsets dominate);
    the classifier is scaled for logits of std about 1.
    """
    p = b.node("GlobalAveragePool", [x.name], "avgpool")
    f = b.node("Flatten", [p], "flatten", axis=1)
    w = b.normal(f"{fc}.weight", (classes, x.channels), _q(1.0 / math.sqrt(x.channels * 0.75 * x.ms)))
    bias = b.normal(f"{fc}.bias", (classes,), 0.1)
    return b.node("Gemm", [f, w, bias], fc, out="logits", transB=1)


def resnet(depth: int = 18, resolution: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """torchvision ResNet-18/34 (basic blocks) or -50/101/152 (bottlenecks), BN kept explicit."""
    blocks = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}
    if depth not in blocks:
        raise ValueError(f"no ResNet-{depth}; depths: {sorted(blocks)}")
    b = GraphBuilder(f"resnet{depth}", seed)
    x = Act(b.input("input", [1, 3, resolution, resolution]), 3, resolution, 0.0, 1.0)
    x = _relu_maxpool(b, _conv_bn(b, x, 64, 7, 2, "conv1", "bn1"), 3, 2, 1, ("relu", "maxpool"))
    for stage, n in enumerate(blocks[depth]):
        width = 64 << stage
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            name = f"layer{stage + 1}.{i}"
            if depth < 50:
                x = _basic_block(b, x, width, stride, name)
            else:
                x = _bottleneck(b, x, width, stride, name)
    _head(b, x, classes, "fc")
    b.output("logits", [1, classes])
    return b.model(f"ResNet-{depth} at {resolution}x{resolution}, seeded random weights (seed {seed})")


def resnet18() -> onnx.ModelProto:
    return resnet(18)


def resnet50() -> onnx.ModelProto:
    return resnet(50)


# ---- MobileNetV2: BN folded into the conv bias ------------------------------------------
_PRE_RELU6_MS = 4.0  # conv outputs feeding a ReLU6 have std 2: the clip at 6 is reached rarely
_LINEAR_MS = 1.0  # linear bottleneck outputs


def _conv_bias(
    b: GraphBuilder, x: Act, cout: int, k: int, stride: int, name: str, target_ms: float, group: int = 1
) -> Act:
    fan_in = x.channels // group * k * k
    std = _q(math.sqrt(target_ms / (fan_in * x.ms)))
    w = b.normal(f"{name}.weight", (cout, x.channels // group, k, k), std)
    bias = b.normal(f"{name}.bias", (cout,), 0.2 * math.sqrt(target_ms))
    p = k // 2
    attrs = {"kernel_shape": [k, k], "strides": [stride] * 2, "pads": [p] * 4, "group": group}
    y = b.node("Conv", [x.name, w, bias], name, **attrs)
    return Act(y, cout, _conv_out(x.size, k, stride), 0.0, target_ms * 1.04)  # bias adds 4%


def _relu6(b: GraphBuilder, x: Act, name: str, bounds: tuple[str, str]) -> Act:
    """ReLU6 as PyTorch exports it: Clip with min/max as initializer inputs."""
    mean, ms = _rectified(x.mean, x.ms)  # the clip at 6 is rare enough to leave out
    return x._replace(name=b.node("Clip", [x.name, *bounds], name), mean=mean, ms=ms)


def _inverted_residual(
    b: GraphBuilder, x: Act, cout: int, stride: int, expand: int, name: str, bounds: tuple[str, str]
) -> Act:
    hidden = x.channels * expand
    y = x
    if expand != 1:
        y = _conv_bias(b, y, hidden, 1, 1, f"{name}.expand", _PRE_RELU6_MS)
        y = _relu6(b, y, f"{name}.expand_relu6", bounds)
    y = _conv_bias(b, y, hidden, 3, stride, f"{name}.dw", _PRE_RELU6_MS, group=hidden)
    y = _relu6(b, y, f"{name}.dw_relu6", bounds)
    if stride == 1 and x.channels == cout:
        # residual branch: a smaller output, so the sum grows slowly through a stage
        y = _conv_bias(b, y, cout, 1, 1, f"{name}.project", _LINEAR_MS / 2)
        return _add_stats(b.node("Add", [x.name, y.name], f"{name}.add"), x, y)
    return _conv_bias(b, y, cout, 1, 1, f"{name}.project", _LINEAR_MS)


def mobilenet_v2(resolution: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2, width 1.0 (torchvision's layout: features.0 .. features.18, classifier)."""
    if resolution % 32:
        raise ValueError(f"MobileNetV2 resolution must be a multiple of 32, not {resolution}")
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1)]
    settings += [(6, 160, 3, 2), (6, 320, 1, 1)]  # (expansion t, channels c, repeats n, stride s)
    b = GraphBuilder(f"mobilenet_v2_{resolution}", seed)
    bounds = (b.const("relu6.min", 0.0), b.const("relu6.max", 6.0))
    x = Act(b.input("input", [1, 3, resolution, resolution]), 3, resolution, 0.0, 1.0)
    x = _relu6(b, _conv_bias(b, x, 32, 3, 2, "features.0", _PRE_RELU6_MS), "features.0.relu6", bounds)
    index = 1
    for t, c, n, s in settings:
        for i in range(n):
            x = _inverted_residual(b, x, c, s if i == 0 else 1, t, f"features.{index}", bounds)
            index += 1
    x = _conv_bias(b, x, 1280, 1, 1, f"features.{index}", _PRE_RELU6_MS)
    x = _relu6(b, x, f"features.{index}.relu6", bounds)
    _head(b, x, classes, "classifier.1")
    b.output("logits", [1, classes])
    return b.model(
        f"MobileNetV2 1.0 at {resolution}x{resolution}, BN folded into conv biases, "
        f"seeded random weights (seed {seed})"
    )


# ---- a tiny CNN: the bundled sample and the fast-test model -----------------------------
def tiny_cnn(seed: int = 0) -> onnx.ModelProto:
    """conv3x3-bn-relu-maxpool, conv3x3-bn-relu-GAP, flatten, gemm on 1x3x32x32 -> 10 classes."""
    b = GraphBuilder("tiny_cnn", seed)
    x = Act(b.input("input", [1, 3, 32, 32]), 3, 32, 0.0, 1.0)
    x = _relu_maxpool(b, _conv_bn(b, x, 16, 3, 1, "conv1", "bn1"), 2, 2, 0, ("relu1", "pool1"))
    x = _relu(b, _conv_bn(b, x, 32, 3, 1, "conv2", "bn2"), "relu2")
    _head(b, x, 10, "fc")
    b.output("logits", [1, 10])
    return b.model(f"tiny CNN on 1x3x32x32, seeded random weights (seed {seed})")
