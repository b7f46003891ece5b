"""pad_packed: a zero pad of a packed tensor's channels and space in the output's block;
compiled against numpy on the host and on PoCL's OpenCL device, and the lanes copied as
vectors in runs of gcd(blocks)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.graph.types import TensorType
from tensorir.ops.kernel import op_kernel, run_op
from tensorir.ops.layout import pack_array, unpack_array


@pytest.mark.parametrize(
    "shape, block, pads, out_block",
    [
        ((1, 24, 9, 7), 8, (0, 0, 0, 4, 0, 0), 4),  # BlazeFace: 24 -> 28 channels, block 8 -> 4
        ((1, 28, 6, 5), 4, (0, 0, 0, 4, 0, 0), 16),  # 28 -> 32, block 4 -> 16
        ((1, 32, 5, 5), 16, (16, 1, 2, 0, 2, 1), 16),  # channels before, space both sides
        ((1, 8, 4, 3), 8, (3, 0, 0, 5, 0, 0), 16),  # 3 before: no common run, lane by lane
        ((1, 6, 3, 4), 2, (2, 1, 0, 0, 0, 3), 8),
    ],
)
@pytest.mark.parametrize("target", ["host", "opencl:pocl"])
def test_compiled_pad_packed_matches_numpy(shape, block, pads, out_block, target):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (got,) = run_op("pad_packed", [pack_array(x, block)], {"pads": pads, "block": out_block}, target=target)
    spec = [(0, 0)] + [(pads[k], pads[k + 3]) for k in range(3)]
    np.testing.assert_array_equal(unpack_array(got), np.pad(x, spec))
    assert got.shape[4] == out_block


def test_lanes_are_copied_in_vector_runs_of_the_common_block():
    """Block 4 into block 16: four 4-lane vector copies per output block, each from one input
    block; the run past the 28 channels is zeros."""
    f = op_kernel("pad_packed", [TensorType((1, 7, 32, 32, 4))], {"pads": (0, 0, 0, 4, 0, 0), "block": 16})
    text = str(f)
    assert "for e_o in range(0, 4):" in text and "if n_ob_y_f//32*16 + e_o*4 < 28:" in text, text
    assert "= in0[ramp(" in text and ", 1, 4)]" in text and "broadcast(0.0, 4)" in text, text
