"""Elementwise ops: broadcast arithmetic, unary math, activations, comparisons, logic, cast.

Every op here is registered with the traits in `EW`: pattern "elementwise" (fuse_ops
chains them into anchors' epilogues, the layout pass runs them on packed activations) and
the "injective" GPU template; FLOPs: one per output element (the default).

References follow ONNX semantics and keep the input dtype (numpy would promote
float16 * python-float to float16 too, but int division and pow need care).
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from tensorir.dtypes import NARROW
from tensorir.graph.types import TensorType, np_dtype
from tensorir.ops.infer import Types, broadcast, same_as
from tensorir.ops.registry import register_op

EW: dict[str, Any] = {"pattern": "elementwise", "gpu": "injective"}


def _keep(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(like.dtype, copy=False)


# ---- binary arithmetic ------------------------------------------------------
@register_op("add", infer=broadcast(), **EW)
def add(a, b):
    return _keep(a + b, a)


@register_op("sub", infer=broadcast(), **EW)
def sub(a, b):
    return _keep(a - b, a)


@register_op("mul", infer=broadcast(), **EW)
def mul(a, b):
    return _keep(a * b, a)


@register_op("div", infer=broadcast(), **EW)
def div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        # ONNX integer Div truncates toward zero (C semantics), numpy floors.
        with np.errstate(divide="ignore"):
            q = np.trunc(a.astype(np.float64) / b.astype(np.float64))
        return q.astype(a.dtype)
    return _keep(a / b, a)


@register_op("pow", infer=broadcast(), **EW)
def pow_(a, b):
    if np.issubdtype(a.dtype, np.integer):
        return np.power(a.astype(np.int64), b.astype(np.int64)).astype(a.dtype)
    return _keep(np.power(a, b.astype(a.dtype)), a)


@register_op("mod", infer=broadcast(), **EW)
def mod(a, b, fmod=0):
    if fmod or np.issubdtype(a.dtype, np.floating):
        return _keep(np.fmod(a, b), a)
    return _keep(np.mod(a, b), a)


@register_op("maximum", infer=broadcast(), **EW)
def maximum(a, b):
    return _keep(np.maximum(a, b), a)


@register_op("minimum", infer=broadcast(), **EW)
def minimum(a, b):
    return _keep(np.minimum(a, b), a)


@register_op("where", infer=lambda ins, attrs: broadcast()([ins[1], ins[0], ins[2]], attrs), **EW)
def where(cond, a, b):
    return np.where(cond, a, b).astype(a.dtype, copy=False)


# ---- comparisons and logic --------------------------------------------------
for _name, _fn in {
    "equal": np.equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}.items():
    register_op(_name, infer=broadcast("bool"), **EW)(lambda a, b, _fn=_fn: _fn(a, b))


@register_op("logical_not", infer=same_as(0), **EW)
def logical_not(x):
    return np.logical_not(x)


# ---- unary math -------------------------------------------------------------
def _erf(x: np.ndarray) -> np.ndarray:
    flat = np.fromiter((math.erf(v) for v in x.astype(np.float64).ravel()), np.float64, x.size)
    return flat.reshape(x.shape)


_UNARY = {
    "sqrt": np.sqrt,
    "exp": np.exp,
    "log": np.log,
    "abs": np.abs,
    "neg": np.negative,
    "reciprocal": np.reciprocal,
    "floor": np.floor,
    "ceil": np.ceil,
    "erf": _erf,
    "tanh": np.tanh,
    "sign": np.sign,
    "sin": np.sin,
    "cos": np.cos,
    "round": np.round,
}
for _name, _fn in _UNARY.items():

    def _ref(x, _fn=_fn):
        with np.errstate(all="ignore"):
            return _keep(_fn(x), x)

    register_op(_name, infer=same_as(0), **EW)(_ref)


# ---- activations ------------------------------------------------------------
def _f(x: np.ndarray) -> np.ndarray:
    """Compute activations in at least float32, return in the input dtype."""
    return x.astype(np.float64) if x.dtype == np.float64 else x.astype(np.float32)


@register_op("relu", infer=same_as(0), **EW)
def relu(x):
    return _keep(np.maximum(x, 0), x)


@register_op("leaky_relu", infer=same_as(0), **EW)
def leaky_relu(x, alpha=0.01):
    return _keep(np.where(x >= 0, x, _f(x) * alpha), x)


@register_op("prelu", infer=broadcast(), **EW)
def prelu(x, slope):
    return _keep(np.where(x >= 0, x, x * slope), x)


@register_op("elu", infer=same_as(0), **EW)
def elu(x, alpha=1.0):
    with np.errstate(over="ignore"):
        return _keep(np.where(x > 0, x, alpha * (np.exp(_f(x)) - 1)), x)


@register_op("selu", infer=same_as(0), **EW)
def selu(x, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    with np.errstate(over="ignore"):
        return _keep(gamma * np.where(x > 0, x, alpha * (np.exp(_f(x)) - 1)), x)


@register_op("sigmoid", infer=same_as(0), **EW)
def sigmoid(x):
    with np.errstate(over="ignore"):
        return _keep(1.0 / (1.0 + np.exp(-_f(x))), x)


@register_op("hard_sigmoid", infer=same_as(0), **EW)
def hard_sigmoid(x, alpha=0.2, beta=0.5):
    return _keep(np.clip(_f(x) * alpha + beta, 0, 1), x)


@register_op("hard_swish", infer=same_as(0), **EW)
def hard_swish(x):
    return _keep(_f(x) * np.clip(_f(x) * (1 / 6) + 0.5, 0, 1), x)  # ONNX: alpha 1/6, beta 1/2


@register_op("softplus", infer=same_as(0), **EW)
def softplus(x):
    return _keep(np.logaddexp(0, _f(x)), x)


@register_op("softsign", infer=same_as(0), **EW)
def softsign(x):
    return _keep(_f(x) / (1 + np.abs(_f(x))), x)


@register_op("gelu", infer=same_as(0), **EW)
def gelu(x, approximate="none"):
    v = _f(x)
    if approximate == "tanh":
        return _keep(0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))), x)
    return _keep(0.5 * v * (1 + _erf(v * math.sqrt(0.5))), x)


@register_op("mish", infer=same_as(0), **EW)
def mish(x):
    v = _f(x)
    return _keep(v * np.tanh(np.logaddexp(0, v)), x)


@register_op("clip", infer=same_as(0), **EW)
def clip(x, min=None, max=None):  # noqa: A002 - ONNX attribute names
    out = x
    if min is not None:
        out = np.maximum(out, np.asarray(min, dtype=x.dtype))
    if max is not None:
        out = np.minimum(out, np.asarray(max, dtype=x.dtype))
    return _keep(out, x)


# ---- cast ---------------------------------------------------------------------
def _cast_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    return [TensorType(ins[0].shape, attrs["to"])]


@register_op("cast", infer=_cast_infer, **EW)
def cast(x, to, saturate=1, round_mode="up"):
    target = np_dtype(to)
    wide = x.astype(np.float32) if x.dtype.name in NARROW else x
    if target == np.bool_:
        return wide.astype(np.bool_)
    if target.name == "float8_e8m0fnu":
        return _cast_e8m0(wide.astype(np.float64), round_mode, saturate).astype(target)
    if saturate and target.name.startswith("float8"):
        # ONNX saturating cast: out-of-range values (and +-inf) clamp to +-max.
        top = float(ml_dtypes.finfo(target).max)
        with np.errstate(invalid="ignore"):
            wide = np.where(np.abs(wide) > top, np.sign(wide) * top, wide)
    wide = np.asarray(wide)
    with np.errstate(all="ignore"):
        if target.name in NARROW and "int" in target.name and wide.dtype.kind == "f":
            # ONNX: float to a 2/4-bit integer truncates, then wraps (keeps the low bits);
            # ml_dtypes >= 0.7 sends out-of-range floats to 0, its int -> int4 still wraps
            wide = wide.astype(np.int64)
        return wide.astype(target)


def _cast_e8m0(x: np.ndarray, round_mode: str, saturate: int) -> np.ndarray:
    """To a power of two (the only values E8M0 holds), rounding the exponent as asked."""
    with np.errstate(all="ignore"):
        f = np.floor(np.log2(np.abs(x)))
        frac = np.abs(x) / np.exp2(f)  # in [1, 2)
        step = {"up": frac > 1, "down": np.zeros_like(frac, bool), "nearest": frac >= 1.5}[round_mode]
        e = f + step
        if saturate:
            e = np.clip(np.nan_to_num(e, neginf=-127, posinf=127), -127, 127)
        out = np.exp2(e)
    return np.where(np.isnan(x), np.nan, out)
