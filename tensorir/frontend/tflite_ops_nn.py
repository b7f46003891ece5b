"""TFLite converters for the convolutions (CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV and
MediaPipe's custom Convolution2DTransposeBias),
FULLY_CONNECTED, pooling (MAX_POOL_2D, AVERAGE_POOL_2D), the reductions (MEAN, SUM,
REDUCE_MAX / MIN / PROD; over H and W: global pooling) and SOFTMAX.

Convolutions and pools always compute in NCHW: they read their input's channels-first twin and
set their output's (`ctx.nchw`, `ctx.set_nchw`), weights transposed from OHWI at import. A
reduction and softmax follow their input's layout; FULLY_CONNECTED works in TFLite's order.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import ModelError, UnsupportedOpError
from tensorir.frontend.tflite_context import TO_NCHW, TfliteContext, to_cl
from tensorir.frontend.tflite_ops_common import activation, converter, follows_nchw, set_output
from tensorir.frontend.tflite_reader import TflOp
from tensorir.graph.graph import Value


# ---- helpers ------------------------------------------------------------------------------
def _out_nchw(ctx: TfliteContext, op: TflOp, v: Value) -> None:
    ctx.set_nchw(op, 0, activation(ctx, op, v))


def same_pads(
    size: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dil: Sequence[int]
) -> tuple[int, ...]:
    """TFLite's SAME padding: output = ceil(in / stride), the odd pad at the end."""
    begins, ends = [], []
    for n, k, s, d in zip(size, kernel, strides, dil, strict=True):
        total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return (*begins, *ends)


def _window(op: TflOp, hw: Sequence[int], kernel: Sequence[int], dil: Sequence[int]) -> dict[str, Any]:
    strides = (int(op.options["StrideH"]), int(op.options["StrideW"]))
    padding = int(op.options.get("Padding", 0))
    if padding not in (0, 1):
        raise UnsupportedOpError(f"{op.label}: padding type {padding} is not supported")
    pads = same_pads(hw, kernel, strides, dil) if padding == 0 else (0, 0, 0, 0)
    return {"strides": strides, "pads": pads, "dilations": tuple(dil)}


def _weight(ctx: TfliteContext, op: TflOp, k: int, perm: Sequence[int]) -> Value:
    if not ctx.has(op, k):
        raise ModelError(f"{op.label}: required input {k} is missing")
    return ctx.weight(op.inputs[k], perm)


def _bias(ctx: TfliteContext, op: TflOp, k: int) -> list[Value]:
    return [ctx.input(op, k)] if ctx.has(op, k) else []


# ---- convolutions -------------------------------------------------------------------------
@converter("CONV_2D")
def conv_2d(ctx: TfliteContext, op: TflOp) -> None:
    x = ctx.nchw(op.inputs[0])
    w = _weight(ctx, op, 1, TO_NCHW)  # OHWI -> OIHW
    c, wt = ctx.graph.type_of(x).shape[1], ctx.graph.type_of(w).shape
    dil = (int(op.options.get("DilationHFactor", 1)), int(op.options.get("DilationWFactor", 1)))
    attrs = _window(op, ctx.graph.type_of(x).shape[2:], wt[2:], dil)
    attrs["group"] = c // wt[1] if wt[1] else 1
    _out_nchw(ctx, op, ctx.add("conv", [x, w, *_bias(ctx, op, 2)], attrs, op))


@converter("DEPTHWISE_CONV_2D")
def depthwise_conv_2d(ctx: TfliteContext, op: TflOp) -> None:
    x = ctx.nchw(op.inputs[0])
    w = _weight(ctx, op, 1, (3, 0, 1, 2))  # 1HW(C*M) -> (C*M)1HW
    c, wt = ctx.graph.type_of(x).shape[1], ctx.graph.type_of(w).shape
    dil = (int(op.options.get("DilationHFactor", 1)), int(op.options.get("DilationWFactor", 1)))
    attrs = _window(op, ctx.graph.type_of(x).shape[2:], wt[2:], dil)
    attrs["group"] = c
    _out_nchw(ctx, op, ctx.add("conv", [x, w, *_bias(ctx, op, 2)], attrs, op))


def transpose_conv_pads(size: int, out: int, k: int, s: int, same: bool) -> tuple[int, int, int]:
    """(pad begin, pad end, output_padding) of a transposed conv that TFLite crops to `out`."""
    full = s * (size - 1) + k
    begin = max(0, (size - 1) * s + k - out) // 2 if same else 0
    end = full - begin - out
    return (begin, end, 0) if end >= 0 else (begin, 0, -end)


@converter("TRANSPOSE_CONV")
def transpose_conv(ctx: TfliteContext, op: TflOp) -> None:
    out_shape = [int(d) for d in ctx.const_input(op, 0, "output_shape")]
    strides = (int(op.options["StrideH"]), int(op.options["StrideW"]))
    same = int(op.options.get("Padding", 0)) == 0
    _transpose_conv(ctx, op, (2, 1, 3), out_shape, strides, same)


@converter("CUSTOM:Convolution2DTransposeBias")
def transpose_conv_bias(ctx: TfliteContext, op: TflOp) -> None:
    """MediaPipe's custom op (selfie segmentation's upsampling): inputs (x, OHWI weight, bias),
    options a TfLiteTransposeConvParams struct (int32 padding 1 SAME / 2 VALID, stride W, stride
    H), the output's shape the output tensor's."""
    if len(op.custom_options) < 12:
        raise ModelError(f"{op.label} {op.custom_code}: {len(op.custom_options)} option bytes, expected 12")
    padding, stride_w, stride_h = (int(v) for v in np.frombuffer(op.custom_options[:12], "<i4"))
    if padding not in (1, 2) or min(stride_w, stride_h) < 1:
        raise ModelError(f"{op.label} {op.custom_code}: padding {padding}, strides {stride_h} x {stride_w}")
    out_shape = list(ctx.tensor(op.outputs[0]).shape)
    _transpose_conv(ctx, op, (0, 1, 2), out_shape, (stride_h, stride_w), padding == 1)


def _transpose_conv(
    ctx: TfliteContext,
    op: TflOp,
    slots: tuple[int, int, int],
    out_shape: list[int],
    strides: tuple[int, int],
    same: bool,
) -> None:
    """A transposed conv cropped to the NHWC `out_shape`; `slots`: the (x, OHWI weight, bias)
    inputs' positions."""
    xi, wi, bi = slots
    x = ctx.nchw(op.inputs[xi])
    w = _weight(ctx, op, wi, (3, 0, 1, 2))  # OHWI -> IOHW
    hw, k = ctx.graph.type_of(x).shape[2:], ctx.graph.type_of(w).shape[2:]
    dims = [transpose_conv_pads(hw[a], out_shape[1 + a], k[a], strides[a], same) for a in range(2)]
    attrs = {
        "strides": strides,
        "pads": (dims[0][0], dims[1][0], dims[0][1], dims[1][1]),
        "output_padding": (dims[0][2], dims[1][2]),
        "dilations": (1, 1),
        "group": 1,
    }
    _out_nchw(ctx, op, ctx.add("conv_transpose", [x, w, *_bias(ctx, op, bi)], attrs, op))


@converter("FULLY_CONNECTED")
def fully_connected(ctx: TfliteContext, op: TflOp) -> None:
    if int(op.options.get("WeightsFormat", 0)) != 0:
        raise UnsupportedOpError(f"{op.label}: shuffled weights are not supported")
    x, w = ctx.input(op, 0), ctx.input(op, 1)
    shape, k = ctx.shape(op.inputs[0]), ctx.graph.type_of(w).shape[1]
    if math.prod(shape) % k:
        raise ModelError(f"{op.label}: input {list(shape)} does not flatten into rows of {k}")
    rows = (math.prod(shape) // k, k)
    flat = x if tuple(shape) == rows else ctx.add("reshape", [x], {"shape": rows}, op)
    y = ctx.add("dense", [flat, w], None, op)
    if ctx.has(op, 2):
        y = ctx.add("add", [y, ctx.input(op, 2)], None, op)
    if op.options.get("KeepNumDims") and len(shape) != 2:
        y = ctx.add("reshape", [y], {"shape": (*shape[:-1], ctx.graph.type_of(w).shape[0])}, op)
    ctx.set_nhwc(op, 0, activation(ctx, op, y))


# ---- pooling / reductions ------------------------------------------------------------------
def _pool(graph_op: str, ctx: TfliteContext, op: TflOp) -> None:
    x = ctx.nchw(op.inputs[0])
    kernel = (int(op.options["FilterHeight"]), int(op.options["FilterWidth"]))
    attrs = {"kernel_shape": kernel, **_window(op, ctx.graph.type_of(x).shape[2:], kernel, (1, 1))}
    attrs.update({"ceil_mode": 0, "storage_order": 0, "indices": 0} if graph_op == "max_pool" else {})
    attrs.update({"ceil_mode": 0, "count_include_pad": 0} if graph_op == "avg_pool" else {})
    _out_nchw(ctx, op, ctx.add(graph_op, [x], attrs, op))


converter("MAX_POOL_2D")(functools.partial(_pool, "max_pool"))
converter("AVERAGE_POOL_2D")(functools.partial(_pool, "avg_pool"))

_REDUCE = {
    "MEAN": "reduce_mean",
    "SUM": "reduce_sum",
    "REDUCE_MAX": "reduce_max",
    "REDUCE_MIN": "reduce_min",
    "REDUCE_PROD": "reduce_prod",
}
_GLOBAL = {"MEAN": "global_avg_pool", "REDUCE_MAX": "global_max_pool"}


def _reduce(ctx: TfliteContext, op: TflOp) -> None:
    i = op.inputs[0]
    rank = ctx.rank(i)
    axes = sorted({int(a) % rank for a in np.asarray(ctx.const_input(op, 1, "axes")).reshape(-1)})
    keep = bool(op.options.get("KeepDims", False))
    if rank == 4 and axes == [1, 2] and op.code in _GLOBAL:  # global pooling over H, W
        y = ctx.add(_GLOBAL[op.code], [ctx.nchw(i)], None, op)
        if keep:
            return ctx.set_nchw(op, 0, y)
        return ctx.set_nhwc(op, 0, ctx.add("reshape", [y], {"shape": ctx.graph.type_of(y).shape[:2]}, op))
    kept = [a for a in range(rank) if a not in axes]
    nchw = follows_nchw(ctx, [i]) and (
        keep or [to_cl(rank)[a] for a in kept] == sorted(to_cl(rank)[a] for a in kept)
    )
    x = ctx.nchw(i) if nchw else ctx.nhwc(i)
    attrs = {"axes": tuple(sorted(to_cl(rank)[a] for a in axes) if nchw else axes), "keepdims": int(keep)}
    set_output(ctx, op, ctx.add(_REDUCE[op.code], [x], attrs, op), nchw and keep)


for _code in _REDUCE:
    converter(_code)(_reduce)


@converter("SOFTMAX")
def softmax(ctx: TfliteContext, op: TflOp) -> None:
    i = op.inputs[0]
    nchw = follows_nchw(ctx, [i])
    x = ctx.nchw(i) if nchw else ctx.nhwc(i)
    beta = float(op.options.get("Beta", 1.0))
    if beta != 1.0:
        x = ctx.add("mul", [x, ctx.const(np.float32(beta))], None, op)
    axis = 1 if nchw else ctx.rank(i) - 1
    set_output(ctx, op, ctx.add("softmax", [x], {"axis": axis}, op), nchw)
