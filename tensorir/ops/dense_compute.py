"""Compute definition of `dense` (x: (M, K) @ w: (N, K)^T, the canonical form of gemm and of
matmul by a constant): the register-blocked matrix product of matmul_compute.py with the
weights already in the (N, K) layout its `bt` stage wants."""

from __future__ import annotations

import tensorir.ops.dense  # noqa: F401  (the reference registers the op first)
from tensorir.ops.matmul_compute import matmul_parts, schedule_matmul
from tensorir.ops.nn_compute import load
from tensorir.ops.registry import register_compute
from tensorir.schedule.te import Tensor, compute


@register_compute("dense", schedule=schedule_matmul)
def dense_compute(x: Tensor, w: Tensor) -> Tensor:
    acc, _ = matmul_parts(x, w, False, True, "dense", ())
    return compute(acc.shape, lambda i, j: load(acc, (i, j), x.dtype), name="dense")
