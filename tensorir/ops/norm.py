"""Normalizations: batch_norm (inference and training), instance_norm, layer_norm.

Channels are axis 1 (N x C x ...). References compute in float32 (float64 stays
float64) and return the input dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType, np_dtype
from tensorir.ops.conv import acc_dtype
from tensorir.ops.infer import Types, broadcast_shapes, normalize_axis
from tensorir.ops.registry import per_output, register_op


def _f(x: np.ndarray) -> np.ndarray:
    return x.astype(acc_dtype(x.dtype), copy=False)


def _channel_params(ins: Types, names: tuple[str, ...], what: str) -> None:
    """Each parameter is one value per channel: shape [C] (or x.shape[1:], old spatial=0 form)."""
    x = ins[0]
    if x.ndim < 2:
        raise ShapeError(f"{what} input must be N x C x ... (rank >= 2), got {x}")
    for name, t in zip(names, ins[1:], strict=False):
        if t.shape not in ((x.shape[1],), x.shape[1:]):
            raise ShapeError(f"{what} {name} {t} must have shape [{x.shape[1]}] (one per channel of {x})")


def _per_channel(p: np.ndarray, ndim: int) -> np.ndarray:
    return _f(p).reshape(-1, *(1,) * (ndim - 2)) if p.ndim == 1 else _f(p)


# ---- batch_norm ---------------------------------------------------------------
_BN_PARAMS = ("scale", "bias", "mean", "var")


def _bn_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    _channel_params(ins, _BN_PARAMS, "batch_norm")
    return [TensorType(ins[0].shape, ins[0].dtype)]


# Per-channel scale and shift, but not "elementwise": fold_batchnorm folds it into the conv
# before it, and fuse_ops / the layout pass leave the rest alone.
@register_op("batch_norm", infer=_bn_infer, pattern="injective", flops=per_output(5), gpu="injective")
def batch_norm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    epsilon: float = 1e-5,
) -> np.ndarray:
    """Inference mode: normalize with the running statistics."""
    nd = x.ndim
    inv = _per_channel(scale, nd) / np.sqrt(_per_channel(var, nd) + epsilon)
    y = (_f(x) - _per_channel(mean, nd)) * inv + _per_channel(bias, nd)
    return y.astype(x.dtype)


def _bn_train_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    _channel_params(ins, _BN_PARAMS, "batch_norm_training")
    mean, var = ins[3], ins[4]
    return [
        TensorType(ins[0].shape, ins[0].dtype),
        TensorType(mean.shape, mean.dtype),
        TensorType(var.shape, var.dtype),
    ]


@register_op("batch_norm_training", infer=_bn_train_infer, pattern="opaque")
def batch_norm_training(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training mode: normalize with batch statistics; outputs y, running_mean, running_var."""
    axes = (0, *range(2, x.ndim)) if mean.ndim == 1 else (0,)
    v = _f(x)
    bmean, bvar = v.mean(axis=axes), v.var(axis=axes)
    nd = x.ndim
    y = (v - _per_channel(bmean, nd)) / np.sqrt(_per_channel(bvar, nd) + epsilon)
    y = y * _per_channel(scale, nd) + _per_channel(bias, nd)
    run_mean = _f(mean) * momentum + bmean * (1 - momentum)
    run_var = _f(var) * momentum + bvar * (1 - momentum)
    return y.astype(x.dtype), run_mean.astype(mean.dtype), run_var.astype(var.dtype)


# ---- instance_norm ------------------------------------------------------------
def _in_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    if x.ndim < 3:
        raise ShapeError(f"instance_norm input must be N x C x spatial (rank >= 3), got {x}")
    for name, t in zip(("scale", "bias"), ins[1:], strict=True):
        if t.shape != (x.shape[1],):
            raise ShapeError(f"instance_norm {name} {t} must have shape [{x.shape[1]}]")
    return [TensorType(x.shape, x.dtype)]


@register_op("instance_norm", infer=_in_infer, pattern="reduction", flops=per_output(5), gpu="rows")
def instance_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: float = 1e-5) -> np.ndarray:
    axes = tuple(range(2, x.ndim))
    v = _f(x)
    mean, var = v.mean(axis=axes, keepdims=True), v.var(axis=axes, keepdims=True)
    y = (v - mean) / np.sqrt(var + epsilon) * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)
    return y.astype(x.dtype)


# ---- layer_norm ---------------------------------------------------------------
def _ln_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    axis = normalize_axis(int(attrs.get("axis", -1)), x.ndim)
    norm_shape = x.shape[axis:]
    for name, t in zip(("scale", "bias"), ins[1:], strict=False):
        if broadcast_shapes(t.shape, norm_shape) != norm_shape:
            raise ShapeError(
                f"layer_norm {name} {t} does not broadcast to normalized shape {list(norm_shape)}"
            )
    stat = TensorType((*x.shape[:axis], *(1,) * (x.ndim - axis)), attrs.get("stash_type", "float32"))
    return [TensorType(x.shape, x.dtype), stat, stat]


@register_op("layer_norm", infer=_ln_infer, pattern="reduction", flops=per_output(5), gpu="rows")
def layer_norm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray | None = None,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: str = "float32",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Outputs Y, Mean and InvStdDev; statistics are computed and returned in `stash_type`."""
    st = np_dtype(stash_type)
    axes = tuple(range(normalize_axis(axis, x.ndim), x.ndim))
    v = x.astype(st)
    mean = v.mean(axis=axes, keepdims=True)
    inv_std = 1 / np.sqrt(((v - mean) ** 2).mean(axis=axes, keepdims=True) + st.type(epsilon))
    y = (v - mean) * inv_std * scale.astype(st)
    if bias is not None:
        y = y + bias.astype(st)
    return y.astype(x.dtype), mean.astype(st), inv_std.astype(st)
