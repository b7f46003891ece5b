"""The schedule of a depthwise conv fused with the 1x1 conv after it (passes/fuse_dwpw.py).

The kernel is the `fused` body conv2d_nchwc(depthwise) + its elementwise steps +
conv2d_nchwc(1x1) + its epilogue. Its stages (name-scoped f0_, f1_, ... by ops/fused.py):

    dw_pad   the depthwise input, padded            (per channel block, in the chunk)
    dw_acc   the depthwise sums                     (per channel block, in the chunk)
    mid      dw_acc + bias, the activation          (every channel block of the chunk's rows)
    pw_acc   the 1x1 sums over mid's channels       (every output block of the chunk's rows)
    y        pw_acc + bias and the epilogue         (the kernel's output)

Per chunk of output rows (the parallel loop: rows of one image), `mid` is computed for every
channel block into a buffer on the stack, then each group of output channel blocks reduces
over it, so the widest tensor of a MobileNet block never reaches memory. The 1x1 product is the
register-blocked form of the plain packed conv (layout.schedule_conv_nchwc): runs of ow_tile
pixels x oc_blocks channel blocks of accumulators, one weight vector load and one broadcast
per step, computed at the output's pixel-tile loop so the epilogue reads the sums from
registers (MobileNetV1's merged kernels 1.88 -> 1.73 ms in all, 1 thread, against a pw_acc
buffer for the whole chunk). The depthwise sums run as in that schedule too (pixels x one
vector in registers), per register tile of mid, its bias and activation reading them there.

With the 1x1 expand merged in front (passes/fuse_dwpw.py:fuse_expand), the stage before
dw_pad is the expand's sums `ex_acc`, computed per channel block of `mid` over the chunk's
rows plus the depthwise's halo (recomputed by the neighbouring chunk; chunks sized by
BLOCK_MID_BYTES), its bias and activation inlined into dw_pad: the expanded tensor exists only
`ex_blocks` channel blocks at a time, on the stack. When the 1x1's output block is narrower than the
vector, its weight arrives widened (conv_algorithms._dwpw, as conv_wide.py does) and pw_acc
holds all its output vectors in one register tile.

Knobs: `row_chunk` (rows per parallel iteration; "auto": the mid buffer near MID_BYTES and
at least MIN_PARALLEL_CHUNKS iterations where the rows allow), `oc_blocks`, `ow_tile`,
`unroll_reduce` for the 1x1, `dw_ow_tile` for the depthwise, `ex_ow_tile` and `ex_blocks`
(channel blocks of `mid` per expand register tile, the depthwise then runs block by block
over them) for the expand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorir.dtypes import elem_bytes
from tensorir.ops.conv_tile import default_oc_blocks, oc_block_choices, tile_pixels
from tensorir.ops.fused import FusedBody
from tensorir.ops.layout import register_tile_inner
from tensorir.ops.nn_compute import (
    chunk_first_axis,
    divisors,
    fuse_all,
    inline_elementwise,
    maybe_parallel,
    pick_vector,
    work_of,
)
from tensorir.schedule.space import knob

MID_BYTES = 128 << 10  # the depthwise rows of one chunk (every channel), kept in L2
# with the expand merged in, every chunk recomputes the expand's halo rows (2 per chunk for a
# 3x3 depthwise): taller chunks make that cheaper
BLOCK_MID_BYTES = 512 << 10
# the chunk's stack buffers (mid, a group's padded depthwise input, the merged expand's sums)
# stay under this, half codegen's limit (llvm.MAX_STACK_BYTES): PicoDet's first block merged at
# 800 x 608 (stride 2, 32-channel blocks) needed 4.46 MB with mid alone sizing the chunk
STACK_BYTES = 2 << 20


# channel blocks of the merged expand per register tile, first that divides: each broadcast
# input feeds that many FMAs (one block: a broadcast per FMA). MobileNetV2-224's merged block
# at 112x112 (16 -> 96 -> 24 channels), in model, 1 thread, three rounds: 1.23-1.32 ms with
# one block, 0.85-1.05 with two, 1.03-1.12 with three (Zen 3, benchmarks.layers).
EXPAND_BLOCKS = (2, 3)

CONVS = ("conv2d_nchwc", "conv2d_nchwc_wide")  # the 1x1 may accumulate in full vectors (conv_wide.py)


def is_dwpw(body: Any) -> bool:
    """Whether a fused body is a depthwise conv group followed by a 1x1 conv (fuse_dwpw)."""
    if not isinstance(body, FusedBody) or body.anchor is None or body.anchor == 0:
        return False
    convs = [k for k, s in enumerate(body.steps) if s.op in CONVS]
    return convs[0] == 0 and convs[-1] == body.anchor and len(convs) in (2, 3)


def schedule_dwpw_nchwc(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """Default schedule (module docstring)."""
    accs = [st for st in s.stages if st.name.endswith("conv_nchwc_acc") and st.op.reduce_axis]
    *ex_acc, dw_acc, pw_acc = accs  # the expand first when the block's expand is merged in
    pads = [st for st in map(s.stage_of, s.reads(dw_acc)) if st is not None and st.name.endswith("_pad")]
    mid = s.stage_of(s.reads(pw_acc)[0])
    inline_elementwise(s, keep=[*pads, mid])
    y = next(st for st in s.stages if st.is_output)
    dtype = pw_acc.tensor.dtype
    lanes = target.vector_lanes(dtype)
    b, m, oh, ow, j = y.op.axis
    v = pick_vector(j.extent, lanes)
    mb_choices = oc_block_choices(m.extent)
    mb = knob(
        "oc_blocks", mb_choices, default_oc_blocks(mb_choices, j.extent, lanes, target.num_vector_registers)
    )
    mo, mi = y.split(m, factor=mb)
    blocks = expand_blocks(mid) if ex_acc else 1
    budget = BLOCK_MID_BYTES if ex_acc else MID_BYTES
    row_bytes = _chunk_row_bytes(mid, pads, oh.extent, blocks, len(ex_acc), elem_bytes(dtype), budget)
    auto = chunk_first_axis(oh.extent, row_bytes, b.extent, budget)
    rows = knob("row_chunk", ["auto", *divisors(oh.extent)], "auto")
    so, si = y.split(oh, factor=auto if rows == "auto" else rows)
    jo, jv = y.split(j, factor=v)
    # one register tile of sums per (row, pixels, output blocks), the epilogue straight after;
    # wide (conv_wide's 16-lane sums for 8-channel blocks): the tile holds every output block
    wide = pw_acc.tensor.shape[4] != j.extent
    acc_v = pick_vector(pw_acc.tensor.shape[4], lanes) if wide else v
    per_pixel = pw_acc.tensor.shape[1] * pw_acc.tensor.shape[4] // acc_v if wide else j.extent // v * mb
    wo, wi = y.split(ow, factor=tile_pixels("ow_tile", ow.extent, per_pixel, target))
    if wide:
        y.reorder(b, so, si, wo, wi, mo, mi, jo, jv)
        y.unroll(mo)
    else:
        y.reorder(b, so, mo, si, wo, wi, mi, jo, jv)
    y.unroll(wi)
    y.unroll(mi)
    y.vectorize(jv)
    outer = fuse_all(y, [b, so])
    maybe_parallel(y, outer, work_of(pw_acc) + work_of(dw_acc))
    pw_acc.compute_at(y, wo)  # mid's reader is attached first (placement.py)
    mid.compute_at(y, outer)
    groups = _schedule_mid(mid, dw_acc, pads, target, blocks)
    if ex_acc:  # the expand's rows for `blocks` channel blocks, read by their padded depthwise inputs
        ex_acc[0].compute_at(mid, groups)
        _schedule_expand(ex_acc[0], target, blocks)
    _schedule_pointwise_tile(pw_acc, acc_v, target)


def _chunk_row_bytes(
    mid: Any, pads: list[Any], rows: int, blocks: int, expand: int, nbytes: int, budget: int
) -> int:
    """Bytes per output row that size the auto row chunk: mid's row (all channels), unless the
    chunk's stack buffers would pass STACK_BYTES at `budget` bytes of mid: then as many more
    as keep them under it. Besides mid, each group of `blocks` channel blocks holds its padded
    depthwise input rows (a stride-2 depthwise reads two input rows per output row, each of the
    wider input), and as much again for the merged expand's sums (`expand`)."""
    _, c, _, ow, lanes = mid.tensor.shape
    mid_row = ow * c * lanes * nbytes
    if not pads:
        return mid_row
    _, _, h_in, w_in, lanes_in = pads[0].tensor.shape
    in_row = h_in * w_in * blocks * lanes_in * nbytes // rows  # per output row, one group
    stack_row = mid_row + in_row * (1 + expand)
    return max(mid_row, -(-stack_row * budget // STACK_BYTES))


def expand_blocks(mid: Any) -> int:
    """Knob `ex_blocks`: channel blocks of the merged expand per register tile (EXPAND_BLOCKS
    where they divide the channel blocks)."""
    c = mid.op.axis[1].extent
    choices = [d for d in (1, 2, 3, 4) if c % d == 0]
    return knob("ex_blocks", choices, next((d for d in EXPAND_BLOCKS if c % d == 0), 1))


def _schedule_mid(mid: Any, dw_acc: Any, pads: list[Any], target: Any, blocks: int = 1) -> Any:
    """mid per channel block (in groups of `blocks`, the merged expand's unit): the block's
    padded input rows first, then per register tile (dw_ow_tile pixels of a row, one block)
    the depthwise sums, their bias and activation read from registers. Returns the loop
    over the groups."""
    lanes = target.vector_lanes(mid.tensor.dtype)
    _, c, h, w, j = mid.op.axis
    v = pick_vector(j.extent, lanes)
    tile = tile_pixels("dw_ow_tile", w.extent, j.extent // v, target)
    wo, wi = mid.split(w, factor=tile)
    jo, jv = mid.split(j, factor=v)
    group = c
    if blocks > 1:
        group, c = mid.split(c, factor=blocks)
        mid.reorder(group, c, h, wo, wi, jo, jv)
    else:
        mid.reorder(c, h, wo, wi, jo, jv)
    mid.unroll(wi)
    mid.vectorize(jv)
    dw_acc.compute_at(mid, wo)
    for pad in pads:  # read by dw_acc, attached there first
        pad.compute_at(mid, c)
        pj = pad.op.axis[-1]
        _, pv = pad.split(pj, factor=pick_vector(pj.extent, lanes))
        pad.vectorize(pv)
    ab, am, ah, aw, aj = dw_acc.op.axis
    ju, jw = dw_acc.split(aj, factor=v)
    dw_acc.reorder(ab, am, ah, *dw_acc.op.reduce_axis, aw, ju, jw)
    dw_acc.unroll(aw)
    dw_acc.unroll(ju)
    dw_acc.vectorize(jw)
    return group


def _schedule_expand(acc: Any, target: Any, blocks: int = 1) -> None:
    """The expand's sums for `blocks` channel blocks: ex_ow_tile pixels x the blocks in
    registers while its input channels run."""
    ab, am, ah, aw, aj = acc.op.axis
    v = pick_vector(aj.extent, target.vector_lanes(acc.tensor.dtype))
    ju, jw = acc.split(aj, factor=v)
    pixels = tile_pixels("ex_ow_tile", aw.extent, blocks * (aj.extent // v), target)
    wo, wi = acc.split(aw, factor=pixels)
    red = list(acc.op.reduce_axis)
    acc.reorder(ab, ah, wo, *red, wi, am, ju, jw)
    register_tile_inner(acc, (wi, am, ju), jw, red, True, False, target)


def _schedule_pointwise_tile(acc: Any, v: int, target: Any) -> None:
    """The 1x1 sums of one register tile (computed at the output's pixel-tile loop): the
    input channels outside, the tile's pixels x blocks x lanes inside, unrolled."""
    ab, am, ah, aw, aj = acc.op.axis
    ju, jw = acc.split(aj, factor=v)
    red = list(acc.op.reduce_axis)
    acc.reorder(ab, ah, *red, aw, am, ju, jw)
    register_tile_inner(acc, (aw, am, ju), jw, red, True, False, target)
