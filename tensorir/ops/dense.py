"""dense: the canonical fully-connected op, y = x @ w.T, with row-major (N, K) weights.

Graph passes rewrite `gemm` (and `matmul` with a constant 2-D right operand) into
`dense`, as TVM's `nn.dense` does: x is (M, K), w is (N, K), the result is (M, N).
Bias, alpha/beta scaling and operand transposes are separate ops (or folded into
the weights) so that a later fusion pass sees one anchor op plus an epilogue.

The reference computes in float32 (float64 stays float64) and returns the input
dtype; integer operands keep integer arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.conv import acc_dtype
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op


def _dense_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    if len(ins) != 2:
        raise ShapeError(f"dense takes 2 inputs (x, w), got {len(ins)}")
    x, w = ins
    if x.ndim != 2 or w.ndim != 2:
        raise ShapeError(f"dense operands must be matrices x: (M, K) and w: (N, K), got {x} and {w}")
    if x.shape[1] != w.shape[1]:
        raise ShapeError(f"dense inner dims differ: x is {x}, w is {w} (w is (N, K), row-major)")
    if x.dtype != w.dtype:
        raise ShapeError(f"dense inputs must share one dtype, got {x} and {w}")
    return [TensorType((x.shape[0], w.shape[0]), x.dtype)]


def _dense_flops(ins: Types, attrs: Mapping[str, Any], out: TensorType) -> int:
    return 2 * out.size * ins[0].shape[-1]


@register_op("dense", infer=_dense_infer, pattern="anchor", tunable=True, flops=_dense_flops, gpu="gemm")
def dense(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """y[m, n] = sum_k x[m, k] * w[n, k]."""
    if np.issubdtype(x.dtype, np.integer):
        return np.matmul(x, w.T).astype(x.dtype)
    ct = acc_dtype(x.dtype)
    return np.matmul(x.astype(ct, copy=False), w.astype(ct, copy=False).T).astype(x.dtype)
