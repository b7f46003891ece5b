"""dense: the blocked product for many rows, the split-K GEMV form for one or two rows."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.graph.types import TensorType
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import op_kernel, run_op

RNG = np.random.default_rng(0)


@pytest.mark.parametrize(
    ("m", "n", "k"), [(1, 1000, 2048), (2, 30, 64), (1, 7, 48), (5, 33, 70), (64, 48, 96)]
)
def test_dense_matches_numpy(m, n, k):
    x = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((n, k)).astype(np.float32)
    (out,) = run_op("dense", [x, w], {})
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_one_row_uses_the_vectorized_split_k_form():
    text = str(op_kernel("dense", [TensorType((1, 256)), TensorType((8, 256))], {}))
    assert "dense_part" in text and "ramp(" in text


def test_fused_dense_bias_relu_one_row():
    x = RNG.standard_normal((1, 128)).astype(np.float32)
    w = RNG.standard_normal((10, 128)).astype(np.float32)
    b = RNG.standard_normal((1, 10)).astype(np.float32)
    body = FusedBody((Step("dense", (), (0, 1)), Step("add", (), (3, 2)), Step("relu", (), (4,))), 3, 0)
    (out,) = run_op("fused", [x, w, b], {"body": body})
    np.testing.assert_allclose(out, np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)
