"""A packed conv whose output block is narrower than the vector accumulates in full vectors
(ops/conv_wide.py, algorithm "direct_wide"): the widened weight and the reference, the kernel's
IR (full-vector accumulators, the output's blocks in the copy-out), the compiled kernel against
float64 numpy (1x1 and padded strided 3x3, fused bias + relu, every tile width), the convs
that keep the plain direct algorithm, and when the wide form is the default (split 512-bit
cores: only where padding to whole vectors adds at most 20% zeros).

The output block is half the host's float32 lanes (8 on AVX-512, 4 on AVX2), so the test
runs the wide path on any x86 host. Tolerance: max |err| / max |ref| < 1e-5 (fp32 sums over
<= 288 terms)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.graph.types import TensorType
from tensorir.ops import conv_wide as cw
from tensorir.ops.conv import conv
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import build_kernel, kernel_space
from tensorir.ops.layout import pack_array, pack_weight, unpack_array
from tensorir.target import Target, get_target
from tests.ops.kernel_run import assert_relative, run_built

HOST = get_target("host")
LANES = HOST.vector_lanes("float32")
OB = LANES // 2
TOL = 1e-5


def _case(c: int, m: int, size: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, size, size)).astype(np.float32)
    w = rng.standard_normal((m, c, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    return x, w, b


def _packed(x, w, b):
    return pack_array(x, LANES), pack_weight(w, LANES, OB, False), b.reshape(-1, OB)


def _run(op, ins, attrs, out_shape, config=None):
    types = [TensorType(a.shape) for a in ins]
    func, spec = build_kernel(op, types, attrs, HOST, config, const_args=frozenset({1, 2}))
    return run_built(func, spec, ins, out_shape), spec, func


def _check(got: np.ndarray, ref: np.ndarray) -> None:
    assert_relative(got, ref, TOL)


def test_widened_weight_and_reference():
    x, w, b = _case(2 * LANES, 5 * OB, 5, 3)
    wp = pack_weight(w, LANES, OB, False)
    wide = cw.widen_weight(wp, LANES, 4)
    assert wide.shape == (4, 2, 3, 3, LANES, LANES)
    np.testing.assert_array_equal(wide[0, 1, 2, 0, 3, OB + 1], w[OB + 1, LANES + 3, 2, 0])
    assert not wide[2, ..., OB:].any() and not wide[3].any()  # channels past M are zero
    got = cw.conv2d_nchwc_wide(
        pack_array(x, LANES), wide, b.reshape(-1, OB), pads=(1, 1, 1, 1), block=OB, channels=5 * OB
    )
    np.testing.assert_allclose(unpack_array(got), conv(x, w, b, pads=(1, 1, 1, 1)), rtol=1e-4, atol=1e-4)


def test_kernel_accumulates_full_vectors():
    x, w, b = _case(2 * LANES, 5 * OB, 6, 1)
    _, spec, func = _run("conv2d_nchwc", list(_packed(x, w, b)), {"group": 1}, (1, 5, 6, 6, OB))
    assert spec.op == cw.OP and spec.algorithm == "direct_wide"
    assert spec.in_types[1].shape[-1] == LANES and spec.attrs["channels"] == 5 * OB
    text = str(func)
    assert f"broadcast(0.0, {LANES})" in text  # the accumulators are full vectors
    assert "conv_nchwc[ramp(" in text and f", 1, {OB})]" in text  # the copy-out writes blocks of OB


@pytest.mark.parametrize("c, m, size, k, stride", [(LANES, 5 * OB, 7, 1, 1), (2 * LANES, 3 * OB, 9, 3, 2)])
def test_kernel_matches_numpy(c, m, size, k, stride):
    x, w, b = _case(c, m, size, k, seed=1)
    p = k // 2
    attrs = {"group": 1, "pads": (p,) * 4, "strides": (stride, stride)}
    o = (size + 2 * p - k) // stride + 1
    cfg = {"algorithm": "direct_wide"}  # 24 channels on Zen 4 default to direct (wide_by_default)
    got, spec, _ = _run("conv2d_nchwc", list(_packed(x, w, b)), attrs, (1, m // OB, o, o, OB), cfg)
    assert spec.algorithm == "direct_wide"
    ref = conv(
        x.astype(np.float64),
        w.astype(np.float64),
        b.astype(np.float64),
        strides=(stride, stride),
        pads=(p,) * 4,
    )
    _check(unpack_array(got), ref)


def test_fused_relu_and_every_tile_width():
    x, w, b = _case(LANES, 7 * OB, 5, 1, seed=2)
    ins = list(_packed(x, w, b))
    body = FusedBody((Step("conv2d_nchwc", (("group", 1),), (0, 1, 2)), Step("relu", (), (3,))), 3, 0)
    ref = np.maximum(conv(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)), 0)
    space = kernel_space("fused", [TensorType(a.shape) for a in ins], {"body": body}, HOST)
    tiles = next(kn for kn in space.knobs("direct_wide") if kn.name == "oc_blocks").choices
    assert tiles == cw.WIDE_BLOCKS
    for k in tiles:
        cfg = {"algorithm": "direct_wide", "oc_blocks": k}
        got, spec, _ = _run("fused", ins, {"body": body}, (1, 7, 5, 5, OB), cfg)
        assert spec.in_types[1].shape[0] % min(k, 4) == 0  # whole tiles of at most the conv's 4 vectors
        assert (got == 0).any()
        _check(unpack_array(got), ref)


def test_full_blocks_and_depthwise_stay_plain():
    x, w, b = _case(LANES, 2 * LANES, 4, 1)
    full = [pack_array(x, LANES), pack_weight(w, LANES, LANES, False), b.reshape(-1, LANES)]
    _, spec, _ = _run("conv2d_nchwc", full, {"group": 1}, (1, 2, 4, 4, LANES))
    assert spec.op == "conv2d_nchwc" and spec.algorithm == "direct"
    assert not cw.eligible((1, 1, 3, 3, 1, LANES), LANES)
    choices = kernel_space(
        "conv2d_nchwc", [TensorType((1, 1, 4, 4, OB)), TensorType((1, 1, 3, 3, 1, OB))], {"group": OB}, HOST
    ).algorithms
    assert "direct_wide" not in choices


def test_full_rate_lanes_of_split_512_bit_cores():
    zen4 = Target("zen4", cpu="znver4", vector_bits=512, num_vector_registers=32)
    assert zen4.vector_lanes("float32") == 16 and zen4.full_rate_lanes("float32") == 8
    assert Target("zen5", cpu="znver5", vector_bits=512).full_rate_lanes("float32") == 16
    assert get_target("x86_64-v4").full_rate_lanes("float32") == 16
    assert get_target("x86_64-v3").full_rate_lanes("float32") == 8


@pytest.mark.parametrize(
    "channels, full_rate, wide",
    [
        (24, 16, True),  # 8-lane FMAs at half rate: always wide
        (24, 8, False),  # Zen 4: 32 computed for 24 (1.33) -> direct
        (40, 8, True),  # 48 for 40 (1.2): wide's fewer broadcasts per FMA still win
        (1000, 8, True),  # SqueezeNet's classes: 1008 for 1000
        (32, 8, False),  # a 16-block is not eligible at all
    ],
)
def test_wide_by_default(channels, full_rate, wide):
    ob = 16 if channels % 16 == 0 else 8
    w_shape = (channels // ob, 4, 1, 1, 16, ob)
    assert cw.wide_by_default(w_shape, 16, full_rate) is wide


def test_zen4_default_is_direct_for_24_channels():
    from tensorir.ops.conv_algorithms import algorithm_choices

    x, w = (1, 6, 8, 8, 16), (3, 6, 1, 1, 16, 8)
    choices, default = algorithm_choices(x, w, {"group": 1}, True, 16, 8)
    assert "direct_wide" in choices and default == "direct"  # still a tuning choice
    assert algorithm_choices(x, w, {"group": 1}, True, 16, 16)[1] == "direct_wide"
