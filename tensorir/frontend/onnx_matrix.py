"""Converters for ONNX ops that select or mark positions: Trilu, EyeLike, Hardmax, OneHot.

Each becomes existing graph ops: shapes are static, so Trilu's triangle is a constant mask
(a `where` against zero), EyeLike a constant, Hardmax an argmax compared with the axis'
positions, OneHot the (wrapped) indices compared with 0..depth-1.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.helper

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.graph.graph import Value
from tensorir.ops.infer import normalize_axis


def positions(n: int, axis: int, ndim: int) -> np.ndarray:
    """0..n-1 as int64, shaped to broadcast along `axis` of a rank-`ndim` tensor."""
    shape = [1] * ndim
    shape[axis] = n
    return np.arange(n, dtype=np.int64).reshape(shape)


def _zero_like(ctx: ImportContext, x: Value) -> Value:
    return ctx.const(np.zeros((), ctx.type_of(x).dtype))


@converter("Trilu")
def trilu(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    shape = ctx.type_of(x).shape
    if len(shape) < 2:
        raise ModelError(f"{node_label(node)}: input must have rank >= 2, got {list(shape)}")
    k = ctx.const_input(node, 1, "k")
    k = 0 if k is None else int(np.asarray(k).reshape(()))
    rows, cols = np.arange(shape[-2])[:, None], np.arange(shape[-1])[None, :]
    upper = ctx.attrs(node).get("upper", 1)
    mask = cols - rows >= k if upper else cols - rows <= k
    return ctx.add("where", [ctx.const(mask), x, _zero_like(ctx, x)], node=node)


@converter("EyeLike")
def eye_like(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    t = ctx.type_of(x)
    if len(t.shape) != 2:
        raise ModelError(f"{node_label(node)}: input must be 2-D, got {list(t.shape)}")
    attrs = ctx.attrs(node)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(attrs["dtype"]) if "dtype" in attrs else t.dtype
    return [ctx.const(np.eye(*t.shape, k=int(attrs.get("k", 0)), dtype=dtype))]


@converter("Hardmax")
def hardmax(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    """1 at the first maximum along the axis, 0 elsewhere (before opset 13 the input is
    seen as 2-D: the axes before `axis` against those from it)."""
    x = ctx.input(node, 0)
    t = ctx.type_of(x)
    axis = normalize_axis(ctx.attrs(node).get("axis", -1 if ctx.opset >= 13 else 1), t.ndim)
    flat = x
    if ctx.opset < 13:
        two_d = (math.prod(t.shape[:axis]), math.prod(t.shape[axis:]))
        (flat,) = ctx.add("reshape", [x], {"shape": two_d}, node=node)
        axis = 1
    ft = ctx.type_of(flat)
    best = ctx.add("argmax", [flat], {"axis": axis, "keepdims": 1, "select_last_index": 0}, node=node)
    where = ctx.const(positions(ft.shape[axis], axis, ft.ndim))
    (hit,) = ctx.add("equal", [best[0], where], node=node)
    (out,) = ctx.add("cast", [hit], {"to": t.dtype, "saturate": 1}, node=node)
    if ctx.opset < 13:
        return ctx.add("reshape", [out], {"shape": t.shape}, node=node)
    return [out]


@converter("OneHot")
def one_hot(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    """on where the index (negative ones counted from depth) equals the position, else off."""
    indices, values = ctx.input(node, 0), ctx.input(node, 2)
    depth = int(np.asarray(ctx.const_input(node, 1, "depth")).reshape(()))
    it = ctx.type_of(indices)
    axis = normalize_axis(ctx.attrs(node).get("axis", -1), it.ndim + 1)
    idx = indices
    if it.dtype != "int64":
        (idx,) = ctx.add("cast", [indices], {"to": "int64", "saturate": 1}, node=node)
    (neg,) = ctx.add("less", [idx, ctx.const(np.int64(0))], node=node)
    (up,) = ctx.add("add", [idx, ctx.const(np.int64(depth))], node=node)
    (idx,) = ctx.add("where", [neg, up, idx], node=node)
    shape = list(it.shape)
    shape.insert(axis, 1)
    (idx,) = ctx.add("reshape", [idx], {"shape": tuple(shape)}, node=node)
    (hit,) = ctx.add("equal", [idx, ctx.const(positions(depth, axis, len(shape)))], node=node)
    off, on = (ctx.add("gather", [values, ctx.const(np.int64(i))], {"axis": 0}, node=node)[0] for i in (0, 1))
    return ctx.add("where", [hit, on, off], node=node)
