"""Reductions, arg-reductions, TopK, CumSum and CumProd.

Attributes are fully normalized by the frontend: `axes` is a sorted tuple of
non-negative axes (`()` reduces nothing: each element is its own set), `axis` is
non-negative. References follow ONNX semantics and keep the input dtype: integer
reductions stay integer, empty-set reductions give the identity of the reduction
(0 for sums, 1 for products, -inf / the dtype minimum for max, -inf for log-sums).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types, same_as
from tensorir.ops.registry import reduction_flops, register_op

Axes = tuple[int, ...]


# ---- inference ------------------------------------------------------------------
def check_axes(axes: Axes, ndim: int) -> Axes:
    """Validate normalized axes: in [0, ndim) and without repeats."""
    axes = tuple(int(a) for a in axes)
    for a in axes:
        if not 0 <= a < ndim:
            raise ShapeError(f"axis {a} is out of range for rank {ndim}")
    if len(set(axes)) != len(axes):
        raise ShapeError(f"axes {list(axes)} repeat an axis")
    return axes


def reduced_shape(shape: tuple[int, ...], axes: Axes, keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _infer_reduce(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    axes = check_axes(attrs["axes"], x.ndim)
    return [TensorType(reduced_shape(x.shape, axes, bool(attrs.get("keepdims", 1))), x.dtype)]


def _check_axis(t: TensorType, attrs: dict[str, Any], what: str) -> int:
    axis = int(attrs["axis"])
    if t.ndim == 0:
        raise ShapeError(f"{what} needs an input of rank >= 1, got a scalar")
    if not 0 <= axis < t.ndim:
        raise ShapeError(f"axis {axis} is out of range for rank {t.ndim}")
    return axis


def _infer_arg(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    axis = _check_axis(x, attrs, "argmax/argmin")
    if x.shape[axis] == 0:
        raise ShapeError(f"argmax/argmin over axis {axis} of size 0 (shape {list(x.shape)})")
    return [TensorType(reduced_shape(x.shape, (axis,), bool(attrs.get("keepdims", 1))), "int64")]


def _infer_topk(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    axis = _check_axis(x, attrs, "topk")
    k = int(attrs["k"])
    if not 0 <= k <= x.shape[axis]:
        raise ShapeError(f"k={k} is out of range for axis {axis} of size {x.shape[axis]}")
    shape = (*x.shape[:axis], k, *x.shape[axis + 1 :])
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


def _infer_scan(ins: Types, attrs: dict[str, Any]) -> Types:
    _check_axis(ins[0], attrs, "cumsum")
    return same_as(0)(ins, attrs)


# ---- references: reductions ---------------------------------------------------
def _acc(x: np.ndarray) -> np.ndarray:
    """Accumulate small floats (float16, bfloat16, float8...) in float32."""
    if x.dtype.kind in "iub" or x.dtype in (np.float32, np.float64):
        return x
    return x.astype(np.float32)


def _keep(out: Any, like: np.ndarray) -> np.ndarray:
    return np.asarray(out).astype(like.dtype, copy=False)


def _sum(v: np.ndarray, axes: Axes, keep: bool) -> np.ndarray:
    dtype = v.dtype if v.dtype.kind in "iu" else None
    return np.sum(v, axis=axes, keepdims=keep, dtype=dtype)


def _bound(x: np.ndarray, top: bool) -> Any:
    """The identity of max (top=False) or min (top=True) for x's dtype."""
    if x.dtype == np.bool_:
        return top
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return info.max if top else info.min
    return np.inf if top else -np.inf


def _log_sum_exp(v: np.ndarray, axes: Axes, keep: bool) -> np.ndarray:
    v = v.astype(np.float64) if v.dtype.kind in "iub" else v
    m = np.max(v, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(v - m), axis=axes, keepdims=True)) + m
    return out if keep else np.squeeze(out, axis=axes)


_REDUCTIONS: dict[str, Callable[[np.ndarray, Axes, bool], Any]] = {
    "reduce_sum": _sum,
    "reduce_mean": lambda v, a, k: np.mean(v, axis=a, keepdims=k),
    "reduce_max": lambda v, a, k: np.max(v, axis=a, keepdims=k, initial=_bound(v, False)),
    "reduce_min": lambda v, a, k: np.min(v, axis=a, keepdims=k, initial=_bound(v, True)),
    "reduce_prod": lambda v, a, k: np.prod(v, axis=a, keepdims=k, dtype=v.dtype),
    "reduce_l1": lambda v, a, k: _sum(np.abs(v), a, k),
    "reduce_l2": lambda v, a, k: np.sqrt(_sum(v * v, a, k)),
    "reduce_sum_square": lambda v, a, k: _sum(v * v, a, k),
    "reduce_log_sum": lambda v, a, k: np.log(_sum(v, a, k)),
    "reduce_log_sum_exp": _log_sum_exp,
}


def _register_reduction(name: str, fn: Callable[[np.ndarray, Axes, bool], Any]) -> None:
    def ref(x: np.ndarray, axes: Axes, keepdims: int = 1) -> np.ndarray:
        with np.errstate(all="ignore"):
            out = fn(_acc(x), tuple(axes), bool(keepdims))
        return _keep(out, x)

    register_op(name, infer=_infer_reduce, pattern="reduction", flops=reduction_flops, gpu="rows")(ref)


for _name, _fn in _REDUCTIONS.items():
    _register_reduction(_name, _fn)


# ---- references: argmax / argmin --------------------------------------------------
def _arg(fn: Callable[..., np.ndarray], x: np.ndarray, axis: int, keepdims: int, last: int) -> np.ndarray:
    idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis) if last else fn(x, axis=axis)
    if keepdims:
        idx = np.expand_dims(idx, axis)
    return np.asarray(idx, dtype=np.int64)


@register_op("argmax", infer=_infer_arg, pattern="reduction", flops=reduction_flops, gpu="rows")
def argmax(x: np.ndarray, axis: int, keepdims: int = 1, select_last_index: int = 0) -> np.ndarray:
    return _arg(np.argmax, x, axis, keepdims, select_last_index)


@register_op("argmin", infer=_infer_arg, pattern="reduction", flops=reduction_flops, gpu="rows")
def argmin(x: np.ndarray, axis: int, keepdims: int = 1, select_last_index: int = 0) -> np.ndarray:
    return _arg(np.argmin, x, axis, keepdims, select_last_index)


# ---- references: topk and cumsum -------------------------------------------------
def stable_order(x: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """Indices sorting x along axis; ties keep the lower index first either way."""
    if not largest:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    rev = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return np.flip(n - 1 - rev, axis)


@register_op("topk", infer=_infer_topk, pattern="opaque")
def topk(x: np.ndarray, k: int, axis: int, largest: int = 1, sorted: int = 1) -> tuple[np.ndarray, ...]:  # noqa: A002
    order = stable_order(x, axis, bool(largest))
    idx = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, idx, axis=axis), idx


def _scan(fn: Callable[..., np.ndarray], identity: int) -> Callable[..., np.ndarray]:
    """A cumulative reference: `fn` (np.cumsum / np.cumprod) with ONNX's exclusive / reverse."""

    def ref(x: np.ndarray, axis: int, exclusive: int = 0, reverse: int = 0) -> np.ndarray:
        v = np.flip(x, axis) if reverse else x
        acc = _acc(v)
        out = fn(acc, axis=axis, dtype=acc.dtype)
        if exclusive and out.shape[axis]:
            first = np.full_like(np.take(out, [0], axis=axis), identity)
            rest = np.take(out, np.arange(out.shape[axis] - 1), axis=axis)
            out = np.concatenate([first, rest], axis=axis)
        if reverse:
            out = np.flip(out, axis)
        return _keep(out, x)

    return ref


cumsum = register_op("cumsum", infer=_infer_scan, pattern="opaque")(_scan(np.cumsum, 0))
cumprod = register_op("cumprod", infer=_infer_scan, pattern="opaque")(_scan(np.cumprod, 1))
