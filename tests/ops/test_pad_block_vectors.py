"""The padding stage of a packed conv or pool copies each channel block as one vector
(nn_compute.vectorize_pad_block), at root (a dense strided conv) and per row chunk (a
depthwise conv, max pool): the bounds test is per pixel. Left scalar, LLVM unrolled the
block's 16 channels and vectorized the pixels, 16 elements apart, into scatters. A plain
NCHW pad (the width padded, the test per element) stays scalar. Numerics against float64
numpy (max |err| / max |ref| < 1e-5) and the library's assembly without scatters."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tensorir.codegen import emit_assembly
from tensorir.graph.types import TensorType
from tensorir.ops.conv import conv
from tensorir.ops.kernel import build_kernel
from tensorir.ops.layout import pack_array, pack_weight, unpack_array
from tensorir.ops.registry import get_op
from tensorir.target import get_target
from tests.ops.kernel_run import assert_relative, run_built

HOST = get_target("host")
L = HOST.vector_lanes("float32")
BLOCK_COPY = re.compile(rf"_pad\[ramp\([^]]*, 1, {L}\)\] = (?:in0\[ramp|broadcast)")


def _pad_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if re.match(r"\s*\w*_pad\[", ln)]


def _build(op, ins, attrs, config, const_args=frozenset({1, 2})):
    types = [TensorType(a.shape) for a in ins]
    return build_kernel(op, types, attrs, HOST, config, const_args=const_args)


def _no_scatter(func) -> None:
    asm = emit_assembly(func, HOST)
    assert not re.search(r"\bv(p)?scatter|\bv(p)?gather", asm)


@pytest.mark.parametrize(("group", "pad_at"), [(1, None), (2, "chunk"), (2, "root")])
def test_strided_conv_pads_a_block_per_vector(group, pad_at):
    """ResNet-50's 3x3 / 2 (dense: pad at root) and a depthwise 3x3 / 2 (per chunk or root)."""
    rng = np.random.default_rng(3)
    c = 2 * L
    x = rng.standard_normal((1, c, 13, 13)).astype(np.float32)
    w = rng.standard_normal((c, c // (c if group == 2 else 1), 3, 3)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    depthwise = group == 2
    attrs = {"group": c if depthwise else 1, "pads": (1, 1, 1, 1), "strides": (2, 2)}
    ins = [pack_array(x, L), pack_weight(w, L, L, depthwise), b.reshape(-1, L)]
    cfg = {"algorithm": "direct", **({"pad_at": pad_at} if pad_at else {})}
    func, spec = _build("conv2d_nchwc", ins, attrs, cfg)
    lines = _pad_lines(str(func))
    assert lines and all(BLOCK_COPY.search(ln) for ln in lines), lines
    _no_scatter(func)
    got = run_built(func, spec, ins, (1, 2, 7, 7, L))
    ref = conv(
        *(a.astype(np.float64) for a in (x, w, b)), strides=(2, 2), pads=(1,) * 4, group=attrs["group"]
    )
    assert_relative(unpack_array(got), ref, 1e-5)


def test_max_pool_pads_a_block_per_vector():
    """ResNet-50's 3x3 / 2 max pool on packed channels: the fill (-inf) a vector too."""
    x = np.random.default_rng(4).standard_normal((1, 2 * L, 15, 15)).astype(np.float32)
    xp = pack_array(x, L)  # the layout pass's packed pool: a unit window on the block axis
    attrs = {"kernel_shape": (3, 3, 1), "strides": (2, 2, 1), "pads": (1, 1, 0, 1, 1, 0), "indices": 0}
    func, spec = _build("max_pool", [xp], attrs, None, const_args=frozenset())
    lines = _pad_lines(str(func))
    assert lines and all(BLOCK_COPY.search(ln) for ln in lines), lines
    _no_scatter(func)
    (want,) = get_op("max_pool").run_reference(
        [x], {**attrs, "kernel_shape": (3, 3), "strides": (2, 2), "pads": (1,) * 4}
    )
    got = run_built(func, spec, [xp], (1, 2, 8, 8, L))
    np.testing.assert_array_equal(unpack_array(got), want)


def test_plain_nchw_pad_stays_scalar():
    """An unpacked max pool pads the width itself: its bounds test reads the last axis."""
    x = np.random.default_rng(5).standard_normal((1, 3, 34, 34)).astype(np.float32)
    attrs = {"kernel_shape": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "indices": 0}
    func, spec = _build("max_pool", [x], attrs, None, const_args=frozenset())
    lines = _pad_lines(str(func))
    assert lines and not any("ramp(" in ln.split("=")[0] for ln in lines), lines
    (want,) = get_op("max_pool").run_reference([x], attrs)
    np.testing.assert_array_equal(run_built(func, spec, [x], want.shape), want)


@pytest.mark.parametrize(("order", "pad_loop"), [("channels", "i0_i1_i2_f"), ("rows", "i0_i2_i1_f")])
def test_a_root_pad_follows_the_convs_outer_order(order, pad_loop):
    """outer_order = rows: the padded copy at root is split by rows too (image, row, channel
    block), so a thread pads the input rows its conv rows read; channels keeps (image,
    channel block, row). Numerics unchanged."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 4 * L, 40, 40)).astype(np.float32)
    w = rng.standard_normal((4 * L, 4 * L, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4 * L).astype(np.float32)
    attrs = {"group": 1, "pads": (1, 1, 1, 1), "strides": (2, 2)}
    ins = [pack_array(x, L), pack_weight(w, L, L, False), b.reshape(-1, L)]
    cfg = {"algorithm": "direct", "pad_at": "root", "outer_order": order, "oc_blocks": 1}
    func, spec = _build("conv2d_nchwc", ins, attrs, cfg)
    heads = [ln.strip() for ln in str(func).splitlines() if "parallel(" in ln]
    assert heads[0].startswith(f"for {pad_loop} in parallel("), heads
    got = run_built(func, spec, ins, (1, 4, 20, 20, L))
    ref = conv(*(a.astype(np.float64) for a in (x, w, b)), strides=(2, 2), pads=(1,) * 4, group=1)
    assert_relative(unpack_array(got), ref, 1e-5)
