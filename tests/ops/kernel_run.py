"""Shared by the kernel tests: run a built host kernel on numpy arrays, compare relatively."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.backends import get_backend
from tensorir.ops.kernel import scratch_arrays
from tensorir.target import get_target

HOST = get_target("host")


def run_built(func: Any, spec: Any, ins: Sequence[np.ndarray], out_shape: tuple) -> np.ndarray:
    """The kernel's float32 output: the inputs as given, each constant one through the
    algorithm's compile-time transform (`spec.transforms`), and its scratch buffers."""
    args = [spec.transforms[i](a) if i in spec.transforms else a for i, a in enumerate(ins)]
    out = np.zeros(out_shape, np.float32)
    get_backend(HOST).jit(func, HOST)(*args, out, *scratch_arrays(func))
    return out


def assert_relative(got: np.ndarray, ref: np.ndarray, tol: float) -> None:
    """max |got - ref| / max |ref| < tol."""
    err = float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))
    assert err < tol, f"relative error {err}"
