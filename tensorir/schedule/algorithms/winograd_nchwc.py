"""Winograd F(m x m, 3 x 3) on packed NCHW[x]c activations: `conv2d_winograd_nchwc`.

The layout pass turns every 2-D conv into `conv2d_nchwc` on packed activations; this op is
its Winograd counterpart for 3x3, stride 1, dilation 1, one group, so a compiled model can
use Winograd without unpacking (the algorithm, matrices and error analysis are winograd.py's):

    x: (N, C/ib, H, W, ib)                the packed input
    U: (alpha, alpha, M/ob, C, ob)        U[e, f, kb, c, ki] = (G w[kb*ob + ki, c] G^T)[e, f],
                                          alpha = m + 2: `weight_transform_nchwc(w_packed, m)`
                                          of conv2d_nchwc's packed weight, made at compile time
    b: (M/ob, ob)                         the packed bias (optional)
    y: (N, M/ob, OH, OW, ob)              = conv2d_nchwc(x, w_packed, b, pads=pads)

Attributes: `pads` (4 ints), `m` (2, 4 or 6). U carries the output channel block ob (its
last axis: one GEMM operand row per (tile, input channel) is ob contiguous weights, the
vector the register block broadcasts against); ib is x's. Reference:
`winograd_nchwc_reference` (numpy, unpacks and runs winograd.py's reference). Tiles are
numbered t = th * TW + tw (TH x TW tiles per image), so the GEMM's register blocks run
across tile rows on small maps. Compute stages (`winograd_nchwc_compute`):

    wino_nchwc_pad  xp[n, cb, h, w, ci]      packed, zero padded to whole tiles (root)
    wino_nchwc_Bd   T[e, b, n, t, c]         BT d, at V's (tile, channel vector) loop
    wino_nchwc_V    V[e, f, n, t, c]         T B (root; channels vectorized)
    wino_nchwc_acc  M[e, f, n, t, k]         alpha^2 GEMMs over c, per block of tiles x k
    wino_nchwc_AM   Z[i, f, n, t, k]         AT M
    wino_nchwc_Yt   Yt[n, t, i, j, k]        Z A (+ bias)
    conv2d_winograd_nchwc  y[n, kb, h, w, ki]  packed output (crops partial tiles); fused
                                             elementwise epilogues inline here

The schedule (`schedule_winograd_nchwc`) computes Yt, Z and the GEMM per (image, output
channel block, block of tile rows) of y — the parallel loop — with the output transform
and the epilogue in cache. Its knobs (schedule/space.py; defaults = the heuristic):

    wino_tile_rows   tiles per GEMM register block (rows x k vectors accumulators)
    wino_k_vectors   output-channel vectors per register block (= per y block)
    wino_row_block   tile rows per cache block (a divisor of TH)

Error: as winograd.py's table (max |err| / max |y| about 5e-7 for m = 2, 1e-5 for m = 4
and 2e-5 for m = 6 on the ResNet layers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.registry import register_compute, register_op
from tensorir.schedule.algorithms.winograd import (
    _geometry,
    _pads,
    _transform1d,
    weight_transform,
    winograd_conv_reference,
    winograd_matrices,
)

Ints = Sequence[int]
OP = "conv2d_winograd_nchwc"
TILE_SIZES = (2, 4, 6)


# ---- weights and reference ---------------------------------------------------------------
def weight_transform_nchwc(w_packed: np.ndarray, m: int) -> np.ndarray:
    """conv2d_nchwc's packed 3x3 weight (M/ob, C/ib, 3, 3, ib, ob) -> U (alpha, alpha, M/ob,
    C, ob) with U[e, f, kb, c, ki] = (G w[kb*ob + ki, c] G^T)[e, f], in w's dtype."""
    from tensorir.ops.layout import unpack_weight

    if w_packed.ndim != 6 or w_packed.shape[2:4] != (3, 3):
        raise ShapeError(f"weight_transform_nchwc wants a packed 3x3 weight (6-D), got {w_packed.shape}")
    if m not in TILE_SIZES:
        raise ShapeError(f"weight_transform_nchwc: m must be one of {TILE_SIZES}, got {m}")
    mo, _, _, _, _, ob = w_packed.shape
    u = weight_transform(unpack_weight(w_packed, False), m)  # (alpha, alpha, C, M)
    alpha, c = m + 2, u.shape[2]
    u = u.reshape(alpha, alpha, c, mo, ob).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(u)


def _check_m(m: Any) -> int:
    if int(m) not in TILE_SIZES:
        raise ShapeError(f"{OP}: m must be one of {TILE_SIZES}, got {m}")
    return int(m)


def _infer(ins: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    if len(ins) not in (2, 3):
        raise ShapeError(f"{OP} takes (x, U) or (x, U, b), got {len(ins)} inputs")
    x, u = ins[0], ins[1]
    m = _check_m(attrs.get("m", 4))
    alpha = m + 2
    if x.ndim != 5:
        raise ShapeError(f"{OP}: x must be packed (N, C/ib, H, W, ib), got {x}")
    n, co, h, w, ib = x.shape
    if u.ndim != 5 or u.shape[:2] != (alpha, alpha) or u.shape[3] != co * ib:
        raise ShapeError(
            f"{OP}(m={m}): U must be (alpha, alpha, M/ob, C, ob) = ({alpha}, {alpha}, M/ob, {co * ib}, ob) "
            f"for x {x}, got {u}"
        )
    if u.dtype != x.dtype:
        raise ShapeError(f"{OP}: dtypes of x and U differ, {x} and {u}")
    if "ob" in attrs and int(attrs["ob"]) != u.shape[4]:
        raise ShapeError(f"{OP}: attribute ob={attrs['ob']} but U's block is {u.shape[4]}")
    mo, ob = u.shape[2], u.shape[4]
    if len(ins) == 3 and (ins[2].shape != (mo, ob) or ins[2].dtype != x.dtype):
        raise ShapeError(f"{OP}: bias {ins[2]} must be [{mo}, {ob}] of {x.dtype}")
    oh, ow, _, _ = _geometry(h, w, attrs.get("pads"), m)
    return [TensorType((n, mo, oh, ow, ob), x.dtype)]


@register_op(OP, infer=_infer, pattern="opaque", gpu="winograd")
def winograd_nchwc_reference(
    x: np.ndarray,
    u: np.ndarray,
    b: np.ndarray | None = None,
    pads: Ints | None = None,
    m: int = 4,
    ob: Any = None,
) -> np.ndarray:
    """numpy: unpack x, winograd.py's tiled reference with U (alpha, alpha, C, M), bias, pack."""
    from tensorir.ops.layout import pack_array, unpack_array

    alpha, _, mo, c, blk = u.shape
    u_flat = np.ascontiguousarray(u.transpose(0, 1, 3, 2, 4)).reshape(alpha, alpha, c, mo * blk)
    y = winograd_conv_reference(unpack_array(x), u_flat, pads=pads, m=_check_m(m))
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1).astype(y.dtype)
    return pack_array(y.astype(x.dtype), blk)


# ---- tensor-expression compute --------------------------------------------------------------
def winograd_nchwc_compute(
    x: Any, u: Any, b: Any = None, pads: Ints | None = None, m: int = 4, ob: Any = None
) -> Any:
    """conv2d_winograd_nchwc as tensor expressions (stages in the module docstring)."""
    from tensorir.ops.nn_compute import acc_type, const, load, pad_spatial
    from tensorir.schedule.te import cast, compute, reduce_axis, sum_

    m = _check_m(m)
    n, _, h, w, ib = x.shape
    alpha, _, mo, c, blk = u.shape
    k = mo * blk
    pt, pl, _, _ = _pads(pads)
    oh, ow, th, tw = _geometry(h, w, pads, m)
    dt = acc_type(x.dtype)
    at, _, bt = winograd_matrices(m)

    xp = pad_spatial(x, (pt, pl, 0), (th * m + 2, tw * m + 2, ib), const(0, x.dtype), "wino_nchwc_pad")

    def bx(e: Any, bb: Any, i: Any, t: Any, ch: Any) -> Any:  # BT d (rows)
        ty, tz = t // tw, t % tw
        return _transform1d(
            bt, e, lambda a: load(xp, (i, ch // ib, ty * m + a, tz * m + bb, ch % ib), dt), dt
        )

    t1 = compute((alpha, alpha, n, th * tw, c), bx, name="wino_nchwc_Bd")

    def vbody(e: Any, f: Any, i: Any, t: Any, ch: Any) -> Any:  # (BT d) B
        return _transform1d(bt, f, lambda bb: t1[e, bb, i, t, ch], dt)

    v = compute((alpha, alpha, n, th * tw, c), vbody, name="wino_nchwc_V")
    rc = reduce_axis(c, "rc")
    acc = compute(
        (alpha, alpha, n, th * tw, k),
        lambda e, f, i, t, j: sum_(v[e, f, i, t, rc] * load(u, (e, f, j // blk, rc, j % blk), dt), axis=rc),
        name="wino_nchwc_acc",
    )

    def az(r: Any, f: Any, i: Any, t: Any, j: Any) -> Any:  # AT M (rows)
        return _transform1d(at, r, lambda e: acc[e, f, i, t, j], dt)

    z = compute((m, alpha, n, th * tw, k), az, name="wino_nchwc_AM")

    def ybody(i: Any, t: Any, r: Any, s: Any, j: Any) -> Any:  # (AT M) A (+ bias)
        val = _transform1d(at, s, lambda f: z[r, f, i, t, j], dt)
        return val + load(b, (j // blk, j % blk), dt) if b is not None else val

    yt = compute((n, th * tw, m, m, k), ybody, name="wino_nchwc_Yt")

    def out(i: Any, kb: Any, y: Any, zz: Any, ki: Any) -> Any:
        return cast(yt[i, (y // m) * tw + zz // m, y % m, zz % m, kb * blk + ki], x.dtype)

    return compute((n, mo, oh, ow, blk), out, name=OP, dtype=x.dtype)


# ---- schedule -------------------------------------------------------------------------------
ROW_CAP = 14  # most tiles per register block by default
K_VECTORS = 2  # output channel vectors per register block by default
# every row count up to 16: the default (pick_rows under a cap that depends on wino_k_vectors)
# must be a choice whatever the k vectors, or a sampled pair (k vectors 4, rows 5) is illegal
TILE_ROW_CHOICES = tuple(range(1, 17))


def schedule_winograd_nchwc(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """pad and V at root (V parallel over tiles, channels vectorized, the transform's tile
    coordinates unrolled); per (image, output channel block, block of tile rows) of y — the
    parallel loop — the block's alpha^2 GEMMs (register blocks of `wino_tile_rows` tiles x
    `wino_k_vectors` output channel vectors, input channels outside), the output transform
    and the packed copy-out with bias and the fused epilogue, all in cache."""
    from tensorir.dtypes import elem_bytes
    from tensorir.ops.nn_compute import (
        LOCAL_BYTES,
        fuse_all,
        inline_elementwise,
        maybe_parallel,
        pick_rows,
        pick_vector,
        stage_named,
        work_of,
    )
    from tensorir.schedule.space import knob

    xp, v = stage_named(s, "wino_nchwc_pad"), stage_named(s, "wino_nchwc_V")
    t1, acc = stage_named(s, "wino_nchwc_Bd"), stage_named(s, "wino_nchwc_acc")
    z, yt = stage_named(s, "wino_nchwc_AM"), stage_named(s, "wino_nchwc_Yt")
    keep = [st for st in (xp, t1, v, z, yt) if st is not None]
    inline_elementwise(s, keep=keep)
    y = next(st for st in s.stages if st.is_output)
    dtype = acc.tensor.dtype
    lanes = target.vector_lanes(dtype)
    work = work_of(acc)
    alpha = acc.op.axis[0].extent
    ntiles = acc.op.axis[3].extent
    yb, ykb, yh, yw, yki = y.op.axis
    blk = yki.extent
    m = alpha - 2
    th = -(-yh.extent // m)
    tw = ntiles // th

    # the parallel loops' order: "rows" splits every stage by rows of tiles, so a thread
    # transforms and multiplies the rows it padded (and its producer wrote, if that split by
    # rows too); "channels" splits the GEMM by output channel blocks, each thread reading
    # every tile's V
    rows_outer = knob("wino_outer_order", ["channels", "rows"], "channels") == "rows"
    if xp is not None:  # packed copy: the bounds test is per pixel, the channel block a vector
        pn, pcb, ph, pw, pc = xp.op.axis
        pco, pcv = xp.split(pc, factor=pick_vector(pc.extent, lanes))
        xp.vectorize(pcv)
        if rows_outer:
            xp.reorder(pn, ph, pcb, pw, pco, pcv)
        maybe_parallel(xp, fuse_all(xp, [pn, ph, pcb] if rows_outer else [pn, pcb, ph]), work)

    # input transform: per (image, tile, channel vector), all alpha x alpha outputs; a vector
    # within one block of the packed input (a 16-lane vector over 8-channel blocks was two
    # blocks apart, gathered lane by lane: PP-OCRv4's 96 -> 24 head conv 4.4 ms, not 1.2)
    c = v.op.axis[4].extent
    (xin,) = t1.op.input_tensors()
    cv = pick_vector(math.gcd(c, xin.shape[-1]), lanes)
    e, f, vb, vt, vc = v.op.axis
    vco, vcv = v.split(vc, factor=cv)
    v.reorder(vb, vt, vco, e, f, vcv)
    v.unroll(f)  # only the selected coordinate is unrolled (keeps compile time down)
    v.vectorize(vcv)
    maybe_parallel(v, fuse_all(v, [vb, vt]), work)
    t1.compute_at(v, vco)
    t1e, *_, t1c = t1.op.axis
    _, t1v = t1.split(t1c, factor=cv)
    t1.unroll(t1e)
    t1.vectorize(t1v)

    # knobs: register block (tiles x k vectors) and cache block (tile rows)
    kv = pick_vector(blk, lanes)  # lanes of one output channel vector
    per_blk = blk // kv  # vectors per output channel block
    nblk = ykb.extent
    kv_choices = [d * per_blk for d in range(1, nblk + 1) if nblk % d == 0 and d * per_blk <= 4]
    if not kv_choices:
        kv_choices = [per_blk]
    kv_default = max(u for u in kv_choices if u <= max(K_VECTORS, per_blk))
    uu = knob("wino_k_vectors", kv_choices, kv_default)
    kbb = max(1, uu // per_blk)  # output channel blocks per y block
    # NEON: the input channels unrolled by the lanes (fmla by lane) keep that many weight
    # vectors live beside the accumulators
    neon_lanes = target.arch == "aarch64" and lanes > 1 and c % lanes == 0 and c > lanes
    live_w = uu * lanes if neon_lanes else uu
    cap = max(1, min(ROW_CAP, (target.num_vector_registers - live_w - 2) // uu))
    tyb_choices = [d for d in range(1, th + 1) if th % d == 0]
    tile_bytes = alpha * alpha * uu * kv * elem_bytes(dtype)  # GEMM results of one tile
    tyb_default = max(d for d in tyb_choices if d == 1 or d * tw * tile_bytes <= LOCAL_BYTES)
    tyb = knob("wino_row_block", tyb_choices, tyb_default)
    block_tiles = tyb * tw
    rows_choices = [r for r in TILE_ROW_CHOICES if r <= ntiles]
    rows = knob("wino_tile_rows", rows_choices, pick_rows(block_tiles, cap))

    # y: (image, k block, tile-row block) outside — the parallel loop — then the copy-out
    jo, ju = y.split(ykb, factor=kbb)
    ho, hi = y.split(yh, factor=tyb * m)
    yko, yv = y.split(yki, factor=kv)
    if rows_outer:
        y.reorder(yb, ho, jo, hi, yw, ju, yko, yv)
        outer = fuse_all(y, [yb, ho, jo])
    else:
        y.reorder(yb, jo, ho, hi, yw, ju, yko, yv)
        outer = fuse_all(y, [yb, jo, ho])
    y.vectorize(yv)
    maybe_parallel(y, outer, work)

    # output transform Z A at y's block, AT M and the GEMM inside it
    yt.compute_at(y, outer)
    b_, t_, r_, s_, j_ = yt.op.axis
    jvo, jvv = yt.split(j_, factor=kv)
    yt.reorder(b_, t_, r_, s_, jvo, jvv)
    yt.unroll(s_)
    yt.vectorize(jvv)
    z.compute_at(yt, b_)
    zi, zf, zb, zt, zk = z.op.axis
    zko, zkv = z.split(zk, factor=kv)
    z.reorder(zb, zt, zf, zi, zko, zkv)
    z.unroll(zi)
    z.vectorize(zkv)
    acc.compute_at(z, zb)
    ae, af, ab, at_, aj = acc.op.axis
    ato, ati = acc.split(at_, factor=rows)
    aju, ajv = acc.split(aj, factor=kv)
    acc.reorder(ae, af, ab, ato, *acc.op.reduce_axis, ati, aju, ajv)
    (rc,) = acc.op.reduce_axis
    rc_step = rc
    if neon_lanes:  # a vector of V per tile feeds `lanes` steps of rc by lane (llvm_expr.py)
        rc_step, rci = acc.split(rc, factor=lanes)
        acc.unroll(rci)
    acc.unroll(ati)
    acc.unroll(aju)
    acc.vectorize(ajv)
    from tensorir.ops.weight_stream import prefetch_next_wino_block

    u = next(t for t in s.reads(acc) if t is not v.tensor)
    prefetch_next_wino_block(acc, u, kbb, rc_step)


register_compute(OP, schedule=schedule_winograd_nchwc)(winograd_nchwc_compute)
