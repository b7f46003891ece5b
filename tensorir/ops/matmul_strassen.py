"""One level of Strassen for a matrix product of two run-time operands: the `algorithm`
"strassen" of a `matmul` (numpy semantics, both operands at least 2-D, batch dims broadcast;
M, K, N even), as the op `matmul_strassen` (same inputs, same result).

B is not constant, so its seven operands are formed in the kernel, a fourth stage:

    strassen_b  b7[.., t, k, j] = the t-th B operand, in B's (K/2, N/2) layout  (scratch,
                                  7/4 of B; from dense_strassen.W_TERMS: B_ab = W_ba^T)
    strassen_x  x7[.., t, i, k] = the t-th A operand                           (7/4 of A)
    strassen_p  p[.., t, i, j]  = x7[.., t] @ b7[.., t]   (matmul's register-blocked schedule)
    matmul      y[.., i, j]     = the C quadrant combination of p (+ the fused epilogue)

dense_strassen's stages and schedule with these accessors. The default is dense's measured
rule counting b7's traffic too (`strassen_default(m, n, k, runtime_b=True)`, measured there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops import dense_strassen as st
from tensorir.ops.nn import _matmul_infer, matmul
from tensorir.ops.registry import register_compute, register_op

OP = "matmul_strassen"


def eligible(a_shape: Sequence[int], b_shape: Sequence[int]) -> bool:
    """Both operands at least 2-D, M, K and N even."""
    if len(a_shape) < 2 or len(b_shape) < 2:
        return False
    return all(d % 2 == 0 and d >= 2 for d in (*a_shape[-2:], b_shape[-1]))


def algorithm_choices(a_shape: Sequence[int], b_shape: Sequence[int]) -> tuple[list[str], str]:
    """(choices, default) of a matmul's `algorithm` knob on a CPU target."""
    if not eligible(a_shape, b_shape):
        return ["direct"], "direct"
    m, k = a_shape[-2:]
    default = st.strassen_default(m, b_shape[-1], k, runtime_b=True)
    return ["direct", "strassen"], "strassen" if default else "direct"


def _infer(ins: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    if len(ins) != 2 or not eligible(ins[0].shape, ins[1].shape):
        raise ShapeError(f"{OP} takes (a, b), at least 2-D with M, K, N even, got {ins}")
    return _matmul_infer(ins, attrs)


@register_op(OP, infer=_infer, pattern="opaque")
def matmul_strassen(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b (the product this kernel computes another way)."""
    return matmul(a, b)


def matmul_strassen_compute(a: Any, b: Any) -> Any:
    """The four stages of the module docstring."""
    from tensorir.ops.nn import matmul_shape
    from tensorir.ops.nn_compute import acc_type, load
    from tensorir.schedule.te import cast

    *ab, m, k = a.shape
    *bb, _, n = b.shape
    m2, k2, n2 = m // 2, k // 2, n // 2
    out = matmul_shape(a.shape, b.shape)
    dt = acc_type(a.dtype)

    def a_quad(q: st.Quad, *idx: Any) -> Any:
        *batch, i, kk = idx
        return load(a, (*batch, q[0] * m2 + i, q[1] * k2 + kk), dt)

    def b_quad(q: st.Quad, *idx: Any) -> Any:  # W_ab = B_ba^T
        *batch, kk, j = idx
        return load(b, (*batch, q[1] * k2 + kk, q[0] * n2 + j), dt)

    xs = st.operand_stage(st.A_TERMS, a_quad, (*ab, 7, m2, k2), "strassen_x")
    bs = st.operand_stage(st.W_TERMS, b_quad, (*bb, 7, k2, n2), "strassen_b", ("k", "j"))
    p = st.product_stage(xs, bs, False, out[:-2])

    def locate(*idx: Any) -> Any:
        *batch, i, j = idx
        return tuple(batch), i // m2, j // n2, i % m2, j % n2

    def finish(v: Any, *_: Any) -> Any:
        return cast(v, a.dtype)

    names = [f"b{d}" for d in range(len(out) - 2)] + ["i", "j"]
    return st.combine_stage(p, out, st.named(locate, names), finish, "matmul", a.dtype)


register_compute(OP, schedule=st.schedule_strassen)(matmul_strassen_compute)
