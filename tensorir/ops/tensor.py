"""Tensor-manipulation ops: data movement without arithmetic.

identity, reshape, transpose, concat, split, slice, gather, gather_elements,
expand, tile, depth_to_space, space_to_depth.

Attributes are fully normalized by the frontend: defaults filled in, axes
non-negative, sequences as tuples, shapes static. Every reference keeps the
input dtype (any numpy or ml_dtypes dtype).

`slice` attributes follow ONNX after clamping to the static shape: per sliced
axis, with step > 0, 0 <= start, end <= dim; with step < 0, 0 <= start <= dim - 1
and -1 <= end <= dim - 1, where end == -1 means "up to and including index 0".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types, broadcast_shapes, same_as
from tensorir.ops.registry import register_op

# data movement: not fused, the injective GPU template, one FLOP per output element
MOVE: dict[str, Any] = {"pattern": "injective", "gpu": "injective"}

Shape = tuple[int, ...]


def _check_axis(axis: int, ndim: int, what: str = "axis") -> None:
    if not 0 <= axis < ndim:
        raise ShapeError(f"{what} {axis} is out of range for rank {ndim} (must be normalized to [0, {ndim}))")


# ---- identity ------------------------------------------------------------------
@register_op("identity", infer=same_as(0), **MOVE)
def identity(x: np.ndarray) -> np.ndarray:
    return x


# ---- reshape -------------------------------------------------------------------
def reshape_target(in_shape: Shape, shape: Sequence[int], allowzero: bool = False) -> Shape:
    """Resolve an ONNX Reshape target (0 = copy the input dim, -1 = inferred) to a static shape."""
    dims = [int(d) for d in shape]
    if not allowzero:
        for i, d in enumerate(dims):
            if d == 0:
                if i >= len(in_shape):
                    raise ShapeError(
                        f"reshape target {list(shape)}: 0 at position {i} has no input dim to copy"
                    )
                dims[i] = in_shape[i]
    if any(d < -1 for d in dims) or dims.count(-1) > 1:
        raise ShapeError(f"reshape target {list(shape)} may hold at most one -1 and no other negative dims")
    total = math.prod(in_shape)
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or total % known:
            raise ShapeError(f"cannot reshape {list(in_shape)} ({total} elements) to {list(shape)}")
        dims[dims.index(-1)] = total // known
    if math.prod(dims) != total:
        raise ShapeError(
            f"cannot reshape {list(in_shape)} ({total} elements) to {dims} ({math.prod(dims)} elements)"
        )
    return tuple(dims)


def _reshape_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    shape = tuple(attrs["shape"])
    if any(d < 0 for d in shape) or math.prod(shape) != ins[0].size:
        raise ShapeError(f"cannot reshape {list(ins[0].shape)} ({ins[0].size} elements) to {list(shape)}")
    return [TensorType(shape, ins[0].dtype)]


@register_op("reshape", infer=_reshape_infer, **MOVE)
def reshape(x: np.ndarray, shape: Shape) -> np.ndarray:
    return np.reshape(x, shape)


# ---- transpose -----------------------------------------------------------------
def _transpose_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(ins[0].ndim)):
        raise ShapeError(f"perm {list(perm)} is not a permutation of the {ins[0].ndim} axes")
    return [TensorType(tuple(ins[0].shape[p] for p in perm), ins[0].dtype)]


@register_op("transpose", infer=_transpose_infer, **MOVE)
def transpose(x: np.ndarray, perm: Shape) -> np.ndarray:
    return np.transpose(x, perm)


# ---- concat / split ------------------------------------------------------------
def _concat_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    if not ins:
        raise ShapeError("concat needs at least one input")
    axis, first = attrs["axis"], ins[0]
    _check_axis(axis, first.ndim)
    for t in ins[1:]:
        if t.dtype != first.dtype:
            raise ShapeError(f"concat inputs have different dtypes {first.dtype} and {t.dtype}")
        same = t.ndim == first.ndim and all(
            a == b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=True)) if i != axis
        )
        if not same:
            raise ShapeError(
                f"concat inputs {list(first.shape)} and {list(t.shape)} differ outside axis {axis}"
            )
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in ins)
    return [TensorType(tuple(shape), first.dtype)]


@register_op("concat", infer=_concat_infer, **MOVE)
def concat(*xs: np.ndarray, axis: int) -> np.ndarray:
    return np.concatenate(xs, axis=axis).astype(xs[0].dtype, copy=False)


def _split_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x, axis, sizes = ins[0], attrs["axis"], tuple(attrs["sizes"])
    _check_axis(axis, x.ndim)
    if any(s < 0 for s in sizes) or sum(sizes) != x.shape[axis]:
        raise ShapeError(f"split sizes {list(sizes)} do not add up to dim {x.shape[axis]} of axis {axis}")
    outs = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        outs.append(TensorType(tuple(shape), x.dtype))
    return outs


@register_op("split", infer=_split_infer, **MOVE)
def split(x: np.ndarray, axis: int, sizes: Shape) -> tuple[np.ndarray, ...]:
    cuts = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, cuts, axis=axis))


# ---- slice ---------------------------------------------------------------------
def normalize_slice(
    shape: Shape,
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None = None,
    steps: Sequence[int] | None = None,
) -> dict[str, Shape]:
    """ONNX Slice arguments -> the normalized `slice` attributes (sorted axes, clamped bounds)."""
    n, ndim = len(starts), len(shape)
    axes = list(range(n)) if axes is None else [int(a) for a in axes]
    steps = [1] * n if steps is None else [int(s) for s in steps]
    if not len(ends) == len(axes) == len(steps) == n:
        raise ShapeError("slice starts, ends, axes and steps must have the same length")
    for a in axes:
        if not -ndim <= a < ndim:
            raise ShapeError(f"slice axis {a} is out of range for rank {ndim}")
    axes = [a % ndim for a in axes]
    if len(set(axes)) != n:
        raise ShapeError(f"slice axes {axes} repeat an axis")
    out: dict[str, list[int]] = {"starts": [], "ends": [], "axes": [], "steps": []}
    for k in sorted(range(n), key=lambda k: axes[k]):
        dim, step = shape[axes[k]], steps[k]
        if step == 0:
            raise ShapeError("slice step must not be 0")
        lo, hi = (0, dim) if step > 0 else (-1, dim - 1)
        start, end = int(starts[k]), int(ends[k])
        start = min(max(start + dim if start < 0 else start, max(lo, 0)), hi)
        end = min(max(end + dim if end < 0 else end, lo), hi)
        for key, v in (("starts", start), ("ends", end), ("axes", axes[k]), ("steps", step)):
            out[key].append(v)
    return {k: tuple(v) for k, v in out.items()}


def _slice_len(start: int, end: int, step: int) -> int:
    return max(0, -(-(end - start) // step))


def _slice_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    shape = list(x.shape)
    for start, end, axis, step in zip(
        attrs["starts"], attrs["ends"], attrs["axes"], attrs["steps"], strict=True
    ):
        _check_axis(axis, x.ndim)
        dim = x.shape[axis]
        ok = 0 <= start <= dim and 0 <= end <= dim if step > 0 else 0 <= start < dim and -1 <= end < dim
        if step == 0 or (dim > 0 and not ok):
            raise ShapeError(f"slice {start}:{end}:{step} on axis {axis} (dim {dim}) is not normalized")
        shape[axis] = _slice_len(start, end, step)
    return [TensorType(tuple(shape), x.dtype)]


@register_op("slice", infer=_slice_infer, **MOVE)
def slice_(x: np.ndarray, starts: Shape, ends: Shape, axes: Shape, steps: Shape) -> np.ndarray:
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        index[axis] = slice(start, end if end >= 0 else None, step)
    return x[tuple(index)]


# ---- gather --------------------------------------------------------------------
def _check_indices(t: TensorType) -> None:
    if t.dtype not in ("int32", "int64"):
        raise ShapeError(f"indices must be int32 or int64, got {t.dtype}")


def _gather_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    data, indices, axis = ins[0], ins[1], attrs["axis"]
    _check_indices(indices)
    _check_axis(axis, data.ndim)
    shape = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]
    return [TensorType(shape, data.dtype)]


@register_op("gather", infer=_gather_infer, **MOVE)
def gather(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """Negative indices count from the end; out-of-range ones raise IndexError."""
    return np.take(data, indices.astype(np.int64), axis=axis)


def _gather_elements_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    data, indices, axis = ins[0], ins[1], attrs["axis"]
    _check_indices(indices)
    _check_axis(axis, data.ndim)
    if indices.ndim != data.ndim:
        raise ShapeError(f"indices rank {indices.ndim} differs from data rank {data.ndim}")
    return [TensorType(indices.shape, data.dtype)]


@register_op("gather_elements", infer=_gather_elements_infer, **MOVE)
def gather_elements(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    dim = data.shape[axis]
    idx = indices.astype(np.int64)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise IndexError(f"gather_elements index out of range [-{dim}, {dim})")
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = np.where(idx < 0, idx + dim, idx)
    return data[tuple(grid)]


# ---- expand / tile -------------------------------------------------------------
def _expand_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    shape = tuple(attrs["shape"])
    if broadcast_shapes(ins[0].shape, shape) != shape:
        raise ShapeError(f"{list(ins[0].shape)} does not broadcast to {list(shape)}")
    return [TensorType(shape, ins[0].dtype)]


@register_op("expand", infer=_expand_infer, **MOVE)
def expand(x: np.ndarray, shape: Shape) -> np.ndarray:
    return np.array(np.broadcast_to(x, shape))


def _tile_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x, repeats = ins[0], tuple(attrs["repeats"])
    if len(repeats) != x.ndim or any(r < 0 for r in repeats):
        raise ShapeError(f"tile repeats {list(repeats)} must be {x.ndim} non-negative counts")
    return [TensorType(tuple(d * r for d, r in zip(x.shape, repeats, strict=True)), x.dtype)]


@register_op("tile", infer=_tile_infer, **MOVE)
def tile(x: np.ndarray, repeats: Shape) -> np.ndarray:
    return np.tile(x, repeats)


# ---- depth_to_space / space_to_depth -------------------------------------------
def _d2s_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x, b, mode = ins[0], attrs["blocksize"], attrs["mode"]
    if mode not in ("DCR", "CRD"):
        raise ShapeError(f"depth_to_space mode must be DCR or CRD, got {mode!r}")
    if x.ndim != 4 or b < 1 or x.shape[1] % (b * b):
        raise ShapeError(f"depth_to_space needs NCHW input with C divisible by {b}*{b}, got {list(x.shape)}")
    n, c, h, w = x.shape
    return [TensorType((n, c // (b * b), h * b, w * b), x.dtype)]


@register_op("depth_to_space", infer=_d2s_infer, **MOVE)
def depth_to_space(x: np.ndarray, blocksize: int, mode: str) -> np.ndarray:
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


def _s2d_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x, b = ins[0], attrs["blocksize"]
    if x.ndim != 4 or b < 1 or x.shape[2] % b or x.shape[3] % b:
        raise ShapeError(f"space_to_depth needs NCHW input with H, W divisible by {b}, got {list(x.shape)}")
    n, c, h, w = x.shape
    return [TensorType((n, c * b * b, h // b, w // b), x.dtype)]


@register_op("space_to_depth", infer=_s2d_infer, **MOVE)
def space_to_depth(x: np.ndarray, blocksize: int) -> np.ndarray:
    n, c, h, w = x.shape
    b = blocksize
    t = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return t.reshape(n, c * b * b, h // b, w // b)
