"""Compute definitions for softmax and log_softmax (references in nn.py).

Numerically stable, as separate stages: the row max, exp(x - max) (softmax keeps it as a
stage, read by the sum and the output), the row sum and its reciprocal, then the
normalization. float16 computes in float32. The default schedule (`schedule_rowwise`)
computes the statistics inside the output's row loop.
"""

from __future__ import annotations

from typing import Any

import tensorir.ops.nn  # noqa: F401  (the references register the ops first)
from tensorir.loop.ir import Const, Expr
from tensorir.ops.reduce_compute import acc_dtype, reduce_stage
from tensorir.ops.registry import register_compute
from tensorir.schedule.defaults import schedule_rowwise
from tensorir.schedule.te import Tensor, call, cast, compute

Index = tuple[Expr, ...]


def _row_max(x: Tensor, axis: int, name: str) -> tuple[Tensor, Any]:
    """The max over `axis` (keepdims) and the shifted input x - max in the compute dtype."""
    wide = acc_dtype(x.dtype)
    m = reduce_stage(f"{name}_max", x, (axis,), True, "max", lambda i: cast(x[i], wide))

    def shifted(i: Index) -> Expr:
        return cast(x[i], wide) - m[row(i, axis)]

    return m, shifted


def row(i: Index, axis: int) -> Index:
    """The index of i's row statistic (0 on `axis`)."""
    return (*i[:axis], Const(0), *i[axis + 1 :])


@register_compute("softmax", schedule=schedule_rowwise)
def softmax_compute(x: Tensor, axis: int = -1) -> Tensor:
    axis %= x.ndim
    _, shifted = _row_max(x, axis, "softmax")
    e = compute(x.shape, lambda *i: call("exp", shifted(i)), name="softmax_exp")
    s = reduce_stage("softmax_sum", e, (axis,), True, "sum", lambda i: e[i])
    # one divide per row, then a multiply per element, as onnxruntime's softmax does: a vector
    # divide per element costs as much as a dozen FMAs on Zen 4
    inv = compute(s.shape, lambda *i: Const(1.0, s.dtype) / s[i], name="softmax_inv")
    return compute(x.shape, lambda *i: e[i] * inv[row(i, axis)], name="softmax", dtype=x.dtype)


@register_compute("log_softmax", schedule=schedule_rowwise)
def log_softmax_compute(x: Tensor, axis: int = -1) -> Tensor:
    """x - (max + log(sum(exp(x - max)))), the row constant and the subtraction in float64:
    the code generator's reassociating float math turns (x - max) - lse into x - (max + lse),
    which in float32 would round max + lse at max's magnitude."""
    axis %= x.ndim
    m, shifted = _row_max(x, axis, "log_softmax")
    s = reduce_stage("log_softmax_sum", x, (axis,), True, "sum", lambda i: call("exp", shifted(i)))
    f64 = "float64"
    c = compute(s.shape, lambda *i: cast(m[i], f64) + call("log", cast(s[i], f64)), name="log_softmax_lse")
    return compute(x.shape, lambda *i: cast(x[i], f64) - c[row(i, axis)], name="log_softmax", dtype=x.dtype)
