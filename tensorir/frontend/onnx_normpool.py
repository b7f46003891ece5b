"""Converters for the Lp-norm and local-response ops, built from existing reductions and pools:

- LpNormalization: x / reduce_l1|l2(x) along the axis (0 where the norm is 0, as ONNX says);
- LpPool: (sum over the window of |x|^p)^(1/p), the sum an avg_pool counting the pads times
  its (static) divisor: a constant per output position (ceil-mode windows count fewer taps);
- LRN: x / (bias + alpha * mean of x^2 over `size` channels)^beta, the mean an avg_pool over a
  (size x 1) window on [N, 1, C, spatial], the missing channels at the edges counting as 0.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.frontend.onnx_nn import pool_attrs
from tensorir.graph.graph import Value
from tensorir.ops.infer import normalize_axis
from tensorir.ops.pool import window_counts


def _const(ctx: ImportContext, like: Value, value: float | np.ndarray) -> Value:
    return ctx.const(np.asarray(value).astype(ctx.type_of(like).dtype))


@converter("LpNormalization")
def lp_normalization(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    attrs = ctx.attrs(node)
    p = int(attrs.get("p", 2))
    if p not in (1, 2):
        raise ModelError(f"{node_label(node)}: p must be 1 or 2, got {p}")
    axis = normalize_axis(int(attrs.get("axis", -1)), ctx.type_of(x).ndim)
    op = "reduce_l1" if p == 1 else "reduce_l2"
    (norm,) = ctx.add(op, [x], {"axes": (axis,), "keepdims": 1}, node=node)
    (zero,) = ctx.add("equal", [norm, _const(ctx, x, 0)], node=node)
    (y,) = ctx.add("div", [x, norm], node=node)
    return ctx.add("where", [zero, _const(ctx, x, 0), y], node=node)


@converter("LpPool")
def lp_pool(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    p = float(ctx.attrs(node).get("p", 2))
    attrs = pool_attrs(ctx, node) | {"count_include_pad": 1}
    (a,) = ctx.add("abs", [x], node=node)
    (powered,) = ctx.add("pow", [a, _const(ctx, x, p)], node=node)
    (mean,) = ctx.add("avg_pool", [powered], attrs, node=node)
    counts = window_counts(ctx.type_of(x).shape[2:], attrs, include_pad=True)
    (total,) = ctx.add("mul", [mean, _const(ctx, x, counts)], node=node)
    return ctx.add("pow", [total, _const(ctx, x, 1 / p)], node=node)


@converter("LRN")
def lrn(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    shape = ctx.type_of(x).shape
    if len(shape) < 3:
        raise ModelError(f"{node_label(node)}: input must be N x C x spatial, got {list(shape)}")
    attrs = ctx.attrs(node)
    size = int(attrs["size"])
    alpha, beta, bias = (float(attrs.get(k, d)) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    (sq,) = ctx.add("mul", [x, x], node=node)
    rows = (shape[0], 1, shape[1], math.prod(shape[2:]))
    (sq,) = ctx.add("reshape", [sq], {"shape": rows}, node=node)
    before = (size - 1) // 2
    window = {
        "kernel_shape": (size, 1),
        "strides": (1, 1),
        "pads": (before, 0, size - 1 - before, 0),
        "dilations": (1, 1),
        "ceil_mode": 0,
        "count_include_pad": 1,
    }
    (mean,) = ctx.add("avg_pool", [sq], window, node=node)
    (mean,) = ctx.add("reshape", [mean], {"shape": shape}, node=node)
    (scaled,) = ctx.add("mul", [mean, _const(ctx, x, alpha)], node=node)
    (base,) = ctx.add("add", [scaled, _const(ctx, x, bias)], node=node)
    (denom,) = ctx.add("pow", [base, _const(ctx, x, beta)], node=node)
    return ctx.add("div", [x, denom], node=node)
