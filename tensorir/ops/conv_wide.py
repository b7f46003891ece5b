"""A packed conv whose output block is narrower than the vector accumulates in full vectors.

The layout pass gives a tensor the largest channel block dividing its channels (layout.py):
SqueezeNet's 1000 classes get blocks of 8, MobileNetV2's 24 channels too. On AVX-512 the
direct conv then runs 8-lane FMAs, half the machine (the 1000-class conv: 127 GFLOP/s, 40%
of the model). Here the weight is packed at compile time into blocks of `acc_block` (the
vector's lanes) output channels, zero-padded past M to a whole number of register tiles, and
the accumulator runs in those; only the epilogue reads it back in the output's blocks:

    w: (M'/wb, C/ib, KH, KW, ib, wb)      M' = M padded (whole tiles of `oc_blocks` vectors)
    acc[n, m', y, x, c] = the direct conv over wb output channels      (n, M'/wb, OH, OW, wb)
    y[n, m, y, x, j] = acc[n, m // r, y, x, (m % r) * ob + j] (+ bias)  r = wb / ob

The direct conv's schedule (layout.schedule_conv_nchwc) runs it: its `oc_blocks` knob then
counts accumulator vectors (`wide_tile`), read first when the weight is padded to M', and the
output's channel-block loop takes r blocks per vector. It is the `algorithm` "direct_wide" (the default
over "direct") of a group-1 conv with a constant weight on a CPU whose output block is
narrower than the vector (conv_algorithms.py).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.conv import Ints, conv, out_spatial
from tensorir.ops.conv_tile import MAX_PIXELS
from tensorir.ops.infer import Types
from tensorir.ops.layout import (
    conv_nchwc_attrs,
    conv_nchwc_flops,
    conv_nchwc_output,
    direct_conv_acc,
    pack_array,
    schedule_conv_nchwc,
    unpack_array,
    unpack_weight,
)
from tensorir.ops.registry import register_compute, register_op
from tensorir.schedule.schedule import ScheduleError
from tensorir.schedule.space import knob

OP = "conv2d_nchwc_wide"
WIDE_BLOCKS = (1, 2, 3, 4, 5, 6)  # accumulator vectors per register tile (the oc_blocks knob)


def eligible(w_shape: Sequence[int], lanes: int) -> bool:
    """A group-1 packed weight (M/ob, C/ib, KH, KW, ib, ob) whose ob is narrower than the lanes."""
    ob = w_shape[-1]
    return lanes > ob and lanes % ob == 0


WIDE_PADDING_MAX = 1.2  # padded / real output channels past which 8-lane FMAs at full rate win


def wide_by_default(w_shape: Sequence[int], lanes: int, full_rate_lanes: int) -> bool:
    """Whether an eligible conv takes `direct_wide` by default. Where the narrow block's own
    vectors run at the full rate too (Zen 4: 512-bit FMAs are two 256-bit halves), the wide
    accumulator still needs fewer loads and broadcasts per FMA (SqueezeNet's 1000-class conv:
    110 GFLOP/s wide, 87-93 direct) but computes the zeros it pads with: MobileNetV2's
    24-channel 1x1s (32 computed, 25% zeros) ran 17% faster direct."""
    if not eligible(w_shape, lanes):
        return False
    if eligible(w_shape, full_rate_lanes):
        return True
    channels = w_shape[0] * w_shape[-1]
    return -(-channels // lanes) * lanes <= WIDE_PADDING_MAX * channels


def default_wide_blocks(registers: int) -> int:
    """The vectors per tile that keep the most accumulators in registers (with a tile of
    pixels as wide as layout.schedule_conv_nchwc allows them): 3 of 32 AVX-512 registers
    (27 accumulators; SqueezeNet's 1000-class conv 0.89 ms at 2, 0.74 ms at 3, 1 thread)."""

    def accumulators(k: int) -> int:
        return k * min(MAX_PIXELS, (registers - k - 2) // k)

    return max(WIDE_BLOCKS, key=lambda k: (accumulators(k), k))


def widen_weight(w: np.ndarray, wb: int, mo_wide: int) -> np.ndarray:
    """(M/ob, C/ib, KH, KW, ib, ob) -> (mo_wide, C/ib, KH, KW, ib, wb), zero past M."""
    mo, co, kh, kw, ib, ob = w.shape
    flat = np.zeros((mo_wide * wb, co, kh, kw, ib), w.dtype)  # output channel first
    flat[: mo * ob] = np.moveaxis(w, 5, 1).reshape(mo * ob, co, kh, kw, ib)
    return np.ascontiguousarray(np.moveaxis(flat.reshape(mo_wide, wb, co, kh, kw, ib), 1, 5))


def wide_transform(wb: int, mo_wide: int) -> Any:
    transform = functools.partial(widen_weight, wb=wb, mo_wide=mo_wide)
    transform.key = f"wide{wb}x{mo_wide}"  # type: ignore[attr-defined]  (one copy per constant)
    return transform


def wide_types(w: TensorType, wb: int, tile: int) -> tuple[TensorType, dict[str, int]]:
    """(the widened weight's type, the op's extra attributes) for `tile` vectors per tile."""
    mo, co, kh, kw, ib, ob = w.shape
    vectors = -(-mo * ob // wb)
    tile = min(tile, vectors)  # as layout.wide_tile caps it
    mo_wide = -(-vectors // tile) * tile
    return TensorType((mo_wide, co, kh, kw, ib, wb), w.dtype), {"block": ob, "channels": mo * ob}


def _infer(ins: Types, attrs: dict[str, Any]) -> Types:
    x, w = ins[0], ins[1]
    ob, m = int(attrs["block"]), int(attrs["channels"])
    if x.ndim != 5 or w.ndim != 6 or w.shape[1] != x.shape[1] or w.shape[4] != x.shape[4]:
        raise ShapeError(f"{OP}: weight {w} does not match input {x}")
    if m % ob or w.shape[5] % ob or w.shape[0] * w.shape[5] < m:
        raise ShapeError(f"{OP}: {m} channels in blocks of {ob} do not fit weight {w}")
    if len(ins) > 2 and ins[2].shape != (m // ob, ob):
        raise ShapeError(f"{OP} bias {ins[2]} must have shape [{m // ob}, {ob}]")
    n, _, h, wd, _ = x.shape
    s, p, d = conv_nchwc_attrs(attrs)
    oh, ow = out_spatial((h, wd), w.shape[2:4], s, p, d)
    return [TensorType((n, m // ob, oh, ow, ob), x.dtype)]


@register_op(OP, infer=_infer, pattern="opaque", flops=conv_nchwc_flops)
def conv2d_nchwc_wide(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    group: int = 1,
    block: int = 1,
    channels: int = 1,
) -> np.ndarray:
    """Unpack, run `conv` on the first `channels` outputs, pack in blocks of `block`."""
    bias = None if b is None else b.reshape(-1)
    weight = unpack_weight(w, False)[:channels]
    return pack_array(conv(unpack_array(x), weight, bias, strides, pads, dilations), block)


def conv_wide_compute(
    x: Any,
    w: Any,
    b: Any = None,
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    group: int = 1,
    block: int = 1,
    channels: int = 1,
) -> Any:
    acc = direct_conv_acc(x, w, strides, pads, dilations, group)
    r = w.shape[5] // block

    def at(i: Any, m: Any, y: Any, z: Any, j: Any) -> Any:
        return acc[i, m // r, y, z, (m % r) * block + j]

    shape = (acc.shape[0], channels // block, *acc.shape[2:4], block)
    return conv_nchwc_output(acc, b, x.dtype, shape=shape, at=at)


def wide_tile(acc: Any, registers: int) -> int:
    """Accumulator vectors per register tile: `oc_blocks`, at most the conv's vectors; the
    weight's padding (M' a multiple of it) was made for it. `acc` None: the knob's value
    (wide_types caps it the same way)."""
    k = knob("oc_blocks", list(WIDE_BLOCKS), default_wide_blocks(registers))
    if acc is None:
        return k
    k = min(k, acc.tensor.shape[1])  # no more vectors than the conv has
    if acc.tensor.shape[1] % k:
        raise ScheduleError(f"oc_blocks {k} does not divide the wide weight's {acc.tensor.shape[1]} blocks")
    return k


def schedule_conv_wide(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """The direct conv's schedule with `wide_tile` accumulator vectors per register tile."""
    schedule_conv_nchwc(s, outputs, target, wide_tile=wide_tile)


register_compute(OP, schedule=schedule_conv_wide)(conv_wide_compute)
