"""A YOLOv8n-style detector for the zoo, as ultralytics exports it at opset 17: convs with the BN
folded into their bias and SiLU as Sigmoid * x, C2f blocks (a Split in two halves, bottlenecks on
the last, a Concat of all), SPPF (three chained 5x5 max pools, a Concat), an FPN / PAN neck
(nearest Resize x2 and Concats) and the Detect head: per level the box and class branches
concatenated and flattened to [1, 4 x 16 + classes, H*W], the levels concatenated, the 16-bin DFL
softmax of each box side reduced to its expected bin by a 1x1 conv, boxes decoded against the
anchor points and strides. Output [1, 4 + classes, anchors]. Weights seeded as in zoo_mobile.py.
"""

from __future__ import annotations

import numpy as np
import onnx

from benchmarks.zoo_cnn import Act, GraphBuilder, _add_stats
from benchmarks.zoo_mobile import _MAX_OF, _concat_stats, _silu_f, _through, conv_bias_act


def _yconv(b: GraphBuilder, x: Act, cout: int, k: int, stride: int, name: str) -> Act:
    """ultralytics' Conv as exported: conv with the BN folded into its bias, then SiLU."""
    return conv_bias_act(b, x, cout, k, stride, name, "silu", target_ms=2.0)


def _c2f(b: GraphBuilder, x: Act, cout: int, n: int, shortcut: bool, name: str) -> Act:
    """C2f: cv1 1x1 -> Split in two halves -> n bottlenecks on the last -> Concat -> cv2 1x1."""
    c = cout // 2
    y = _yconv(b, x, 2 * c, 1, 1, f"{name}.cv1")
    split = b.const(f"{name}.split", [c, c], np.int64)
    halves = [f"{name}.chunk0", f"{name}.chunk1"]
    for h in halves:
        b._claim(h)
    b.nodes.append(onnx.helper.make_node("Split", [y.name, split], halves, name=f"{name}.chunk", axis=1))
    parts = [y._replace(name=h, channels=c) for h in halves]
    for i in range(n):
        z = _yconv(b, parts[-1], c, 3, 1, f"{name}.m.{i}.cv1")
        z = _yconv(b, z, c, 3, 1, f"{name}.m.{i}.cv2")
        if shortcut:
            z = _add_stats(b.node("Add", [parts[-1].name, z.name], f"{name}.m.{i}.add"), parts[-1], z)
        parts.append(z)
    cat = _concat_stats(b.node("Concat", [p.name for p in parts], f"{name}.cat", axis=1), parts)
    return _yconv(b, cat, cout, 1, 1, f"{name}.cv2")


def _sppf(b: GraphBuilder, x: Act, cout: int, name: str) -> Act:
    """SPPF: cv1 1x1, three chained 5x5 stride-1 max pools, Concat of the four, cv2 1x1."""
    y = _yconv(b, x, x.channels // 2, 1, 1, f"{name}.cv1")
    parts = [y]
    for i, shift in enumerate((1.0, 1.4, 1.6)):  # max over 25, 81, 169 correlated neighbours
        p = b.node(
            "MaxPool", [parts[-1].name], f"{name}.m.{i}", kernel_shape=[5, 5], strides=[1, 1], pads=[2] * 4
        )
        mean, ms = _through(_silu_f, 0.0, 2.08, shift * _MAX_OF[25][0], _MAX_OF[25][1])
        parts.append(y._replace(name=p, mean=mean, ms=ms))
    cat = _concat_stats(b.node("Concat", [p.name for p in parts], f"{name}.cat", axis=1), parts)
    return _yconv(b, cat, cout, 1, 1, f"{name}.cv2")


def _upsample(b: GraphBuilder, x: Act, name: str) -> Act:
    scales = b.const(f"{name}.scales", [1.0, 1.0, 2.0, 2.0])
    y = b.node(
        "Resize",
        [x.name, "", scales],
        name,
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    return x._replace(name=y, size=x.size * 2)


def _concat(b: GraphBuilder, parts: list[Act], name: str) -> Act:
    return _concat_stats(b.node("Concat", [p.name for p in parts], name, axis=1), parts)


def _anchors(sizes: list[int], strides: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """ultralytics' make_anchors: cell centres (x, y) + 0.5, one stride per anchor."""
    points, per = [], []
    for h, s in zip(sizes, strides, strict=True):
        sy, sx = np.meshgrid(np.arange(h) + 0.5, np.arange(h) + 0.5, indexing="ij")
        points.append(np.stack([sx.ravel(), sy.ravel()], 0))
        per.append(np.full(h * h, s))
    return np.concatenate(points, 1)[None].astype(np.float32), np.concatenate(per)[None].astype(np.float32)


def yolov8n(resolution: int = 320, classes: int = 80, seed: int = 0) -> onnx.ModelProto:
    """A YOLOv8n-style detector (ultralytics' yolov8.yaml at width 0.25, depth 0.33), as exported:
    BN folded into the convs, SiLU as Sigmoid * x. Output [1, 4 + classes, anchors]: boxes
    (cx, cy, w, h in pixels, decoded from a 16-bin DFL softmax) and class probabilities."""
    if resolution % 32:
        raise ValueError(f"the detector's resolution must be a multiple of 32, not {resolution}")
    b = GraphBuilder(f"yolov8n_{resolution}", seed)
    x = Act(b.input("images", [1, 3, resolution, resolution]), 3, resolution, 0.0, 1.0)
    x = _yconv(b, x, 16, 3, 2, "model.0")
    x = _yconv(b, x, 32, 3, 2, "model.1")
    x = _c2f(b, x, 32, 1, True, "model.2")
    x = _yconv(b, x, 64, 3, 2, "model.3")
    p3 = _c2f(b, x, 64, 2, True, "model.4")
    x = _yconv(b, p3, 128, 3, 2, "model.5")
    p4 = _c2f(b, x, 128, 2, True, "model.6")
    x = _yconv(b, p4, 256, 3, 2, "model.7")
    x = _c2f(b, x, 256, 1, True, "model.8")
    p5 = _sppf(b, x, 256, "model.9")
    x = _concat(b, [_upsample(b, p5, "model.10"), p4], "model.11")
    h4 = _c2f(b, x, 128, 1, False, "model.12")
    x = _concat(b, [_upsample(b, h4, "model.13"), p3], "model.14")
    o3 = _c2f(b, x, 64, 1, False, "model.15")
    x = _concat(b, [_yconv(b, o3, 64, 3, 2, "model.16"), h4], "model.17")
    o4 = _c2f(b, x, 128, 1, False, "model.18")
    x = _concat(b, [_yconv(b, o4, 128, 3, 2, "model.19"), p5], "model.20")
    o5 = _c2f(b, x, 256, 1, False, "model.21")
    # Detect: per level a box branch (-> 4 x 16 DFL logits) and a class branch, concatenated
    reg, c2, c3 = 16, 64, max(64, min(classes, 100))
    flat = []
    for i, o in enumerate((o3, o4, o5)):
        name = f"model.22.{i}"
        r = _yconv(b, _yconv(b, o, c2, 3, 1, f"{name}.cv2.0"), c2, 3, 1, f"{name}.cv2.1")
        r = conv_bias_act(b, r, 4 * reg, 1, 1, f"{name}.cv2.2", None, target_ms=2.0)
        c = _yconv(b, _yconv(b, o, c3, 3, 1, f"{name}.cv3.0"), c3, 3, 1, f"{name}.cv3.1")
        c = conv_bias_act(b, c, classes, 1, 1, f"{name}.cv3.2", None, target_ms=4.0, bias_mean=-3.0)
        cat = b.node("Concat", [r.name, c.name], f"{name}.cat", axis=1)
        shape = b.const(f"{name}.flat_shape", [1, 4 * reg + classes, -1], np.int64)
        flat.append(b.node("Reshape", [cat, shape], f"{name}.flat"))
    anchors = sum((resolution // s) ** 2 for s in (8, 16, 32))
    x = b.node("Concat", flat, "model.22.cat", axis=2)
    split = b.const("model.22.split", [4 * reg, classes], np.int64)
    b._claim("model.22.box")
    b._claim("model.22.cls")
    b.nodes.append(
        onnx.helper.make_node(
            "Split", [x, split], ["model.22.box", "model.22.cls"], name="model.22.split", axis=1
        )
    )
    # DFL: [1, 64, A] -> [1, 4, 16, A] -> [1, 16, 4, A] -> softmax over the bins -> expected bin
    d = b.node(
        "Reshape",
        ["model.22.box", b.const("model.22.dfl.shape", [1, 4, reg, anchors], np.int64)],
        "model.22.dfl.view",
    )
    d = b.node("Transpose", [d], "model.22.dfl.transpose", perm=[0, 2, 1, 3])
    d = b.node("Softmax", [d], "model.22.dfl.softmax", axis=1)
    bins = b.const("model.22.dfl.conv.weight", np.arange(reg, dtype=np.float32).reshape(1, reg, 1, 1))
    d = b.node("Conv", [d, bins], "model.22.dfl.conv", kernel_shape=[1, 1])
    d = b.node("Reshape", [d, b.const("model.22.dfl.out_shape", [1, 4, anchors], np.int64)], "model.22.dfl")
    # dist2bbox (xywh) times the strides
    b._claim("model.22.lt")
    b._claim("model.22.rb")
    half = b.const("model.22.half", [2, 2], np.int64)
    b.nodes.append(
        onnx.helper.make_node(
            "Split", [d, half], ["model.22.lt", "model.22.rb"], name="model.22.chunk", axis=1
        )
    )
    points, strides = _anchors([resolution // s for s in (8, 16, 32)], [8, 16, 32])
    pts = b.const("model.22.anchors", points)
    x1y1 = b.node("Sub", [pts, "model.22.lt"], "model.22.x1y1")
    x2y2 = b.node("Add", [pts, "model.22.rb"], "model.22.x2y2")
    cxy = b.node(
        "Div", [b.node("Add", [x1y1, x2y2], "model.22.sum"), b.const("model.22.two", 2.0)], "model.22.cxy"
    )
    wh = b.node("Sub", [x2y2, x1y1], "model.22.wh")
    box = b.node("Concat", [cxy, wh], "model.22.dbox", axis=1)
    box = b.node("Mul", [box, b.const("model.22.strides", strides)], "model.22.box_px")
    cls = b.node("Sigmoid", ["model.22.cls"], "model.22.cls_prob")
    b.node("Concat", [box, cls], "model.22.out", out="output0", axis=1)
    b.output("output0", [1, 4 + classes, anchors])
    return b.model(
        f"YOLOv8n-style detector at {resolution}x{resolution}, {classes} classes, "
        f"seeded random weights (seed {seed})"
    )
