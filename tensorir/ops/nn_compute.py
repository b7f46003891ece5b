"""Shared pieces of the NN compute definitions (conv_compute.py, matmul_compute.py,
pool_compute.py) and their default schedules: block-size choice from the target's vector
width and register count, padding stages, stage lookup, and the small loop recipes the
schedules share.

Vector blocks divide the extent they tile: a vectorized loop under a tail guard whose
condition depends on the lane stays scalar (see loop/passes.py), so `pick_vector` takes the
widest power-of-two width <= the target's lanes that divides the axis, and wider blocks are
several such vectors, unrolled. Only rows (unrolled, never vectorized) take a guarded
non-dividing split.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Sequence

import numpy as np

import tensorir.ops.conv  # the reference modules register the ops first
import tensorir.ops.nn
import tensorir.ops.pool  # noqa: F401
from tensorir.dtypes import elem_bytes
from tensorir.loop.arith import is_float
from tensorir.loop.ir import Const, Expr, Select
from tensorir.loop.visitor import walk
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.space import knob
from tensorir.schedule.te import IterVar, Tensor, all_, cast, compute, if_then_else
from tensorir.target import Target

PARALLEL_MIN_WORK = 1 << 15  # multiply-adds; below this a parallel launch costs more than it saves
LOCAL_BYTES = 256 << 10  # largest per-thread tile buffer (accumulators of one block) on the stack
PACK_BYTES = 1 << 20  # largest packed-operand slice kept on the stack
MIN_PARALLEL_CHUNKS = 8  # split work further when the natural outer loop is shorter than this


# ---- dtypes and constants -------------------------------------------------------------
_HALF_SUMS = contextvars.ContextVar("tir_half_sums", default=False)


@contextlib.contextmanager
def half_sums(enabled: bool) -> Iterator[None]:
    """Within: float16 ops accumulate in float16 (`--precision fp16` on a target with float16
    arithmetic, as the mobile engines do: twice the lanes per FMA); else in float32."""
    token = _HALF_SUMS.set(enabled)
    try:
        yield
    finally:
        _HALF_SUMS.reset(token)


def acc_type(dtype: str) -> str:
    """The dtype a float op accumulates in (float16 in float32, as the references do, unless
    within `half_sums(True)`)."""
    if dtype == "float16" and _HALF_SUMS.get():
        return dtype
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def const(value: float | int, dtype: str) -> Const:
    return Const(float(value) if is_float(dtype) else int(value), dtype)


def load(t: Tensor, idx: Sequence[Expr | int], dtype: str) -> Expr:
    """t[idx] as `dtype` (a cast only when the tensor's dtype differs)."""
    return cast(t[tuple(idx)], dtype)


def lowest(dtype: str) -> Const:
    """The identity of max: -inf for floats, the type's minimum for integers."""
    if is_float(dtype):
        return Const(-math.inf, dtype)
    if dtype == "bool":
        return Const(False, dtype)
    return Const(int(np.iinfo(np.dtype(dtype)).min), dtype)


# ---- block sizes ------------------------------------------------------------------------
def pick_vector(extent: int, lanes: int) -> int:
    """The vector width for an axis: the largest power of two <= lanes dividing `extent`.
    (Odd widths such as 40 lanes are legal IR, but LLVM scalarizes such vectors once they
    live in a local buffer, so wider blocks are several native vectors, unrolled.)"""
    v = 1
    while v * 2 <= lanes and extent % (v * 2) == 0:
        v *= 2
    return v


def pick_block(extent: int, lanes: int, max_vectors: int) -> tuple[int, int]:
    """(v, u): a block of u vectors of v lanes (v = pick_vector) dividing `extent`, with u
    the largest divisor of extent / v that is <= max_vectors."""
    v = pick_vector(extent, lanes)
    rest = extent // v
    u = max(d for d in range(1, max(1, min(rest, max_vectors)) + 1) if rest % d == 0)
    return v, u


def pick_rows(extent: int, cap: int) -> int:
    """A row block <= cap: the largest divisor of `extent` if it is at least cap / 2, else cap
    itself (the last block is guarded; rows are unrolled, so the guard costs a branch)."""
    if extent <= cap:
        return extent
    d = max(x for x in range(1, cap + 1) if extent % x == 0)
    return d if 2 * d >= cap else cap


def register_tile(target: Target, dtype: str, rows: int, cols: int) -> tuple[int, int, int]:
    """(MR, v, u) for an MR x (u * v) accumulator tile, v-lane vectors across the columns:
    MR * u accumulators + u operand vectors + one broadcast fit the register file."""
    lanes = target.vector_lanes(dtype)
    want = max(2, 16 // lanes) if rows > 2 else target.num_vector_registers - 2  # vectors across a row
    v, u = pick_block(cols, lanes, want)
    return tile_rows(target, rows, u), v, u


def tile_rows(target: Target, rows: int, u: int) -> int:
    """MR for a tile u vectors wide: MR * u accumulators + u operands + a broadcast fit."""
    return pick_rows(rows, max(1, min(8, (target.num_vector_registers - u - 1) // u)))


def chunk_rows(rows: int, mr: int, row_bytes: int, outer_iters: int) -> int:
    """Rows per chunk (a multiple of mr) so one chunk's buffer stays under LOCAL_BYTES and the
    parallel loop (outer_iters x chunks) has at least MIN_PARALLEL_CHUNKS iterations."""
    mc = max(mr, LOCAL_BYTES // max(1, row_bytes) // mr * mr)
    while outer_iters * -(-rows // mc) < MIN_PARALLEL_CHUNKS and mc > mr:
        mc = max(mr, (mc // 2) // mr * mr)
    return min(mc, -(-rows // mr) * mr)


# ---- compute pieces -------------------------------------------------------------------
def pad_spatial(x: Tensor, begins: Sequence[int], extents: Sequence[int], fill: Const, name: str) -> Tensor:
    """x (N, C, *spatial) padded at the front by `begins` to spatial `extents` with `fill`
    (x itself when nothing is added: a window that reads less than x, such as a strided 1x1
    conv's, reads x in place rather than a cropped copy)."""
    nsp = len(begins)
    sp = x.shape[2:]
    if not any(begins) and all(e <= n for e, n in zip(extents, sp, strict=True)):
        return x

    def body(*i: Expr) -> Expr:
        src = [i[2 + d] - begins[d] for d in range(nsp)]
        conds = []
        for d in range(nsp):
            if begins[d]:
                conds.append(src[d] >= 0)
            if begins[d] + sp[d] < extents[d]:
                conds.append(src[d] < sp[d])
        value = x[(i[0], i[1], *src)]
        return if_then_else(all_(*conds), value, fill) if conds else value

    return compute((*x.shape[:2], *extents), body, name=name)


# ---- schedule helpers -----------------------------------------------------------------
def stage_named(s: Schedule, suffix: str) -> Stage | None:
    """The (last) stage whose name ends with `suffix` (computes are name-scoped when fused)."""
    found = [st for st in s.stages if st.name.endswith(suffix)]
    return found[-1] if found else None


def work_of(st: Stage) -> int:
    n = math.prod(st.tensor.shape)
    for r in st.op.reduce_axis:
        n *= r.extent
    return n


def fuse_all(st: Stage, axes: Sequence[IterVar]) -> IterVar | None:
    if not axes:
        return None
    return st.fuse(*axes) if len(axes) > 1 else axes[0]


def maybe_parallel(st: Stage, axis: IterVar | None, work: int) -> None:
    if axis is not None and axis.extent > 1 and work >= PARALLEL_MIN_WORK:
        st.parallel(axis)


def schedule_copy(st: Stage, target: Target) -> None:
    """An elementwise stage at root: last axis vectorized (a divisor block), the rest fused
    and parallel when large."""
    axes = list(st.leaves)
    if not axes:
        return
    lanes = target.vector_lanes(st.tensor.dtype)
    last = axes[-1]
    v = pick_vector(last.extent, lanes)
    outer = axes[:-1]
    if v > 1:
        lo, li = st.split(last, factor=v)
        outer.append(lo)
        st.vectorize(li)
    else:
        outer.append(last)
    maybe_parallel(st, fuse_all(st, outer), math.prod(st.tensor.shape))


PAD_ROW_MIN = 64  # elements of the inner (plain) loops of a padding stage


def schedule_pad(st: Stage, lanes: int = 0, rows_first: bool = False) -> None:
    """A padding stage at root: the leading axes fused and parallel, the trailing ones plain
    loops of at least PAD_ROW_MIN elements (a whole row when the channel block is narrow; the
    bounds test depends on the position, so it is left to LLVM, which if-converts it into
    masked vector loads) — a fused loop with a 1-wide body would pay index math per element.
    `lanes` > 0: the channel block as vectors first (`vectorize_pad_block`). `rows_first`
    (packed NCHW[x]c): the rows outside the channel blocks, so a thread pads whole rows, as
    a consumer split by rows reads them."""
    vectorize_pad_block(st, lanes)
    if rows_first and len(st.op.axis) == 5:
        n, cb, h, *rest = st.leaves
        st.reorder(n, h, cb, *rest)
    leaves = list(st.leaves)
    inner = 1
    while len(leaves) > 1 and inner < PAD_ROW_MIN:
        inner *= leaves.pop().extent
    maybe_parallel(st, fuse_all(st, leaves), math.prod(st.tensor.shape))


def vectorize_pad_block(st: Stage, lanes: int) -> None:
    """The padding stage's last axis (the channel block of an NCHW[x]c tensor) as `lanes`-wide
    vectors where it divides: the bounds test is per pixel, so a block is one vector copy or
    one vector of the fill. Left scalar, LLVM unrolled the 16 channels and vectorized the
    pixels 16 elements apart, as scatters (ResNet-50's 3x3 / 2 convs and max pool, PP-OCRv4's
    5x5 depthwise convs: 35% of a kernel's samples in vscatterdps)."""
    if lanes < 2 or _bounds_test_reads(st, st.op.axis[-1]):  # plain NCHW: the width is padded
        return
    last = st.leaves[-1]
    v = pick_vector(last.extent, lanes)
    if v < 4:  # a narrow block (the RGB stem's one channel): rows stay LLVM's
        return
    _, inner = st.split(last, factor=v)
    st.vectorize(inner)


def _bounds_test_reads(st: Stage, axis: IterVar) -> bool:
    """Whether a condition of the stage's body (pad_spatial's bounds test) depends on `axis`."""
    conds = [n.cond for n in walk(st.op.body) if isinstance(n, Select)]
    return any(n is axis for c in conds for n in walk(c))


def place_pad(
    pad: Stage, y: Stage, outer: IterVar | None, chunk_default: bool, lanes: int = 0, rows_first: bool = False
) -> None:
    """Knob `pad_at`: the padding stage computed inside `y`'s parallel loop `outer` (each
    iteration pads only the input rows it reads, which stay in cache) or a padded copy of
    the whole input at root (`schedule_pad`). Chunk suits a loop whose iterations read
    disjoint inputs; where several iterations read the same rows it re-pads them. `lanes`:
    as schedule_pad's."""
    default = "chunk" if chunk_default else "root"
    if outer is not None and knob("pad_at", ["root", "chunk"], default) == "chunk":
        pad.compute_at(y, outer)
        vectorize_pad_block(pad, lanes)
    else:
        schedule_pad(pad, lanes, rows_first)


def inline_elementwise(s: Schedule, keep: Sequence[Stage] = ()) -> None:
    """Inline every non-output stage without a reduction, except `keep`."""
    for st in s.stages:
        if st.is_output or st.op.reduce_axis or st.inlined or any(st is k for k in keep):
            continue
        st.compute_inline()


def schedule_reduction_generic(st: Stage, target: Target) -> None:
    """Any reduction at root: data axes outside (fused, parallel), reductions, then the last
    data axis (a divisor block) vectorized inside them."""
    data, red = list(st.op.axis), list(st.op.reduce_axis)
    lanes = target.vector_lanes(st.tensor.dtype)
    inner = None
    if data and data[-1].extent > 1:
        v = pick_vector(data[-1].extent, lanes)
        if v > 1:
            lo, inner = st.split(data[-1], factor=v)
            data[-1] = lo
    st.reorder(*data, *red, *([inner] if inner is not None else []))
    if inner is not None:
        st.vectorize(inner)
    maybe_parallel(st, fuse_all(st, data), work_of(st))


def chunk_first_axis(extent: int, row_bytes: int, outer_iters: int, budget: int = LOCAL_BYTES) -> int:
    """Rows per chunk of the first output axis: the block buffer under `budget` bytes, and at
    least MIN_PARALLEL_CHUNKS parallel iterations when the rows allow."""
    rows = max(1, min(extent, budget // max(1, row_bytes)))
    while outer_iters * -(-extent // rows) < MIN_PARALLEL_CHUNKS and rows > 1:
        rows = -(-rows // 2)
    return pick_rows(extent, rows)


def schedule_windowed(s: Schedule, y: Stage, acc: Stage, target: Target) -> IterVar | None:
    """A windowed reduction per channel: `acc` (n, c, *out; reductions over channels and/or
    taps) computed for each (image, channel, row chunk) of `y` (the parallel loop), its last
    spatial axis vectorized with a few rows unrolled (depthwise conv, pooling). Returns
    that parallel loop (a caller may compute the padded input there too)."""
    b, m, *sp = y.op.axis
    lanes = target.vector_lanes(acc.tensor.dtype)
    row_bytes = math.prod(a.extent for a in sp[1:]) * elem_bytes(acc.tensor.dtype)
    chunk = chunk_first_axis(sp[0].extent, row_bytes, b.extent * m.extent)
    rows = knob("window_row_chunk", ["auto", *divisors(sp[0].extent)], "auto")
    chunk = chunk if rows == "auto" else rows
    so, sp[0] = y.split(sp[0], factor=chunk)
    _, li = y.split(sp[-1], factor=pick_vector(sp[-1].extent, lanes))
    y.vectorize(li)
    outer = fuse_all(y, [b, m, so])
    maybe_parallel(y, outer, work_of(acc))
    acc.compute_at(y, outer)
    ab, am, *asp = acc.op.axis
    v = pick_vector(asp[-1].extent, lanes)
    rest = asp[-1].extent // v
    u = knob("window_vectors", [d for d in divisors(rest) if d <= 4], pick_block(asp[-1].extent, lanes, 2)[1])
    wo, wi = acc.split(asp[-1], factor=v * u)
    wu, wv = acc.split(wi, factor=v)
    outer_sp, rows = asp[:-1], []
    if outer_sp:  # a few rows in registers too
        cap = max(1, min(4, (target.num_vector_registers - 2) // u))
        hr = pick_rows(outer_sp[-1].extent, cap)
        hr = knob("window_rows", list(range(1, min(8, outer_sp[-1].extent) + 1)), hr)
        ho, hi = acc.split(outer_sp[-1], factor=hr)
        outer_sp[-1], rows = ho, [hi]
    acc.reorder(ab, am, *outer_sp, wo, *acc.op.reduce_axis, *rows, wu, wv)
    for a in (*rows, wu):
        acc.unroll(a)
    acc.vectorize(wv)
    return outer


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
