"""A packed conv's weights streamed ahead: the next channel block group's weights are
prefetched while the current group runs (schedule/prefetch.py).

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
