"""grid_sample (ONNX GridSample, opset 16+): X [N, C, D1..Dk] sampled at the normalized
positions of grid [N, O1..Om, k] (grid[..., 0] indexes the last axis), out [N, C, O1..Om].

Per axis: the position is mapped to pixel units (align_corners: -1 and 1 are the centers of
the edge pixels, else their outer edges), rounded half to even for "nearest", then brought
inside by the padding mode ("border" clamps, "reflection" reflects off the edges, "zeros"
leaves it); "linear" / "cubic" (Keys, alpha -0.75) weigh 2 / 4 taps per axis around it, a
tap outside the input reading 0 ("zeros"), the edge ("border") or its reflection. This is
ONNX's reference (after PyTorch), except that "cubic" with "border" clamps each tap and not
the position, as onnxruntime and PyTorch do (no node test covers it). The math is written
once over `MathOps`: the numpy reference and the compute (grid_sample_compute.py) share it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op

MODES = ("nearest", "linear", "cubic")
PADDINGS = ("zeros", "border", "reflection")
CUBIC_ALPHA = -0.75
TAPS = {"nearest": 1, "linear": 2, "cubic": 4}  # per axis


@dataclass(frozen=True)
class MathOps:
    """What the shared formulas need beyond + - * / and comparisons."""

    where: Callable[[Any, Any, Any], Any]
    floor: Callable[[Any], Any]
    rint: Callable[[Any], Any]  # to nearest, ties to even
    to_int: Callable[[Any], Any]  # toward zero
    clip: Callable[[Any, float, float], Any]
    either: Callable[[Any, Any], Any]
    both: Callable[[Any, Any], Any]
    eq: Callable[[Any, Any], Any]
    to_float: Callable[[Any], Any]


NUMPY = MathOps(
    where=np.where,
    floor=np.floor,
    rint=np.rint,
    to_int=lambda v: np.trunc(v).astype(np.int64),
    clip=np.clip,
    either=np.logical_or,
    both=np.logical_and,
    eq=np.equal,
    to_float=lambda v: np.asarray(v, np.float64),
)


def _edges(dim: int, align_corners: int) -> tuple[float, float]:
    return (0.0, dim - 1.0) if align_corners else (-0.5, dim - 0.5)


def reflect(m: MathOps, v: Any, lo: float, hi: float) -> Any:
    """v reflected off lo and hi until inside (as often as it takes)."""
    span = hi - lo
    if span <= 0:
        return v * 0 + lo
    below, dist = v < lo, m.where(v < lo, lo - v, v - hi)
    n = m.floor(dist / span)
    r = dist - n * span
    even = m.eq(n - 2 * m.floor(n / 2), 0)
    from_lo, from_hi = lo + r, hi - r
    inside = m.both(v >= lo, v <= hi)
    return m.where(inside, v, m.where(m.eq(below, even), from_lo, from_hi))


def source(m: MathOps, g: Any, dim: int, mode: str, padding: str, align_corners: int) -> Any:
    """The position (pixel units, float) along an axis of size `dim` for grid value g."""
    v = (g + 1) / 2 * (dim - 1) if align_corners else ((g + 1) * dim - 1) / 2
    if mode == "nearest":
        v = m.rint(v)
    lo, hi = _edges(dim, align_corners)
    if padding == "border" and mode != "cubic":  # cubic: each tap is clamped instead
        return m.where(m.either(v < lo, v > hi), m.clip(v, 0, dim - 1), v)
    if padding == "reflection":
        return reflect(m, v, lo, hi)
    return v


def cubic_weights(t: Any) -> list[Any]:
    """Keys' cubic convolution weights of the taps at -1, 0, 1, 2 for offset t in [0, 1)."""
    a = CUBIC_ALPHA

    def far(x: Any) -> Any:  # 1 <= |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    def near(x: Any) -> Any:  # |x| < 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def taps(m: MathOps, v: Any, mode: str) -> list[tuple[Any, Any]]:
    """(integer tap position, weight) pairs for position v."""
    if mode == "nearest":
        return [(m.to_int(v), None)]
    base = m.floor(v)
    t = v - base
    if mode == "linear":
        return [(m.to_int(base), 1 - t), (m.to_int(base) + 1, t)]
    return [(m.to_int(base) + (k - 1), w) for k, w in enumerate(cubic_weights(t))]


def tap_index(m: MathOps, i: Any, dim: int, padding: str, align_corners: int) -> tuple[Any, Any]:
    """(in-range index, whether the tap is inside) for an integer tap position i."""
    inside = m.both(i >= 0, i < dim)
    if padding == "reflection":
        lo, hi = _edges(dim, align_corners)
        i = m.to_int(reflect(m, m.to_float(i), lo, hi))
        inside = None
    elif padding == "border":
        inside = None
    return m.clip(i, 0, dim - 1), inside


def _infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x, grid = ins
    if attrs.get("mode", "linear") not in MODES or attrs.get("padding_mode", "zeros") not in PADDINGS:
        raise ShapeError(f"grid_sample: mode must be in {MODES}, padding_mode in {PADDINGS}")
    nsp = x.ndim - 2
    if nsp < 1 or grid.ndim != nsp + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != nsp:
        raise ShapeError(f"grid_sample: grid {grid} does not match input {x}")
    return [TensorType((*x.shape[:2], *grid.shape[1:-1]), x.dtype)]


@register_op("grid_sample", infer=_infer, pattern="opaque")
def grid_sample(
    x: np.ndarray, grid: np.ndarray, mode: str = "linear", padding_mode: str = "zeros", align_corners: int = 0
) -> np.ndarray:
    nsp = x.ndim - 2
    dims = x.shape[2:]
    g = grid.astype(np.float64)
    pos = [source(NUMPY, g[..., nsp - 1 - d], dims[d], mode, padding_mode, align_corners) for d in range(nsp)]
    lead = np.arange(x.shape[0]).reshape(-1, *(1,) * (grid.ndim - 2))
    out = np.zeros((*grid.shape[:-1], x.shape[1]), np.float64)
    for combo in itertools.product(*(taps(NUMPY, p, mode) for p in pos)):
        weight, idx, ok = 1.0, [], True
        for d, (i, w) in enumerate(combo):
            j, inside = tap_index(NUMPY, i, dims[d], padding_mode, align_corners)
            idx.append(j)
            weight = weight if w is None else weight * w
            ok = ok if inside is None else ok & inside
        vals = x[(lead, slice(None), *idx)].astype(np.float64)  # [N, O.., C]
        out += vals * np.expand_dims(np.where(ok, weight, 0.0), -1)
    return np.moveaxis(out, -1, 1).astype(x.dtype)
