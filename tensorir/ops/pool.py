"""Pooling: `max_pool`, `avg_pool`, `global_max_pool`, `global_avg_pool` (N x C x spatial).

Window attributes follow ONNX (see conv.py): `kernel_shape`, `strides`, `pads` (all
begins then all ends), `dilations`, `ceil_mode`. `max_pool` also returns the int64
flat index of each maximum into the unpadded input (`storage_order` 1: the spatial
axes are column-major) unless `indices` is 0 (the ONNX node has no Indices output);
`avg_pool`'s `count_include_pad` says whether explicit pads count toward the divisor
(the extra tail of a ceil-mode window never does).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.conv import Ints, acc_dtype, out_spatial, pad_for_windows, spatial_attrs, window_view
from tensorir.ops.infer import Types
from tensorir.ops.registry import reduction_flops, register_op, window_flops


def _window(nsp: int, attrs: dict[str, Any]) -> tuple[Ints, Ints, Ints, Ints]:
    kernel = tuple(attrs.get("kernel_shape") or ())
    if len(kernel) != nsp or min(kernel, default=1) < 1:
        raise ShapeError(f"kernel_shape {list(kernel)} must have one positive size per spatial axis ({nsp})")
    s, p, d = spatial_attrs(nsp, attrs.get("strides"), attrs.get("pads"), attrs.get("dilations"))
    return kernel, s, p, d


def _pool_out(x: TensorType, attrs: dict[str, Any]) -> tuple[int, ...]:
    if x.ndim < 3:
        raise ShapeError(f"pooling input must be N x C x spatial (rank >= 3), got {x}")
    k, s, p, d = _window(x.ndim - 2, attrs)
    out = out_spatial(x.shape[2:], k, s, p, d, bool(attrs.get("ceil_mode", 0)))
    return (*x.shape[:2], *out)


def _max_pool_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    shape = _pool_out(ins[0], attrs)
    values = TensorType(shape, ins[0].dtype)
    return [values, TensorType(shape, "int64")] if attrs.get("indices", 1) else [values]


def _avg_pool_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    return [TensorType(_pool_out(ins[0], attrs), ins[0].dtype)]


def _lowest(dtype: np.dtype) -> Any:
    if np.issubdtype(dtype, np.integer):
        return np.iinfo(dtype).min
    if dtype == np.bool_:
        return False
    return -np.inf


def _flat_index(pos: list[np.ndarray], in_shape: Ints, column_major: bool, lead: np.ndarray) -> np.ndarray:
    """Flat index into N x C x spatial of spatial positions `pos`, `lead` = n * C + c."""
    order = range(len(in_shape)) if column_major else reversed(range(len(in_shape)))
    idx, step = np.zeros_like(pos[0]), 1
    for i in order:
        idx += pos[i] * step
        step *= in_shape[i]
    return idx + lead * step


# Not an anchor (fuse_ops leaves an activation after it as its own kernel), but tunable.
@register_op(
    "max_pool",
    infer=_max_pool_infer,
    pattern="reduction",
    tunable=True,
    layout="pool",
    flops=window_flops,
    gpu="rows",
)
def max_pool(
    x: np.ndarray,
    kernel_shape: Ints = (),
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    ceil_mode: int = 0,
    storage_order: int = 0,
    indices: int = 1,
) -> tuple[np.ndarray, np.ndarray] | np.ndarray:
    nsp = x.ndim - 2
    attrs = {"kernel_shape": kernel_shape, "strides": strides, "pads": pads, "dilations": dilations}
    k, s, p, d = _window(nsp, attrs)
    out = out_spatial(x.shape[2:], k, s, p, d, bool(ceil_mode))
    xp = pad_for_windows(x, k, s, p, d, out, _lowest(x.dtype))
    n, c = x.shape[:2]
    win = window_view(xp, k, s, d, out).reshape(n, c, *out, math.prod(k))
    if not indices:  # the ONNX node has no Indices output: the values alone
        return np.ascontiguousarray(win.max(axis=-1))
    arg = win.argmax(axis=-1)
    y = np.take_along_axis(win, arg[..., None], axis=-1)[..., 0]
    taps = np.unravel_index(arg, k)
    grid = np.indices(out, sparse=True)
    pos = [grid[i] * s[i] + taps[i] * d[i] - p[i] for i in range(nsp)]
    lead = (np.arange(n)[:, None] * c + np.arange(c)).reshape(n, c, *(1,) * nsp)
    idx = _flat_index(pos, x.shape[2:], bool(storage_order), lead)
    return np.ascontiguousarray(y), idx.astype(np.int64)


def _tap_counts(size: int, k: int, s: int, d: int, lo: int, hi: int, out: int) -> np.ndarray:
    """Per output position, how many of its k taps land in [lo, hi) of the padded axis."""
    taps = np.arange(out)[:, None] * s + np.arange(k)[None, :] * d
    return ((taps >= lo) & (taps < hi)).sum(axis=1)


@register_op(
    "avg_pool",
    infer=_avg_pool_infer,
    pattern="anchor",
    tunable=True,
    layout="pool",
    flops=window_flops,
    gpu="rows",
)
def avg_pool(
    x: np.ndarray,
    kernel_shape: Ints = (),
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    ceil_mode: int = 0,
    count_include_pad: int = 0,
) -> np.ndarray:
    nsp = x.ndim - 2
    attrs = {"kernel_shape": kernel_shape, "strides": strides, "pads": pads, "dilations": dilations}
    k, s, p, d = _window(nsp, attrs)
    out = out_spatial(x.shape[2:], k, s, p, d, bool(ceil_mode))
    ct = acc_dtype(x.dtype)
    xp = pad_for_windows(x.astype(ct, copy=False), k, s, p, d, out, 0)
    total = window_view(xp, k, s, d, out).sum(axis=tuple(range(-nsp, 0)))
    count = window_counts(x.shape[2:], attrs | {"ceil_mode": ceil_mode}, bool(count_include_pad))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (total / count.astype(ct)).astype(x.dtype)


def window_counts(spatial: Ints, attrs: dict[str, Any], include_pad: bool) -> np.ndarray:
    """Per output position (the spatial dims), how many window taps fall on the input, or on
    the input and its explicit pads with `include_pad` (avg_pool's divisor; int64)."""
    k, s, p, d = _window(len(spatial), attrs)
    out = out_spatial(spatial, k, s, p, d, bool(attrs.get("ceil_mode", 0)))
    nsp = len(spatial)
    count = np.ones((), dtype=np.int64)
    for i, size in enumerate(spatial):
        lo, hi = (0, size + p[i] + p[nsp + i]) if include_pad else (p[i], p[i] + size)
        count = np.multiply.outer(count, _tap_counts(size, k[i], s[i], d[i], lo, hi, out[i]))
    return count


def _global_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    if x.ndim < 3:
        raise ShapeError(f"global pooling input must be N x C x spatial (rank >= 3), got {x}")
    return [TensorType((*x.shape[:2], *(1,) * (x.ndim - 2)), x.dtype)]


@register_op(
    "global_avg_pool",
    infer=_global_infer,
    pattern="anchor",
    layout="global_avg",
    flops=reduction_flops,
    gpu="rows",
)
def global_avg_pool(x: np.ndarray) -> np.ndarray:
    axes = tuple(range(2, x.ndim))
    return x.astype(acc_dtype(x.dtype), copy=False).mean(axis=axes, keepdims=True).astype(x.dtype)


@register_op(
    "global_max_pool",
    infer=_global_infer,
    pattern="anchor",
    layout="global_max",
    flops=reduction_flops,
    gpu="rows",
)
def global_max_pool(x: np.ndarray) -> np.ndarray:
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)
