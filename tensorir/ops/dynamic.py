"""Ops whose output length depends on the data: nonzero, nms, unique.

A static-shape compiler gives such an output its upper bound and returns the real length
beside it, as one more output: an int64 scalar `count`. Rows past `count` along the dynamic
axis are zeros (so indices read from them stay in range for a Gather downstream); the ONNX
frontend (frontend/onnx_dynamic.py, onnx_lengths.py) follows the length through the ops that
keep rows apart and makes it a graph output, and the runtime trims the output to it.

    nonzero(x)                    -> idx (rank, size) int64,  count
    topk_dyn(x, length, k)        -> values, indices (x's shape), count
    nms(boxes, scores, max_out, iou_threshold, score_threshold)
                                  -> selected (rows, 3) int64, count
    unique(x[, length])           -> y, indices, inverse, counts, count

topk_dyn is TopK when K is known only at run time, or x itself has a length along the axis
(`length`, the valid entries; a constant when it has none): every line sorted (ties: lower
index first), count = min(K, length). unique with `length` reads only the first `length`
slices (axis None: the first `length` rows of x flattened).

nms follows onnxruntime's NonMaxSuppression: per (batch, class), the boxes with a score above
`score_threshold` (all boxes without one) in order of score, ties by lower index, each kept
unless its IoU with a box kept before exceeds `iou_threshold`, at most `max_out` per class.
`rows` = batch * classes * per_class, where per_class is min(boxes, max_out) when max_out is
known at compile time, else the number of boxes.

unique follows ONNX Unique: `axis` None flattens x; `sorted` 1 orders the unique values (or
slices, lexicographically) ascending, 0 keeps the order of first occurrence.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op

COUNT = TensorType((), "int64")


# ---- nonzero ------------------------------------------------------------------------------
def _infer_nonzero(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    return [TensorType((max(x.ndim, 1), x.size), "int64"), COUNT]


@register_op("nonzero", infer=_infer_nonzero, pattern="opaque")
def nonzero(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flat = np.atleast_1d(x)
    hits = np.array(np.nonzero(flat), np.int64).reshape(flat.ndim, -1)
    out = np.zeros((flat.ndim, flat.size), np.int64)
    out[:, : hits.shape[1]] = hits
    return out, np.array(hits.shape[1], np.int64)


# ---- nms ----------------------------------------------------------------------------------
def rows_per_class(num_boxes: int, max_out: int | None) -> int:
    """Rows each (batch, class) may select at most: attribute `per_class` of nms."""
    return num_boxes if max_out is None else max(0, min(num_boxes, int(max_out)))


def _infer_nms(ins: Types, attrs: dict[str, Any]) -> Types:
    boxes, scores = ins[:2]
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3:
        raise ShapeError(
            f"nms: boxes must be (batch, n, 4) and scores (batch, classes, n), got {boxes}, {scores}"
        )
    batch, n = boxes.shape[:2]
    if scores.shape[0] != batch or scores.shape[2] != n:
        raise ShapeError(f"nms: boxes {boxes} and scores {scores} disagree on batch or box count")
    if not 0 <= attrs["per_class"] <= n:
        raise ShapeError(f"nms: per_class {attrs['per_class']} is out of range for {n} boxes")
    return [TensorType((batch * scores.shape[1] * attrs["per_class"], 3), "int64"), COUNT]


def iou_suppresses(a: np.ndarray, b: np.ndarray, center: int, threshold: float) -> bool:
    """onnxruntime's SuppressByIOU, in float32: whether box b suppresses box a."""
    f = np.float32
    if center:
        ax0, ax1 = f(a[0] - a[2] / f(2)), f(a[0] + a[2] / f(2))
        ay0, ay1 = f(a[1] - a[3] / f(2)), f(a[1] + a[3] / f(2))
        bx0, bx1 = f(b[0] - b[2] / f(2)), f(b[0] + b[2] / f(2))
        by0, by1 = f(b[1] - b[3] / f(2)), f(b[1] + b[3] / f(2))
    else:
        ax0, ax1 = sorted((a[1], a[3]))
        ay0, ay1 = sorted((a[0], a[2]))
        bx0, bx1 = sorted((b[1], b[3]))
        by0, by1 = sorted((b[0], b[2]))
    ix0, ix1, iy0, iy1 = max(ax0, bx0), min(ax1, bx1), max(ay0, by0), min(ay1, by1)
    if ix1 <= ix0 or iy1 <= iy0:
        return False
    inter = f((ix1 - ix0) * (iy1 - iy0))
    area_a, area_b = f((ax1 - ax0) * (ay1 - ay0)), f((bx1 - bx0) * (by1 - by0))
    union = f(area_a + area_b - inter)
    if inter <= 0 or area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return bool(f(inter / union) > f(threshold))


@register_op("nms", infer=_infer_nms, pattern="opaque")
def nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    max_out: np.ndarray,
    iou_threshold: np.ndarray,
    score_threshold: np.ndarray,
    per_class: int,
    center_point_box: int = 0,
    has_score_threshold: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    batch, classes = scores.shape[:2]
    limit = int(np.asarray(max_out).reshape(-1)[0]) if np.asarray(max_out).size else 0
    iou, thr = (float(np.asarray(t).reshape(-1)[0]) for t in (iou_threshold, score_threshold))
    selected = []
    for b in range(batch):
        for c in range(classes):
            s = scores[b, c]
            order = [i for i in np.argsort(-s, kind="stable") if not has_score_threshold or s[i] > thr]
            kept: list[int] = []
            for i in order:
                if len(kept) >= min(limit, per_class):
                    break
                if not any(iou_suppresses(boxes[b, i], boxes[b, k], center_point_box, iou) for k in kept):
                    kept.append(int(i))
            selected += [(b, c, i) for i in kept]
    out = np.zeros((batch * classes * per_class, 3), np.int64)
    out[: len(selected)] = np.array(selected, np.int64).reshape(-1, 3)
    return out, np.array(len(selected), np.int64)


# ---- topk_dyn -----------------------------------------------------------------------------
def _infer_topk_dyn(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    if not 0 <= attrs["axis"] < x.ndim:
        raise ShapeError(f"topk_dyn: axis {attrs['axis']} is out of range for {x}")
    return [x, TensorType(x.shape, "int64"), COUNT]


def _clipped(v: np.ndarray, hi: int) -> int:
    return int(np.clip(np.asarray(v).reshape(-1)[0], 0, hi))


@register_op("topk_dyn", infer=_infer_topk_dyn, pattern="opaque")
def topk_dyn(
    x: np.ndarray,
    length: np.ndarray,
    k: np.ndarray,
    axis: int,
    largest: int = 1,
    sorted: int = 1,  # noqa: A002
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from tensorir.ops.reduce import stable_order

    valid = _clipped(length, x.shape[axis])
    keep = _clipped(k, valid)
    lines = np.moveaxis(x, axis, -1)
    order = stable_order(lines[..., :valid], lines.ndim - 1, bool(largest))[..., :keep].astype(np.int64)
    values, indices = np.zeros_like(lines), np.zeros(lines.shape, np.int64)
    values[..., :keep] = np.take_along_axis(lines[..., :valid], order, -1)
    indices[..., :keep] = order
    return np.moveaxis(values, -1, axis), np.moveaxis(indices, -1, axis), np.array(keep, np.int64)


# ---- unique -------------------------------------------------------------------------------
def unique_layout(shape: tuple[int, ...], axis: int | None) -> tuple[int, int, int]:
    """(outer, n, inner): x seen as (outer, n, inner) slices along `axis` (None: flattened)."""
    if axis is None:
        return 1, int(np.prod(shape, dtype=np.int64)), 1
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    return outer, shape[axis], int(np.prod(shape[axis + 1 :], dtype=np.int64))


def _infer_unique(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    axis = attrs.get("axis")
    if axis is not None and not 0 <= axis < x.ndim:
        raise ShapeError(f"unique: axis {axis} is out of range for {x}")
    n = unique_layout(x.shape, axis)[1]
    y = (n,) if axis is None else x.shape
    idx = TensorType((n,), "int64")
    return [TensorType(y, x.dtype), idx, idx, idx, COUNT]


def valid_slices(shape: tuple[int, ...], axis: int | None, length: int) -> int:
    """Slices of x unique reads when x has `length` valid rows (along `axis`; None: the first
    axis, x flattened)."""
    n = unique_layout(shape, axis)[1]
    per_row = 1 if axis is not None else n // max(shape[0], 1) if shape else 1
    return max(0, min(n, length * per_row))


@register_op("unique", infer=_infer_unique, pattern="opaque")
def unique(
    x: np.ndarray,
    length: np.ndarray | None = None,
    sorted: int = 1,  # noqa: A002
    axis: int | None = None,
) -> tuple[np.ndarray, ...]:
    outer, n, inner = unique_layout(x.shape, axis)
    slices = np.moveaxis(x.reshape(outer, n, inner), 1, 0).reshape(n, -1)
    firsts: list[int] = []
    inverse = np.zeros(n, np.int64)
    valid = n if length is None else valid_slices(x.shape, axis, int(np.asarray(length).reshape(-1)[0]))
    for k in range(valid):
        match = next((j for j, f in enumerate(firsts) if np.array_equal(slices[k], slices[f])), None)
        if match is None:
            firsts.append(k)
            match = len(firsts) - 1
        inverse[k] = match
    u = len(firsts)
    order = list(range(u))
    if sorted:
        order.sort(key=lambda j: tuple(slices[firsts[j]].tolist()))
    rank = np.empty(u, np.int64)
    rank[order] = np.arange(u)
    counts = np.bincount(inverse[:valid], minlength=u).astype(np.int64)
    y = np.zeros((outer, n, inner), x.dtype)
    picked = [firsts[j] for j in order]
    y[:, :u] = x.reshape(outer, n, inner)[:, picked]
    pad = np.zeros(n - u, np.int64)
    indices = np.concatenate([np.array(picked, np.int64), pad])
    counts_out = np.concatenate([counts[order], pad])
    y = y.reshape(-1) if axis is None else y.reshape(x.shape)
    inverse = rank[inverse] if u else inverse
    inverse[valid:] = 0
    return y, indices, inverse, counts_out, np.array(u, np.int64)
