"""A stride-1 1x1 conv on a 16-register CPU reads its image with whole rows merged.

In NCHW[x]c a 1x1, stride-1, unpadded conv is a product over pixels that does not care where
a row ends: (N, C/c, H, W, c) and (N, C/c, H/k, k*W, c) are the same bytes, and so are its
output and any same-sized tensor its epilogue reads. The packed conv's register tile runs
along one row (layout.schedule_conv_nchwc); on a 16-register file it is as wide as 8 sums
allow, the last tile of a row guarded (conv_tile.tile_pixels), and that tail costs about what
a full tile does (the same weight loads, fewer FMAs). ResNet-50's 14- and 7-wide rows at 4
pixels a tile end in 2- and 3-pixel tails: one tile in four or two. Merging k rows (a view,
no copy) leaves one tail per k rows, or none where k*W is a multiple of the tile.

The merge: the fewest rows that give (within 1%) the fewest tiles per image, keeping
MIN_PARALLEL iterations for the parallel loop (channel groups x merged rows): 14x14 at 4 pixels
a tile becomes 7 x 28 (56 -> 49 tiles), 7x7 becomes 1 x 49 (14 -> 13). On 32-register
files, whose tiles already divide the row or end in a tail of enough sums
(conv_tile.tile_pixels, balanced_tile), only rows too narrow for LATENCY_SUMS sums at the
default blocks are merged: MobileNetV2-96's 3x3 maps, 3 pixels x 2
blocks a row, become 1 x 9, whose tile reads each weight once instead of once per row. It is not a knob: the
tile and row-chunk knobs' choices follow the merged shape, so a space holding both would
sample illegal pairs; `pin("merge_rows", k)` forces k (tests), TIR_MERGE_ROWS=0 keeps the
rows (`python -m benchmarks.knob_ab MODEL --env TIR_MERGE_ROWS=0`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tensorir.config import merge_rows_enabled
from tensorir.graph.types import TensorType
from tensorir.ops.conv_tile import (
    LATENCY_SUMS,
    default_oc_blocks,
    oc_block_choices,
    small_file_pixels,
    wide_file_pixels,
)
from tensorir.ops.fused import FusedBody
from tensorir.ops.layout import conv_nchwc_attrs
from tensorir.ops.registry import is_elementwise
from tensorir.schedule.space import pinned

NEAR_FEWEST = 1.01  # a merge within 1% of the fewest tiles is as good (more rows to split)
# parallel iterations (output channel groups x rows) to keep: tir_parallel_for splits a loop
# into 4 chunks per thread (codegen/parallel.py), so 16 keep 4 threads balanced. (An earlier
# note blamed a 2-thread loss on the PP-OCR classifier on a smaller value: it was the VM's
# noise; that model has no merged conv at 4 or 16.)
MIN_PARALLEL = 16


def pointwise(w_shape: Sequence[int], attrs: Mapping[str, Any]) -> bool:
    """A dense 1x1 conv, stride 1, dilation 1, no padding."""
    strides, pads, dilations = conv_nchwc_attrs(dict(attrs))
    group = int(attrs.get("group", 1))
    one = tuple(strides) == (1, 1) and tuple(dilations) == (1, 1)
    return group == 1 and tuple(w_shape[2:4]) == (1, 1) and one and not any(pads)


def _pixelwise_epilogue(
    in_types: Sequence[TensorType], attrs: Mapping[str, Any], anchor: int | None, hw: tuple[int, int]
) -> bool:
    """A plain conv, or a fused one whose other steps are elementwise and whose other inputs
    span the image (hw) or broadcast over all of it: they see pixels, not rows."""
    if anchor is None:
        return True
    body: FusedBody = attrs["body"]
    if not all(k == anchor or is_elementwise(s.op) for k, s in enumerate(body.steps)):
        return False
    own = set(body.steps[anchor].args)
    for j, t in enumerate(in_types):
        spatial = tuple((1,) * (5 - len(t.shape)) + tuple(t.shape))[2:4] if len(t.shape) <= 5 else None
        if j not in own and spatial not in (tuple(hw), (1, 1)):
            return False
    return True


def default_merge(h: int, w: int, tile: int, groups: int) -> int:
    """The rows to merge: the fewest k dividing h whose image takes within NEAR_FEWEST of the
    fewest register tiles ((h/k) * ceil(k*w / tile)), among those leaving MIN_PARALLEL parallel
    iterations (`groups` output channel groups x h/k rows)."""
    ks = [k for k in range(1, h + 1) if h % k == 0 and (k == 1 or groups * (h // k) >= MIN_PARALLEL)]
    tiles = {k: (h // k) * -(-k * w // tile) for k in ks}
    fewest = min(tiles.values())
    return min(k for k in ks if tiles[k] <= fewest * NEAR_FEWEST)


def _default_tile(w_shape: Sequence[int], lanes: int, registers: int) -> tuple[int, int, int]:
    """(pixels per register tile, accumulator vectors per pixel, output channel groups) the
    schedule's defaults give."""
    m_blocks, ob = w_shape[0], w_shape[5]
    mb = default_oc_blocks(oc_block_choices(m_blocks), ob, lanes, registers)
    u = max(1, mb * ob // lanes)
    pixels = wide_file_pixels(u, registers) if registers > 16 else small_file_pixels(u)
    return pixels, u, max(1, m_blocks // mb)


def merge_rows(
    in_types: tuple[TensorType, ...],
    attrs: Mapping[str, Any],
    anchor: int | None,
    xi: int,
    wi: int,
    target: Any,
) -> tuple[TensorType, ...]:
    """`in_types` with every tensor of the conv's image size seen with rows merged."""
    x, w = in_types[xi].shape, in_types[wi].shape
    conv_attrs = attrs if anchor is None else dict(attrs["body"].steps[anchor].attrs)
    if len(x) != 5 or not pointwise(w, conv_attrs):
        return in_types
    h, wd = x[2], x[3]
    registers = target.num_vector_registers
    tile, u, groups = _default_tile(w, target.vector_lanes(in_types[xi].dtype), registers)
    if registers > 16 and wd * u >= LATENCY_SUMS:  # a wide file's tiles already fit its rows
        return in_types
    if not _pixelwise_epilogue(in_types, attrs, anchor, (h, wd)):
        return in_types
    k = pinned("merge_rows") or (default_merge(h, wd, tile, groups) if merge_rows_enabled() else 1)
    if k == 1 or h % k:
        return in_types

    def merged(t: TensorType) -> TensorType:
        if len(t.shape) != 5 or tuple(t.shape[2:4]) != (h, wd):
            return t
        n, c, _, _, b = t.shape
        return TensorType((n, c, h // k, k * wd, b), t.dtype)

    return tuple(merged(t) if j != wi else t for j, t in enumerate(in_types))
