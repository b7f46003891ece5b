"""The packed direct conv's register tile (layout.schedule_conv_nchwc): the sums of one tile
(ow_tile pixels x oc_blocks channel blocks of one row) live in a tile-sized local buffer
allocated inside the output's pixel-tile loop, and the epilogue (bias, fused add and relu)
stores the output from it in the same loop iteration; no row-chunk accumulator buffer.
Numerics against float64 numpy for every tile width (guarded tails included), 1x1 with a
fused residual add + relu, and a padded strided 3x3.

Tolerance: max |err| / max |ref| < 1e-5 (fp32 sums over <= 288 terms)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tensorir.graph.types import TensorType
from tensorir.ops.conv import conv
from tensorir.ops.conv_tile import _row_steps, balanced_tile, narrow_row_oc_blocks, small_file_tile
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import build_kernel, kernel_space
from tensorir.ops.layout import pack_array, pack_weight, unpack_array
from tensorir.target import get_target
from tests.ops.kernel_run import assert_relative, run_built

HOST = get_target("host")
L = HOST.vector_lanes("float32")
TOL = 1e-5
# conv (bias) -> add the residual (input 3) -> relu
ADD_RELU = FusedBody(
    (Step("conv2d_nchwc", (("group", 1),), (0, 1, 2)), Step("add", (), (4, 3)), Step("relu", (), (5,))), 4, 0
)


def _case(c: int, m: int, size: int, k: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, size, size)).astype(np.float32)
    w = rng.standard_normal((m, c, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    return x, w, b


def _build(op, ins, attrs, config=None):
    types = [TensorType(a.shape) for a in ins]
    return build_kernel(op, types, attrs, HOST, config, const_args=frozenset({1, 2}))


def _run(op, ins, attrs, out_shape, config=None) -> np.ndarray:
    return run_built(*_build(op, ins, attrs, config), ins, out_shape)


def _check(got: np.ndarray, ref: np.ndarray) -> None:
    assert_relative(got, ref, TOL)


def _residual_case(size: int):
    x, w, b = _case(2 * L, 4 * L, size, 1, seed=3)
    r = np.random.default_rng(4).standard_normal((1, 4 * L, size, size)).astype(np.float32)
    ins = [pack_array(x, L), pack_weight(w, L, L, False), b.reshape(-1, L), pack_array(r, L)]
    ref = np.maximum(conv(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)) + r, 0)
    return ins, ref


def test_sums_per_register_tile_then_epilogue():
    ins, _ = _residual_case(12)
    cfg = {"algorithm": "direct", "oc_blocks": 2, "ow_tile": 4}
    func, spec = _build("fused", ins, {"body": ADD_RELU}, cfg)
    assert spec.algorithm == "direct"
    lines = str(func).splitlines()
    allocs = [k for k, line in enumerate(lines) if "conv_nchwc_acc = allocate(" in line]
    assert len(allocs) == 1
    # one row x 4 pixels x 2 blocks: the tile, not a chunk of rows
    assert re.search(rf"allocate\(f32\[1,2,1,4,{L}\], \"local\"\)", lines[allocs[0]]), lines[allocs[0]]
    indent = len(lines[allocs[0]]) - len(lines[allocs[0]].lstrip())
    body = []  # the rest of the pixel-tile loop's body
    for line in lines[allocs[0] + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        body.append(line)
    stores = [line for line in body if re.match(r"\s*f\d_relu\[", line)]
    assert len(stores) == 2 * 4  # the epilogue, unrolled over the tile, in the same iteration
    assert all("conv_nchwc_acc[ramp(" in line and "in3[ramp(" in line for line in stores)


def test_every_tile_width_with_residual_add():
    ins, ref = _residual_case(7)
    types = [TensorType(a.shape) for a in ins]
    space = kernel_space("fused", types, {"body": ADD_RELU}, HOST)
    tiles = next(kn for kn in space.knobs("direct") if kn.name == "ow_tile").choices
    assert 3 in tiles and 7 in tiles  # 3 leaves a guarded tail of one pixel
    for t in tiles:
        for mb in (1, 2, 4):
            cfg = {"algorithm": "direct", "ow_tile": t, "oc_blocks": mb}
            got = _run("fused", ins, {"body": ADD_RELU}, (1, 4, 7, 7, L), cfg)
            _check(unpack_array(got), ref)


@pytest.mark.parametrize("tile", [2, 5])
def test_padded_strided_3x3(tile):
    x, w, b = _case(L, 2 * L, 11, 3, seed=5)
    attrs = {"group": 1, "pads": (1, 1, 1, 1), "strides": (2, 2)}
    ins = [pack_array(x, L), pack_weight(w, L, L, False), b.reshape(-1, L)]
    cfg = {"algorithm": "direct", "ow_tile": tile}
    got = _run("conv2d_nchwc", ins, attrs, (1, 2, 6, 6, L), cfg)
    x, w, b = (a.astype(np.float64) for a in (x, w, b))
    ref = conv(x, w, b, strides=(2, 2), pads=(1,) * 4)
    _check(unpack_array(got), ref)


@pytest.mark.parametrize(("size", "stride"), [(13, 2), (14, 2), (11, 3)])
def test_strided_1x1_gathers_its_pixels_first(size, stride):
    """A 1x1 conv with stride s and no padding reads every s-th pixel: they are gathered
    into a dense (OH, OW) copy (a cropped copy of the whole input, as before, moved s^2
    times the data), and the conv reads that copy at stride 1."""
    x, w, b = _case(2 * L, 2 * L, size, 1, seed=7)
    attrs = {"group": 1, "strides": (stride, stride)}
    ins = [pack_array(x, L), pack_weight(w, L, L, False), b.reshape(-1, L)]
    out = (size - 1) // stride + 1
    func, spec = _build("conv2d_nchwc", ins, attrs, {"algorithm": "direct"})
    # the copy holds OW pixels per row (whole, or the rows of the parallel chunk)
    copy = re.search(rf"conv_nchwc_pad(?:: | = allocate\()f32\[1,2,(\d+),{out},{L}\]", str(func))
    assert copy and int(copy.group(1)) <= out, str(func)[:600]
    got = run_built(func, spec, ins, (1, 2, out, out, L))
    x, w, b = (a.astype(np.float64) for a in (x, w, b))
    _check(unpack_array(got), conv(x, w, b, strides=(stride, stride)))


def test_unpadded_window_reads_the_input_in_place():
    """A 3x3/s2 conv without padding over an even size reads one row and column less than
    the input has: no cropped copy, the conv reads the input itself."""
    x, w, b = _case(L, L, 12, 3, seed=8)
    attrs = {"group": 1, "strides": (2, 2)}
    ins = [pack_array(x, L), pack_weight(w, L, L, False), b.reshape(-1, L)]
    func, spec = _build("conv2d_nchwc", ins, attrs, {"algorithm": "direct"})
    assert "conv_nchwc_pad" not in str(func)
    got = run_built(func, spec, ins, (1, 1, 5, 5, L))
    x, w, b = (a.astype(np.float64) for a in (x, w, b))
    _check(unpack_array(got), conv(x, w, b, strides=(2, 2)))


@pytest.mark.parametrize(
    ("target", "width", "tile"),
    [
        ("x86_64-v3", 28, 4),  # 16 ymm: 8 sums of 2 blocks = 4 pixels, 7 whole tiles
        ("x86_64-v3", 7, 4),  # 4 + 3: the guarded last tile keeps 6 sums, 5 + 2 would keep 4
        ("x86_64-v3", 14, 5),  # 5 + 5 + 4 (10, 10, 8 sums) rather than 4 + 4 + 4 + 2 (4 sums)
        ("x86_64-v3", 3, 3),  # narrower than the tile: the whole row
        ("linux-arm64", 14, 7),  # 32 q: as many as fit beside the weights, a divisor of 14
        ("linux-arm64", 13, 7),  # 7 + 6 (14, 12 sums) rather than 12 + 1 (2 sums at the latency)
        ("linux-arm64", 26, 9),  # 9 + 9 + 8 rather than 12 + 12 + 2
        ("linux-arm64", 52, 12),  # 12 x 4 + 4: the last tile's 8 sums hide the latency
    ],
)
def test_default_tile_by_register_file(target, width, tile):
    """A 16-register file keeps 8 sums per tile (conv_tile.SMALL_FILE_ACCUMULATORS) with a
    guarded last tile, or one pixel more where the row's tiles then take fewer FMA steps
    (conv_tile.small_file_tile); a 32-register file keeps the divisor rule, or balanced tiles
    where the row would end in a tail of fewer than 8 sums (conv_tile.balanced_tile)."""
    tgt = get_target(target)
    lanes = tgt.vector_lanes("float32")
    x, w, b = _case(2 * lanes, 2 * lanes, width, 1, seed=6)
    ins = [pack_array(x, lanes), pack_weight(w, lanes, lanes, False), b.reshape(-1, lanes)]
    types = [TensorType(a.shape) for a in ins]
    space = kernel_space("conv2d_nchwc", types, {"group": 1}, tgt)
    default = space.default()
    assert default["algorithm"] == "direct"
    assert (default["oc_blocks"], default["ow_tile"]) == (2, tile)


@pytest.mark.parametrize(
    ("width", "u", "steps4", "steps5"),
    [(14, 2, 32, 28), (28, 2, 56, 58), (55, 2, 112, 110), (7, 2, 16, 18), (13, 2, 32, 28)],
)
def test_row_steps_count_short_tiles_at_the_fma_latency(width, u, steps4, steps5):
    """A tile of fewer than 8 sums costs 8 steps (the FMA latency); the default takes the
    cheaper of 4 and 5 pixels for 2 blocks, 4 on a tie."""
    assert (_row_steps(width, 4, u), _row_steps(width, 5, u)) == (steps4, steps5)
    assert small_file_tile(width, u) == (5 if steps5 < steps4 else 4)
    assert small_file_tile(width, 3) == min(width, 4)  # 5 x 3 sums would not fit 16 registers


@pytest.mark.parametrize(
    ("width", "u", "tile"),
    [(13, 2, 7), (26, 2, 9), (111, 2, 8), (13, 1, 7), (52, 1, 11), (19, 2, 10), (38, 2, 10)],
)
def test_balanced_tile_spends_the_fewest_fma_slots(width, u, tile):
    """Tiles of 6 to 12 pixels; a tile of fewer than 8 sums costs 8 FMA slots; ties go to the
    fewest tiles, then the widest last tile. 111 pixels of 2 blocks (SqueezeNet's stem): 8 x 13
    + 7 (222 slots) rather than 12 x 9 + 3 (224); timed alone, one thread, Zen 5: 0.22-0.25 ms
    against 0.25-0.27."""
    assert balanced_tile(width, u, 12) == tile


@pytest.mark.parametrize(
    ("width", "choices", "blocks"),
    [
        (3, [1, 2, 3, 4, 5, 6], 6),
        (3, [1, 2, 4, 5], 5),
        (2, [1, 2, 3, 6], 6),
        (4, [1, 2, 4], 2),
        (1, [1, 2, 7], 7),
    ],
)
def test_narrow_rows_take_more_output_blocks(width, choices, blocks):
    """A row of fewer than 8 sums at 2 blocks (3 pixels: 6) takes the most blocks whose sums,
    weights and broadcast fit 32 registers; 4 pixels x 2 blocks already make 8."""
    assert narrow_row_oc_blocks(2 if 2 in choices else 1, choices, width, 1, 32) == blocks
    assert narrow_row_oc_blocks(2, choices, width, 1, 16) == 2  # AVX2: its own rules


def test_narrow_map_default_and_numerics():
    """A 1x1 conv at 3x3 (MobileNetV2's last blocks at 96x96): 6 output blocks per tile on a
    32-register file (NEON: blocks of 4 lanes), and the result matches (host)."""
    arm = get_target("linux-arm64")
    la = arm.vector_lanes("float32")
    x, w, b = _case(2 * la, 12 * la, 3, 1, seed=10)
    ins = [pack_array(x, la), pack_weight(w, la, la, False), b.reshape(-1, la)]
    space = kernel_space("conv2d_nchwc", [TensorType(a.shape) for a in ins], {"group": 1}, arm)
    assert (space.default()["oc_blocks"], space.default()["ow_tile"]) == (6, 3)
    x, w, b = _case(2 * L, 12 * L, 3, 1, seed=10)
    ins = [pack_array(x, L), pack_weight(w, L, L, False), b.reshape(-1, L)]
    got = _run("conv2d_nchwc", ins, {"group": 1}, (1, 12, 3, 3, L), {"oc_blocks": 6})
    _check(unpack_array(got), conv(*(a.astype(np.float64) for a in (x, w, b))))


def test_balanced_default_numerics():
    """A 13 x 13 conv, stride 1, and one to 13 x 13, stride 2, with the default tiles."""
    for size, stride, k, pads in [(13, 1, 1, (0,) * 4), (26, 2, 3, (1,) * 4)]:
        x, w, b = _case(2 * L, 4 * L, size, k, seed=9)
        attrs = {"group": 1, "pads": pads, "strides": (stride, stride)}
        ins = [pack_array(x, L), pack_weight(w, L, L, False), b.reshape(-1, L)]
        got = _run("conv2d_nchwc", ins, attrs, (1, 4, 13, 13, L))
        x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
        _check(unpack_array(got), conv(x64, w64, b64, strides=(stride, stride), pads=pads))


@pytest.mark.parametrize(("target", "blocks", "tile"), [("x86_64-v3", 5, 2), ("linux-arm64", 1, 7)])
def test_odd_block_count_default(target, blocks, tile):
    """125 output blocks (SqueezeNet's 1000 classes in blocks of 8): a 16-register file takes
    5 blocks x 2 pixels rather than one block x 8 pixels, load-bound on one weight vector;
    NEON's 32 registers keep one block, its 13-wide rows in tiles of 7 + 6 pixels rather than
    12 + 1 (conv_tile.balanced_tile: a 1-sum tile waits on the FMA latency)."""
    tgt = get_target(target)
    lanes = tgt.vector_lanes("float32")
    x, w, b = _case(2 * lanes, 125 * lanes, 13, 1, seed=7)
    ins = [pack_array(x, lanes), pack_weight(w, lanes, lanes, False), b.reshape(-1, lanes)]
    space = kernel_space("conv2d_nchwc", [TensorType(a.shape) for a in ins], {"group": 1}, tgt)
    default = space.default()
    assert (default["oc_blocks"], default["ow_tile"]) == (blocks, tile)


@pytest.mark.parametrize(
    ("target", "blocks", "default"),
    [("host", 80, 8), ("x86_64-v3", 80, 8), ("linux-arm64", 12, 6), ("host", 8, 4), ("host", 1, 1)],
)
def test_one_pixel_conv_streams_eight_weight_blocks(target, blocks, default):
    """A 1x1 conv to one output pixel (PP-LCNet's 512 -> 1280 on pooled features) is a
    matrix-vector product bound by its weight streams: the tile takes up to
    conv_tile.PIXEL_OC_BLOCKS output blocks, as long as two tiles remain for two threads;
    a conv with more pixels keeps the divisors up to 6."""
    tgt = get_target(target)
    lanes = tgt.vector_lanes("float32")
    x, w, b = _case(2 * lanes, blocks * lanes, 1, 1, seed=8)
    ins = [pack_array(x, lanes), pack_weight(w, lanes, lanes, False), b.reshape(-1, lanes)]
    space = kernel_space("conv2d_nchwc", [TensorType(a.shape) for a in ins], {"group": 1}, tgt)
    assert space.default()["oc_blocks"] == default
    choices = next(kn for kn in space.knobs("direct") if kn.name == "oc_blocks").choices
    assert max(choices) == min(8, max(d for d in range(1, 9) if blocks % d == 0))
    wider = [TensorType((1, 2, 2, 2, lanes)), *(TensorType(a.shape) for a in ins[1:])]
    wider_space = kernel_space("conv2d_nchwc", wider, {"group": 1}, tgt)
    assert max(next(kn for kn in wider_space.knobs("direct") if kn.name == "oc_blocks").choices) <= 6


def test_one_pixel_conv_numerics():
    x, w, b = _case(3 * L, 40 * L, 1, 1, seed=9)
    ins = [pack_array(x, L), pack_weight(w, L, L, False), b.reshape(-1, L)]
    func, spec = _build("conv2d_nchwc", ins, {"group": 1})
    assert re.search(rf"allocate\(f32\[1,8,1,1,{L}\], \"local\"\)", str(func)), "8 blocks per tile"
    got = run_built(func, spec, ins, (1, 40, 1, 1, L))
    ref = conv(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64))
    _check(unpack_array(got), ref)
