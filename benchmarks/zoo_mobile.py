"""Zoo models whose graphs carry the ops that sit between convolutions in mobile and detection
nets: SqueezeNet 1.1 (fire-module concats, ceil-mode pools), MobileNetV1 (depthwise-separable,
BN + ReLU), MobileNetV3-Small (squeeze-excite: global pool, 1x1 convs, hard-sigmoid, broadcast
mul; hard-swish) and DenseNet (dense-block concats, pre-activation BN, average-pool
transitions); the YOLO-style detector, built from the same pieces, is in `zoo_yolo.py`.

Weights are seeded as in `zoo_cnn.py`: each builder keeps a running estimate of every
activation's mean and mean square (`Act`) and scales the next weights or BN statistics from
it, so activations keep an O(1) scale through the depth. Activation functions map the estimate
through a Gaussian quadrature (`_through`). Two styles, as exported models have them:

* explicit BatchNormalization (MobileNetV1/V3, DenseNet): He-initialized conv, BN running
  variance near the conv output's estimated mean square, so each BN output has scale ~|gamma|;
* BN folded into the conv bias (SqueezeNet has no BN, the YOLO export fuses it): the conv
  weights are scaled for a target output mean square from the input's estimate.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx

from benchmarks.zoo_cnn import _BN_PARAMS, Act, GraphBuilder, _add_stats, _avg, _q

# ---- statistics -------------------------------------------------------------------------
_GRID = [k / 16.0 for k in range(-128, 129)]  # z in [-8, 8]
_WEIGHTS = [math.exp(-0.5 * z * z) for z in _GRID]
_WSUM = math.fsum(_WEIGHTS)


def _through(f: Callable[[float], float], mean: float, ms: float, shift: float = 0.0, spread: float = 1.0):
    """Mean and mean square of f(z), z ~ N(mean + shift * sd, (spread * sd)^2), sd^2 = ms - mean^2."""
    sd = math.sqrt(max(ms - mean * mean, 1e-12))
    mu, sd = mean + shift * sd, spread * sd
    ys = [f(mu + sd * z) for z in _GRID]
    m1 = math.fsum(w * y for w, y in zip(_WEIGHTS, ys, strict=True)) / _WSUM
    m2 = math.fsum(w * y * y for w, y in zip(_WEIGHTS, ys, strict=True)) / _WSUM
    return m1, m2


def _relu_f(x: float) -> float:
    return max(x, 0.0)


def _silu_f(x: float) -> float:
    return x / (1.0 + math.exp(-x)) if x > -60 else 0.0


def _hswish_f(x: float) -> float:
    return x * min(max(x + 3.0, 0.0), 6.0) / 6.0


def _hsigmoid_f(x: float) -> float:
    return min(max(x / 6.0 + 0.5, 0.0), 1.0)


_ACT_F = {"relu": _relu_f, "silu": _silu_f, "hswish": _hswish_f, "hsigmoid": _hsigmoid_f}
# the max of k iid standard normals: mean and standard deviation
_MAX_OF = {4: (1.0294, 0.7012), 9: (1.4850, 0.5978), 25: (1.9653, 0.4982)}


def _concat_stats(name: str, parts: list[Act]) -> Act:
    c = sum(p.channels for p in parts)
    mean = math.fsum(p.mean * p.channels for p in parts) / c
    ms = math.fsum(p.ms * p.channels for p in parts) / c
    return Act(name, c, parts[0].size, mean, ms)


def _pooled_ms(x: Act) -> float:
    """Mean square of a global average pool of x: the per-channel means survive, the spatial
    variation mostly averages out (a quarter of the variance kept: channels' means differ)."""
    return x.mean * x.mean + 0.25 * max(x.ms - x.mean * x.mean, 0.0)


# ---- graph pieces -------------------------------------------------------------------------
def _out_size(size: int, k: int, stride: int, pad: int, ceil: bool = False) -> int:
    span = size + 2 * pad - k
    return (-(-span // stride) if ceil else span // stride) + 1


def _act(b: GraphBuilder, x: Act, kind: str | None, name: str) -> Act:
    """An activation node (SiLU as PyTorch exports it at opset 17: Sigmoid then Mul)."""
    if kind is None:
        return x
    if kind == "relu":
        y = b.node("Relu", [x.name], name)
    elif kind == "hswish":
        y = b.node("HardSwish", [x.name], name)
    elif kind == "hsigmoid":
        y = b.node("HardSigmoid", [x.name], name, alpha=1.0 / 6.0, beta=0.5)
    elif kind == "silu":
        s = b.node("Sigmoid", [x.name], f"{name}.sigmoid")
        y = b.node("Mul", [x.name, s], name)
    else:
        raise ValueError(kind)
    mean, ms = _through(_ACT_F[kind], x.mean, x.ms)
    return x._replace(name=y, mean=mean, ms=ms)


def _conv(
    b: GraphBuilder,
    x: Act,
    cout: int,
    k: int,
    stride: int,
    name: str,
    *,
    pad: int | None = None,
    group: int = 1,
    bias: np.ndarray | None = None,
    std: float | None = None,
) -> tuple[str, int]:
    """A Conv node; weights N(0, std^2) (He init by default). Returns (output, output size)."""
    fan_in = x.channels // group * k * k
    std = std if std is not None else _q(math.sqrt(2.0 / fan_in))
    w = b.normal(f"{name}.weight", (cout, x.channels // group, k, k), std)
    ins = [x.name, w]
    if bias is not None:
        ins.append(b.const(f"{name}.bias", bias))
    p = k // 2 if pad is None else pad
    attrs = {"kernel_shape": [k, k], "strides": [stride] * 2, "pads": [p] * 4}
    if group != 1:
        attrs["group"] = group
    return b.node("Conv", ins, name, **attrs), _out_size(x.size, k, stride, p)


def _bn(b: GraphBuilder, x: str, size: int, parts: list[tuple[int, float, float]], name: str, gamma) -> Act:
    """BatchNormalization of x whose channels come in `parts` of (channels, mean, ms): running
    statistics near each part's estimate, so the output has scale ~|gamma| per channel."""
    c = sum(p[0] for p in parts)
    g = b.rng.uniform(*gamma, c).astype(np.float32)
    beta = (0.1 * b.rng.standard_normal(c)).astype(np.float32)
    rm = np.concatenate(
        [_q(m) + _q(0.1 * math.sqrt(max(s - m * m, 1e-6))) * b.rng.standard_normal(n) for n, m, s in parts]
    ).astype(np.float32)
    rv = np.concatenate(
        [_q(max(s - m * m, 1e-6)) * b.rng.uniform(0.75, 1.33, n) for n, m, s in parts]
    ).astype(np.float32)
    names = [b.const(f"{name}.{s}", a) for s, a in zip(_BN_PARAMS, (g, beta, rm, rv), strict=True)]
    y = b.node("BatchNormalization", [x, *names], name, epsilon=1e-5)
    true_mean = np.concatenate([np.full(n, m) for n, m, _ in parts])
    true_var = np.concatenate([np.full(n, s - m * m) for n, m, s in parts])
    gl, bl, rml, rvl, tm, tv = (a.tolist() for a in (g, beta, rm, rv, true_mean, true_var))
    means = [be + gi * (t - m) / math.sqrt(v) for gi, be, m, v, t in zip(gl, bl, rml, rvl, tm, strict=True)]
    var = [gi * gi * t / v for gi, v, t in zip(gl, rvl, tv, strict=True)]
    ms = _avg([m * m + v for m, v in zip(means, var, strict=True)])
    return Act(y, c, size, _avg(means), ms)


def conv_bn_act(
    b: GraphBuilder,
    x: Act,
    cout: int,
    k: int,
    stride: int,
    name: str,
    act: str | None,
    *,
    group: int = 1,
    gamma: tuple[float, float] = (0.6, 1.1),
    bn: str | None = None,
) -> Act:
    """Conv (no bias, He init) -> BatchNormalization -> activation (torchvision's Conv2dNormActivation)."""
    y, size = _conv(b, x, cout, k, stride, name, group=group)
    conv_ms = _q(2.0 * x.ms)  # zero-mean iid weights: E[y^2] = fan_in * var(w) * E[x^2]
    z = _bn(b, y, size, [(cout, 0.0, conv_ms)], bn or f"{name}.bn", gamma)
    return _act(b, z, act, f"{name}.{act}")


def conv_bias_act(
    b: GraphBuilder,
    x: Act,
    cout: int,
    k: int,
    stride: int,
    name: str,
    act: str | None,
    *,
    target_ms: float = 2.0,
    bias_mean: float = 0.0,
    pad: int | None = None,
    group: int = 1,
) -> Act:
    """Conv with a bias (BN folded in, or none) scaled for an output mean square near target_ms."""
    fan_in = x.channels // group * k * k
    std = _q(math.sqrt(target_ms / (fan_in * x.ms)))
    bias = bias_mean + _q(0.2 * math.sqrt(target_ms)) * b.rng.standard_normal(cout)
    y, size = _conv(b, x, cout, k, stride, name, pad=pad, group=group, bias=bias, std=std)
    z = Act(y, cout, size, bias_mean, target_ms * 1.04 + bias_mean * bias_mean)
    return _act(b, z, act, f"{name}.{act}")


def _gap_head(b: GraphBuilder, x: Act, hidden: list[tuple[int, str | None]], classes: int) -> str:
    """GlobalAveragePool, Flatten, then Gemms (transB=1, as PyTorch exports Linear): logits std ~1."""
    f = b.node("Flatten", [b.node("GlobalAveragePool", [x.name], "avgpool")], "flatten", axis=1)
    cur = Act(f, x.channels, 1, x.mean, _pooled_ms(x))
    for i, (width, act) in enumerate([*hidden, (classes, None)]):
        last = i == len(hidden)
        target = 1.0 if last else 2.0
        w = b.normal(
            f"classifier.{i}.weight", (width, cur.channels), _q(math.sqrt(target / (cur.channels * cur.ms)))
        )
        bias = b.normal(f"classifier.{i}.bias", (width,), 0.1)
        out = "logits" if last else f"classifier.{i}"
        y = b.node("Gemm", [cur.name, w, bias], f"classifier.{i}", out=out, transB=1)
        cur = _act(b, Act(y, width, 1, 0.0, target), act, f"classifier.{i}.{act}")
    return cur.name


# ---- SqueezeNet 1.1 ------------------------------------------------------------------------
def _fire(b: GraphBuilder, x: Act, squeeze: int, expand: int, name: str) -> Act:
    s = conv_bias_act(b, x, squeeze, 1, 1, f"{name}.squeeze", "relu")
    e1 = conv_bias_act(b, s, expand, 1, 1, f"{name}.expand1x1", "relu")
    e3 = conv_bias_act(b, s, expand, 3, 1, f"{name}.expand3x3", "relu")
    return _concat_stats(b.node("Concat", [e1.name, e3.name], f"{name}.cat", axis=1), [e1, e3])


def _ceil_maxpool(b: GraphBuilder, x: Act, name: str) -> Act:
    """MaxPool 3x3 stride 2, ceil_mode (torchvision's SqueezeNet) after a ReLU of conv outputs
    of mean square ~2.08: relu(max of 9 normals)."""
    y = b.node("MaxPool", [x.name], name, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    mean, ms = _through(_relu_f, 0.0, 2.08, *_MAX_OF[9])
    return Act(y, x.channels, _out_size(x.size, 3, 2, 0, ceil=True), mean, ms)


def squeezenet1_1(resolution: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """torchvision's SqueezeNet 1.1: conv 3x3/2 (no padding), ceil-mode max pools, 8 fire modules,
    a 1x1 conv classifier with ReLU, then a global average pool."""
    b = GraphBuilder(f"squeezenet1_1_{resolution}", seed)
    x = Act(b.input("input", [1, 3, resolution, resolution]), 3, resolution, 0.0, 1.0)
    x = conv_bias_act(b, x, 64, 3, 2, "features.0", "relu", pad=0)
    x = _ceil_maxpool(b, x, "features.2")
    fires = {3: (16, 64), 4: (16, 64), 6: (32, 128), 7: (32, 128), 9: (48, 192), 10: (48, 192)}
    fires |= {11: (64, 256), 12: (64, 256)}
    for i in range(3, 13):
        x = _ceil_maxpool(b, x, f"features.{i}") if i in (5, 8) else _fire(b, x, *fires[i], f"features.{i}")
    x = conv_bias_act(b, x, classes, 1, 1, "classifier.1", "relu", target_ms=4.0)
    p = b.node("GlobalAveragePool", [x.name], "classifier.3")
    b.node("Flatten", [p], "flatten", out="logits", axis=1)
    b.output("logits", [1, classes])
    return b.model(f"SqueezeNet 1.1 at {resolution}x{resolution}, seeded random weights (seed {seed})")


# ---- MobileNetV1 ---------------------------------------------------------------------------
def mobilenet_v1(resolution: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """MobileNetV1 1.0: conv 3x3/2, 13 depthwise-separable blocks (dw 3x3 BN ReLU, pw 1x1 BN
    ReLU), global average pool, fully connected."""
    b = GraphBuilder(f"mobilenet_v1_{resolution}", seed)
    x = Act(b.input("input", [1, 3, resolution, resolution]), 3, resolution, 0.0, 1.0)
    x = conv_bn_act(b, x, 32, 3, 2, "features.0", "relu")
    blocks = [
        (64, 1),
        (128, 2),
        (128, 1),
        (256, 2),
        (256, 1),
        (512, 2),
        *[(512, 1)] * 5,
        (1024, 2),
        (1024, 1),
    ]
    for i, (c, s) in enumerate(blocks, 1):
        x = conv_bn_act(b, x, x.channels, 3, s, f"features.{i}.dw", "relu", group=x.channels)
        x = conv_bn_act(b, x, c, 1, 1, f"features.{i}.pw", "relu")
    _gap_head(b, x, [], classes)
    b.output("logits", [1, classes])
    return b.model(f"MobileNetV1 1.0 at {resolution}x{resolution}, seeded random weights (seed {seed})")


# ---- MobileNetV3-Small ---------------------------------------------------------------------
def _make_divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _squeeze_excite(b: GraphBuilder, x: Act, name: str) -> Act:
    """torchvision's SqueezeExcitation: GAP -> 1x1 conv -> ReLU -> 1x1 conv -> HardSigmoid -> mul."""
    squeeze = _make_divisible(x.channels // 4)
    p = Act(b.node("GlobalAveragePool", [x.name], f"{name}.avgpool"), x.channels, 1, x.mean, _pooled_ms(x))
    s = conv_bias_act(b, p, squeeze, 1, 1, f"{name}.fc1", "relu", target_ms=1.0)
    # gate = hardsigmoid(N(1, 2^2)): mostly in (0, 1), now and then clipped
    g = conv_bias_act(b, s, x.channels, 1, 1, f"{name}.fc2", "hsigmoid", target_ms=4.0, bias_mean=1.0)
    y = b.node("Mul", [x.name, g.name], f"{name}.scale")
    return x._replace(name=y, mean=x.mean * g.mean, ms=x.ms * g.ms)


def mobilenet_v3_small(resolution: int = 224, classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """torchvision's MobileNetV3-Small 1.0: hard-swish, squeeze-excite with hard-sigmoid gates."""
    # (kernel, expanded, out, squeeze-excite, activation, stride)
    settings = [
        (3, 16, 16, True, "relu", 2),
        (3, 72, 24, False, "relu", 2),
        (3, 88, 24, False, "relu", 1),
        (5, 96, 40, True, "hswish", 2),
        (5, 240, 40, True, "hswish", 1),
        (5, 240, 40, True, "hswish", 1),
        (5, 120, 48, True, "hswish", 1),
        (5, 144, 48, True, "hswish", 1),
        (5, 288, 96, True, "hswish", 2),
        (5, 576, 96, True, "hswish", 1),
        (5, 576, 96, True, "hswish", 1),
    ]
    b = GraphBuilder(f"mobilenet_v3_small_{resolution}", seed)
    x = Act(b.input("input", [1, 3, resolution, resolution]), 3, resolution, 0.0, 1.0)
    x = conv_bn_act(b, x, 16, 3, 2, "features.0", "hswish")
    for i, (k, exp, out, se, act, s) in enumerate(settings, 1):
        name, y = f"features.{i}", x
        if exp != x.channels:
            y = conv_bn_act(b, y, exp, 1, 1, f"{name}.expand", act)
        y = conv_bn_act(b, y, exp, k, s, f"{name}.dw", act, group=exp)
        if se:
            y = _squeeze_excite(b, y, f"{name}.se")
        if s == 1 and x.channels == out:
            y = conv_bn_act(b, y, out, 1, 1, f"{name}.project", None, gamma=(0.3, 0.7))
            x = _add_stats(b.node("Add", [x.name, y.name], f"{name}.add"), x, y)
        else:
            x = conv_bn_act(b, y, out, 1, 1, f"{name}.project", None)
    x = conv_bn_act(b, x, 576, 1, 1, "features.12", "hswish")
    _gap_head(b, x, [(1024, "hswish")], classes)
    b.output("logits", [1, classes])
    return b.model(f"MobileNetV3-Small 1.0 at {resolution}x{resolution}, seeded random weights (seed {seed})")


# ---- DenseNet --------------------------------------------------------------------------------
def _bn_relu(b: GraphBuilder, name: str, size: int, parts: list[Act], bn: str) -> Act:
    """BN over the concatenation of `parts` (tensor `name`), then ReLU: pre-activation."""
    z = _bn(b, name, size, [(p.channels, p.mean, p.ms) for p in parts], bn, (0.6, 1.1))
    return _act(b, z, "relu", f"{bn}.relu")


def densenet(
    blocks: tuple[int, ...] = (6, 12, 24, 16),
    growth: int = 32,
    init: int = 64,
    resolution: int = 224,
    classes: int = 1000,
    seed: int = 0,
    name: str = "densenet121",
) -> onnx.ModelProto:
    """torchvision's DenseNet (121 by default): every dense layer is BN-ReLU-conv1x1(4 x growth)
    -BN-ReLU-conv3x3(growth) over the Concat of all features before it; transitions BN-ReLU-
    conv1x1 (half the channels)-AvgPool 2x2/2."""
    b = GraphBuilder(f"{name}_{resolution}", seed)
    x = Act(b.input("input", [1, 3, resolution, resolution]), 3, resolution, 0.0, 1.0)
    x = conv_bn_act(b, x, init, 7, 2, "features.conv0", "relu", bn="features.norm0")
    p = b.node("MaxPool", [x.name], "features.pool0", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    x = Act(p, x.channels, _out_size(x.size, 3, 2, 1), *_through(_relu_f, 0.0, 1.0, *_MAX_OF[9]))
    for bi, n in enumerate(blocks, 1):
        feats = [x]
        for li in range(1, n + 1):
            name_l = f"features.denseblock{bi}.denselayer{li}"
            cat = (
                feats[0].name
                if len(feats) == 1
                else b.node("Concat", [f.name for f in feats], f"{name_l}.cat", axis=1)
            )
            y = _bn_relu(b, cat, x.size, feats, f"{name_l}.norm1")
            y_name, _ = _conv(b, y, 4 * growth, 1, 1, f"{name_l}.conv1")
            y = _bn_relu(
                b, y_name, x.size, [Act(y_name, 4 * growth, x.size, 0.0, _q(2.0 * y.ms))], f"{name_l}.norm2"
            )
            y_name, _ = _conv(b, y, growth, 3, 1, f"{name_l}.conv2")
            feats.append(Act(y_name, growth, x.size, 0.0, _q(2.0 * y.ms)))
        cat = b.node("Concat", [f.name for f in feats], f"features.denseblock{bi}", axis=1)
        if bi == len(blocks):
            x = _bn_relu(b, cat, x.size, feats, "features.norm5")
            break
        t = f"features.transition{bi}"
        y = _bn_relu(b, cat, x.size, feats, f"{t}.norm")
        c = sum(f.channels for f in feats) // 2
        y_name, _ = _conv(b, y, c, 1, 1, f"{t}.conv")
        pooled = b.node("AveragePool", [y_name], f"{t}.pool", kernel_shape=[2, 2], strides=[2, 2])
        x = Act(pooled, c, x.size // 2, 0.0, _q(2.0 * y.ms * 0.6))  # neighbours correlate: ~0.6 kept
    _gap_head(b, x, [], classes)
    b.output("logits", [1, classes])
    return b.model(
        f"DenseNet (blocks {list(blocks)}, growth {growth}) at {resolution}x{resolution}, "
        f"seeded random weights (seed {seed})"
    )
