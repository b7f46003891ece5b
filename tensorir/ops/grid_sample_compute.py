"""Compute definition of grid_sample (grid_sample.py, whose formulas it shares).

One stage per spatial axis computes the source position of every output point (once, not
per channel: [N, O1..Om] floats); the output stage sums the taps' weighted input values,
each tap an index read from those positions, clamped into range (a tap outside reads 0 under
"zeros" padding by its weight's select, never memory outside X). Both stages run as fused
loops over their points, rows vectorized where the loads allow (the taps are gathers).
Positions and sums are float32 (float64 for float64 inputs).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import tensorir.ops.grid_sample  # noqa: F401  (the references register the ops first)
from tensorir.loop.ir import Expr
from tensorir.ops.elementwise_compute import const
from tensorir.ops.grid_sample import TAPS, MathOps, source, tap_index, taps
from tensorir.ops.registry import register_compute
from tensorir.ops.tensor_compute import vectorize_rows
from tensorir.schedule.schedule import Schedule
from tensorir.schedule.te import Tensor, all_, any_, call, cast, compute, max_, min_, select
from tensorir.target import Target


def te_ops(wide: str) -> MathOps:
    """MathOps on tensor expressions, positions in `wide` (float32 / float64)."""
    return MathOps(
        where=select,
        floor=lambda v: call("floor", v),
        rint=lambda v: call("round", v),
        to_int=lambda v: cast(v, "int64"),
        clip=lambda v, lo, hi: max_(min_(v, hi), lo),
        either=lambda a, b: any_(a, b),
        both=lambda a, b: all_(a, b),
        eq=lambda a, b: a.eq(b),
        to_float=lambda v: cast(v, wide),
    )


def schedule_grid_sample(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Every stage a fused loop over its points, rows vectorized where possible."""
    for st in s.stages:
        if not st.inlined and st.op.axis:
            vectorize_rows(st, target)


@register_compute("grid_sample", schedule=schedule_grid_sample)
def grid_sample_compute(
    x: Tensor, grid: Tensor, mode: str = "linear", padding_mode: str = "zeros", align_corners: int = 0
) -> Tensor:
    nsp = x.ndim - 2
    dims, points = x.shape[2:], grid.shape[:-1]
    wide = "float64" if x.dtype == "float64" else "float32"
    m = te_ops(wide)

    def position(d: int) -> Tensor:
        def body(*p: Expr) -> Expr:
            g = cast(grid[(*p, const(nsp - 1 - d, "int64"))], wide)
            return source(m, g, dims[d], mode, padding_mode, align_corners)

        return compute(points, body, name=f"grid_pos{d}")

    pos = [position(d) for d in range(nsp)]
    axes = [_tap_stages(m, pos[d], d, dims[d], mode, padding_mode, align_corners) for d in range(nsp)]

    def body(n: Expr, c: Expr, *o: Expr) -> Expr:
        total: Expr = const(0, wide)
        for combo in itertools.product(*axes):
            value = cast(x[(n, c, *(i[(n, *o)] for i, _ in combo))], wide)
            for _, w in combo:
                value = value if w is None else value * w[(n, *o)]
            total = total + value
        return cast(total, x.dtype)

    return compute((*x.shape[:2], *points[1:]), body, name="grid_sample")


def _tap_stages(
    m: MathOps, pos: Tensor, d: int, dim: int, mode: str, padding: str, align_corners: int
) -> list[tuple[Tensor, Tensor | None]]:
    """Per tap along axis d: a stage of its (clamped) index and one of its weight (0 for a
    tap outside under "zeros" padding; None when every weight is 1)."""
    out = []
    for k in range(TAPS[mode]):

        def tap(*p: Expr, k: int = k) -> tuple[Expr, Expr | None, Expr | None]:
            i, w = taps(m, pos[p], mode)[k]
            j, inside = tap_index(m, i, dim, padding, align_corners)
            return j, w, inside

        idx = compute(pos.shape, lambda *p, tap=tap: tap(*p)[0], name=f"grid_idx{d}_{k}")
        w, inside = tap(*(0 for _ in pos.shape))[1:]
        if w is None and inside is None:
            out.append((idx, None))
            continue

        def weight(*p: Expr, tap: Callable[..., tuple] = tap) -> Expr:
            _, w, inside = tap(*p)
            w = const(1, pos.dtype) if w is None else w
            return w if inside is None else select(inside, w, const(0, pos.dtype))

        out.append((idx, compute(pos.shape, weight, name=f"grid_w{d}_{k}")))
    return out
