"""TensorFlow converters for the neural-network ops: convolutions, pooling, matmuls and einsum,
batch norm, softmax, resize.

NHWC convolutions and pools become the graph IR's NCHW ops between two transposes
(NHWC -> NCHW before, back after); passes/transpose_sink.py cancels the pairs between
layers. TF filters are [kh, kw, in, out] (depthwise: [kh, kw, in, multiplier]) and are
reordered to [out, in/group, kh, kw] here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorir.errors import ModelError, UnsupportedOpError
from tensorir.frontend.tensorflow import TFContext, TFNode, node_label, tf_converter
from tensorir.graph.graph import Value

TO_NCHW, TO_NHWC = (0, 3, 1, 2), (0, 2, 3, 1)


def is_nhwc(ctx: TFContext, node: TFNode) -> bool:
    fmt = ctx.attr(node, "data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW"):
        raise UnsupportedOpError(f"{node_label(node)}: data_format {fmt} is not supported")
    return fmt == "NHWC"


def to_nchw(ctx: TFContext, v: Value, nhwc: bool) -> Value:
    return ctx.add1("transpose", [v], {"perm": TO_NCHW}) if nhwc else v


def to_nhwc(ctx: TFContext, v: Value, nhwc: bool, node: TFNode) -> list[Value]:
    return ctx.add("transpose", [v], {"perm": TO_NHWC}, node=node) if nhwc else [v]


def _spatial(values: list[int], nhwc: bool) -> tuple[int, int]:
    return (values[1], values[2]) if nhwc else (values[2], values[3])


def window(
    ctx: TFContext, node: TFNode, hw: tuple[int, int], kernel: tuple[int, int], nhwc: bool
) -> dict[str, Any]:
    """strides, dilations and explicit pads of a TF window op (SAME / VALID / EXPLICIT)."""
    strides = _spatial(ctx.attr(node, "strides", [1, 1, 1, 1]), nhwc)
    dil = _spatial(ctx.attr(node, "dilations", [1, 1, 1, 1]), nhwc)
    padding = ctx.attr(node, "padding", "VALID")
    if padding == "SAME":
        begins, ends = [], []
        for n, k, s, d in zip(hw, kernel, strides, dil, strict=True):
            total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
            begins.append(total // 2)
            ends.append(total - total // 2)
        pads = (*begins, *ends)
    elif padding == "VALID":
        pads = (0, 0, 0, 0)
    elif padding == "EXPLICIT":
        ex = ctx.attr(node, "explicit_paddings")
        pairs = [ex[2:4], ex[4:6]] if nhwc else [ex[4:6], ex[6:8]]
        pads = (pairs[0][0], pairs[1][0], pairs[0][1], pairs[1][1])
    else:
        raise ModelError(f"{node_label(node)}: unknown padding '{padding}'")
    return {"strides": tuple(strides), "dilations": tuple(dil), "pads": tuple(int(p) for p in pads)}


def _filter(ctx: TFContext, node: TFNode, i: int, perm: tuple[int, ...]) -> Value:
    """Input i (a TF filter) transposed by `perm`: folded now when it is a constant."""
    w = ctx.input(node, i)
    value = ctx.const_value(w)
    if value is not None:
        return ctx.const(np.ascontiguousarray(value.transpose(perm)))
    return ctx.add1("transpose", [w], {"perm": perm})


@tf_converter("Conv2D")
def conv2d(ctx: TFContext, node: TFNode) -> list[Value]:
    nhwc = is_nhwc(ctx, node)
    x = ctx.input(node, 0)
    kh, kw, cin, _ = ctx.shape(ctx.input(node, 1))
    group = ctx.shape(x)[3 if nhwc else 1] // cin
    attrs = window(ctx, node, _spatial(list(ctx.shape(x)), nhwc), (kh, kw), nhwc)
    w = _filter(ctx, node, 1, (3, 2, 0, 1))
    (y,) = ctx.add("conv", [to_nchw(ctx, x, nhwc), w], {**attrs, "group": group}, node=node)
    return to_nhwc(ctx, y, nhwc, node)


@tf_converter("DepthwiseConv2dNative")
def depthwise_conv2d(ctx: TFContext, node: TFNode) -> list[Value]:
    nhwc = is_nhwc(ctx, node)
    x = ctx.input(node, 0)
    kh, kw, cin, mult = ctx.shape(ctx.input(node, 1))
    attrs = window(ctx, node, _spatial(list(ctx.shape(x)), nhwc), (kh, kw), nhwc)
    w = ctx.const_value(ctx.input(node, 1))
    if w is None:
        raise ModelError(f"{node_label(node)}: the depthwise filter must be a constant")
    # [kh, kw, c, m] -> [c * m, 1, kh, kw]: output channel c * m + j reads input channel c
    wt = ctx.const(np.ascontiguousarray(w.transpose(2, 3, 0, 1).reshape(cin * mult, 1, kh, kw)))
    (y,) = ctx.add("conv", [to_nchw(ctx, x, nhwc), wt], {**attrs, "group": cin}, node=node)
    return to_nhwc(ctx, y, nhwc, node)


@tf_converter("Conv2DBackpropInput")
def conv2d_transpose(ctx: TFContext, node: TFNode) -> list[Value]:
    nhwc = is_nhwc(ctx, node)
    sizes = [int(d) for d in ctx.const_input(node, 0, "input_sizes")]
    x = ctx.input(node, 2)
    kh, kw, _, _ = ctx.shape(ctx.input(node, 1))
    target = _spatial(sizes, nhwc)
    fwd = window(ctx, node, target, (kh, kw), nhwc)  # the forward conv this one transposes
    in_hw = _spatial(list(ctx.shape(x)), nhwc)
    pads, out_pad = list(fwd["pads"]), [0, 0]
    for i, (n, k, s, d) in enumerate(zip(in_hw, (kh, kw), fwd["strides"], fwd["dilations"], strict=True)):
        end = s * (n - 1) + (k - 1) * d + 1 - target[i] - pads[i]
        pads[2 + i], out_pad[i] = max(end, 0), max(-end, 0)
    attrs = {**fwd, "pads": tuple(pads), "output_padding": tuple(out_pad), "group": 1}
    w = _filter(ctx, node, 1, (3, 2, 0, 1))  # [kh, kw, out, in] -> [in, out, kh, kw]
    (y,) = ctx.add("conv_transpose", [to_nchw(ctx, x, nhwc), w], attrs, node=node)
    return to_nhwc(ctx, y, nhwc, node)


def _pool(op: str, ctx: TFContext, node: TFNode, extra: dict[str, Any]) -> list[Value]:
    nhwc = is_nhwc(ctx, node)
    x = ctx.input(node, 0)
    ksize = ctx.attr(node, "ksize")
    if ksize[0] != 1 or ksize[3 if nhwc else 1] != 1:
        raise UnsupportedOpError(f"{node_label(node)}: pooling over the batch or channel axis")
    kernel = _spatial(ksize, nhwc)
    attrs = window(ctx, node, _spatial(list(ctx.shape(x)), nhwc), kernel, nhwc)
    attrs.pop("dilations")
    (y,) = ctx.add(op, [to_nchw(ctx, x, nhwc)], {**attrs, "kernel_shape": kernel, **extra}, node=node)
    return to_nhwc(ctx, y, nhwc, node)


@tf_converter("MaxPool")
def max_pool(ctx: TFContext, node: TFNode) -> list[Value]:
    return _pool("max_pool", ctx, node, {"indices": 0})


@tf_converter("AvgPool")
def avg_pool(ctx: TFContext, node: TFNode) -> list[Value]:
    return _pool("avg_pool", ctx, node, {"count_include_pad": 0})


# ---- matmul / einsum -------------------------------------------------------------------
def _swap_last(ctx: TFContext, v: Value) -> Value:
    n = len(ctx.shape(v))
    value = ctx.const_value(v)
    if value is not None:
        return ctx.const(np.ascontiguousarray(np.swapaxes(value, -1, -2)))
    return ctx.add1("transpose", [v], {"perm": (*range(n - 2), n - 1, n - 2)})


def _matmul(ctx: TFContext, node: TFNode, ta: str, tb: str) -> list[Value]:
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    if ctx.attr(node, ta, False):
        a = _swap_last(ctx, a)
    if ctx.attr(node, tb, False):
        b = _swap_last(ctx, b)
    return ctx.add("matmul", [a, b], node=node)


@tf_converter("MatMul")
def matmul(ctx: TFContext, node: TFNode) -> list[Value]:
    return _matmul(ctx, node, "transpose_a", "transpose_b")


@tf_converter("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def batch_matmul(ctx: TFContext, node: TFNode) -> list[Value]:
    return _matmul(ctx, node, "adj_x", "adj_y")


@tf_converter("Einsum")
def einsum(ctx: TFContext, node: TFNode) -> list[Value]:
    equation = str(ctx.attr(node, "equation")).replace(" ", "")
    ins = [ctx.input(node, i) for i in range(ctx.n_inputs(node))]
    return ctx.add("einsum", ins, {"equation": equation}, node=node)


# ---- batch norm / softmax ------------------------------------------------------------
@tf_converter("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def fused_batch_norm(ctx: TFContext, node: TFNode) -> list[Value]:
    if ctx.attr(node, "is_training", False):
        raise UnsupportedOpError(f"{node_label(node)}: batch norm in training mode")
    nhwc = is_nhwc(ctx, node)
    x = ctx.input(node, 0)
    scale, offset, mean, var = (ctx.const_input(node, i).astype(np.float64) for i in range(1, 5))
    a = scale / np.sqrt(var + float(ctx.attr(node, "epsilon", 1e-3)))
    b = offset - mean * a
    dtype = ctx.type_of(x).dtype
    shape = (-1,) if nhwc else (-1, 1, 1)
    y = ctx.add1("mul", [x, ctx.const(a.reshape(shape), dtype)])
    return ctx.add("add", [y, ctx.const(b.reshape(shape), dtype)], node=node)


@tf_converter("Softmax", "LogSoftmax")
def softmax(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    op = "softmax" if node.op == "Softmax" else "log_softmax"
    return ctx.add(op, [x], {"axis": len(ctx.shape(x)) - 1}, node=node)


# ---- resize ---------------------------------------------------------------------------
def _resize_modes(ctx: TFContext, node: TFNode, nearest: bool) -> dict[str, str]:
    if ctx.attr(node, "align_corners", False):
        return {"coordinate_transformation_mode": "align_corners", "nearest_mode": "round_prefer_ceil"}
    if ctx.attr(node, "half_pixel_centers", False):
        # nearest: floor((x + 0.5) * in / out) is half_pixel rounded half up
        return {"coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_ceil"}
    return {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}


@tf_converter("ResizeBilinear", "ResizeNearestNeighbor")
def resize(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    n, h, w, c = ctx.shape(x)
    oh, ow = (int(d) for d in ctx.const_input(node, 1, "size"))
    nearest = node.op == "ResizeNearestNeighbor"
    attrs = {
        "sizes": (n, oh, ow, c),
        "scales": (1.0, oh / h, ow / w, 1.0),
        "mode": "nearest" if nearest else "linear",
        **_resize_modes(ctx, node, nearest),
    }
    return ctx.add("resize", [x], attrs, node=node)
