"""Compute definitions for the elementwise ops (references in elementwise.py).

Every op is one `compute` over the numpy-broadcast output shape with the default
injective schedule (one fused loop, vectorized, parallel when large). Float16 activations
are evaluated in float32 and rounded once, as the references do; float64 tanh / erf /
sin / cos go through float32 (the code generator has no float64 version of those).

Undefined cases are kept harmless: integer division / modulo by zero gives 0 and
INT_MIN / -1 wraps (no hardware trap); float -> int casts of NaN or out-of-range values
are unspecified (as in ONNX). Float maximum / minimum / relu / clip propagate NaN like
numpy (the code generator's max(a, b) returns b when either is NaN, so the data operand
goes second, or the NaN is selected explicitly).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes

import tensorir.ops.elementwise  # noqa: F401  (the references register the ops first)
from tensorir.dtypes import np_dtype
from tensorir.loop.arith import is_float, is_int
from tensorir.loop.ir import BinOp, Call, Cmp, Const, Expr, Not
from tensorir.ops.infer import broadcast_shapes
from tensorir.ops.registry import register_compute
from tensorir.schedule.defaults import schedule_injective
from tensorir.schedule.te import Tensor, any_, call, cast, compute, max_, min_, select

Fn = Callable[..., Expr]
_NO_F64 = ("tanh", "erf", "sin", "cos")  # math the code generator has in float32 only


def const(value: float | int | bool, dtype: str) -> Const:
    """A constant of `dtype` (Python value coerced to the dtype's kind)."""
    if dtype == "bool":
        return Const(bool(value), dtype)
    return Const(float(value) if is_float(dtype) else int(value), dtype)


def math_call(name: str, x: Expr) -> Expr:
    """call(name, x), through float32 where the code generator lacks the float64 version."""
    if x.dtype == "float64" and name in _NO_F64:
        return cast(call(name, cast(x, "float32")), "float64")
    return call(name, x)


def elementwise(name: str, ins: list[Tensor], fn: Fn, dtype: str | None = None) -> Tensor:
    """out[i] = fn(*(t.bcast[i] for t in ins)) over the broadcast shape of `ins`."""
    shape = broadcast_shapes(*(t.shape for t in ins))

    def body(*i: Any) -> Expr:
        return fn(*(t.bcast[i] for t in ins))

    return compute(shape, body, name=name, dtype=dtype)


def in_float(fn: Fn) -> Fn:
    """fn evaluated in float32 (float64 stays float64), the result cast back."""

    def wrapped(x: Expr, **attrs: Any) -> Expr:
        wide = "float64" if x.dtype == "float64" else "float32"
        return cast(fn(cast(x, wide), **attrs), x.dtype)

    return wrapped


def _register(name: str, fn: Fn, dtype: Callable[[list[Tensor]], str | None] = lambda ins: None) -> None:
    def compute_fn(*ins: Tensor, **attrs: Any) -> Tensor:
        return elementwise(name, list(ins), lambda *v: fn(*v, **attrs), dtype(list(ins)))

    register_compute(name, schedule=schedule_injective)(compute_fn)


# ---- binary arithmetic ------------------------------------------------------
def safe_int_div(a: Expr, b: Expr, op: str) -> Expr:
    """Integer a / b (truncating) or a % b (floor) that never traps: 0 where b == 0 (ONNX
    leaves it undefined), and a / -1 as a wrapping negation (INT_MIN / -1 faults on x86);
    a hardware fault would kill the process. Only selects of constants: it vectorizes."""
    zero, one = const(0, b.dtype), const(1, b.dtype)
    if not b.dtype.startswith("int"):  # unsigned: only zero needs care
        return BinOp(op, a, select(b.eq(zero), one, b)) * cast(b.ne(zero), a.dtype)
    minus = const(-1, b.dtype)
    q = BinOp(op, a, select(any_(b.eq(zero), b.eq(minus)), one, b))  # a / 1, a % 1 there
    if op == "%":
        return q * cast(b.ne(zero), a.dtype)  # a % -1 == a % 1 == 0
    return q * select(b.eq(minus), minus, select(b.eq(zero), zero, one))


def _div(a: Expr, b: Expr) -> Expr:
    return safe_int_div(a, b, "/") if is_int(a.dtype) else a / b  # "/" truncates ints, as ONNX


def _pow(a: Expr, b: Expr) -> Expr:
    if is_int(a.dtype):  # exact while the result fits float64's mantissa
        p = call("pow", cast(a, "float64"), cast(cast(b, "int64"), "float64"))
        return cast(call("round", p), a.dtype)
    wide = "float32" if a.dtype == "float16" else a.dtype
    return cast(call("pow", cast(a, wide), cast(cast(b, a.dtype), wide)), a.dtype)


def nan_first(a: Expr, m: Expr) -> Expr:
    """m, or a where a is NaN: with max_(a, b) (NaN wins only as b) NaN propagates like numpy."""
    return select(a.ne(a), a, m) if is_float(a.dtype) else m


def trunc(q: Expr) -> Expr:
    """Round a float toward zero."""
    return select(q < const(0, q.dtype), call("ceil", q), call("floor", q))


def _mod(a: Expr, b: Expr, fmod: int = 0) -> Expr:
    if is_int(a.dtype):  # C remainder (fmod) / Python's floor modulo
        if not fmod:
            return safe_int_div(a, b, "%")
        return (a - safe_int_div(a, b, "/") * b) * cast(b.ne(const(0, b.dtype)), a.dtype)
    wide = "float64"  # a - trunc(a/b)*b is exact enough in double for float16/32 inputs
    wa, wb = cast(a, wide), cast(b, wide)
    r = wa - trunc(wa / wb) * wb
    return cast(r, a.dtype)


def _where(c: Expr, a: Expr, b: Expr) -> Expr:
    return select(cast(c, "bool"), a, b)


for _name, _fn in {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": _div,
    "pow": _pow,
    "mod": _mod,
    "maximum": lambda a, b: nan_first(a, max_(a, b)),
    "minimum": lambda a, b: nan_first(a, min_(a, b)),
}.items():
    _register(_name, _fn)
_register("where", _where, dtype=lambda ins: ins[1].dtype)


# ---- comparisons and logic --------------------------------------------------
def _cmp(op: str) -> Fn:
    return lambda a, b: Cmp(op, a, b)


def _logic(op: str) -> Fn:
    return lambda a, b: BinOp(op, cast(a, "bool"), cast(b, "bool"))


for _name, _fn in {
    "equal": _cmp("=="),
    "less": _cmp("<"),
    "less_equal": _cmp("<="),
    "greater": _cmp(">"),
    "greater_equal": _cmp(">="),
    "logical_and": _logic("and"),
    "logical_or": _logic("or"),
    "logical_xor": _logic("xor"),
}.items():
    _register(_name, _fn, dtype=lambda ins: "bool")
_register("logical_not", lambda x: Not(cast(x, "bool")))


# ---- unary math -------------------------------------------------------------
def _sign(x: Expr) -> Expr:
    zero, one = const(0, x.dtype), const(1, x.dtype)
    if not is_float(x.dtype) and not x.dtype.startswith("int"):
        return select(x > zero, one, zero)
    return select(x > zero, one, select(x < zero, const(-1, x.dtype), x))


def _unary_call(name: str) -> Fn:
    return lambda x: math_call(name, x)


_UNARY: dict[str, Fn] = {
    "sqrt": _unary_call("sqrt"),
    "exp": _unary_call("exp"),
    "log": _unary_call("log"),
    "abs": _unary_call("abs"),
    "neg": lambda x: -x,
    "reciprocal": lambda x: const(1, x.dtype) / x,
    "floor": _unary_call("floor"),
    "ceil": _unary_call("ceil"),
    "erf": _unary_call("erf"),
    "tanh": _unary_call("tanh"),
    "sign": _sign,
    "sin": _unary_call("sin"),
    "cos": _unary_call("cos"),
    "round": _unary_call("round"),
}
for _name, _fn in _UNARY.items():
    _register(_name, _fn)


# ---- activations ------------------------------------------------------------
def _c(x: Expr, v: float) -> Expr:
    return const(v, x.dtype)


def _leaky_relu(x: Expr, alpha: float = 0.01) -> Expr:
    return select(x >= _c(x, 0), x, x * _c(x, alpha))


def _prelu(x: Expr, slope: Expr) -> Expr:
    return select(x >= const(0, x.dtype), x, x * cast(slope, x.dtype))


def _elu(x: Expr, alpha: float = 1.0) -> Expr:
    return select(x > _c(x, 0), x, _c(x, alpha) * (math_call("exp", x) - _c(x, 1)))


def _selu(
    x: Expr, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875
) -> Expr:
    return _c(x, gamma) * _elu(x, alpha)


def _clamp01(v: Expr) -> Expr:
    return max_(_c(v, 0), min_(_c(v, 1), v))  # constant first: a NaN v propagates


def _hard_sigmoid(x: Expr, alpha: float = 0.2, beta: float = 0.5) -> Expr:
    return _clamp01(x * _c(x, alpha) + _c(x, beta))


def _hard_swish(x: Expr) -> Expr:
    """x * hard_sigmoid(x, 1/6, 1/2), as ONNX defines it: a multiply, not a divide by 6 (a
    vector divide per element costs as much as a dozen FMAs on Zen 4 and stalled PP-LCNet's
    depthwise + 1x1 kernels)."""
    return x * _hard_sigmoid(x, 1 / 6, 0.5)


def log1p_unit(y: Expr) -> Expr:
    """log(1 + y) for y in [0, 1] in float64: a series below 0.01 (where 1 + y would round
    off y's digits), log(1 + y) above. (A Goldberg-style log(u) * y / (u - 1) does not survive
    the code generator's reassociating float math.)"""
    one = const(1, "float64")
    series: Expr = const(-1 / 8, "float64")  # y * series = y - y^2/2 + y^3/3 - ... - y^8/8
    for k in range(6, -1, -1):
        series = const((-1) ** k / (k + 1), "float64") + y * series
    return select(y < const(0.01, "float64"), y * series, math_call("log", one + y))


def softplus_expr(x: Expr) -> Expr:
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), in float64 (exact to the input's ulp)."""
    v = cast(x, "float64")
    y = math_call("exp", -math_call("abs", v))
    return cast(max_(const(0, "float64"), v) + log1p_unit(y), x.dtype)


def _softsign(x: Expr) -> Expr:
    return x / (_c(x, 1) + math_call("abs", x))


def _gelu(x: Expr, approximate: str = "none") -> Expr:
    if approximate == "tanh":
        inner = _c(x, math.sqrt(2 / math.pi)) * (x + _c(x, 0.044715) * x * x * x)
        return _c(x, 0.5) * x * (_c(x, 1) + math_call("tanh", inner))
    # x * (1 / sqrt(2)): a multiply, as onnxruntime's Gelu does, not a vector divide per element
    return _c(x, 0.5) * x * (_c(x, 1) + math_call("erf", x * _c(x, math.sqrt(0.5))))


def _mish(x: Expr) -> Expr:
    return x * math_call("tanh", softplus_expr(x))


def _clip(x: Expr, min: float | None = None, max: float | None = None) -> Expr:  # noqa: A002
    out = x
    if min is not None:
        out = max_(const(min, x.dtype), out)
    if max is not None:
        out = min_(const(max, x.dtype), out)
    return out


_register("relu", lambda x: max_(const(0, x.dtype), x))  # NaN propagates
_register("prelu", _prelu)
_register("clip", _clip)
for _name, _fn in {
    "leaky_relu": _leaky_relu,
    "elu": _elu,
    "selu": _selu,
    "sigmoid": lambda x: math_call("sigmoid", x),
    "hard_sigmoid": _hard_sigmoid,
    "hard_swish": _hard_swish,
    "softplus": softplus_expr,
    "softsign": _softsign,
    "gelu": _gelu,
    "mish": _mish,
}.items():
    _register(_name, in_float(_fn))


# ---- cast ---------------------------------------------------------------------
@register_compute("cast", schedule=schedule_injective)
def cast_compute(x: Tensor, to: str, saturate: int = 1, round_mode: str = "up") -> Tensor:
    """Numeric conversions between the code generator's dtypes (float -> int truncates)."""
    return compute(x.shape, lambda *i: cast_value(x[i], to, saturate, round_mode), name="cast")


def cast_value(v: Expr, to: str, saturate: int = 1, round_mode: str = "up") -> Expr:
    """ONNX Cast of one value: to float8 with `saturate`, out-of-range values and infinities
    clamp to +-max first (NaN stays NaN); to float8_e8m0fnu the exponent rounds by
    `round_mode` (the e8m0_* intrinsics). The code generator's Cast does the rest."""
    if to == "float8_e8m0fnu":
        return Call(f"e8m0_{round_mode}", (cast(v, "float32"), Const(bool(saturate), "bool")), to)
    if saturate and to.startswith("float8") and is_float(v.dtype):
        top = float(ml_dtypes.finfo(np_dtype(to)).max)
        w = cast(v, "float64" if v.dtype == "float64" else "float32")
        hi, lo = const(top, w.dtype), const(-top, w.dtype)
        return cast(select(w > hi, hi, select(w < lo, lo, w)), to)
    return cast(v, to)
