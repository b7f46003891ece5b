"""conv2d_winograd_nchwc: Winograd F(m x m, 3 x 3) on packed NCHW16c activations."""

from __future__ import annotations

import random

import numpy as np
import pytest

import tensorir.schedule.algorithms.winograd_nchwc  # noqa: F401  (registers the op)
from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.loop.printer import to_text
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import kernel_space, op_kernel, run_op
from tensorir.ops.layout import pack_array, pack_weight
from tensorir.ops.registry import get_op
from tensorir.schedule.algorithms.winograd import weight_transform
from tensorir.schedule.algorithms.winograd_nchwc import OP, weight_transform_nchwc

BLOCK = 16
# max |y - conv2d_nchwc| / max |y|: winograd.py's measured float32 errors (5e-7, 1e-5, 2e-5
# on the ResNet layers for m = 2, 4, 6) with a margin of about 3x
TOL = {2: 2e-6, 4: 4e-5, 6: 6e-5}


def make_case(shape: tuple, m: int, bias: bool, seed: int = 0) -> tuple[list, list]:
    """(inputs of conv2d_nchwc, inputs of conv2d_winograd_nchwc) for shape (N, C, H, W, M)."""
    n, c, h, w, k = shape
    rng = np.random.default_rng([seed, c, h, w, k])
    x = pack_array(rng.uniform(-1, 1, (n, c, h, w)).astype(np.float32), BLOCK)
    wp = pack_weight(rng.uniform(-1, 1, (k, c, 3, 3)).astype(np.float32), BLOCK, BLOCK, False)
    b = [rng.uniform(-1, 1, (k // BLOCK, BLOCK)).astype(np.float32)] if bias else []
    return [x, wp, *b], [x, weight_transform_nchwc(wp, m), *b]


def direct(ins: list, pads: tuple) -> np.ndarray:
    return get_op("conv2d_nchwc").run_reference(ins, {"pads": pads})[0]


def check(y: np.ndarray, ref: np.ndarray, m: int) -> None:
    assert y.shape == ref.shape and y.dtype == np.float32
    err = np.abs(y - ref).max() / np.abs(ref).max()
    assert err <= TOL[m], (m, err)


def test_weight_transform_matches_unpacked() -> None:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((48, 32, 3, 3)).astype(np.float32)
    wp = pack_weight(w, BLOCK, BLOCK, False)
    for m in (2, 4, 6):
        u = weight_transform_nchwc(wp, m)
        alpha = m + 2
        assert u.shape == (alpha, alpha, 3, 32, BLOCK) and u.dtype == np.float32
        ref = weight_transform(w, m)  # (alpha, alpha, C, M)
        np.testing.assert_array_equal(u, ref.reshape(alpha, alpha, 32, 3, BLOCK).transpose(0, 1, 3, 2, 4))
    with pytest.raises(ShapeError):
        weight_transform_nchwc(w, 4)
    with pytest.raises(ShapeError):
        weight_transform_nchwc(wp, 3)


@pytest.mark.parametrize("m", [2, 4, 6])
def test_reference_matches_direct(m: int) -> None:
    pads = (1, 0, 2, 1)
    ins, wins = make_case((2, 32, 10, 13, 48), m, bias=True)
    check(get_op(OP).run_reference(wins, {"pads": pads, "m": m})[0], direct(ins, pads), m)


def test_infer() -> None:
    op = get_op(OP)
    x, u = TensorType((2, 2, 10, 12, 16), "float32"), TensorType((6, 6, 3, 32, 16), "float32")
    b = TensorType((3, 16), "float32")
    want = [TensorType((2, 3, 10, 12, 16), "float32")]
    assert op.infer([x, u], {"pads": (1, 1, 1, 1), "m": 4}) == want
    assert op.infer([x, u, b], {"pads": (1, 1, 1, 1), "m": 4, "ob": 16}) == want
    assert op.infer([x, u], {"pads": (0, 0, 0, 0), "m": 4}) == [TensorType((2, 3, 8, 10, 16), "float32")]
    bad = [
        ([x, u], {"pads": (1, 1, 1, 1), "m": 2}),  # U is for m = 4
        ([x, u], {"pads": (1, 1, 1, 1), "m": 3}),  # unsupported tile size
        ([x, TensorType((6, 6, 3, 16, 16), "float32")], {"m": 4}),  # C mismatch
        ([TensorType((2, 32, 10, 12), "float32"), u], {"m": 4}),  # not packed
        ([x, u, TensorType((48,), "float32")], {"m": 4}),  # bias not packed
        ([x, u], {"m": 4, "ob": 8}),  # ob disagrees with U
        ([x, TensorType((6, 6, 3, 32, 16), "float64")], {"m": 4}),  # dtypes
        ([TensorType((1, 1, 1, 1, 16), "float32"), u], {"m": 4}),  # smaller than 3x3
    ]
    for ins, attrs in bad:
        with pytest.raises(ShapeError):
            op.infer(ins, attrs)


@pytest.mark.parametrize(
    "shape,m,bias",
    [
        ((1, 64, 56, 56, 64), 4, False),  # ResNet layer1
        ((1, 128, 28, 28, 128), 6, True),  # layer2
        ((1, 256, 14, 14, 256), 2, False),  # layer3
        ((1, 256, 14, 14, 256), 6, True),
        ((1, 512, 7, 7, 512), 4, True),  # layer4
        ((1, 512, 7, 7, 512), 2, False),
    ],
)
def test_resnet_layers(shape: tuple, m: int, bias: bool) -> None:
    ins, wins = make_case(shape, m, bias)
    (y,) = run_op(OP, wins, {"pads": (1, 1, 1, 1), "m": m})
    check(y, direct(ins, (1, 1, 1, 1)), m)


@pytest.mark.parametrize("m", [2, 4, 6])
def test_odd_shapes_with_bias(m: int) -> None:
    # C != M, H != W, sizes not divisible by m (partial tiles), asymmetric pads, batch 2
    pads = (1, 0, 2, 1)
    ins, wins = make_case((2, 32, 10, 13, 48), m, bias=True)
    (y,) = run_op(OP, wins, {"pads": pads, "m": m})
    check(y, direct(ins, pads), m)
    ref = get_op(OP).run_reference(wins, {"pads": pads, "m": m})[0]
    np.testing.assert_allclose(y, ref, rtol=0, atol=TOL[m] * np.abs(ref).max())


def test_fused_epilogue() -> None:
    # conv (+bias) + residual add + relu inlined into the kernel's packed output stage
    m, pads = 4, (1, 1, 1, 1)
    ins, wins = make_case((1, 32, 9, 11, 32), m, bias=True)
    res = np.random.default_rng(5).uniform(-2, 2, (1, 2, 9, 11, 16)).astype(np.float32)
    conv = Step(OP, (("pads", pads), ("m", m)), (0, 1, 2))
    body = FusedBody((conv, Step("add", (), (4, 3)), Step("relu", (), (5,))), 4, 0)
    (y,) = run_op("fused", [*wins, res], {"body": body})
    ref = np.maximum(direct(ins, pads) + res, 0)
    assert (y >= 0).all() and (y == 0).any()
    check(y, ref, m)


@pytest.mark.parametrize("shape,m", [((1, 32, 12, 12, 64), 2), ((2, 16, 9, 14, 32), 6)])
def test_random_knob_configs(shape: tuple, m: int) -> None:
    pads = (1, 1, 1, 1)
    ins, wins = make_case(shape, m, bias=True)
    ref = direct(ins, pads)
    attrs = {"pads": pads, "m": m}
    space = kernel_space(OP, [TensorType.of(a) for a in wins], attrs)
    names = {k.name for k in space.knobs()}
    assert {"wino_tile_rows", "wino_k_vectors", "wino_row_block"} <= names
    rng = random.Random(m)
    for cfg in [space.sample(rng) for _ in range(2)]:
        (y,) = run_op(OP, wins, attrs, config=cfg)
        check(y, ref, m)


def test_input_blocks_narrower_than_the_vector() -> None:
    """Packed in blocks of half the float32 lanes (8 of 16 on AVX-512: PP-OCRv4's 96 -> 24 head
    conv), the input transform runs vectors of one block: a full-width vector over two blocks
    was gathered lane by lane (4.4 ms against 1.2 ms in blocks of 16)."""
    from tensorir.ops.kernel import op_kernel
    from tensorir.target import get_target

    half = get_target("host").vector_lanes("float32") // 2
    n, c, h, w, k, m, pads = 1, 4 * half, 10, 12, 3 * half, 4, (1, 1, 1, 1)
    rng = np.random.default_rng(7)
    x = pack_array(rng.uniform(-1, 1, (n, c, h, w)).astype(np.float32), half)
    wp = pack_weight(rng.uniform(-1, 1, (k, c, 3, 3)).astype(np.float32), half, half, False)
    wins = [x, weight_transform_nchwc(wp, m)]
    text = str(op_kernel(OP, [TensorType.of(a) for a in wins], {"pads": pads, "m": m}, "host"))
    assert "wino_nchwc_Bd[ramp(" in text and f", 1, {half})]" in text  # one block per vector
    assert "ch_i//" not in text  # no per-lane block index (the gathered form's `ch_i//8*...`)
    (y,) = run_op(OP, wins, {"pads": pads, "m": m})
    check(y, direct([x, wp], pads), m)


@pytest.mark.parametrize(
    "order,pad_loop,gemm_loop",
    [
        ("channels", "for i0_i1_i2_f in parallel(0, 20)", "for i_kb_o_y_o_f in parallel(0, 8)"),
        ("rows", "for i0_i2_i1_f in parallel(0, 20)", "for i_y_o_kb_o_f in parallel(0, 8)"),
    ],
)
def test_outer_order_splits_every_stage_the_same_way(order: str, pad_loop: str, gemm_loop: str) -> None:
    """wino_outer_order = rows: the padding's parallel loop runs (image, row, channel block)
    and the GEMM's (image, tile-row block, output channel block), so a thread multiplies the
    tiles it transformed from rows it padded; channels (the default) splits the GEMM by
    output channel blocks. The input transform is per tile either way. Same numbers."""
    ins, wins = make_case((1, 32, 8, 8, 32), 2, bias=True)
    attrs = {"pads": (1, 1, 1, 1), "m": 2}
    space = kernel_space(OP, [TensorType.of(a) for a in wins], attrs)
    one_block = min(next(k for k in space.knobs() if k.name == "wino_k_vectors").choices)
    # the vectors of one output channel block: 1 on AVX-512, 2 on AVX2 (16 lanes of 8)
    cfg = {"wino_outer_order": order, "wino_row_block": 1, "wino_k_vectors": one_block}
    text = to_text(op_kernel(OP, [TensorType.of(a) for a in wins], attrs, config=cfg, passes=False))
    parallel = [line.strip().rstrip(":") for line in text.splitlines() if "parallel" in line]
    assert parallel == [pad_loop, "for i_t_f in parallel(0, 16)", gemm_loop]
    (y,) = run_op(OP, wins, attrs, config=cfg)
    check(y, direct(ins, (1, 1, 1, 1)), 2)


def test_large_weights_prefetch_the_next_blocks_slice() -> None:
    """U of 1 MB or more (ResNet-50's layer 3 and 4: 4-17 MB, from memory in a whole-model run):
    at each input channel of a GEMM position (e, f), the kernel prefetches that channel's row
    of the next output-channel block's U slice at (e, f), one line per channel block; smaller
    U (or wino_prefetch = 0) has no prefetch. Same numbers either way."""
    shape, m, attrs = (1, 256, 6, 6, 256), 2, {"pads": (1, 1, 1, 1), "m": 2}
    ins, wins = make_case(shape, m, bias=False)
    assert wins[1].nbytes >= 1 << 20
    types = [TensorType.of(a) for a in wins]
    space = kernel_space(OP, types, attrs)
    one_block = min(next(k for k in space.knobs() if k.name == "wino_k_vectors").choices)
    cfg = {"wino_k_vectors": one_block}  # one output channel block per y block: one line each
    text = to_text(op_kernel(OP, types, attrs, config=cfg, passes=False))
    lines = [line.strip() for line in text.splitlines()]
    pre = [i for i, line in enumerate(lines) if line.startswith("prefetch(")]
    ob, c, mo = wins[1].shape[4], 256, wins[1].shape[2]
    assert len(pre) == 1 and lines[pre[0] - 1] == "for rc in range(0, 256):"
    assert lines[pre[0]].startswith(f"prefetch(in1[min({c * ob} + e*{4 * mo * c * ob} + f*{mo * c * ob} + ")
    assert f"rc*{ob} + 0, {wins[1].size - 1})])" in lines[pre[0]]
    off = to_text(op_kernel(OP, types, attrs, config={**cfg, "wino_prefetch": 0}, passes=False))
    assert "prefetch(" not in off
    _, small_wins = make_case((1, 64, 6, 6, 64), m, bias=False)
    small = to_text(op_kernel(OP, [TensorType.of(a) for a in small_wins], attrs, passes=False))
    assert "prefetch(" not in small
    (y,) = run_op(OP, wins, attrs, config=cfg)
    check(y, direct(ins, (1, 1, 1, 1)), m)
