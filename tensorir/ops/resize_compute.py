"""Compute definition for resize (reference in resize.py): nearest / linear / cubic.

Every mode of the reference is covered: all coordinate transformation modes, every
nearest_mode, cubic_coeff_a, exclude_outside, extrapolation_value (tf_crop_and_resize)
and antialias.

The per-axis sampling plan is static, so it is computed at compile time with the
reference's own helpers (`source_coords`, `nearest_index`, `tap_window`) in float64 and
baked into the kernel as 1-D tables over the output index: left[y] (the first tap, or
nearest's sample), ratio[y] (the coordinate's distance past it) and outside[y]
(extrapolation). A table is a stage whose body is `column_expr`: an affine or periodic
formula when one fits (upsampling by 2: `y % 2` patterns), else a balanced select tree
over runs of equal values. Nearest therefore picks exactly the reference's samples,
rounding ties included. The weights are computed once per call from ratio with the
reference's kernel formulas (`kernel_weight`), masked and normalized for exclude_outside
and antialias, into weight[y, t]:

    nearest:  out[i] = x[left0[i0], left1[i1], ...]
    linear / cubic (taps t_k on the resized axes, in float64):
        acc[i] = sum_t  W0[i0, t0] * W1[i1, t1] * ... * x[left0[i0] + s0 + t0, ...]  (clamped)
        out[i] = saturate(acc[i])          (round half to even and clip for integers)
    either way, out[i] = extrapolation_value where any resized axis samples outside.

The reference resizes one axis at a time; summing the tensor product of the per-axis
weights instead is the same interpolation, equal up to float64 rounding (the linear and
cubic weights sum to one, so extrapolated values pass through later axes unchanged).
Tables, weights and the accumulator's workspace cost O(sum of n_out * taps), not the
output size. The accumulator is computed at each output element (a one-element local
buffer), its tap loops unrolled when there are at most 64 tap combinations. Loads are
data-dependent gathers, so the loops stay scalar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorir.loop.ir import Const, Expr
from tensorir.ops import resize as ref
from tensorir.ops.registry import register_compute
from tensorir.schedule.defaults import PARALLEL_MIN_WORK
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.te import (
    Tensor,
    all_,
    any_,
    call,
    cast,
    compute,
    if_then_else,
    max_,
    min_,
    reduce_axis,
    sum_,
)
from tensorir.target import Target

MAX_UNROLLED_TAPS = 64
MAX_PERIOD = 64  # longest repeating pattern a table is encoded by


# ---- static tables ----------------------------------------------------------------------
def column_expr(v: np.ndarray, y: Expr, dtype: str) -> Expr:
    """An expression equal to v[y] for 0 <= y < len(v): v[y % p] + (y // p) * step for the
    shortest period p <= MAX_PERIOD that fits (integers may step; floats must repeat to
    1e-12, so their values can move by that much), else a select tree over runs."""
    n = len(v)
    if dtype != "bool":
        for p in range(1, min(MAX_PERIOD, n // 2) + 1):
            d = v[p:] - v[:-p]
            step = int(d[0]) if dtype == "int64" else 0
            if np.all(d == step) if dtype == "int64" else np.all(np.abs(d) <= 1e-12):
                base = _runs(v[:p], y % p, dtype) if p > 1 else Const(v[0].item(), dtype)
                return (y // p if p > 1 else y) * step + base if step else base
    return _runs(v, y, dtype)


def _runs(v: np.ndarray, y: Expr, dtype: str) -> Expr:
    vals = v.tolist()
    starts = [k for k in range(len(vals)) if k == 0 or vals[k] != vals[k - 1]]
    return _tree([vals[k] for k in starts], starts, 0, len(starts), y, dtype)


def _tree(vals: list[Any], starts: list[int], lo: int, hi: int, y: Expr, dtype: str) -> Expr:
    """vals[k] for the run k (starting at starts[k]) that holds y, k in [lo, hi)."""
    if hi - lo == 1:
        return Const(vals[lo], dtype)
    mid = (lo + hi) // 2
    low, high = _tree(vals, starts, lo, mid, y, dtype), _tree(vals, starts, mid, hi, y, dtype)
    return if_then_else(y < starts[mid], low, high)


def table(values: np.ndarray, dtype: str, name: str, clip: int | None = None) -> Tensor:
    """A computed 1-D tensor holding `values` (by `column_expr`); `clip` clamps the values
    into [0, clip] in the kernel (clamping before encoding would break their periods)."""

    def body(y: Expr) -> Expr:
        e = column_expr(values, y, dtype)
        if clip is not None and (values.min() < 0 or values.max() > clip):
            e = min_(max_(e, 0), clip)
        return e

    return compute(values.shape, body, name=name, dtype=dtype)


# ---- per-axis sampling plans --------------------------------------------------------------
@dataclass
class AxisPlan:
    """How one resized axis samples the input, from the reference's arithmetic: output y
    reads input left[y] + start + t for taps t in [0, taps) (nearest: left[y] alone) with
    weight kernel((start + t - ratio[y]) * s); outside[y] flags extrapolation."""

    axis: int
    n_in: int
    left: np.ndarray  # int64 [n_out], before clamping into the input
    ratio: np.ndarray | None  # float64 [n_out]; None for nearest
    start: int = 0
    taps: int = 1
    s: float = 1.0  # kernel scale: min(scale, 1) with antialias, else 1
    outside: np.ndarray | None = None  # bool [n_out] with tf_crop_and_resize


def axis_plan(axis: int, n_in: int, n_out: int, scale: float, roi: Any, at: dict[str, Any]) -> AxisPlan:
    """One axis of the reference's `_resize_axis` / `interp_weights`, kept as arrays."""
    x = ref.source_coords(at["coordinate_transformation_mode"], n_out, n_in, scale, roi)
    outside = ((x < 0) | (x > n_in - 1)) if roi is not None else None
    if at["mode"] == "nearest":
        return AxisPlan(axis, n_in, ref.nearest_index(x, at["nearest_mode"], scale), None, outside=outside)
    s = min(scale, 1.0) if at["antialias"] else 1.0
    support = 1 if at["mode"] == "linear" else 2
    start = int(np.floor(-support / s) + 1)
    left, ratio = ref.tap_window(x, 2 - 2 * start)
    return AxisPlan(axis, n_in, left, ratio, start, 2 - 2 * start, s, outside)


def plans(shape: Sequence[int], attrs: dict[str, Any]) -> list[AxisPlan]:
    """Plans of the axes the reference actually resizes (it skips identity axes)."""
    r = len(shape)
    crop = attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
    roi, out = attrs["roi"], []
    for axis in range(r):
        axis_roi = (float(roi[axis]), float(roi[axis + r])) if crop else None
        n_in, n_out, scale = shape[axis], int(attrs["sizes"][axis]), float(attrs["scales"][axis])
        if not ref._is_identity(n_in, n_out, scale, axis_roi):
            out.append(axis_plan(axis, n_in, n_out, scale, axis_roi, attrs))
    return out


# ---- schedule ----------------------------------------------------------------------------
def schedule_resize(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Tables at the root; the accumulator at each output element, its taps unrolled when
    few; the output's leading axes fused into one loop (parallel when the work is large)
    around the last axis."""
    out = s[outputs[0]]
    axes = list(out.op.axis)
    work = math.prod(out.tensor.shape)
    for st in s.stages:
        if st.name == "resize_acc":
            _accumulator(st, out, axes[-1])
            work *= math.prod(r.extent for r in st.op.reduce_axis)
    outer = out.fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
    if work >= PARALLEL_MIN_WORK and outer.extent > 1:
        out.parallel(outer)


def _accumulator(acc: Stage, out: Stage, at: Any) -> None:
    acc.compute_at(out, at)
    if math.prod(r.extent for r in acc.op.reduce_axis) <= MAX_UNROLLED_TAPS:
        for r in acc.op.reduce_axis:
            acc.unroll(r)


# ---- compute -----------------------------------------------------------------------------
def saturate(v: Expr, dtype: str) -> Expr:
    """float64 -> dtype as the reference's `_saturate`: round half to even and clip for
    integers, != 0 for bool, a plain cast for floats."""
    if dtype == "bool":
        return v.ne(0.0)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(np.dtype(dtype))
        clipped = min_(max_(call("round", v), float(info.min)), float(info.max))
        return cast(clipped, dtype)
    return cast(v, dtype)


def _extrapolate(value: Expr, i: Sequence[Expr], outs: list[tuple[int, Tensor]], fill: float) -> Expr:
    if not outs:
        return value
    flag = any_(*(o[i[axis]] for axis, o in outs))
    const = Const(bool(fill), "bool") if value.dtype == "bool" else cast(fill, value.dtype)
    return if_then_else(flag, const, value)


def kernel_weight(d: Expr, mode: str, a: float) -> Expr:
    """The reference's `_kernel`: linear tent or Keys cubic with coefficient a."""
    d = call("abs", d)
    if mode == "linear":
        return min_(max_(1.0 - d, 0.0), 1.0)
    near = ((a + 2) * d - (a + 3)) * d * d + 1.0
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return if_then_else(d <= 1.0, near, if_then_else(d < 2.0, far, 0.0))


@dataclass
class AxisTables:
    plan: AxisPlan
    left: Tensor
    weight: Tensor | None = None

    def index(self, y: Expr, t: Expr | int = 0) -> Expr:
        """The input index tap t of output y reads, clamped into the input."""
        p = self.plan
        if p.ratio is None:  # nearest: its table is clamped already
            return self.left[y]
        e = self.left[y] + (t + p.start)
        if p.left.min() + p.start < 0 or p.left.max() + p.start + p.taps > p.n_in:
            e = min_(max_(e, 0), p.n_in - 1)
        return e


def _weights(p: AxisPlan, left: Tensor, at: dict[str, Any]) -> Tensor:
    """weight[y, t] as `interp_weights` and `_resize_axis` make it: the kernel at the tap,
    zero outside the input with exclude_outside, normalized with antialias or exclude_outside."""
    ratio = table(p.ratio, "float64", f"resize_ratio{p.axis}")
    exclude = bool(at["exclude_outside"])

    def raw(y: Expr, t: Expr) -> Expr:
        d = cast(t + p.start, "float64") - ratio[y]
        w = kernel_weight(d * p.s if p.s != 1.0 else d, at["mode"], at["cubic_coeff_a"])
        if not exclude:
            return w
        k = left[y] + (t + p.start)
        return if_then_else(all_(k >= 0, k < p.n_in), w, 0.0)

    shape = (len(p.left), p.taps)
    if not (exclude or at["antialias"]):
        return compute(shape, raw, name=f"resize_weight{p.axis}")
    k = compute(shape, raw, name=f"resize_kernel{p.axis}")

    def body(y: Expr, t: Expr) -> Expr:
        total = k[y, 0]
        for j in range(1, p.taps):
            total = total + k[y, j]
        return if_then_else(total.eq(0.0), 0.0, k[y, t] / total)

    return compute((len(p.left), p.taps), body, name=f"resize_weight{p.axis}")


def _tables(ps: list[AxisPlan], at: dict[str, Any]) -> tuple[list[AxisTables], list[tuple[int, Tensor]]]:
    tables = []
    for p in ps:
        clip = p.n_in - 1 if p.ratio is None else None  # nearest clamps its table
        left = table(p.left, "int64", f"resize_left{p.axis}", clip=clip)
        tables.append(AxisTables(p, left, None if p.ratio is None else _weights(p, left, at)))
    outside = [
        (p.axis, table(p.outside, "bool", f"resize_outside{p.axis}")) for p in ps if p.outside is not None
    ]
    return tables, outside


@register_compute("resize", schedule=schedule_resize)
def resize_compute(x: Tensor, **attrs: Any) -> Tensor:
    at = {**_DEFAULTS, **attrs}
    shape = tuple(int(s) for s in at["sizes"])
    tables, outside = _tables(plans(x.shape, at), at)
    fill = float(at["extrapolation_value"])
    if at["mode"] == "nearest" or not tables:

        def gather(*i: Expr) -> Expr:
            src = list(i)
            for tb in tables:
                src[tb.plan.axis] = tb.index(i[tb.plan.axis])
            return _extrapolate(x[tuple(src)], i, outside, fill)

        return compute(shape, gather, name="resize")
    taps = [reduce_axis(tb.plan.taps, f"t{tb.plan.axis}") for tb in tables]

    def accumulate(*i: Expr) -> Expr:
        src, w = list(i), None
        for tb, t in zip(tables, taps, strict=True):
            y = i[tb.plan.axis]
            src[tb.plan.axis] = tb.index(y, t)
            w = tb.weight[y, t] if w is None else w * tb.weight[y, t]
        return sum_(w * cast(x[tuple(src)], "float64"), axis=taps)

    acc = compute(shape, accumulate, name="resize_acc")
    return compute(shape, lambda *i: _extrapolate(saturate(acc[i], x.dtype), i, outside, fill), name="resize")


_DEFAULTS = {
    "roi": (),
    "mode": "nearest",
    "coordinate_transformation_mode": "half_pixel",
    "nearest_mode": "round_prefer_floor",
    "cubic_coeff_a": -0.75,
    "exclude_outside": 0,
    "extrapolation_value": 0.0,
    "antialias": 0,
}
