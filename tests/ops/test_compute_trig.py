"""tan, asin, acos, atan and the hyperbolic functions compiled for the host, against numpy's
float64 functions, in ulp of the result dtype over their domains, edges included (+-1, 0,
infinities, NaN, out-of-domain inputs giving NaN)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.graph.types import TensorType
from tensorir.loop.ir import Call
from tensorir.loop.visitor import walk
from tensorir.ops.kernel import op_kernel, run_op

EXACT = {
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
}
EDGES = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, -1e-12]
DOMAIN = {
    "tan": (-3, 3),
    "asin": (-1.1, 1.1),
    "acos": (-1.1, 1.1),
    "atan": (-60, 60),
    "sinh": (-20, 20),
    "cosh": (-20, 20),
    "asinh": (-1e3, 1e3),
    "acosh": (0.5, 1e3),
    "atanh": (-1.1, 1.1),
}
# max ulp measured here (float64 tan goes through float32 sin / cos, as sin / cos do)
MAX_ULP = {"float32": 4, "float16": 1, "float64": 80}


def ulp_error(got: np.ndarray, x: np.ndarray, op: str) -> float:
    with np.errstate(all="ignore"):
        exact = EXACT[op](x.astype(np.float64))
        want = exact.astype(x.dtype)
    assert np.array_equal(np.isnan(got), np.isnan(want)), op
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=op)
    fin = np.isfinite(want)
    err = np.abs(got[fin].astype(np.float64) - exact[fin]) / np.spacing(np.abs(want[fin])).astype(np.float64)
    return float(err.max())


# float64 tan is float32 sin / cos: checked by test_float64_tan_through_float32 instead
CASES = [
    (op, dt)
    for op in sorted(EXACT)
    for dt in ("float32", "float16", "float64")
    if (op, dt) != ("tan", "float64")
]


@pytest.mark.parametrize(("op", "dtype"), CASES)
def test_accuracy(op: str, dtype: str) -> None:
    lo, hi = DOMAIN[op]
    x = np.concatenate([np.linspace(lo, hi, 4001), EDGES]).astype(dtype)
    (got,) = run_op(op, [x], {})
    assert got.dtype == x.dtype
    assert ulp_error(got, x, op) <= MAX_ULP[dtype]


def test_float64_tan_through_float32() -> None:
    x = np.linspace(-1.5, 1.5, 1001)
    (got,) = run_op("tan", [x], {})
    np.testing.assert_allclose(got, np.tan(x), rtol=1e-6)


@pytest.mark.parametrize(
    ("op", "calls"),
    [("atan", {"abs"}), ("asin", {"abs", "sqrt"}), ("sinh", {"abs", "exp"}), ("atanh", {"abs", "log"})],
)
def test_kernel_is_one_vector_loop_of_known_math(op: str, calls: set[str]) -> None:
    """One vectorized loop calling only the code generator's own math (no libm atan, ...)."""
    func = op_kernel(op, [TensorType((64,), "float32")], {})
    text = str(func)
    assert text.count("for ") == 1 and "ramp(" in text, text
    assert {n.name for n in walk(func.body) if isinstance(n, Call)} == calls
