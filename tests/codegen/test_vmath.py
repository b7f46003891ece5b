"""Accuracy of the libm-free vector math (tensorir/codegen/vmath.py) against float64/longdouble
numpy references, with the bounds stated in vmath's docstring (measured, plus a small margin)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tensorir.errors import TirError
from tensorir.loop.ir import Buffer, Call, Const, For, ForKind, Load, LoopFunc, Ramp, Store, Var
from tensorir.runtime.jit import compile_host

N = 1 << 20
_erf = np.frompyfunc(math.erf, 1, 1)
REF = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": lambda x: _erf(x).astype(np.float64),
    "sin": np.sin,
    "cos": np.cos,
}


def math_kernel(name: str, n: int, dtype: str = "float32", lanes: int = 16, nargs: int = 1):
    xs = [Buffer(f"X{j}", (n,), dtype) for j in range(nargs)]
    y = Buffer("Y", (n,), dtype)
    i = Var("i")
    idx = Ramp(i * lanes, Const(1), lanes) if lanes > 1 else i
    body = Store(y, idx, Call(name, tuple(Load(b, idx) for b in xs), dtype))
    f = LoopFunc(
        f"vm_{name}_{dtype}_{lanes}", (*xs, y), For(i, Const(0), Const(n // lanes), ForKind.SERIAL, body)
    )
    return compile_host(f)


def inputs(lo: float, hi: float, n: int = N, log_scale: bool = False, dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(0)
    if log_scale:
        return np.exp(rng.uniform(np.log(lo), np.log(hi), n)).astype(dtype)
    return np.concatenate([np.linspace(lo, hi, n // 2), rng.uniform(lo, hi, n - n // 2)]).astype(dtype)


def errors(got: np.ndarray, ref: np.ndarray) -> tuple[float, float, float]:
    """(max ulp, max abs, max rel) of got against an exact-enough reference."""
    diff = np.abs(got.astype(ref.dtype) - ref)
    ulp = diff / np.spacing(np.abs(ref).astype(got.dtype)).astype(ref.dtype)
    rel = diff / np.maximum(np.abs(ref), np.finfo(got.dtype).tiny)
    return float(ulp.max()), float(diff.max()), float(rel.max())


F32 = [  # name, range, max ulp, max abs err
    ("exp", (-87, 88), 1.5, None),
    ("log", (1e-30, 1e30), 1.0, None),
    ("tanh", (-20, 20), 2.0, 1e-7),
    ("sigmoid", (-80, 80), 3.0, 1e-7),
    ("erf", (-6, 6), 3.0, 2e-7),
    ("sin", (-100, 100), 3.5, 1.2e-7),
    ("cos", (-100, 100), 3.5, 1.2e-7),
]


@pytest.mark.parametrize(("name", "rng", "max_ulp", "max_abs"), F32, ids=[c[0] for c in F32])
def test_float32_accuracy(name, rng, max_ulp, max_abs):
    x = inputs(*rng, log_scale=name == "log")
    y = np.zeros_like(x)
    math_kernel(name, N)(x, y)
    ulp, ab, rel = errors(y, REF[name](x.astype(np.float64)))
    print(f"{name} on {rng}: max {ulp:.2f} ulp, abs {ab:.3g}, rel {rel:.3g}")
    assert ulp <= max_ulp
    if max_abs is not None:
        assert ab <= max_abs


def test_sigmoid_denormal_results():
    """sigmoid(x) for x in [-104, -87] is a denormal float32: rounded once (its exp scales by
    2^(k+24), then 2^-24), not flushed to zero or held at the smallest normal."""
    x = inputs(-110, -86, 1 << 16)
    y = np.zeros_like(x)
    math_kernel("sigmoid", x.size)(x, y)
    ref = REF["sigmoid"](x.astype(np.float64))
    assert np.all(np.abs(y - ref) <= np.spacing(np.abs(ref).astype(np.float32)))  # within 1 ulp
    assert np.all(y[x < -104] == 0) and np.all(y[x > -103] > 0)


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sincos_wide_range(name):
    x = inputs(-1e4, 1e4, 1 << 18)
    y = np.zeros_like(x)
    math_kernel(name, x.size)(x, y)
    _, ab, _ = errors(y, REF[name](x.astype(np.float64)))
    assert ab <= 1.2e-7


def test_float32_pow():
    rng = np.random.default_rng(1)
    a = rng.uniform(0, 10, 1 << 18).astype(np.float32)
    b = rng.uniform(-10, 10, a.size).astype(np.float32)
    a[:8], b[:8] = [-2, -2, 0, 0, 1, -1, 2, -8], [3, 2.5, 0, -1, np.nan, 0.5, 0, 3]
    y = np.zeros_like(a)
    math_kernel("pow", a.size, nargs=2)(a, b, y)
    with np.errstate(all="ignore"):
        ref = np.power(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_array_equal(y[:8], ref[:8].astype(np.float32))
    ok = np.isfinite(ref) & (np.abs(ref) < 3e38) & (np.abs(ref) > 1e-37)
    assert errors(y[ok], ref[ok])[0] <= 1.0


@pytest.mark.parametrize(
    ("name", "rng", "max_ulp"),
    [("exp", (-708, 709), 1.0), ("log", (1e-300, 1e300), 1.0), ("sigmoid", (-700, 700), 2.5)],
)
def test_float64_accuracy(name, rng, max_ulp):
    x = inputs(*rng, n=1 << 18, log_scale=name == "log", dtype=np.float64)
    y = np.zeros_like(x)
    math_kernel(name, x.size, "float64", lanes=8)(x, y)
    ref = REF[name](x.astype(np.longdouble))  # 64-bit mantissa on x86-64
    assert errors(y, ref)[0] <= max_ulp


def test_special_values():
    x = np.array(
        [0, -0.0, np.inf, -np.inf, np.nan, 1, -1, 100, -100, 89, -104, -120, 1e-40, 88.7, 88.73, 3],
        np.float32,
    )
    for name in REF:
        y = np.zeros_like(x)
        math_kernel(name, x.size)(x, y)
        with np.errstate(all="ignore"):
            ref = REF[name](x.astype(np.float64)).astype(np.float32)
        fin = np.isfinite(ref)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref), err_msg=name)
        np.testing.assert_array_equal(y[~fin & ~np.isnan(ref)], ref[~fin & ~np.isnan(ref)], err_msg=name)
        np.testing.assert_allclose(y[fin], ref[fin], rtol=3e-7, atol=1e-44, err_msg=name)


@pytest.mark.parametrize("lanes", [1, 4, 8])
def test_other_lane_counts_and_float16(lanes):
    x = inputs(-5, 5, 256)
    for name in REF:
        arg = np.abs(x) + np.float32(0.01) if name == "log" else x
        y = np.zeros_like(arg)
        math_kernel(name, arg.size, lanes=lanes)(arg, y)
        np.testing.assert_allclose(y, REF[name](arg.astype(np.float64)), rtol=1e-6, atol=2e-7, err_msg=name)
        h, yh = arg.astype(np.float16), np.zeros(arg.size, np.float16)
        math_kernel(name, arg.size, "float16", lanes=lanes)(h, yh)
        np.testing.assert_allclose(yh, REF[name](h.astype(np.float64)), rtol=1e-3, atol=1e-3, err_msg=name)


def test_missing_float64_function_is_a_clear_error():
    with pytest.raises(TirError, match="no vectorized 'tanh' for float64"):
        math_kernel("tanh", 16, "float64", lanes=4)
