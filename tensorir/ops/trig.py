"""Inverse trigonometric and hyperbolic functions: tan, asin, acos, atan, sinh, cosh, asinh,
acosh, atanh (ONNX Tan, Asin, ...). Elementwise, float inputs, the input dtype out; the
compute definitions (trig_compute.py) build them from exp / log / sqrt / sin / cos and
polynomials, so the generated code stays libm-free.

Out-of-domain inputs give NaN as numpy does (asin(2), acosh(0.5), atanh(2)).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tensorir.ops.elementwise import EW
from tensorir.ops.infer import same_as
from tensorir.ops.registry import register_op

# computed in float64 (gpu=None: not every OpenCL device has doubles)
HYPERBOLIC = {
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
}
TRIGONOMETRIC = {"tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan}


def _reference(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    def ref(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(x)).astype(x.dtype, copy=False)

    return ref


for _name, _fn in TRIGONOMETRIC.items():
    register_op(_name, infer=same_as(0), **EW)(_reference(_fn))
for _name, _fn in HYPERBOLIC.items():
    register_op(_name, infer=same_as(0), pattern="elementwise")(_reference(_fn))
