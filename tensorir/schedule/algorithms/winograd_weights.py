"""The Winograd weight transform as a kernel: `winograd_weight_nchwc`, run at start-up.

    w: (M/ob, C/ib, 3, 3, ib, ob)      conv2d_nchwc's packed 3x3 weight
    U: (alpha, alpha, M/ob, C, ob)     U[e, f, kb, c, ki] = (G w[kb*ob + ki, c] G^T)[e, f]

the same U as `weight_transform_nchwc(w, m)` (winograd_nchwc.py), which computes it in numpy
(float64) and is this op's reference. A CPU build stores w, which is alpha^2 / 9 times
smaller than U (1.78x for m = 2, 4x for m = 4), and `tir_create` runs this kernel once to
fill the prepared-weights block the Winograd kernels read (tensorir/compiler_prepare.py), as
MNN transforms its weights when a session is created. Computed in float32 (the accumulator
type of w's dtype): U differs from the float64 reference by a rounding or two, far inside the
Winograd error (winograd.py's table). Compute stages (`winograd_weight_compute`):

    wino_weight_G          T[e, s, kb, c, ki] = sum_r G[e, r] w[kb, c/ib, r, s, c%ib, ki]
    winograd_weight_nchwc  U[e, f, kb, c, ki] = sum_s G[f, s] T[e, s, kb, c, ki]

Both are `_transform1d` passes with G's exact entries, so no multiplication by 0 or +-1 is
emitted. Schedule (`schedule_winograd_weight`): per output channel block (the parallel loop),
row e of U (unrolled: it picks G's row in T) and input channel, T's 3 vectors of ob output
channels, then U's alpha (f unrolled, picking G's row in U). U is written as alpha streams
(rows e, f of consecutive channels), not alpha^2: 1.3-3x faster than channels outside e,
most where the weights fit in cache (ResNet-18's 128 x 128 F(4x4): 0.08 vs 0.24 ms).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.registry import register_compute, register_op
from tensorir.schedule.algorithms.winograd import _transform1d, winograd_matrices
from tensorir.schedule.algorithms.winograd_nchwc import TILE_SIZES, weight_transform_nchwc

OP = "winograd_weight_nchwc"


def _infer(ins: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    if len(ins) != 1 or ins[0].ndim != 6 or ins[0].shape[2:4] != (3, 3):
        raise ShapeError(f"{OP} takes one packed 3x3 weight (M/ob, C/ib, 3, 3, ib, ob), got {ins}")
    m = int(attrs.get("m", 4))
    if m not in TILE_SIZES:
        raise ShapeError(f"{OP}: m must be one of {TILE_SIZES}, got {m}")
    mo, cb, _, _, ib, ob = ins[0].shape
    return [TensorType((m + 2, m + 2, mo, cb * ib, ob), ins[0].dtype)]


@register_op(OP, infer=_infer, pattern="opaque")
def winograd_weight_reference(w: Any, m: int = 4) -> Any:
    """numpy (float64 inside): `weight_transform_nchwc`."""
    return weight_transform_nchwc(w, int(m))


def winograd_weight_compute(w: Any, m: int = 4) -> Any:
    """winograd_weight_nchwc as tensor expressions (stages in the module docstring)."""
    from tensorir.ops.nn_compute import acc_type, load
    from tensorir.schedule.te import cast, compute

    m = int(m)
    mo, _, _, _, ib, ob = w.shape
    u_type = _infer([TensorType(w.shape, w.dtype)], {"m": m})[0]
    alpha, c = m + 2, u_type.shape[3]
    dt = acc_type(w.dtype)
    _, g, _ = winograd_matrices(m)

    def gw(e: Any, s: Any, kb: Any, ch: Any, ki: Any) -> Any:  # G w (rows)
        return _transform1d(g, e, lambda r: load(w, (kb, ch // ib, r, s, ch % ib, ki), dt), dt)

    t = compute((alpha, 3, mo, c, ob), gw, name="wino_weight_G")

    def u(e: Any, f: Any, kb: Any, ch: Any, ki: Any) -> Any:  # (G w) G^T
        return cast(_transform1d(g, f, lambda s: t[e, s, kb, ch, ki], dt), w.dtype)

    return compute(u_type.shape, u, name=OP, dtype=w.dtype)


def schedule_winograd_weight(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """Per (output channel block: parallel, row e: unrolled, input channel): T's 3 vectors,
    then U's alpha (f unrolled); the ob output channels vectorized."""
    from tensorir.ops.nn_compute import maybe_parallel, pick_vector, stage_named, work_of

    t = stage_named(s, "wino_weight_G")
    u = next(st for st in s.stages if st.is_output)
    e, f, kb, ch, ki = u.op.axis
    lanes = pick_vector(ki.extent, target.vector_lanes(t.tensor.dtype))
    kio, kiv = u.split(ki, factor=lanes)
    u.reorder(kb, e, ch, f, kio, kiv)
    u.unroll(e)
    u.unroll(f)
    u.vectorize(kiv)
    maybe_parallel(u, kb, work_of(u))
    t.compute_at(u, ch)
    *_, tki = t.op.axis
    _, tkv = t.split(tki, factor=lanes)
    t.vectorize(tkv)


register_compute(OP, schedule=schedule_winograd_weight)(winograd_weight_compute)
