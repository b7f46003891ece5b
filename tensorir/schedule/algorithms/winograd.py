"""Winograd minimal filtering F(m x m, 3 x 3) for 3x3 stride-1 convolutions.

Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016
(arXiv:1509.09308): with alpha = m + r - 1 points, an m x m output tile of an r x r
correlation is

    Y = AT [ (G g G^T) * (BT d B) ] A          (* elementwise, d an alpha x alpha tile)

so a layer costs alpha^2 multiplications per tile and channel pair instead of m^2 r^2.
The matrices come from Cook-Toom interpolation at alpha - 1 finite points plus infinity:

    AT[i, j] = p_j^i,          G[j, k] = p_j^k / prod_{l != j} (p_j - p_l),
    (last column of AT / row of G: the point at infinity, picking the top coefficient)
    BT = V^-1 with V[s, j] = AT[i, j] G[j, k] for any i + k = s (it depends on s only),

computed exactly with fractions (`winograd_matrices`). Default points: 0, 1, -1, 2, -2,
1/2, -1/2, 4, -4, ... (F(2,3): 0, +-1; F(4,3): 0, +-1, +-2; F(6,3): 0, +-1, +-2, +-1/2).

Graph op `conv2d_winograd(x, U, pads=, m=)`: x NCHW, U = weight_transform(w, m) of shape
(alpha, alpha, C, M), made at compile time; output as conv(x, w, pads=pads) (stride 1,
dilation 1, one group). Reference: `winograd_conv_reference` (numpy, tiled, computed in
x's dtype). Compute stages (`winograd_conv_compute`):

    wino_pad  xp[n, h, w, c]                 NHWC, zero padded to whole tiles (root)
    wino_Bd   T[e, b, n, th, tw, c]          BT d, at V's (tile, channel vector) loop
    wino_V    V[e, f, n, th, tw, c]          T B (root; channels vectorized)
    wino_acc  M[e, f, n, th, tw, k]          alpha^2 GEMMs over c, per block of tiles x k
    wino_AM   Z[i, f, n, th, tw, k]          AT M, at Yt's block loop (acc computed in it)
    wino_Yt   Yt[n, th, i, tw, j, k]         Z A: NHWC tiles (k vectorized)
    conv2d_winograd  y[n, k, h, w]           NHWC -> NCHW copy (crops partial tiles)

The 2-D transforms are two 1-D passes, each a sparse constant combination selected by the
(unrolled) tile coordinate, so no multiplication by 0 or +-1 reaches the code.

float32 error vs a float64 direct conv (max |err| / max |y|, inputs U(-1, 1), weights
U(-1, 1), batch 1, C = M, pads 1; measured by `measure_errors`, numpy reference):

    layer (C@HxW)   m=2        m=4        m=6
    64@56           4.1e-07    8.1e-06    9.0e-06
    128@28          3.6e-07    6.0e-06    1.2e-05
    256@14          5.3e-07    1.0e-05    1.8e-05
    512@7           5.7e-07    8.9e-06    1.4e-05

(ResNet-18 has the same 3x3 stride-1 shapes; seed 0.) F(4,3) loses about one decimal
digit against F(2,3) and F(6,3) another factor ~2, as Lavin & Gray and later analyses
(Barabasz et al. 2020) report; the compiled kernel's error is of the same size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.registry import register_compute, register_op

Ints = Sequence[int]
DEFAULT_POINTS = [
    Fraction(0),
    Fraction(1),
    Fraction(-1),
    Fraction(2),
    Fraction(-2),
    Fraction(1, 2),
    Fraction(-1, 2),
    Fraction(4),
    Fraction(-4),
    Fraction(1, 4),
    Fraction(-1, 4),
]


# ---- matrices -------------------------------------------------------------------------
def _inverse(a: list[list[Fraction]]) -> list[list[Fraction]]:
    n = len(a)
    aug = [row[:] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(a)]
    for col in range(n):
        piv = next(r for r in range(col, n) if aug[r][col] != 0)
        aug[col], aug[piv] = aug[piv], aug[col]
        inv = 1 / aug[col][col]
        aug[col] = [v * inv for v in aug[col]]
        for r in range(n):
            if r != col and aug[r][col] != 0:
                f = aug[r][col]
                aug[r] = [v - f * p for v, p in zip(aug[r], aug[col], strict=True)]
    return [row[n:] for row in aug]


def winograd_fractions(
    m: int, r: int = 3, points: Sequence[Any] | None = None
) -> tuple[list[list[Fraction]], list[list[Fraction]], list[list[Fraction]]]:
    """Exact (AT, G, BT) of F(m, r) as lists of Fractions (see `winograd_matrices`)."""
    alpha = m + r - 1
    pts = [Fraction(p) for p in (points if points is not None else DEFAULT_POINTS[: alpha - 1])]
    if len(pts) != alpha - 1 or len(set(pts)) != len(pts):
        raise ValueError(f"F({m},{r}) needs {alpha - 1} distinct finite points, got {pts}")
    norm = [math.prod((p - q for q in pts if q != p), start=Fraction(1)) for p in pts]
    at = [[p**i for p in pts] + [Fraction(int(i == m - 1))] for i in range(m)]
    g = [[p**k / nj for k in range(r)] for p, nj in zip(pts, norm, strict=True)]
    g.append([Fraction(int(k == r - 1)) for k in range(r)])
    v = [
        [p**s / nj for p, nj in zip(pts, norm, strict=True)] + [Fraction(int(s == alpha - 1))]
        for s in range(alpha)
    ]
    return at, g, _inverse(v)


def winograd_matrices(
    m: int, r: int = 3, points: Sequence[Any] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(AT (m x alpha), G (alpha x r), BT (alpha x alpha)) of F(m, r), alpha = m + r - 1,
    such that AT @ ((G @ g) * (BT @ d)) is the correlation of d (length alpha) with g.

    Cook-Toom construction at `points` (alpha - 1 distinct finite points; infinity is
    added), after Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks",
    CVPR 2016. Computed exactly with fractions, returned as float64."""
    at, g, bt = winograd_fractions(m, r, points)
    return tuple(np.array([[float(v) for v in row] for row in a]) for a in (at, g, bt))  # type: ignore[return-value]


# ---- numpy reference --------------------------------------------------------------------
def weight_transform(w: np.ndarray, m: int) -> np.ndarray:
    """OIHW 3x3 weights -> U[e, f, c, k] = (G w[k, c] G^T)[e, f] (alpha, alpha, C, M), in
    w's dtype (computed in float64)."""
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ShapeError(f"weight_transform wants OIHW 3x3 weights, got {w.shape}")
    _, g, _ = winograd_matrices(m)
    u = np.einsum("ir,kcrs,js->ijck", g, w.astype(np.float64), g, optimize=True)
    return np.ascontiguousarray(u.astype(w.dtype))


def _pads(pads: Ints | None) -> tuple[int, int, int, int]:
    p = tuple(int(v) for v in (pads or (0, 0, 0, 0)))
    if len(p) == 2:
        p = p + p
    if len(p) != 4 or min(p) < 0:
        raise ShapeError(f"conv2d_winograd pads must be 4 non-negative ints, got {pads}")
    return p  # type: ignore[return-value]


def _geometry(h: int, w: int, pads: Ints | None, m: int) -> tuple[int, int, int, int]:
    """(OH, OW, TH, TW): output size and tiles per axis."""
    pt, pl, pb, pr = _pads(pads)
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    if oh < 1 or ow < 1:
        raise ShapeError(f"conv2d_winograd: input {h}x{w} with pads {pads} is smaller than 3x3")
    return oh, ow, -(-oh // m), -(-ow // m)


def _infer(ins: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    x, u = ins[0], ins[1]
    m = int(attrs["m"])
    alpha = m + 2
    if x.ndim != 4 or u.ndim != 4 or u.shape[:2] != (alpha, alpha) or u.shape[2] != x.shape[1]:
        raise ShapeError(f"conv2d_winograd(m={m}) needs NCHW x and U ({alpha}, {alpha}, C, M), got {x}, {u}")
    if u.dtype != x.dtype:
        raise ShapeError(f"conv2d_winograd: dtypes differ, {x} and {u}")
    oh, ow, _, _ = _geometry(x.shape[2], x.shape[3], attrs.get("pads"), m)
    return [TensorType((x.shape[0], u.shape[3], oh, ow), x.dtype)]


@register_op("conv2d_winograd", infer=_infer, pattern="opaque")
def winograd_conv_reference(x: np.ndarray, u: np.ndarray, pads: Ints | None = None, m: int = 4) -> np.ndarray:
    """The tiled Winograd conv in numpy, in x's dtype: y = conv(x, w, pads) for U = weight_transform(w, m)."""
    n, c, h, w = x.shape
    alpha = m + 2
    pt, pl, _, _ = _pads(pads)
    oh, ow, th, tw = _geometry(h, w, pads, m)
    dt = x.dtype
    at, _, bt = (a.astype(dt) for a in winograd_matrices(m))
    xp = np.zeros((n, c, th * m + 2, tw * m + 2), dt)
    hh, ww = min(h, th * m + 2 - pt), min(w, tw * m + 2 - pl)
    xp[:, :, pt : pt + hh, pl : pl + ww] = x[:, :, :hh, :ww]
    d = np.lib.stride_tricks.sliding_window_view(xp, (alpha, alpha), axis=(2, 3))[:, :, ::m, ::m]
    v = np.einsum("ia,nctsab,jb->ijntsc", bt, d, bt, optimize=True)  # alpha, alpha, N, TH, TW, C
    mm = np.matmul(v.reshape(alpha * alpha, -1, c), u.reshape(alpha * alpha, c, -1))
    mm = mm.reshape(alpha, alpha, n, th, tw, -1)
    y = np.einsum("ie,efntsk,jf->nktisj", at, mm, at, optimize=True).reshape(n, -1, th * m, tw * m)
    return np.ascontiguousarray(y[:, :, :oh, :ow], dtype=dt)


def winograd_conv2d(x: np.ndarray, w: np.ndarray, m: int, pads: Ints | None = None) -> np.ndarray:
    """conv(x, w, pads) (NCHW, OIHW 3x3, stride 1) by F(m x m, 3 x 3) in numpy."""
    return winograd_conv_reference(x, weight_transform(w, m), pads=pads, m=m)


def direct_conv64(x: np.ndarray, w: np.ndarray, pads: Ints | None = None) -> np.ndarray:
    from tensorir.ops.conv import conv

    return conv(x.astype(np.float64), w.astype(np.float64), pads=list(_pads(pads)))


ZOO_3X3 = [(64, 56), (128, 28), (256, 14), (512, 7)]  # ResNet-18/50 3x3 stride-1 convs (C = M)


def measure_errors(
    ms: Sequence[int] = (2, 4, 6), shapes: Sequence[tuple[int, int]] = ZOO_3X3, seed: int = 0
) -> dict[tuple[int, int, int], float]:
    """{(C, HW, m): max |y32 - y64| / max |y64|} of the numpy reference on 3x3 stride-1
    layers (batch 1, C = M, pads 1), inputs and weights U(-1, 1) seeded by (seed, C, HW)."""
    out = {}
    for c, hw in shapes:
        rng = np.random.default_rng([seed, c, hw])
        x = rng.uniform(-1, 1, (1, c, hw, hw)).astype(np.float32)
        w = rng.uniform(-1, 1, (c, c, 3, 3)).astype(np.float32)
        ref = direct_conv64(x, w, (1, 1, 1, 1))
        for m in ms:
            y = winograd_conv2d(x, w, m, (1, 1, 1, 1))
            out[c, hw, m] = float(np.abs(y - ref).max() / np.abs(ref).max())
    return out


# ---- tensor-expression compute ------------------------------------------------------------
def _combination(coeffs: Sequence[float], terms: Sequence[Any], dtype: str) -> Any:
    """sum_i coeffs[i] * terms[i], skipping zeros, without multiplying by +-1."""
    from tensorir.ops.nn_compute import const

    out = None
    for c, t in zip(coeffs, terms, strict=True):
        if c == 0:
            continue
        if out is None:
            out = t if c == 1 else (const(0, dtype) - t if c == -1 else const(c, dtype) * t)
        elif c == 1:
            out = out + t
        elif c == -1:
            out = out - t
        else:
            out = out + const(c, dtype) * t
    return out if out is not None else const(0, dtype)


def _select(index: Any, options: Sequence[Any]) -> Any:
    """options[index] for an index the schedule unrolls (the chain folds to one branch)."""
    from tensorir.schedule.te import if_then_else

    out = options[-1]
    for v in range(len(options) - 2, -1, -1):
        out = if_then_else(index.eq(v), options[v], out)
    return out


def _transform1d(mat: np.ndarray, row: Any, operand: Any, dtype: str) -> Any:
    """(mat @ T)[row] for T given as operand(a) -> expr, `row` unrolled by the schedule."""
    rows, cols = mat.shape
    terms = [operand(a) for a in range(cols)]
    return _select(row, [_combination([float(v) for v in mat[i]], terms, dtype) for i in range(rows)])


def winograd_conv_compute(x: Any, u: Any, pads: Ints | None = None, m: int = 4) -> Any:
    """conv2d_winograd as tensor expressions (stages in the module docstring)."""
    from tensorir.ops.nn_compute import acc_type, const, load
    from tensorir.schedule.te import all_, cast, compute, if_then_else, reduce_axis, sum_

    n, c, h, w = x.shape
    alpha, k = m + 2, u.shape[3]
    pt, pl, _, _ = _pads(pads)
    oh, ow, th, tw = _geometry(h, w, pads, m)
    dt = acc_type(x.dtype)
    at, _, bt = winograd_matrices(m)

    def pad(b: Any, y: Any, z: Any, ch: Any) -> Any:
        sy, sz = y - pt, z - pl
        conds = [sy >= 0, sy < h, sz >= 0, sz < w]
        return if_then_else(all_(*conds), load(x, (b, ch, sy, sz), dt), const(0, dt))

    xp = compute((n, th * m + 2, tw * m + 2, c), pad, name="wino_pad")

    def bx(e: Any, bb: Any, b: Any, ty: Any, tz: Any, ch: Any) -> Any:  # BT d (rows)
        return _transform1d(bt, e, lambda a: xp[b, ty * m + a, tz * m + bb, ch], dt)

    t1 = compute((alpha, alpha, n, th, tw, c), bx, name="wino_Bd")

    def vbody(e: Any, f: Any, b: Any, ty: Any, tz: Any, ch: Any) -> Any:  # (BT d) B
        return _transform1d(bt, f, lambda bb: t1[e, bb, b, ty, tz, ch], dt)

    v = compute((alpha, alpha, n, th, tw, c), vbody, name="wino_V")
    rc = reduce_axis(c, "rc")
    acc = compute(
        (alpha, alpha, n, th, tw, k),
        lambda e, f, b, ty, tz, j: sum_(v[e, f, b, ty, tz, rc] * load(u, (e, f, rc, j), dt), axis=rc),
        name="wino_acc",
    )

    def az(i: Any, f: Any, b: Any, ty: Any, tz: Any, j: Any) -> Any:  # AT M (rows)
        return _transform1d(at, i, lambda e: acc[e, f, b, ty, tz, j], dt)

    z = compute((m, alpha, n, th, tw, k), az, name="wino_AM")

    def ybody(b: Any, ty: Any, i: Any, tz: Any, jj: Any, j: Any) -> Any:  # (AT M) A
        return _transform1d(at, jj, lambda f: z[i, f, b, ty, tz, j], dt)

    yt = compute((n, th, m, tw, m, k), ybody, name="wino_Yt")

    def out(b: Any, j: Any, y: Any, z: Any) -> Any:
        return cast(yt[b, y // m, y % m, z // m, z % m, j], x.dtype)

    return compute((n, k, oh, ow), out, name="conv2d_winograd", dtype=x.dtype)


ROW_CAP = 12  # tiles per register block of the GEMM


def schedule_winograd(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """pad and V at root (parallel over rows, channels vectorized, the transform's tile
    coordinates unrolled); per (image, tile row, tile block, channel block) of Yt — the
    parallel loop — the alpha^2 GEMM accumulators of the block (a register tile of tiles x
    output-channel vectors, input channels outside), then the output transform from them;
    the final NHWC -> NCHW copy vectorized along the rows."""
    from tensorir.dtypes import elem_bytes
    from tensorir.ops.nn_compute import (
        LOCAL_BYTES,
        fuse_all,
        inline_elementwise,
        maybe_parallel,
        pick_block,
        pick_rows,
        pick_vector,
        stage_named,
        work_of,
    )

    xp, v = stage_named(s, "wino_pad"), stage_named(s, "wino_V")
    acc, yt = stage_named(s, "wino_acc"), stage_named(s, "wino_Yt")
    t1, z = stage_named(s, "wino_Bd"), stage_named(s, "wino_AM")
    inline_elementwise(s, keep=[xp, t1, v, z, yt])
    y = next(st for st in s.stages if st.is_output)
    dtype = acc.tensor.dtype
    lanes = target.vector_lanes(dtype)
    work = work_of(acc)

    # pad: NCHW -> NHWC, channels vectorized (gathers)
    pb, ph, _, pc = xp.op.axis
    _, pcv = xp.split(pc, factor=pick_vector(pc.extent, lanes))
    xp.vectorize(pcv)
    maybe_parallel(xp, fuse_all(xp, [pb, ph]), work)

    # input transform
    e, f, vb, vth, vtw, vc = v.op.axis
    vco, vcv = v.split(vc, factor=pick_vector(vc.extent, lanes))
    v.reorder(vb, vth, vtw, vco, e, f, vcv)
    v.unroll(f)  # only the selected coordinate is unrolled (keeps compile time down)
    v.vectorize(vcv)
    maybe_parallel(v, fuse_all(v, [vb, vth]), work)
    t1.compute_at(v, vco)
    *t1_outer, t1c = t1.op.axis
    _, t1v = t1.split(t1c, factor=pick_vector(vc.extent, lanes))
    t1.unroll(t1_outer[0])
    t1.vectorize(t1v)

    # output transform with the GEMM at its tile block
    b, ty, i, tz, jj, j = yt.op.axis
    vv, uu = pick_block(j.extent, lanes, 2)
    cap = max(1, min(ROW_CAP, (target.num_vector_registers - uu - 2) // uu))
    rows = pick_rows(tz.extent, cap)
    tzo, tzi = yt.split(tz, factor=rows)
    jo, ji = yt.split(j, factor=vv * uu)
    ju, jv = yt.split(ji, factor=vv)
    acc_row = acc.op.axis[0].extent ** 2 * rows * vv * uu * elem_bytes(dtype)
    tyb = max(d for d in range(1, ty.extent + 1) if ty.extent % d == 0 and d * acc_row <= LOCAL_BYTES)
    tyo, tyi = yt.split(ty, factor=tyb)
    # k blocks outside the tile blocks: one block's transformed weights stay in cache
    yt.reorder(b, jo, tyo, tzo, tyi, tzi, ju, i, jj, jv)
    yt.unroll(jj)
    yt.vectorize(jv)
    outer = fuse_all(yt, [b, jo, tyo, tzo])
    maybe_parallel(yt, outer, work)
    z.compute_at(yt, outer)
    zi, zf, zb, zty, ztz, zk = z.op.axis
    zko, zkv = z.split(zk, factor=vv)
    z.reorder(zb, zty, ztz, zf, zi, zko, zkv)
    z.unroll(zi)
    z.vectorize(zkv)
    acc.compute_at(z, zb)
    ae, af, ab, aty, atz, aj = acc.op.axis
    aju, ajv = acc.split(aj, factor=vv)
    if tyb * rows <= cap:  # small maps: all tile rows of the block in registers
        acc.reorder(ae, af, ab, *acc.op.reduce_axis, aty, atz, aju, ajv)
        acc.unroll(aty)
    else:
        acc.reorder(ae, af, ab, aty, *acc.op.reduce_axis, atz, aju, ajv)
    acc.unroll(atz)
    acc.unroll(aju)
    acc.vectorize(ajv)

    # NHWC -> NCHW copy
    ob, ok, _, ow = y.op.axis
    _, owv = y.split(ow, factor=pick_vector(ow.extent, lanes))
    y.vectorize(owv)
    maybe_parallel(y, fuse_all(y, [ob, ok]), work)


register_compute("conv2d_winograd", schedule=schedule_winograd)(winograd_conv_compute)


# ---- choosing the tile size ----------------------------------------------------------------
# multiplies per byte of U / V traffic. 8 (set with the first Winograd kernels) kept every
# 7x7x512 conv and most small-channel ones direct; with the packed NCHW[x]c kernels of today
# the transformed weights stream from cache behind the GEMM (ResNet-18's 7x7x512 F(2x2): 1.55
# vs 2.09 ms direct, 1 Zen 4 core). Whole models, 1 thread, fpb 8 -> 2 (interleaved, Zen 4):
# ResNet-18 20.6 -> 18.9 ms, ResNet-50 61.4 -> 60.1, DenseNet-121 53.5 -> 40.7, YOLOv8n-320
# 17.9 -> 15.3, ddddocr's detector 44.9 -> 42.4; 1 was no better (ResNet-18 19.1 -> 19.6-20.4:
# F(4x4) at 7x7 pads 8x8 output tiles).
FLOPS_PER_BYTE = 2.0
TILE_PENALTY = 0.12  # MNN's per-(m^2 / r^2) penalty for larger tiles (accuracy, registers)
# Weights this large stream from memory in a whole-model run: the other layers' weights evict
# them between runs (ResNet-18 holds 45 MB, ResNet-50 100 MB, against a 32 MB L3), though a
# kernel timed alone finds them in L3. Each such byte costs DRAM_MULTS_PER_BYTE multiplies on a
# core retiring 16-lane FMAs at full rate (Zen 5: 289 GFLOP/s a core against 18-25 GB/s from
# memory: U streamed at 18 GB/s inside ResNet-50, a 256 MB numpy sum read 22-25). ResNet-18's
# and -50's 7x7x512 convs (U of F(2x2) 16.8 MB, w 9.4 MB) then go direct
# on Zen 5: whole models at 1 / 2 threads, interleaved, ResNet-18 10.51 -> 10.20 and 5.71 ->
# 5.61 ms, ResNet-50 26.30 -> 26.03 and 14.65 -> 14.56. Narrower cores (Zen 4's split 512-bit
# FMAs, AVX2, NEON) have half the multiplies per byte or less; unmeasured there, so left out.
DRAM_WEIGHT_BYTES = 8 << 20
DRAM_MULTS_PER_BYTE = 8.0


def winograd_cost(shape: Sequence[int], m: int, elem_bytes: int = 4, full_rate_lanes: int = 0) -> float:
    """Estimated cost (multiply-equivalents) of F(m x m, 3 x 3) on conv shape (N, C, H, W, M)
    (output H x W): GEMM multiplies + separable transforms + weight / V traffic (+ the
    weights' trip from memory where they are that large, `dram_cost`)."""
    n, c, h, w, k = shape
    alpha = m + 2
    tiles = n * -(-h // m) * -(-w // m)
    gemm = tiles * alpha * alpha * c * k
    transforms = tiles * (2 * alpha**3 * c + 2 * m * alpha * alpha * k)
    # the transformed weights stream once; V is written and read back (the GEMM results
    # stay in the per-block buffer of the default schedule)
    u_bytes = alpha * alpha * c * k * elem_bytes
    traffic = u_bytes + 2 * tiles * alpha * alpha * c * elem_bytes
    return gemm + transforms + FLOPS_PER_BYTE * traffic + dram_cost(u_bytes, full_rate_lanes)


def direct_cost(shape: Sequence[int], elem_bytes: int = 4, full_rate_lanes: int = 0) -> float:
    n, c, h, w, k = shape
    w_bytes = 9 * c * k * elem_bytes
    return n * h * w * 9 * c * k + FLOPS_PER_BYTE * w_bytes + dram_cost(w_bytes, full_rate_lanes)


def dram_cost(weight_bytes: int, full_rate_lanes: int) -> float:
    """Multiply-equivalents of reading weights from memory in a whole-model run: none under
    DRAM_WEIGHT_BYTES, nor on cores under 16 full-rate lanes (0: unknown)."""
    if weight_bytes < DRAM_WEIGHT_BYTES or full_rate_lanes < 16:
        return 0.0
    return DRAM_MULTS_PER_BYTE * weight_bytes


def choose_winograd_m(
    shape: Sequence[int], target: Any = None, candidates: Ints = (2, 4, 6), full_rate_lanes: int = 0
) -> int | None:
    """Tile size m for a 3x3 stride-1 conv of shape (N, C, H, W, M) (H x W the output), or
    None when direct convolution is estimated faster. MNN-style (ConvolutionWinograd's unit
    choice): the best ratio direct / winograd cost minus a penalty growing with m^2 wins, if
    it beats 1. `target` is accepted for target-specific constants (unused on x86 so far);
    `full_rate_lanes` (the CPU's, 0: unknown) prices weights read from memory (dram_cost)."""
    base = direct_cost(shape, full_rate_lanes=full_rate_lanes)
    best, best_rate = None, 1.0
    for m in candidates:
        rate = base / winograd_cost(shape, m, full_rate_lanes=full_rate_lanes) - TILE_PENALTY * m * m / 9
        if rate > best_rate:
            best, best_rate = m, rate
    return best
