"""The packed conv prefetches the next channel block group's weights (ops/weight_stream.py):
the prefetch lines sit at the top of the reduction's third loop, their addresses start one
group ahead and, over the group's rows x tiles x steps, cover every line of the next group
once; the numerics are those without them. The RGB stem (one input channel per step) and
small weights get none by default.

Tolerance: max |err| / max |ref| < 1e-5 (fp32 sums over <= 1152 terms)."""

from __future__ import annotations

import re

import numpy as np

from tensorir.graph.types import TensorType
from tensorir.ops.conv import conv
from tensorir.ops.kernel import build_kernel
from tensorir.ops.layout import pack_array, pack_weight, unpack_array
from tensorir.target import get_target
from tests.ops.kernel_run import assert_relative, run_built

HOST = get_target("host")
L = HOST.vector_lanes("float32")
PAD = {"group": 1, "pads": (1, 1, 1, 1)}


def _case(c: int, m: int, size: int, k: int, block: int = L, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, size, size)).astype(np.float32)
    w = rng.standard_normal((m, c, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    ins = [pack_array(x, block), pack_weight(w, block, block, False), b.reshape(-1, block)]
    return ins, conv(*(a.astype(np.float64) for a in (x, w, b)), pads=(k // 2,) * 4)


def _build(ins, attrs, config=None):
    types = [TensorType(a.shape) for a in ins]
    return build_kernel("conv2d_nchwc", types, attrs, HOST, config, const_args=frozenset({1, 2}))


def _prefetches(func) -> list[str]:
    return [line for line in str(func).splitlines() if "prefetch(" in line]


def test_next_group_prefetched_over_the_groups_steps():
    # 8L -> 8L channels, 3x3 over 5x5: 8 blocks of weights, 4 groups of 2, L*L*9*8 elements each
    ins, ref = _case(8 * L, 8 * L, 5, 3)
    cfg = {"algorithm": "direct", "oc_blocks": 2, "ow_tile": 5, "prefetch_weights": 1}
    func, spec = _build(ins, PAD, cfg)
    lines = str(func).splitlines()
    pf = [k for k, line in enumerate(lines) if "prefetch(" in line]
    block = 8 * 9 * L * L  # elements of one output block's weights
    group_lines = 2 * block // (64 // 4)
    steps = 8 * 3 * 3  # (input channel block, kh, kw) per register tile
    per = -(-group_lines // (5 * 1 * steps))  # rows x tiles x steps cover the group once
    assert len(pf) == per
    # at the top of the third reduction loop, right before the innermost (input channels)
    assert "for rkw in range(0, 3):" in lines[pf[0] - 1] and "for rci in" in lines[pf[-1] + 1]
    first = lines[pf[0]]
    assert f"+ {2 * block})" in first or f"+ {2 * block}," in first, first  # one group ahead
    assert re.search(rf"min\(.*, {ins[1].size - 1}\)", first), first  # clamped into the weights
    got = run_built(func, spec, ins, (1, 8, 5, 5, L))
    assert_relative(unpack_array(got), ref, 1e-5)
    cfg["prefetch_weights"] = 0
    off, spec_off = _build(ins, PAD, cfg)
    assert not _prefetches(off)
    np.testing.assert_array_equal(run_built(off, spec_off, ins, (1, 8, 5, 5, L)), got)


def test_default_on_for_large_weights_off_for_the_stem_and_small_ones():
    big, _ = _case(8 * L, 8 * L, 5, 3)  # 8*8*9*L*L*4 bytes: >= 64 KB at L = 8 or 16
    assert _prefetches(_build(big, PAD)[0])
    small, _ = _case(L, 2 * L, 5, 1)
    assert not _prefetches(_build(small, {"group": 1})[0])
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal((64 * L, 3, 3, 3)).astype(np.float32)
    stem = [pack_array(x, 1), pack_weight(w, 1, L, False), np.zeros((64, L), np.float32)]
    assert not _prefetches(_build(stem, PAD, {"algorithm": "direct"})[0])  # one channel per step
