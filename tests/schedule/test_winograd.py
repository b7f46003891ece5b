"""Winograd F(m x m, 3 x 3): matrices, numpy reference, compiled op, tile-size choice."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.kernel import run_op
from tensorir.ops.registry import get_op
from tensorir.schedule.algorithms.winograd import (
    choose_winograd_m,
    direct_conv64,
    direct_cost,
    measure_errors,
    weight_transform,
    winograd_conv2d,
    winograd_conv_reference,
    winograd_cost,
    winograd_fractions,
    winograd_matrices,
)


def correlate2d(d: np.ndarray, g: np.ndarray) -> np.ndarray:
    r = g.shape[0]
    m = d.shape[0] - r + 1
    return np.array([[np.sum(d[i : i + r, j : j + r] * g) for j in range(m)] for i in range(m)])


@pytest.mark.parametrize("m", [2, 3, 4, 5, 6])
def test_identity_1d_2d(m: int) -> None:
    at, g, bt = winograd_matrices(m)
    alpha = m + 2
    assert at.shape == (m, alpha) and g.shape == (alpha, 3) and bt.shape == (alpha, alpha)
    rng = np.random.default_rng(m)
    for _ in range(5):
        d, w = rng.uniform(-1, 1, alpha), rng.uniform(-1, 1, 3)
        np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), np.correlate(d, w, "valid"), rtol=0, atol=1e-12)
        d2, w2 = rng.uniform(-1, 1, (alpha, alpha)), rng.uniform(-1, 1, (3, 3))
        y = at @ ((g @ w2 @ g.T) * (bt @ d2 @ bt.T)) @ at.T
        np.testing.assert_allclose(y, correlate2d(d2, w2), rtol=0, atol=1e-12)


def test_exact_fractions_and_points() -> None:
    at, g, bt = winograd_fractions(4)
    # exact identity on the basis: sum_j AT[i, j] G[j, k] BT[j, l] = [l == i + k]
    for i in range(4):
        for k in range(3):
            for col in range(6):
                s = sum(at[i][j] * g[j][k] * bt[j][col] for j in range(6))
                assert s == Fraction(int(col == i + k))
    # Lavin & Gray's F(2,3) input transform (up to row signs)
    np.testing.assert_array_equal(
        np.abs(winograd_matrices(2)[2]), [[1, 0, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 0, 1]]
    )
    # other points work too; bad ones are refused
    at, g, bt = winograd_matrices(2, points=[0, Fraction(1, 2), -3])
    d, w = np.arange(4.0), np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), np.correlate(d, w, "valid"), atol=1e-12)
    with pytest.raises(ValueError):
        winograd_matrices(2, points=[0, 1, 1])
    with pytest.raises(ValueError):
        winograd_matrices(4, points=[0, 1, -1])


@pytest.mark.parametrize("m", [2, 4, 6])
@pytest.mark.parametrize(
    "shape,pads",
    [((1, 3, 5, 5, 4), (0, 0, 0, 0)), ((2, 5, 9, 7, 6), (1, 1, 1, 1)), ((1, 4, 6, 11, 3), (2, 0, 1, 3))],
)
def test_reference_matches_direct(m: int, shape: tuple, pads: tuple) -> None:
    n, c, h, w, k = shape
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    ref = direct_conv64(x, wt, pads)
    y = winograd_conv2d(x, wt, m, pads)
    assert y.dtype == np.float32 and y.shape == ref.shape
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    y64 = winograd_conv2d(x.astype(np.float64), wt.astype(np.float64), m, pads)
    np.testing.assert_allclose(y64, ref, rtol=0, atol=1e-11 * np.abs(ref).max())


# the module docstring's table (seed 0); bounds are 2x the measured values
MEASURED = {
    (64, 56): {2: 4.1e-07, 4: 8.1e-06, 6: 9.0e-06},
    (512, 7): {2: 5.7e-07, 4: 8.9e-06, 6: 1.4e-05},
}


def test_zoo_error_bounds() -> None:
    got = measure_errors((2, 4, 6), list(MEASURED))
    for (c, hw, m), err in got.items():
        assert err <= 2 * MEASURED[c, hw][m], (c, hw, m, err)
    assert got[64, 56, 2] < got[64, 56, 4]  # larger tiles lose accuracy


def test_infer() -> None:
    op = get_op("conv2d_winograd")
    x, u = TensorType((2, 8, 10, 12), "float32"), TensorType((6, 6, 8, 16), "float32")
    assert op.infer([x, u], {"pads": (1, 1, 1, 1), "m": 4}) == [TensorType((2, 16, 10, 12), "float32")]
    assert op.infer([x, u], {"pads": (0, 0, 0, 0), "m": 4}) == [TensorType((2, 16, 8, 10), "float32")]
    with pytest.raises(ShapeError):
        op.infer([x, u], {"pads": (1, 1, 1, 1), "m": 2})
    with pytest.raises(ShapeError):
        op.infer([x, TensorType((6, 6, 4, 16), "float32")], {"m": 4})


@pytest.mark.parametrize(
    "shape,pads,m",
    [
        ((1, 8, 10, 9, 16), (1, 0, 2, 1), 2),
        ((2, 16, 9, 8, 32), (1, 1, 1, 1), 4),
        ((1, 16, 7, 7, 16), (1, 1, 1, 1), 6),
        ((1, 5, 6, 7, 6), (0, 1, 1, 0), 4),  # channels not a multiple of the vector
        ((1, 64, 56, 56, 64), (1, 1, 1, 1), 4),  # ResNet-50 layer1
    ],
)
def test_compiled_matches_reference(shape: tuple, pads: tuple, m: int) -> None:
    n, c, h, w, k = shape
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (n, c, h, w)).astype(np.float32)
    wt = rng.uniform(-1, 1, (k, c, 3, 3)).astype(np.float32)
    u = weight_transform(wt, m)
    (y,) = run_op("conv2d_winograd", [x, u], {"pads": pads, "m": m})
    ref = direct_conv64(x, wt, pads)
    scale = np.abs(ref).max()
    assert np.abs(y - ref).max() <= 4e-5 * scale
    np.testing.assert_allclose(y, winograd_conv_reference(x, u, pads=pads, m=m), rtol=0, atol=2e-5 * scale)


def test_choose_m() -> None:
    # ResNet-50 3x3 layers, batch 1: the winners measured on one AVX-512 core (Zen 4, whole
    # models: tensorir/schedule/algorithms/winograd.py, FLOPS_PER_BYTE)
    assert choose_winograd_m((1, 64, 56, 56, 64), "host") == 4
    assert choose_winograd_m((1, 128, 28, 28, 128), "host") == 4
    assert choose_winograd_m((1, 256, 14, 14, 256), "host") in (2, 4)
    assert choose_winograd_m((1, 512, 7, 7, 512), "host") == 2  # F(4x4) would pad 7 to 8
    assert choose_winograd_m((1, 64, 7, 7, 64), "host") in (2, None)
    assert choose_winograd_m((1, 16, 16, 16, 32), "host") == 4  # small channel counts too
    assert choose_winograd_m((8, 512, 7, 7, 512), "host") in (2, 4)  # batching amortizes U
    assert choose_winograd_m((1, 3, 224, 224, 64), "host") is None  # too few input channels
    assert choose_winograd_m((1, 16, 2, 2, 16), "host") is None
    assert choose_winograd_m((1, 64, 56, 56, 64), "host", candidates=(2, 6)) == 6


def test_weights_from_memory_price_the_7x7x512_convs_direct_on_full_rate_avx512() -> None:
    """U of F(2x2) for 512 -> 512 channels is 16.8 MB (w: 9.4 MB): in a whole ResNet run it
    comes from memory, which a core retiring 16-lane FMAs at full rate (Zen 5) pays more for
    than Winograd saves, so the conv goes direct there (measured in whole models: winograd.py,
    DRAM_WEIGHT_BYTES). Smaller weights, and narrower cores, choose as before."""
    big = (1, 512, 7, 7, 512)
    assert choose_winograd_m(big, full_rate_lanes=16) is None
    assert choose_winograd_m(big, full_rate_lanes=8) == 2  # Zen 4, AVX2
    assert choose_winograd_m(big, full_rate_lanes=4) == 2  # NEON
    assert choose_winograd_m(big) == 2  # lanes unknown
    assert direct_cost(big, full_rate_lanes=16) - direct_cost(big) == pytest.approx(8.0 * 9 * 512 * 512 * 4)
    for shape, m in [((1, 256, 14, 14, 256), 2), ((1, 128, 28, 28, 128), 4), ((1, 64, 56, 56, 64), 4)]:
        assert choose_winograd_m(shape, full_rate_lanes=16) == m, shape
        assert winograd_cost(shape, m, full_rate_lanes=16) == winograd_cost(shape, m)  # under 8 MB
