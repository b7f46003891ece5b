"""Elementwise compute definitions, compiled for the host, against the numpy references.

Tolerances: integers and bools exact; float32 arithmetic 1e-6, float32 math / activations
rtol 1e-5 (the vector math is within 3 ulp; the references are numpy's float32 functions);
float64 exp/log/sqrt/pow 1e-12, float64 tanh/erf/sin/cos rtol/atol 1e-6 (computed through
float32, the code generator has no float64 version); float16 2e-3 (about two float16 ulp).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensorir.ops.kernel import run_op
from tensorir.ops.registry import get_op

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seed() -> None:
    global RNG
    RNG = np.random.default_rng(0)


def check(op: str, ins: list[np.ndarray], attrs: dict | None = None, rtol: float = 1e-6, atol: float = 0.0):
    """Compiled outputs equal the reference's (dtype and shape exactly, values within tolerance)."""
    attrs = attrs or {}
    got = run_op(op, ins, attrs)
    want = get_op(op).run_reference(ins, attrs)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (op, g.dtype, w.dtype, g.shape, w.shape)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=op)
        else:
            np.testing.assert_array_equal(g, w, err_msg=op)


def data(shape, dtype, lo: float = -3.0, hi: float = 3.0) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return RNG.random(shape) < 0.5
    if dt.kind in "iu":
        return RNG.integers(int(lo), int(hi) + 1, shape).astype(dt)
    return RNG.uniform(lo, hi, shape).astype(dt)


FLOAT_TOL = {"float32": (1e-5, 1e-6), "float64": (1e-12, 1e-12), "float16": (2e-3, 1e-3)}
SHAPE_PAIRS = [((3, 17), (3, 17)), ((2, 3, 16), (16,)), ((4, 1, 5), (1, 6, 1)), ((), (7,)), ((33,), ())]


# ---- binary arithmetic -------------------------------------------------------------------
BINARY_CASES = [("float32", s) for s in SHAPE_PAIRS] + [
    (dt, s) for dt in ("float64", "float16", "int32", "int64", "uint8") for s in SHAPE_PAIRS[1:3]
]


@pytest.mark.parametrize(("dtype", "shapes"), BINARY_CASES, ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_binary_arithmetic(op, dtype, shapes):
    a, b = data(shapes[0], dtype, 0, 9), data(shapes[1], dtype, 1, 9)
    if dtype.startswith("float"):
        a, b = data(shapes[0], dtype), data(shapes[1], dtype, 0.5, 3)
    check(op, [a, b], rtol=FLOAT_TOL.get(dtype, (0, 0))[0])


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_division_truncates_and_mod_floors(dtype):
    a = np.array([7, -7, 7, -7, 6, -6, 0], dtype)
    b = np.array([2, 2, -2, -2, 3, -4, 5], dtype)
    check("div", [a, b])
    check("mod", [a, b])
    check("mod", [a, b], {"fmod": 1})


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_integer_division_by_zero_gives_zero_instead_of_trapping(dtype):
    a, b = np.array([7, 3, 0], dtype), np.zeros(3, dtype)
    for op, attrs in (("div", {}), ("mod", {}), ("mod", {"fmod": 1})):
        assert run_op(op, [a, b], attrs)[0].tolist() == [0, 0, 0]


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_min_divided_by_minus_one_wraps_instead_of_trapping(dtype):
    low = np.iinfo(dtype).min
    a, b = np.array([low, low, 9], dtype), np.array([-1, 1, -1], dtype)
    assert run_op("div", [a, b], {})[0].tolist() == [low, low, -9]
    assert run_op("mod", [a, b], {})[0].tolist() == [0, 0, 0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_float_mod_is_fmod(dtype):
    a, b = data((5, 8), dtype, -10, 10), data((8,), dtype, 0.5, 3) * np.where(np.arange(8) % 2, 1, -1)
    check("mod", [a, b.astype(dtype)], {"fmod": 1}, rtol=FLOAT_TOL[dtype][0], atol=FLOAT_TOL[dtype][1])


@pytest.mark.parametrize(
    ("adt", "bdt"),
    [
        ("float32", "float32"),
        ("float64", "float64"),
        ("float32", "int32"),
        ("int32", "int32"),
        ("int64", "int64"),
    ],
)
def test_pow(adt, bdt):
    if adt.startswith("int"):
        a, b = data((4, 6), adt, -4, 4), data((6,), bdt, 0, 5)
    else:
        a, b = data((4, 6), adt, 0.1, 3), data((6,), bdt, -3, 3)
    check("pow", [a, b], rtol=1e-6 if adt == "float32" else 1e-12)


def test_float_nan_propagates_like_numpy():
    x = np.array([np.nan, 1, -1, 2, np.nan], np.float32)
    y = np.array([0, np.nan, 0, 1, np.nan], np.float32)
    for op in ("maximum", "minimum"):
        check(op, [x, y])
    for op, attrs in (("relu", {}), ("clip", {"min": 0.0, "max": 1.0}), ("sign", {}), ("abs", {})):
        check(op, [x], attrs)


# ---- comparisons, logic, where -------------------------------------------------------------
@pytest.mark.parametrize("op", ["equal", "less", "less_equal", "greater", "greater_equal"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "uint16"])
def test_comparisons(op, dtype):
    a, b = data((3, 1, 17), dtype, 0, 4), data((5, 1), dtype, 0, 4)
    check(op, [a, b])


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logic(op):
    check(op, [data((4, 33), "bool"), data((33,), "bool")])


def test_logical_not():
    check("logical_not", [data((5, 7), "bool")])


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_where_broadcasts_all_three(dtype):
    check("where", [data((4, 1, 16), "bool"), data((3, 16), dtype), data((4, 3, 1), dtype)])


# ---- unary math ------------------------------------------------------------------------------
POSITIVE = {"sqrt", "log", "reciprocal"}
VIA_F32_IN_F64 = {"tanh", "erf", "sin", "cos"}


def _unary_tol(op: str, dtype: str) -> tuple[float, float]:
    if dtype == "float64" and op in VIA_F32_IN_F64:
        return 1e-6, 1e-6  # the argument rounds to float32: abs error ~ |x| 2^-24
    return FLOAT_TOL[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize(
    "op",
    [
        "sqrt",
        "exp",
        "log",
        "abs",
        "neg",
        "reciprocal",
        "floor",
        "ceil",
        "erf",
        "tanh",
        "sign",
        "sin",
        "cos",
        "round",
    ],
)
def test_unary_math(op, dtype):
    x = data((3, 37), dtype, 0.05, 5) if op in POSITIVE else data((3, 37), dtype, -5, 5)
    if op == "round":
        x = (np.arange(-8, 9) / 2).astype(dtype)  # halves round to even
    check(op, [x], rtol=_unary_tol(op, dtype)[0], atol=_unary_tol(op, dtype)[1])


@pytest.mark.parametrize("op", ["abs", "neg", "sign", "relu"])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_unary_integer(op, dtype):
    check(op, [data((5, 9), dtype, -20, 20)])


# ---- activations ------------------------------------------------------------------------------
ACTIVATIONS = [
    ("relu", {}),
    ("leaky_relu", {"alpha": 0.1}),
    ("elu", {"alpha": 0.7}),
    ("selu", {}),
    ("sigmoid", {}),
    ("hard_sigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("hard_swish", {}),
    ("softplus", {}),
    ("softsign", {}),
    ("gelu", {}),
    ("gelu", {"approximate": "tanh"}),
    ("mish", {}),
    ("clip", {"min": -1.0, "max": 0.5}),
    ("clip", {"max": 0.5}),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize(("op", "attrs"), ACTIVATIONS, ids=[f"{o}-{a}" for o, a in ACTIVATIONS])
def test_activations(op, attrs, dtype):
    x = data((4, 40), dtype, -8, 8)
    rtol, atol = FLOAT_TOL[dtype]
    if dtype == "float64" and op in ("gelu", "mish"):
        rtol, atol = 1e-6, 1e-6  # erf / tanh through float32
    check(op, [x], attrs, rtol=max(rtol, 1e-5 if dtype == "float32" else 0), atol=atol)


def test_softplus_accurate_in_the_tails():
    x = np.array([-80, -30, -16, -10, -1e-3, 0, 1e-3, 10, 16, 30, 80], np.float32)
    check("softplus", [x], rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_prelu_broadcast_slope(dtype):
    check("prelu", [data((2, 3, 4, 5), dtype, -5, 5), data((3, 1, 1), dtype, -2, 2)], rtol=1e-6)


def test_clip_integer():
    check("clip", [data((6, 7), "int32", -10, 10)], {"min": -3, "max": 4})


# ---- cast ---------------------------------------------------------------------------------------
CAST_DTYPES = [
    "float32",
    "float64",
    "float16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint32",
    "uint64",
    "bool",
]


@pytest.mark.parametrize("to", CAST_DTYPES)
@pytest.mark.parametrize("src", CAST_DTYPES)
def test_cast(src, to):
    if src == "bool":
        x = data((3, 21), "bool")
    elif src.startswith("float"):
        lo = 0.0 if to.startswith("uint") else -100.0
        x = data((3, 21), src, lo, 100)  # in range of every target: float -> int truncates
    else:
        x = data((3, 21), src, 0, 100)
    check("cast", [x], {"to": to})


# ---- hypothesis: random shapes ------------------------------------------------------------------
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=1, max_side=9),
    op=st.sampled_from(["add", "sub", "mul", "maximum", "less"]),
    dtype=st.sampled_from(["float32", "int32"]),
)
def test_random_broadcast_binary(shapes, op, dtype):
    a, b = (data(s, dtype, -9, 9) for s in shapes.input_shapes)
    check(op, [a, b])


@SETTINGS
@given(
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=11),
    op=st.sampled_from(["exp", "tanh", "sigmoid", "erf", "gelu", "softplus"]),
    scale=st.floats(0.1, 30),
)
def test_random_unary_transcendental(shape, op, scale):
    check(op, [data(shape, "float32", -scale, scale)], rtol=1e-5, atol=1e-6)


def test_packed_per_channel_scale_vectorizes_one_block_per_vector():
    """x + x * s with x packed in blocks of half the float32 lanes (8 of 16 on AVX-512) and s a
    per-channel (N, C/b, 1, 1, b) scale, as a squeeze-excite block leaves them: a vector holds
    one pixel's block, so the scale is a contiguous load. A vector of all the lanes spanned two
    pixels, the scale's index was no ramp and the loop ran scalar (schedule/defaults.py)."""
    from tensorir.graph.types import TensorType
    from tensorir.ops.fused import FusedBody, Step
    from tensorir.ops.kernel import op_kernel
    from tensorir.target import get_target

    half = get_target("host").vector_lanes("float32") // 2
    x = RNG.standard_normal((1, 3, 10, 10, half)).astype(np.float32)
    s = RNG.standard_normal((1, 3, 1, 1, half)).astype(np.float32)
    body = FusedBody((Step("mul", (), (0, 1)), Step("add", (), (0, 2))), 2, None)
    text = str(op_kernel("fused", [TensorType.of(x), TensorType.of(s)], {"body": body}, "host"))
    assert "in1[ramp(" in text and f", 1, {half})]" in text, text  # the scale: one block per vector
    assert f"range(0, {2 * half})" not in text, text  # no scalar loop over the lanes
    (y,) = run_op("fused", [x, s], {"body": body})
    # the product may fuse into an FMA (one rounding, not two): within an ulp of x * s
    np.testing.assert_allclose(y, x + x * s, rtol=1e-6, atol=1e-6 * np.abs(x * s).max())
