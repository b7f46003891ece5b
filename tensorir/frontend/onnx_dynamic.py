"""Converters for ops whose output length depends on the data: NonZero, Compress,
NonMaxSuppression, Unique (TopK with a run-time k is in onnx_reduce.py).

Each becomes an op of ops/dynamic.py (or a composition: Compress is a gather at the
positions NonZero finds) whose output has its upper bound as shape and a length, an int64
scalar tensor, recorded with `ctx.set_length`; frontend/lengths.py follows it downstream.
On inputs that are constants (no graph input among their producers) the result is computed
at import instead, with its exact shape, as shape computations in exported graphs need.

Shape and Size of a tensor with a length give run-time tensors (`RUNTIME_SHAPE`).
"""

from __future__ import annotations

import numpy as np
import onnx

from tensorir.errors import ModelError
from tensorir.frontend.onnx import RUNTIME_SHAPE, ImportContext, converter, node_label
from tensorir.graph.graph import Value
from tensorir.ops.dynamic import rows_per_class
from tensorir.ops.registry import get_op


def _folded(ctx: ImportContext, node: onnx.NodeProto, op: str, attrs: dict) -> list[Value] | None:
    """The op's exact result as constants when every input is known at compile time."""
    values = [ctx.known_value(v) for v in ctx.inputs(node)]
    if any(v is None for v in values):
        return None
    outs = get_op(op).run_reference(values, attrs)
    return [ctx.const(o) for o in outs]


@converter("NonZero")
def nonzero(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    folded = _folded(ctx, node, "nonzero", {})
    if folded is not None:
        count = int(ctx.const_value(folded[1]))
        full = ctx.const_value(folded[0])
        return [ctx.const(np.ascontiguousarray(full[:, :count]))]
    idx, count = ctx.add("nonzero", [x], node=node)
    ctx.set_length(idx, 1, count, node)
    return [idx]


@converter("Compress")
def compress(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x, cond = ctx.input(node, 0), ctx.input(node, 1)
    axis = ctx.attrs(node).get("axis")
    shape = ctx.type_of(x).shape
    if axis is None:
        (x,) = ctx.add("reshape", [x], {"shape": (int(np.prod(shape, dtype=np.int64)),)}, node=node)
        axis = 0
    elif not -len(shape) <= axis < len(shape):
        raise ModelError(f"{node_label(node)}: axis {axis} is out of range for rank {len(shape)}")
    axis %= max(len(shape), 1)
    n = ctx.type_of(cond).size
    if n > ctx.type_of(x).shape[axis]:
        raise ModelError(
            f"{node_label(node)}: condition has {n} entries, more than the "
            f"{ctx.type_of(x).shape[axis]} of axis {axis}"
        )
    known = ctx.known_value(cond)
    if known is not None:
        picked = ctx.const(np.nonzero(known.reshape(-1))[0].astype(np.int64))
        return ctx.add("gather", [x, picked], {"axis": axis}, node=node)
    (flat,) = ctx.add("reshape", [cond], {"shape": (n,)}, node=node)
    idx, count = ctx.add("nonzero", [flat], node=node)
    (idx,) = ctx.add("reshape", [idx], {"shape": (n,)}, node=node)
    (out,) = ctx.add("gather", [x, idx], {"axis": axis}, node=node)
    ctx.set_length(out, axis, count, node)
    return [out]


def _scalar_input(ctx: ImportContext, node: onnx.NodeProto, i: int, default: float, dtype: str) -> Value:
    if not ctx.has_input(node, i):
        return ctx.const(np.array(default, dtype))
    v = ctx.input(node, i)
    if ctx.type_of(v).size != 1:
        raise ModelError(f"{node_label(node)}: input {i} ('{node.input[i]}') must hold one value")
    if ctx.type_of(v).dtype != dtype:
        (v,) = ctx.add("cast", [v], {"to": dtype}, node=node)
    return v


@converter("NonMaxSuppression")
def non_max_suppression(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    boxes, scores = ctx.input(node, 0), ctx.input(node, 1)
    n = ctx.type_of(boxes).shape[1] if ctx.type_of(boxes).ndim == 3 else 0
    max_out = _scalar_input(ctx, node, 2, 0, "int64")
    known = ctx.known_value(max_out)
    attrs = {
        "per_class": rows_per_class(n, None if known is None else int(np.asarray(known).reshape(-1)[0])),
        "center_point_box": int(ctx.attrs(node).get("center_point_box", 0)),
        "has_score_threshold": int(ctx.has_input(node, 4)),
    }
    inputs = [
        boxes,
        scores,
        max_out,
        _scalar_input(ctx, node, 3, 0.0, "float32"),
        _scalar_input(ctx, node, 4, 0.0, "float32"),
    ]
    selected, count = ctx.add("nms", inputs, attrs, node=node)
    ctx.set_length(selected, 0, count, node)
    return [selected]


@converter("Unique")
def unique(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    attrs = ctx.attrs(node)
    rank = ctx.type_of(x).ndim
    axis = attrs.get("axis")
    if axis is not None:
        if not -rank <= axis < rank:
            raise ModelError(f"{node_label(node)}: axis {axis} is out of range for rank {rank}")
        axis %= rank
    op_attrs = {"sorted": int(attrs.get("sorted", 1)), "axis": axis}
    inputs = [x]
    if x in ctx.lengths:  # only the valid rows count
        along = ctx.lengths[x].axis
        if along != (0 if axis is None else axis):
            raise ModelError(
                f"{node_label(node)}: its input has a data-dependent length along axis {along} "
                f"(from {ctx.lengths[x].origin}); Unique over axis {axis} of it is not supported"
            )
        inputs.append(ctx.lengths[x].count)
    y, indices, inverse, counts, count = ctx.add("unique", inputs, op_attrs, node=node)
    ctx.set_length(y, 0 if axis is None else axis, count, node)
    ctx.set_length(indices, 0, count, node)
    ctx.set_length(counts, 0, count, node)
    return [y, indices, inverse, counts]


# ---- Shape / Size of a tensor with a data-dependent length --------------------------------
def _length_i64(ctx: ImportContext, node: onnx.NodeProto, shape: tuple[int, ...]) -> Value:
    length = ctx.lengths[ctx.input(node, 0)]
    return ctx.add("reshape", [length.count], {"shape": shape}, node=node)[0]


def _runtime_shape(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    dims = list(ctx.type_of(x).shape)
    axis = ctx.lengths[x].axis
    attrs = ctx.attrs(node)
    lo, hi, _ = slice(attrs.get("start", 0), attrs.get("end")).indices(len(dims))
    if not lo <= axis < hi:
        return [ctx.const(np.array(dims[lo:hi], np.int64))]
    parts = [ctx.const(np.array(dims[lo:axis], np.int64)), _length_i64(ctx, node, (1,))]
    parts.append(ctx.const(np.array(dims[axis + 1 : hi], np.int64)))
    return ctx.add("concat", parts, {"axis": 0}, node=node)


def _runtime_size(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    t = ctx.type_of(x)
    rest = t.size // max(t.shape[ctx.lengths[x].axis], 1)
    return ctx.add("mul", [_length_i64(ctx, node, ()), ctx.const(np.int64(rest))], node=node)


RUNTIME_SHAPE["Shape"] = _runtime_shape
RUNTIME_SHAPE["Size"] = _runtime_size
