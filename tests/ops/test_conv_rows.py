"""A stride-1 1x1 conv on a 16-register CPU sees its image with rows merged (ops/conv_rows.py):
the kernel's signature before/after, the default merge per image size, the cases left alone
(32-register files but for rows too narrow for 8 sums, padded or strided convs, an epilogue
input that broadcasts over rows), and
numerics against float64 numpy for every merge, with a fused residual add + relu.

Tolerance: max |err| / max |ref| < 1e-5 (fp32 sums over 64 terms)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.graph.types import TensorType
from tensorir.ops.conv import conv
from tensorir.ops.conv_rows import default_merge, merge_rows
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import build_kernel, kernel_space
from tensorir.ops.layout import pack_array, pack_weight, unpack_array
from tensorir.schedule.space import pin
from tensorir.target import get_target
from tests.ops.kernel_run import assert_relative, run_built

V3, V4 = get_target("x86_64-v3"), get_target("x86_64-v4")
ADD_RELU = FusedBody(
    (Step("conv2d_nchwc", (("group", 1),), (0, 1, 2)), Step("add", (), (4, 3)), Step("relu", (), (5,))), 4, 0
)


def _types(c: int, m: int, h: int, w: int, lanes: int = 8, k: int = 1) -> list[TensorType]:
    return [
        TensorType((1, c // lanes, h, w, lanes)),
        TensorType((m // lanes, c // lanes, k, k, lanes, lanes)),
        TensorType((m // lanes, lanes)),
    ]


@pytest.mark.parametrize(
    ("h", "w", "groups", "merge"),
    [
        (14, 14, 16, 2),  # 14 x 4 tiles -> 7 rows of 28: 49, no tail
        (7, 7, 32, 7),  # 14 -> 13 tiles
        (7, 7, 2, 1),  # one row left for 2 channel groups: under 16 parallel iterations
        (56, 56, 8, 1),  # whole tiles already
        (55, 55, 4, 5),  # 770 -> 759 tiles; all 55 rows (757) would leave one row per group
        (55, 55, 1, 1),  # one channel group: 11 rows would be under 16 parallel iterations
    ],
)
def test_default_merge(h, w, groups, merge):
    assert default_merge(h, w, 4, groups) == merge


def test_kernel_signature_before_and_after():
    types = _types(1024, 256, 14, 14)
    attrs = {"group": 1}
    func, _ = build_kernel("conv2d_nchwc", types, attrs, V3, const_args=frozenset({1, 2}))
    head = str(func).splitlines()[0]
    assert "in0: f32[1,128,7,28,8], in1: f32[32,128,1,1,8,8], in2: f32[32,8]" in head, head
    assert "conv_nchwc: f32[1,32,7,28,8]" in head, head
    with pin("merge_rows", 1):
        kept, _ = build_kernel("conv2d_nchwc", types, attrs, V3, const_args=frozenset({1, 2}))
    assert "in0: f32[1,128,14,14,8]" in str(kept).splitlines()[0]
    # not a knob: the space's tile and row-chunk choices are those of the merged shape
    space = kernel_space("conv2d_nchwc", types, attrs, V3)
    knobs = {k.name: k for k in space.knobs("direct")}
    assert "merge_rows" not in knobs and knobs["row_chunk"].choices == ("auto", 1, 7)


def test_environment_switch_keeps_the_rows(monkeypatch):
    monkeypatch.setenv("TIR_MERGE_ROWS", "0")
    func, _ = build_kernel(
        "conv2d_nchwc", _types(1024, 256, 14, 14), {"group": 1}, V3, const_args=frozenset({1, 2})
    )
    assert "in0: f32[1,128,14,14,8]" in str(func).splitlines()[0]


@pytest.mark.parametrize(
    ("types", "attrs", "target"),
    [
        (_types(256, 256, 14, 14, 16), {"group": 1}, V4),  # 32 registers: the tile divides the row
        (_types(64, 64, 14, 14, k=3), {"group": 1, "pads": (1, 1, 1, 1)}, V3),  # 3x3
        (_types(64, 64, 14, 14), {"group": 1, "strides": (2, 2)}, V3),  # strided
    ],
)
def test_left_alone(types, attrs, target):
    assert merge_rows(tuple(types), attrs, None, 0, 1, target) == tuple(types)


def test_narrow_rows_merge_on_32_registers():
    """AVX-512: a 3x3 map tiles 3 pixels x 2 blocks a row, 6 sums, under the 8 that hide the
    FMA latency: its rows are merged (1 x 9, each weight read once per tile instead of once
    per row), when the channel groups leave MIN_PARALLEL iterations; 6x6 (12 sums) is not."""
    narrow = tuple(_types(160, 960, 3, 3, 16))
    assert merge_rows(narrow, {"group": 1}, None, 0, 1, V4)[0].shape == (1, 10, 1, 9, 16)
    assert merge_rows(tuple(_types(160, 960, 6, 6, 16)), {"group": 1}, None, 0, 1, V4)[0].shape[2:4] == (6, 6)
    few_groups = tuple(_types(960, 160, 3, 3, 16))  # 5 groups x 1 row: under 16 iterations
    assert merge_rows(few_groups, {"group": 1}, None, 0, 1, V4) == few_groups
    func, _ = build_kernel("conv2d_nchwc", list(narrow), {"group": 1}, V4, const_args=frozenset({1, 2}))
    assert "in0: f32[1,10,1,9,16]" in str(func).splitlines()[0]


def test_epilogue_input_broadcast_over_rows_is_left_alone():
    types = (*_types(64, 64, 14, 14), TensorType((1, 8, 1, 14, 8)))  # one row, added to every row
    assert merge_rows(types, {"body": ADD_RELU}, 0, 0, 1, V3) == types
    full = (*_types(64, 64, 14, 14), TensorType((1, 8, 14, 14, 8)))
    assert merge_rows(full, {"body": ADD_RELU}, 0, 0, 1, V3)[3].shape == (1, 8, 7, 28, 8)


@pytest.mark.parametrize("merge", [1, 2, 7, 14])
def test_every_merge_with_residual_add_matches_numpy(merge):
    rng = np.random.default_rng(merge)
    x, w, b, r = (
        rng.standard_normal(s).astype(np.float32)
        for s in ((1, 64, 14, 14), (32, 64, 1, 1), 32, (1, 32, 14, 14))
    )
    ins = [pack_array(x, 8), pack_weight(w, 8, 8, False), b.reshape(-1, 8), pack_array(r, 8)]
    types = [TensorType(a.shape) for a in ins]
    with pin("merge_rows", merge):
        func, spec = build_kernel("fused", types, {"body": ADD_RELU}, V3, const_args=frozenset({1, 2}))
    assert f"in0: f32[1,8,{14 // merge},{14 * merge},8]" in str(func).splitlines()[0]
    got = run_built(func, spec, ins, (1, 4, 14, 14, 8))  # the graph-shaped arrays are the merged view
    ref = np.maximum(conv(*(a.astype(np.float64) for a in (x, w, b))) + r, 0)
    assert_relative(unpack_array(got), ref, 1e-5)
