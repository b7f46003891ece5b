"""Converters for reductions: Reduce*, ArgMax/ArgMin, TopK, CumSum and CumProd.

Axes become static attributes: from the `axes` attribute before ReduceSum-13 /
Reduce*-18, from the (constant) `axes` input since. Absent or empty axes reduce
every axis unless noop_with_empty_axes is set, which makes `axes=()`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np
import onnx

from tensorir.errors import ModelError, ShapeError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.graph.graph import Value

_REDUCE = {
    "ReduceSum": "reduce_sum",
    "ReduceMean": "reduce_mean",
    "ReduceMax": "reduce_max",
    "ReduceMin": "reduce_min",
    "ReduceProd": "reduce_prod",
    "ReduceL1": "reduce_l1",
    "ReduceL2": "reduce_l2",
    "ReduceSumSquare": "reduce_sum_square",
    "ReduceLogSum": "reduce_log_sum",
    "ReduceLogSumExp": "reduce_log_sum_exp",
}
# first opset in which `axes` is an input rather than an attribute
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def norm_axes(node: onnx.NodeProto, axes: Iterable[int], rank: int) -> tuple[int, ...]:
    """Sorted non-negative axes; a ShapeError naming the node for bad or repeated ones."""
    out = []
    for a in (int(a) for a in axes):
        if not -rank <= a < rank:
            raise ShapeError(f"{node_label(node)}: axis {a} is out of range for rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ShapeError(f"{node_label(node)}: axes {list(axes)} repeat an axis")
    return tuple(sorted(out))


def norm_axis(node: onnx.NodeProto, axis: int, rank: int) -> int:
    return norm_axes(node, [axis], rank)[0]


def const_int(ctx: ImportContext, node: onnx.NodeProto, i: int, what: str) -> int:
    """A required constant input holding one integer (a scalar or a 1-element tensor)."""
    ctx.input(node, i)  # a clear error when it is missing
    value = np.asarray(ctx.const_input(node, i, what)).reshape(-1)
    if value.size != 1:
        raise ModelError(f"{node_label(node)}: {what} must hold one integer, got {value.tolist()}")
    return int(value[0])


def _reduce(op: str, ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    rank = ctx.type_of(x).ndim
    attrs = ctx.attrs(node)
    if ctx.opset >= _AXES_INPUT_SINCE.get(node.op_type, 18):
        axes = ctx.const_input(node, 1, "axes")
        noop = bool(attrs.get("noop_with_empty_axes", 0))
    else:
        axes, noop = attrs.get("axes"), False
    if axes is None or len(np.asarray(axes).reshape(-1)) == 0:
        norm = () if noop else tuple(range(rank))
    else:
        norm = norm_axes(node, np.asarray(axes).reshape(-1), rank)
    keepdims = int(attrs.get("keepdims", 1))
    return ctx.add(op, [x], {"axes": norm, "keepdims": keepdims}, node=node)


for _t, _op in _REDUCE.items():
    converter(_t)(functools.partial(_reduce, _op))


def _arg(op: str, ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    attrs = ctx.attrs(node)
    out = {
        "axis": norm_axis(node, attrs.get("axis", 0), ctx.type_of(x).ndim),
        "keepdims": int(attrs.get("keepdims", 1)),
        "select_last_index": int(attrs.get("select_last_index", 0)),
    }
    return ctx.add(op, [x], out, node=node)


converter("ArgMax")(functools.partial(_arg, "argmax"))
converter("ArgMin")(functools.partial(_arg, "argmin"))


@converter("TopK")
def topk(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    attrs = ctx.attrs(node)
    out = {
        "axis": norm_axis(node, attrs.get("axis", -1), ctx.type_of(x).ndim),
        "largest": int(attrs.get("largest", 1)),
        "sorted": int(attrs.get("sorted", 1)),
    }
    length = ctx.lengths.get(x)
    along = length is not None and length.axis == out["axis"]
    if ctx.opset >= 10 and (along or ctx.known_value(ctx.input(node, 1)) is None):
        return _topk_dyn(ctx, node, x, out, length.count if along else None)
    out["k"] = const_int(ctx, node, 1, "K") if ctx.opset >= 10 else int(attrs["k"])
    return ctx.add("topk", [x], out, node=node)


def _topk_dyn(
    ctx: ImportContext, node: onnx.NodeProto, x: Value, attrs: dict, length: Value | None
) -> list[Value]:
    """K known at run time only, or x with a data-dependent length along the axis: every
    line sorted, min(K, valid entries) as the outputs' length (ops/dynamic.py topk_dyn)."""
    k = ctx.input(node, 1)
    if ctx.type_of(k).size != 1:
        raise ModelError(
            f"{node_label(node)}: K must hold one integer, got shape {list(ctx.type_of(k).shape)}"
        )
    if ctx.type_of(k).dtype != "int64":
        (k,) = ctx.add("cast", [k], {"to": "int64"}, node=node)
    if length is None:
        length = ctx.const(np.int64(ctx.type_of(x).shape[attrs["axis"]]))
    values, indices, count = ctx.add("topk_dyn", [x, length, k], attrs, node=node)
    for v in (values, indices):
        ctx.set_length(v, attrs["axis"], count, node)
    return [values, indices]


@converter("CumSum", "CumProd")
def cumulative(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    attrs = ctx.attrs(node)
    axis = const_int(ctx, node, 1, "axis")
    out = {
        "axis": norm_axis(node, axis, ctx.type_of(x).ndim),
        "exclusive": int(attrs.get("exclusive", 0)),
        "reverse": int(attrs.get("reverse", 0)),
    }
    return ctx.add("cumsum" if node.op_type == "CumSum" else "cumprod", [x], out, node=node)
