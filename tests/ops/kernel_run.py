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


def dense_operands(m: int, k: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x (m, k) and a dense's weight w (n, k), standard normal float32."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)


def run_const_weight(
    op: str,
    ins: Sequence[np.ndarray],
    attrs: dict,
    out_shape: tuple,
    kernel_op: str,
    config: dict | None = None,
) -> np.ndarray:
    """Build `op` with input 1 a constant (a dense's weight, alone or as a fused body's first
    step), check that it became `kernel_op`, and run it (run_built)."""
    from tensorir.graph.types import TensorType
    from tensorir.ops.kernel import build_kernel

    types = [TensorType(a.shape) for a in ins]
    func, spec = build_kernel(op, types, attrs, HOST, config, const_args=frozenset({1}))
    assert spec.op == kernel_op or spec.attrs["body"].steps[0].op == kernel_op
    return run_built(func, spec, ins, out_shape)
