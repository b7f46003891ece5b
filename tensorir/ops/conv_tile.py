"""Register-tile sizes of the packed (NCHW[x]c) convs: output pixels and output channel blocks
per tile, their knobs' choices and defaults (layout.schedule_conv_nchwc, dwpw.py)."""

from __future__ import annotations

from typing import Any

MAX_PIXELS = 12  # output pixels per register tile
OC_BLOCKS = 2  # output channel blocks per register tile (dense convs share the input broadcasts)
# A 16-register file (x86 AVX2) keeps at most 8 sums per tile, though 12 fit beside the
# weights and the broadcast: on Zen 3, 512 -> 512 1x1 at 12x12, one thread, 4 pixels x 2
# blocks ran 1.17-1.29 ms, 6 x 2 1.51-1.65, 3 x 4 1.38-1.42, 2 x 4 1.30 (onnxruntime 1.24-1.38);
# MobileNetV1 whole 21.1-22.4 -> 17.8-18.1 ms. A tile is at least 2 pixels wide (5 blocks:
# 10 sums, default_oc_blocks).
SMALL_FILE_ACCUMULATORS = 8
# ... except 3 blocks x 4 pixels: 12 sums, 3 weight vectors and one broadcast fill the file,
# and each step loads 7 vectors for 12 FMAs. Of the AVX2 workloads whose blocks divide by 3
# the tuner chose it for 10 of 12 at one thread, 3 of 7 at two (2 x 5 for 3 others;
# tuning_logs/x86_64-znver3-avx2-t1, -t2), and as the default (untuned,
# benchmarks.knob_ab, 40 interleaved runs, Zen 3) MobileNetV2-224 ran 0.951x / 0.972x at
# 1 / 2 threads, SqueezeNet 1.1 0.984x / 0.983x, MobileNetV3-small 0.923x (1 thread).
THREE_BLOCK_ACCUMULATORS = 12
# A conv to one output pixel (a classifier or squeeze-excite 1x1 on pooled features) is a
# matrix-vector product: every weight is read once, from memory, for one FMA, so the kernel
# is as fast as its weights stream in. Its register tile spans output blocks only, each block
# a weight stream of its own: 8 streams pull more of the memory's bandwidth than 2 (PP-LCNet's
# 512 -> 1280 1x1 on pooled features, 2.6 MB of weights, in the model, one thread, Zen 4:
# 0.074 -> 0.047 ms).
PIXEL_OC_BLOCKS = 8
# Sums a register tile needs to hide the FMA latency (4 cycles x 2 pipes on Zen 4/5 and
# Cortex-A76). On a 32-register file the tile spans up to MAX_PIXELS pixels; a row that ends in
# a tail of fewer sums waits on the latency there, so such rows are split into balanced tiles
# (balanced_tile). ddddocr's detector, one thread, Zen 5: its 3x3 stride-2 conv to 13x13 (192
# -> 384 channels) ran 1.16-1.27 ms with 12 + 1 pixels, 0.92-0.97 with 13 or 7 + 6; its 768 ->
# 384 1x1 at 13x13 0.51-0.53 -> 0.40-0.42; the 3x3 stride-2 conv to 26x26 (12 + 12 + 2)
# 0.99-1.02 -> 0.92-0.94 with 9 + 9 + 8 (benchmarks.task_configs).
LATENCY_SUMS = 8
# A row narrower than that many sums at OC_BLOCKS blocks (3 pixels x 2 blocks) takes more output
# blocks per tile instead (narrow_row_oc_blocks). MobileNetV2-96's 1x1s at 3x3, alone, cold,
# one thread, Zen 5: 960 -> 320 0.067-0.077 ms with 2 blocks, 0.055-0.064 with 4, 0.056-0.059
# with 5; 960 -> 160 0.036-0.038 with 2, 0.028-0.029 with 5.


def tile_pixels(name: str, width: int, u: int, target: Any, live_per_pixel: int = 0) -> int:
    """Knob `name`: output pixels per register tile of `u` accumulator vectors per pixel
    (default: as many as the registers hold beside the weights, up to MAX_PIXELS;
    `live_per_pixel` more registers per pixel where the tile keeps inputs live too; on a
    16-register file SMALL_FILE_ACCUMULATORS sums)."""
    from tensorir.ops.nn_compute import pick_rows
    from tensorir.schedule.space import knob

    u = max(1, u)
    regs = target.num_vector_registers
    if regs <= 16:  # AVX2: small_file_pixels (or one more), the last tile guarded
        default = small_file_tile(width, u, regs)
    else:
        cap = wide_file_pixels(u, regs, live_per_pixel)
        default = pick_rows(width, cap)
        if width % default and width % default * u < LATENCY_SUMS:
            default = balanced_tile(width, u, cap)
    return knob(name, tile_choices(width, 2 * MAX_PIXELS), default)


def wide_file_pixels(u: int, registers: int, live_per_pixel: int = 0) -> int:
    """Pixels per tile on a 32-register file: as many as fit beside `u` weight vectors and a
    broadcast (`live_per_pixel` more registers per pixel), at most MAX_PIXELS."""
    return max(1, min(MAX_PIXELS, (registers - u - 2) // (u + live_per_pixel)))


def balanced_tile(width: int, u: int, cap: int) -> int:
    """Pixels per tile (at most `cap`, at least half of it) that cover a row of `width` in the
    fewest FMA issue slots, a tile of fewer than LATENCY_SUMS sums costing as much as one of
    that many; then the fewest tiles, then the widest last tile. A 13-wide row of 2-block
    tiles: 7 + 6 pixels (14 + 12 sums), not 12 + 1 (24 + 2, the last waiting on the latency)."""

    def cost(p: int) -> tuple[int, int, int]:
        full, tail = divmod(width, p)
        slots = full * max(p * u, LATENCY_SUMS) + (max(tail * u, LATENCY_SUMS) if tail else 0)
        return slots, full + (tail > 0), -(tail or p)

    return min(range(max(1, cap // 2), min(cap, width) + 1), key=cost)


def small_file_tile(width: int, u: int, registers: int = 16) -> int:
    """The default pixels per tile on a 16-register file: small_file_pixels, or one pixel
    more where that fits the registers (the sums, `u` weight vectors and a broadcast), stays
    within SMALL_FILE_ACCUMULATORS + u sums, and covers the row in less time by
    `_row_steps`. A 14-wide row of 2-block tiles: 4 + 4 + 4 + 2 pixels, the last tile's 4
    sums wait on the FMA latency, 32 steps; 5 + 5 + 4, 28 (ResNet-50's 3x3/s2 at 28 -> 14:
    the tuner's best record is 5 pixels). 28- and 56-wide rows keep 4."""
    base = min(width, small_file_pixels(u))
    wider = base + 1
    fits = wider * u <= SMALL_FILE_ACCUMULATORS + u and wider * u + u + 1 <= registers
    if wider <= width and fits and _row_steps(width, wider, u) < _row_steps(width, base, u):
        return wider
    return base


def _row_steps(width: int, pixels: int, u: int) -> int:
    """Reduction steps' worth of FMA issue slots a row of `width` pixels takes in tiles of
    `pixels`: a tile of fewer than SMALL_FILE_ACCUMULATORS sums waits on the FMA latency
    (4 cycles x 2 pipes on Zen 3), so it costs as much as one of that many."""
    full, tail = divmod(width, pixels)
    steps = full * max(pixels * u, SMALL_FILE_ACCUMULATORS)
    return steps + (max(tail * u, SMALL_FILE_ACCUMULATORS) if tail else 0)


def small_file_pixels(u: int) -> int:
    """Pixels per register tile of `u` accumulator vectors per pixel on a 16-register file:
    SMALL_FILE_ACCUMULATORS sums (THREE_BLOCK_ACCUMULATORS for 3), at least 2 pixels."""
    sums = THREE_BLOCK_ACCUMULATORS if u == 3 else SMALL_FILE_ACCUMULATORS
    return max(2, sums // max(1, u))


def oc_block_choices(blocks: int, pixels: int = 2) -> list[int]:
    """Output channel blocks per register tile: the divisors of `blocks` up to 6, or up to
    PIXEL_OC_BLOCKS for a conv to one output pixel (`pixels`: the output's height x width)."""
    top = PIXEL_OC_BLOCKS if pixels == 1 else 6
    return [d for d in range(1, top + 1) if blocks % d == 0]


def pixel_oc_blocks(choices: list[int], blocks: int) -> int:
    """The default tile of a conv to one output pixel: the most output blocks in `choices`
    that still leave two tiles for two threads (PIXEL_OC_BLOCKS)."""
    return max(d for d in choices if blocks // d >= 2 or d == 1)


def default_oc_blocks(choices: list[int], block: int, lanes: int, registers: int = 32) -> int:
    """OC_BLOCKS channel blocks per register tile; narrow blocks (8 channels on a 16-lane
    target, as for 24 channels) take up to OC_BLOCKS full vectors' worth instead. Where only
    one block would fit that, a divisor up to twice as wide is taken (SqueezeNet's 1000
    classes are 125 blocks of 8: one 8-lane accumulator per pixel was load-bound, 5 share
    each broadcast). On a 16-register file any divisor in `choices` is taken there (the same
    125 blocks of 8 on AVX2: 5 blocks x 2 pixels 3.29-3.41 ms against 4.07 for 1 x 8, Zen 3,
    one thread; onnxruntime 3.06-3.29). On a 16-register file, 3 full-vector blocks where
    they divide (THREE_BLOCK_ACCUMULATORS)."""
    if registers <= 16 and block == lanes and 3 in choices:
        return 3
    want = max(OC_BLOCKS, OC_BLOCKS * lanes // max(1, block))
    best = max(d for d in choices if d <= want)
    if best == 1:
        bound = 2 * want if registers > 16 else max(choices)
        best = min((d for d in choices if 1 < d <= bound), default=1)
    return best


def narrow_row_oc_blocks(blocks: int, choices: list[int], width: int, vectors: int, registers: int) -> int:
    """The default output blocks per tile where a whole row of `width` pixels, `vectors`
    accumulator vectors per block, keeps fewer than LATENCY_SUMS sums with `blocks` (a 3-wide
    map: 3 pixels x 2 blocks, 6 sums waiting on the FMA latency): on a 32-register file, the
    most blocks in `choices` whose sums, weight vectors and a broadcast fit the registers.
    MobileNetV2-96's 1x1s at 3x3 (LATENCY_SUMS); else `blocks`."""
    if registers <= 16 or width * blocks * vectors >= LATENCY_SUMS:
        return blocks
    fits = [d for d in choices if d >= blocks and d * vectors * (width + 1) + 1 <= registers]
    return max(fits, default=blocks)


def tile_choices(extent: int, cap: int) -> list[int]:
    """Register-tile widths: every size up to `cap` (guarded tails are legal), capped by extent."""
    return list(range(1, min(extent, cap) + 1))
