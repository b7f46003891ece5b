"""Weights streamed ahead: a packed conv's next channel block group (`prefetch_next_group`)
and a packed Winograd GEMM's next output-channel block of U (`prefetch_next_wino_block`) are
prefetched while the current one runs (schedule/prefetch.py).

The packed conv (layout.schedule_conv_nchwc) runs one group of `oc_blocks` output channel
blocks over every row before the next group: the group's weights (oc_blocks x input
channels x taps x 64 bytes per block line) come from DRAM during its first register tile
and from L2 for the others. Where the weights are large and the map small (ResNet-50's
layer 4: 9.4 MB per 3x3 conv, 7 x 7 outputs), that first tile asks for the lines about
three times faster than one core's DRAM share delivers them, and the FMAs wait (1.00 ms
with cold caches against 0.87 warm, 1 thread).

Here every step of the group's reduction (input channel block, tap) also prefetches P lines
of the next group, P chosen so that the steps of the group's rows x tiles cover all of it
once: by the time the next group starts, its weights are in L2 and the DRAM traffic ran
alongside the arithmetic. Knob `prefetch_weights`: default on from PREFETCH_MIN_BYTES of
weights and MIN_INNER_CHANNELS input channels per step (the RGB stem, 1 channel per step,
took 0.26 -> 0.49 ms with it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tensorir.dtypes import elem_bytes

PREFETCH_MIN_BYTES = 64 << 10
MIN_INNER_CHANNELS = 8  # input channels per reduction step (fewer: the prefetches cost more)
LINE_BYTES = 64


def prefetch_next_group(
    acc: Any, w: Any, mb: int, rows: int, tiles: int, pixels: int, red: Sequence[Any], target: Any
) -> None:
    """On the packed conv's accumulator `acc` (computed per register tile; reduction loops
    `red` in loop order, the first three outside the register tile's inner loop): prefetch
    the next group of `mb` blocks of weights `w` (M/ob, C/ib, KH, KW, ib, ob), spread over
    the `rows` x `tiles` register tiles (`pixels` wide) of the current group."""
    from tensorir.schedule.space import knob

    block_elems = math.prod(w.shape[1:])
    groups = w.shape[0] // mb
    nbytes = w.shape[0] * block_elems * elem_bytes(w.dtype)
    if groups < 2 or len(red) < 4:  # no next group to fetch
        return
    default = nbytes >= PREFETCH_MIN_BYTES and red[-1].extent >= MIN_INNER_CHANNELS
    if not knob("prefetch_weights", [0, 1], int(default)):
        return
    _, am, ah, aw, _ = acc.op.axis
    line = LINE_BYTES // elem_bytes(w.dtype)
    outer = list(red[:3])
    steps = math.prod(a.extent for a in outer)
    per = -(-(mb * block_elems // line) // (rows * tiles * steps))  # lines per step
    unit = per * line
    terms = [(am, block_elems, 1), (ah, tiles * steps * unit, 1), (aw, steps * unit, pixels)]
    scale = unit
    for axis in reversed(outer):
        terms.append((axis, scale, 1))
        scale *= axis.extent
    acc.prefetch(w, outer[-1], terms, offset=mb * block_elems, count=per, stride=line)


WINO_PREFETCH_MIN_BYTES = 1 << 20  # transformed weights below this stay in L2/L3 between runs


def prefetch_next_wino_block(acc: Any, u: Any, kbb: int, at: Any) -> None:
    """On the packed Winograd GEMM `acc` (M[e, f, n, t, j] = sum_rc V[e, f, n, t, rc] *
    U[e, f, j // ob, rc, j % ob], computed per y block of `kbb` output channel blocks):
    at each step `at` of the reduction rc, prefetch row rc of the next block's U slice at
    this (e, f): one line per output channel block, so that while a block runs, the next
    block's alpha^2 x C x kbb x ob weights come in from memory beside the arithmetic.

        U (alpha, alpha, M/ob, C, ob): flat (((e * alpha + f) * M/ob + kb) * C + rc) * ob + ki
        acc's j at the block's start = kb * ob, so kb * C * ob = j * C

    Knob `wino_prefetch`: default on from WINO_PREFETCH_MIN_BYTES of U (ResNet-50's layer 3
    and 4 Winograd weights, 4-17 MB each, come from memory in a whole-model run)."""
    from tensorir.schedule.space import knob

    alpha, _, mo, c, ob = u.shape
    nbytes = math.prod(u.shape) * elem_bytes(u.dtype)
    if mo // kbb < 2:  # one block: nothing next
        return
    if not knob("wino_prefetch", [0, 1], int(nbytes >= WINO_PREFETCH_MIN_BYTES)):
        return
    ae, af, _, _, aj = acc.op.axis
    (rc,) = acc.op.reduce_axis
    terms = [(ae, alpha * mo * c * ob, 1), (af, mo * c * ob, 1), (aj, c, 1), (rc, ob, 1)]
    acc.prefetch(u, at, terms, offset=kbb * c * ob, count=kbb, stride=c * ob)
