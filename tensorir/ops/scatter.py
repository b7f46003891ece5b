"""Scatter and N-d gather: scatter_elements, scatter_nd, gather_nd (ONNX ScatterElements /
Scatter, ScatterND, GatherND; MaxUnpool and TensorScatter import through these).

- scatter_elements(data, indices, updates, axis, reduction): a copy of data where, for every
  position p of indices (same shape as updates), out[p with p[axis] = indices[p]] is set to
  (or combined with, reduction "add" / "mul" / "max" / "min") updates[p];
- scatter_nd(data, indices, updates, reduction): indices [..., k] address k-d slices of data;
  updates[p] (shape data.shape[k:]) goes to the slice at indices[p];
- gather_nd(data, indices, batch_dims): the slices indices [..., k] address, the first
  batch_dims axes shared by data and indices.

Negative indices count from the end. Duplicate indices are applied in row-major order of
indices (the last write wins without a reduction, as numpy and onnxruntime do). Not fused:
scatters run as a copy then a serial loop over the updates (scatter_compute.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op

REDUCTIONS = ("none", "add", "mul", "max", "min")
_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _check(indices: TensorType, reduction: str) -> None:
    if indices.dtype not in ("int32", "int64"):
        raise ShapeError(f"indices must be int32 or int64, got {indices.dtype}")
    if reduction not in REDUCTIONS:
        raise ShapeError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def _wrap(idx: np.ndarray, dim: int) -> np.ndarray:
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise IndexError(f"scatter/gather index out of range [-{dim}, {dim})")
    return np.where(idx < 0, idx + dim, idx)


def _apply(out: np.ndarray, where: tuple, values: np.ndarray, reduction: str) -> None:
    if reduction == "none":
        out[where] = values
    else:
        _UFUNCS[reduction].at(out, where, values)


# ---- scatter_elements ------------------------------------------------------------------
def _scatter_elements_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    data, indices, updates = ins
    _check(indices, attrs.get("reduction", "none"))
    axis = attrs["axis"]
    if not 0 <= axis < data.ndim:
        raise ShapeError(f"axis {axis} is out of range for rank {data.ndim}")
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise ShapeError(f"indices {indices} and updates {updates} must have one shape, of data's rank")
    if updates.dtype != data.dtype:
        raise ShapeError(f"updates {updates.dtype} differ from data {data.dtype}")
    return [data]


@register_op("scatter_elements", infer=_scatter_elements_infer, pattern="opaque")
def scatter_elements(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int, reduction: str = "none"
) -> np.ndarray:
    out = data.copy()
    grid = list(np.indices(indices.shape))
    grid[axis] = _wrap(indices, data.shape[axis])
    if reduction == "none":  # in order, so the last of duplicates wins
        for k in range(indices.size):
            p = tuple(g.reshape(-1)[k] for g in grid)
            out[p] = updates.reshape(-1)[k]
        return out
    _apply(out, tuple(grid), updates, reduction)
    return out


# ---- scatter_nd / gather_nd ---------------------------------------------------------------
def _scatter_nd_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    data, indices, updates = ins
    _check(indices, attrs.get("reduction", "none"))
    k = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or k > data.ndim:
        raise ShapeError(f"indices {indices} must end in a dim <= data's rank {data.ndim}")
    want = indices.shape[:-1] + data.shape[k:]
    if updates.shape != want or updates.dtype != data.dtype:
        raise ShapeError(f"updates must be {list(want)} {data.dtype}, got {updates}")
    return [data]


@register_op("scatter_nd", infer=_scatter_nd_infer, pattern="opaque")
def scatter_nd(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str = "none"
) -> np.ndarray:
    out = data.copy()
    k = indices.shape[-1]
    flat = indices.reshape(-1, k)
    pos = np.stack([_wrap(flat[:, j], data.shape[j]) for j in range(k)], axis=1) if k else flat
    rows = updates.reshape(len(flat), *data.shape[k:])
    for p, u in zip(pos, rows, strict=True):
        if reduction == "none":
            out[tuple(p)] = u
        else:
            out[tuple(p)] = _UFUNCS[reduction](out[tuple(p)], u)
    return out


def _gather_nd_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    data, indices = ins
    _check(indices, "none")
    b = int(attrs.get("batch_dims", 0))
    k = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or b + k > data.ndim or indices.shape[:b] != data.shape[:b]:
        raise ShapeError(f"gather_nd: indices {indices} do not address data {data} (batch_dims {b})")
    return [TensorType(indices.shape[:-1] + data.shape[b + k :], data.dtype)]


@register_op("gather_nd", infer=_gather_nd_infer, pattern="injective", gpu="injective")
def gather_nd(data: np.ndarray, indices: np.ndarray, batch_dims: int = 0) -> np.ndarray:
    b, k = batch_dims, indices.shape[-1]
    out_shape = indices.shape[:-1] + data.shape[b + k :]
    out = np.empty(out_shape, data.dtype)
    for p in np.ndindex(*indices.shape[:-1]):
        where = tuple(int(_wrap(indices[p][j], data.shape[b + j])) for j in range(k))
        out[p] = data[p[:b] + where]
    return out
