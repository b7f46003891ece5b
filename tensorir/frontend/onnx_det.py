"""ONNX Det as Gaussian elimination with partial pivoting, unrolled into existing graph ops.

The matrices are [..., n, n] with n static and at most MAX_N. Step k picks the row p >= k with
the largest |A[p, k]| (argmax, first of ties, as LAPACK's), swaps rows k and p (a gather of row p
and two selects: exact), multiplies the determinant by the pivot (negated when p != k), and
subtracts multiples of row k from the rows below it (selected, so rows above keep their bits; a
zero pivot's factors are 0, so a singular matrix's determinant is 0, not NaN). The product of the
pivots is the determinant.
"""

from __future__ import annotations

import numpy as np
import onnx

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.graph.graph import Value
from tensorir.ops.tensor import normalize_slice

MAX_N = 8


def _cut(ctx: ImportContext, v: Value, axis: int, start: int, node: onnx.NodeProto) -> Value:
    """v[..., start:start+1, ...] along `axis` (kept)."""
    return ctx.add(
        "slice", [v], normalize_slice(ctx.type_of(v).shape, [start], [start + 1], [axis]), node=node
    )[0]


def _rows_mask(n: int, pick: np.ndarray) -> np.ndarray:
    return pick.reshape(n, 1)


def _swap_in_pivot(ctx: ImportContext, a: Value, k: int, node: onnx.NodeProto) -> tuple[Value, Value]:
    """(a with rows k and p swapped, p == k as a bool [..., 1, 1])."""
    shape = ctx.type_of(a).shape
    r, n = len(shape), shape[-1]
    rows = np.arange(n)
    (col,) = ctx.add("abs", [_cut(ctx, a, r - 1, k, node)], node=node)
    low = ctx.const(np.asarray(-1, ctx.type_of(a).dtype))
    (col,) = ctx.add("where", [ctx.const(_rows_mask(n, rows >= k)), col, low], node=node)
    (p,) = ctx.add("argmax", [col], {"axis": r - 2, "keepdims": 1}, node=node)
    (is_p,) = ctx.add("equal", [ctx.const(_rows_mask(n, rows.astype(np.int64))), p], node=node)
    (wide,) = ctx.add("expand", [p], {"shape": (*shape[:-2], 1, n)}, node=node)
    (row_p,) = ctx.add("gather_elements", [a, wide], {"axis": r - 2}, node=node)
    row_k = _cut(ctx, a, r - 2, k, node)
    (a,) = ctx.add("where", [ctx.const(_rows_mask(n, rows == k)), row_p, a], node=node)
    (a,) = ctx.add("where", [is_p, row_k, a], node=node)
    (same,) = ctx.add("equal", [p, ctx.const(np.asarray(k, np.int64))], node=node)
    return a, same


def _eliminate(ctx: ImportContext, a: Value, pivot: Value, k: int, node: onnx.NodeProto) -> Value:
    """Rows below k minus (A[i, k] / pivot) * row k (factor 0 for a zero pivot, as LAPACK skips
    that column); the others unchanged."""
    shape = ctx.type_of(a).shape
    r, n = len(shape), shape[-1]
    (f,) = ctx.add("div", [_cut(ctx, a, r - 1, k, node), pivot], node=node)
    zero = ctx.const(np.asarray(0, ctx.type_of(a).dtype))
    (singular,) = ctx.add("equal", [pivot, zero], node=node)
    (f,) = ctx.add("where", [singular, zero, f], node=node)
    (step,) = ctx.add("mul", [f, _cut(ctx, a, r - 2, k, node)], node=node)
    (reduced,) = ctx.add("sub", [a, step], node=node)
    below = ctx.const(_rows_mask(n, np.arange(n) > k))
    return ctx.add("where", [below, reduced, a], node=node)[0]


@converter("Det")
def det(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    a = ctx.input(node, 0)
    shape = ctx.type_of(a).shape
    r = len(shape)
    if r < 2 or shape[-1] != shape[-2]:
        raise ModelError(f"{node_label(node)}: Det needs square matrices [..., n, n], got {list(shape)}")
    n = shape[-1]
    if n > MAX_N:
        raise ModelError(
            f"{node_label(node)}: Det is compiled for n <= {MAX_N} (unrolled elimination), got {n}"
        )
    result = None
    for k in range(n):
        same = None
        if k < n - 1:
            a, same = _swap_in_pivot(ctx, a, k, node)
        pivot = _cut(ctx, _cut(ctx, a, r - 2, k, node), r - 1, k, node)
        if same is not None:
            (neg,) = ctx.add("neg", [pivot], node=node)
            (pivot_signed,) = ctx.add("where", [same, pivot, neg], node=node)
            a = _eliminate(ctx, a, pivot, k, node)
            pivot = pivot_signed
        result = pivot if result is None else ctx.add("mul", [result, pivot], node=node)[0]
    assert result is not None
    return ctx.add("reshape", [result], {"shape": tuple(shape[:-2])}, node=node)
