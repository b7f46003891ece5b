"""Compute definitions for batch_norm (inference and training), instance_norm and layer_norm
(references in norm.py).

Statistics are separate stages (sum, mean, centered sum of squares, 1/sqrt(var + eps)),
two-pass like the references; float16 computes in float32. batch_norm (inference) is
elementwise with scale/sqrt(var + eps) precomputed per channel; instance_norm and layer_norm
use `schedule_rowwise` (statistics computed inside the output's row loop).
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorir.ops.norm  # noqa: F401  (the references register the ops first)
from tensorir.loop.ir import Const, Expr
from tensorir.ops.elementwise_compute import const
from tensorir.ops.reduce_compute import acc_dtype, reduce_stage
from tensorir.ops.registry import register_compute
from tensorir.schedule.defaults import schedule_injective_params, schedule_rowwise
from tensorir.schedule.te import Tensor, call, cast, compute

Index = tuple[Expr, ...]


def _param(p: Tensor, rest: Index, dtype: str) -> Expr:
    """A per-channel parameter ([C] or x.shape[1:]) at x-index (n, *rest), in `dtype`."""
    return cast(p[rest[:1]] if p.ndim == 1 else p[rest], dtype)


def _stat(t: Tensor, i: Index, axes: Sequence[int]) -> Expr:
    """Keepdims statistic t at x-index i (0 on the reduced axes)."""
    return t[tuple(Const(0) if d in axes else e for d, e in enumerate(i))]


def moments(x: Tensor, axes: Sequence[int], wide: str, name: str) -> tuple[Tensor, Tensor]:
    """(mean, population variance) over `axes`, keepdims, in `wide`, two-pass."""
    n = 1
    for a in axes:
        n *= x.shape[a]
    s1 = reduce_stage(f"{name}_sum", x, axes, True, "sum", lambda i: cast(x[i], wide))
    mean = compute(s1.shape, lambda *i: s1[i] / const(n, wide), name=f"{name}_mean")

    def sq(i: Index) -> Expr:
        d = cast(x[i], wide) - _stat(mean, i, axes)
        return d * d

    s2 = reduce_stage(f"{name}_sqsum", x, axes, True, "sum", sq)
    var = compute(s2.shape, lambda *i: s2[i] / const(n, wide), name=f"{name}_var")
    return mean, var


# ---- batch_norm ------------------------------------------------------------------------
@register_compute("batch_norm", schedule=schedule_injective_params)
def batch_norm_compute(
    x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, epsilon: float = 1e-5
) -> Tensor:
    """y = (x - mean) * (scale / sqrt(var + eps)) + bias, the factor computed per channel."""
    wide = acc_dtype(x.dtype)
    pshape = (x.shape[1],) if scale.ndim == 1 and var.ndim == 1 else x.shape[1:]

    def factor(*c: Expr) -> Expr:
        return _param(scale, c, wide) / call("sqrt", _param(var, c, wide) + const(epsilon, wide))

    inv = compute(pshape, factor, name="batch_norm_factor")

    def body(*i: Expr) -> Expr:
        f = inv[i[1:2]] if len(pshape) == 1 else inv[i[1:]]
        return (cast(x[i], wide) - _param(mean, i[1:], wide)) * f + _param(bias, i[1:], wide)

    return compute(x.shape, body, name="batch_norm", dtype=x.dtype)


@register_compute("batch_norm_training", schedule=schedule_rowwise)
def batch_norm_training_compute(
    x: Tensor,
    scale: Tensor,
    bias: Tensor,
    mean: Tensor,
    var: Tensor,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
) -> tuple[Tensor, Tensor, Tensor]:
    """Normalize with the batch statistics; running stats = old * momentum + batch * (1 - momentum)."""
    wide = acc_dtype(x.dtype)
    axes = (0, *range(2, x.ndim)) if mean.ndim == 1 else (0,)
    bmean, bvar = moments(x, axes, wide, "bn")
    inv = compute(
        bvar.shape, lambda *i: const(1, wide) / call("sqrt", bvar[i] + const(epsilon, wide)), name="bn_inv"
    )

    def y(*i: Expr) -> Expr:
        v = (cast(x[i], wide) - _stat(bmean, i, axes)) * _stat(inv, i, axes)
        return v * _param(scale, i[1:], wide) + _param(bias, i[1:], wide)

    def running(old: Tensor, batch: Tensor, name: str) -> Tensor:
        def body(*c: Expr) -> Expr:
            b = (
                batch[(Const(0), *c)]
                if mean.ndim != 1
                else batch[(Const(0), c[0], *(Const(0),) * (x.ndim - 2))]
            )
            return cast(old[c], wide) * const(momentum, wide) + b * const(1 - momentum, wide)

        return compute(old.shape, body, name=name, dtype=old.dtype)

    out = compute(x.shape, y, name="batch_norm_training", dtype=x.dtype)
    return out, running(mean, bmean, "bn_running_mean"), running(var, bvar, "bn_running_var")


# ---- instance_norm / layer_norm ------------------------------------------------------------
@register_compute("instance_norm", schedule=schedule_rowwise)
def instance_norm_compute(x: Tensor, scale: Tensor, bias: Tensor, epsilon: float = 1e-5) -> Tensor:
    wide = acc_dtype(x.dtype)
    axes = tuple(range(2, x.ndim))
    mean, var = moments(x, axes, wide, "in")
    inv = compute(
        var.shape, lambda *i: const(1, wide) / call("sqrt", var[i] + const(epsilon, wide)), name="in_inv"
    )

    def body(*i: Expr) -> Expr:
        v = (cast(x[i], wide) - _stat(mean, i, axes)) * _stat(inv, i, axes)
        return v * cast(scale[i[1:2]], wide) + cast(bias[i[1:2]], wide)

    return compute(x.shape, body, name="instance_norm", dtype=x.dtype)


@register_compute("layer_norm", schedule=schedule_rowwise)
def layer_norm_compute(
    x: Tensor,
    scale: Tensor,
    bias: Tensor | None = None,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: str = "float32",
) -> tuple[Tensor, Tensor, Tensor]:
    """Outputs Y, Mean, InvStdDev; statistics in `stash_type` (sums in float32 at least)."""
    st = stash_type
    axes = tuple(range(axis % x.ndim, x.ndim))
    wide = acc_dtype(st)
    n = 1
    for a in axes:
        n *= x.shape[a]
    s1 = reduce_stage("ln_sum", x, axes, True, "sum", lambda i: cast(x[i], wide))
    mean = compute(s1.shape, lambda *i: cast(s1[i] / const(n, wide), st), name="ln_mean")

    def sq(i: Index) -> Expr:
        d = cast(cast(x[i], st) - _stat(mean, i, axes), wide)
        return d * d

    s2 = reduce_stage("ln_sqsum", x, axes, True, "sum", sq)

    def inv_std(*i: Expr) -> Expr:
        var = cast(s2[i] / const(n, wide), st)
        return const(1, st) / call("sqrt", var + const(epsilon, st))

    inv = compute(s2.shape, inv_std, name="ln_inv_std")

    def y(*i: Expr) -> Expr:
        v = (cast(x[i], st) - _stat(mean, i, axes)) * _stat(inv, i, axes) * cast(scale.bcast[i], st)
        return v if bias is None else v + cast(bias.bcast[i], st)

    return compute(x.shape, y, name="layer_norm", dtype=x.dtype), mean, inv
