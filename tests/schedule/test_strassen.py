"""Strassen over compiled dense kernels: numerics vs numpy / float64 and the cut-off rule."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.errors import TirError
from tensorir.schedule.algorithms.strassen import (
    StrassenMatmul,
    combine_func,
    should_recurse,
    strassen_depth,
    strassen_matmul,
)


def _operands(m: int, k: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def _err(c: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(c - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_matches_numpy_rectangular(depth):
    a, b, ref = _operands(96, 64, 128)
    mm = StrassenMatmul(96, 64, 128, depth=depth)
    assert mm.depth == depth
    c = mm(a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert _err(c, ref) < 5e-6


def test_dense_layout_and_reuse():
    a, b, _ = _operands(64, 128, 32, seed=1)
    mm = StrassenMatmul(64, 128, 32, depth=1)
    w = np.ascontiguousarray(b.T)
    out = np.empty((64, 32), np.float32)
    for _ in range(2):  # the second call runs the bound plan
        assert mm.dense(a, w, out) is out
        np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    a2 = a[::-1].copy()  # new arrays: a fresh plan
    np.testing.assert_allclose(mm.dense(a2, w), a2 @ b, rtol=1e-4, atol=1e-4)


def test_accuracy_512_depth_1_2():
    a, b, ref = _operands(512, 512, 512)
    errs = [_err(StrassenMatmul(512, 512, 512, depth=d)(a, b), ref) for d in (0, 1, 2)]
    assert errs[0] < 3e-6 and errs[1] < 5e-6 and errs[2] < 1e-5, errs


def test_cutoff_rule():
    # m*n*k/8 > 3mk + 3nk + 5.25mn: square s recurses while s/8 > 11.25, i.e. s > 90
    assert should_recurse(128, 128, 128)
    assert not should_recurse(64, 64, 64)
    assert not should_recurse(90, 90, 90)
    assert should_recurse(92, 92, 92)
    assert not should_recurse(1024, 1024, 1023)  # odd dim
    assert not should_recurse(2, 4096, 4096)  # thin m: the additions on B dominate
    assert strassen_depth(512, 512, 512) == 3  # 512 -> 256 -> 128 -> 64 stops
    assert strassen_depth(1024, 1024, 1024) == 4
    assert strassen_depth(1024, 1024, 1024, max_depth=2) == 2
    assert strassen_depth(96, 96, 96) == 1  # 48 < 90
    assert strassen_depth(1024, 1024, 1024, cutoff=lambda m, n, k: m > 256) == 2
    assert StrassenMatmul(256, 256, 256).depth == 2
    assert StrassenMatmul(256, 256, 256, max_depth=1).depth == 1


def test_bad_depth():
    with pytest.raises(TirError):
        StrassenMatmul(96, 64, 100, depth=3)


def test_combine_kernel():
    from tensorir.runtime.jit import compile_host

    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    y = np.zeros((4, 6), np.float32)
    f = combine_func([(8, 8)], [(0, 0, 0, 1), (0, 4, 4, -1)], (4, 6), (0, 2), 4, 4)
    compile_host(f)(x, y)
    want = np.zeros((4, 6), np.float32)
    want[:, 2:] = x[:4, :4] - x[4:, 4:]
    np.testing.assert_array_equal(y, want)


def test_one_shot():
    a, b, _ = _operands(32, 32, 32)
    np.testing.assert_allclose(strassen_matmul(a, b, depth=1), a @ b, rtol=1e-4, atol=1e-4)
