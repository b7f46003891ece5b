"""Compute definitions of tan, asin, acos, atan and the hyperbolic functions (trig.py).

No libm: they are built from the code generator's vectorized exp / log / sqrt / sin / cos
(codegen/vmath.py), selects and polynomials, so they vectorize like any elementwise op.

- atan: Cephes' range reduction (|x| > tan(3pi/8): pi/2 + atan(-1/x); > tan(pi/8) (0.66 in
  float64): pi/4 + atan((x-1)/(x+1))) and its polynomial: atanf's degree 9 in float32 (float16
  computes in float32), atan's rational P(z)/Q(z) in float64;
- asin(x) = atan(x / sqrt((1-x)(1+x))), acos(x) = 2 atan(sqrt((1-x)/(1+x))) (exact at +-1, NaN
  outside [-1, 1]); tan = sin / cos;
- sinh, cosh, asinh, acosh, atanh in float64 (rounded once to the input dtype): exp for
  sinh / cosh (a Taylor series for sinh below 0.5, where e - 1/e cancels), log1p forms for
  the inverses (no cancellation near 0 or 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import tensorir.ops.trig  # noqa: F401  (the references register the ops first)
from tensorir.loop.ir import Expr
from tensorir.ops.elementwise_compute import const, elementwise, log1p_unit, math_call
from tensorir.ops.registry import register_compute
from tensorir.schedule.defaults import schedule_injective
from tensorir.schedule.te import Tensor, cast, select

_ATAN64_P = (
    -8.750608600031904122785e-1,
    -1.615753718733365076637e1,
    -7.500855792314704667340e1,
    -1.228866684490136173410e2,
    -6.485021904942025371773e1,
)
_ATAN64_Q = (
    2.485846490142306297962e1,
    1.650270098316988542046e2,
    4.328810604912902668951e2,
    4.853903996359136964868e2,
    1.945506571482613964425e2,
)
_ATAN32_P = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
_MOREBITS = 6.123233995736765886130e-17  # pi/2 - float64(pi/2)
_BIG = 1e150  # float64 arguments above this would overflow x*x


def _poly(z: Expr, coeffs: tuple[float, ...], monic: bool = False) -> Expr:
    """Horner: c0 z^n + ... + cn (with a leading 1 z^(n+1) when `monic`)."""
    acc = z + const(coeffs[0], z.dtype) if monic else const(coeffs[0], z.dtype)
    for c in coeffs[1:]:
        acc = acc * z + const(c, z.dtype)
    return acc


def _with_sign(x: Expr, magnitude: Expr) -> Expr:
    """magnitude * sign(x) (a product, not a select of two copies of `magnitude`)."""
    return magnitude * select(x < const(0, x.dtype), const(-1, x.dtype), const(1, x.dtype))


def atan_expr(x: Expr) -> Expr:
    """atan of a float32 or float64 expression (module docstring)."""
    dt = x.dtype
    c = lambda v: const(v, dt)  # noqa: E731
    a = math_call("abs", x)
    big = a > c(2.414213562373095)
    mid = a > c(0.66 if dt == "float64" else 0.4142135623730950)
    r = select(big, c(-1) / a, select(mid, (a - c(1)) / (a + c(1)), a))
    z = r * r
    if dt == "float64":
        poly = z * _poly(z, _ATAN64_P) / _poly(z, _ATAN64_Q, monic=True)
        base = select(big, c(math.pi / 2 + _MOREBITS), select(mid, c(math.pi / 4 + _MOREBITS / 2), c(0)))
    else:
        poly = _poly(z, _ATAN32_P) * z
        base = select(big, c(math.pi / 2), select(mid, c(math.pi / 4), c(0)))
    return _with_sign(x, base + (r * poly + r))


def _asin(x: Expr) -> Expr:
    one = const(1, x.dtype)
    return atan_expr(x / math_call("sqrt", (one - x) * (one + x)))


def _acos(x: Expr) -> Expr:
    one = const(1, x.dtype)
    return const(2, x.dtype) * atan_expr(math_call("sqrt", (one - x) / (one + x)))


def _tan(x: Expr) -> Expr:
    return math_call("sin", x) / math_call("cos", x)


def _sinh(v: Expr) -> Expr:
    a = math_call("abs", v)
    z = v * v
    series: Expr = const(1 / math.factorial(15), "float64")
    for k in range(13, 0, -2):
        series = const(1 / math.factorial(k), "float64") + z * series
    e = math_call("exp", a)
    big = (e - const(1, "float64") / e) * const(0.5, "float64")
    return select(a < const(0.5, "float64"), v * series, _with_sign(v, big))


def _cosh(v: Expr) -> Expr:
    e = math_call("exp", math_call("abs", v))
    return (e + const(1, "float64") / e) * const(0.5, "float64")


def _log1p(y: Expr) -> Expr:
    return log1p_unit(y)  # y >= 0 (its series below 0.01, log(1 + y) above)


def _asinh(v: Expr) -> Expr:
    c = lambda k: const(k, "float64")  # noqa: E731
    a = math_call("abs", v)
    near = _log1p(a + a * a / (c(1) + math_call("sqrt", c(1) + a * a)))
    far = math_call("log", a) + c(math.log(2))
    return _with_sign(v, select(a > c(_BIG), far, near))


def _acosh(v: Expr) -> Expr:
    c = lambda k: const(k, "float64")  # noqa: E731
    t = v - c(1)
    near = _log1p(t + math_call("sqrt", t * (t + c(2))))
    far = math_call("log", v) + c(math.log(2))
    return select(v < c(1), c(math.nan), select(v > c(_BIG), far, near))


def _atanh(v: Expr) -> Expr:
    c = lambda k: const(k, "float64")  # noqa: E731
    a = math_call("abs", v)
    inside = c(0.5) * _log1p(c(2) * a / (c(1) - a))
    return select(a > c(1), c(math.nan), _with_sign(v, inside))


def _via(x: Expr, dtype: str) -> Expr:
    """x cast to dtype, through float32 between float16 and float64 (the code generator's
    direct conversion would need a compiler-rt routine the library does not link)."""
    if {x.dtype, dtype} == {"float16", "float64"}:
        x = cast(x, "float32")
    return cast(x, dtype)


def _in(wide: Callable[[str], str], fn: Callable[[Expr], Expr]) -> Callable[[Expr], Expr]:
    """fn evaluated in dtype wide(x.dtype), the result cast back to x's dtype."""
    return lambda x: _via(fn(_via(x, wide(x.dtype))), x.dtype)


def _f32_up(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


_COMPUTES: dict[str, Callable[[Expr], Expr]] = {
    "tan": _in(_f32_up, _tan),
    "asin": _in(_f32_up, _asin),
    "acos": _in(_f32_up, _acos),
    "atan": _in(_f32_up, atan_expr),
    "sinh": _in(lambda d: "float64", _sinh),
    "cosh": _in(lambda d: "float64", _cosh),
    "asinh": _in(lambda d: "float64", _asinh),
    "acosh": _in(lambda d: "float64", _acosh),
    "atanh": _in(lambda d: "float64", _atanh),
}


def _register(name: str, fn: Callable[[Expr], Expr]) -> None:
    def compute_fn(x: Tensor) -> Tensor:
        return elementwise(name, [x], fn)

    register_compute(name, schedule=schedule_injective)(compute_fn)


for _name, _fn in _COMPUTES.items():
    _register(_name, _fn)
