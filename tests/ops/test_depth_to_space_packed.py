"""depth_to_space_packed: DCR depth_to_space on NCHW[x]c (ops/depth_to_space_packed.py): the
reference against the unpacked op, the compiled kernel against the reference (and its IR: one
contiguous vector per output block, the source index without per-vector division), and the
layout pass keeping a conv -> depth_to_space -> relu chain packed (and a CRD one not)."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.ops.depth_to_space_packed import OP, depth_to_space_packed
from tensorir.ops.kernel import op_kernel, run_op
from tensorir.ops.layout import pack_array, unpack_array
from tensorir.ops.tensor import depth_to_space
from tensorir.passes import copy_graph
from tensorir.passes.layout import make_layout_pass
from tensorir.target import get_target
from tests.passes.helpers import assert_same_results, const

CASES = [  # (output channels, k, input block, output block)
    (24, 2, 16, 8),  # PP-OCR's head: 96 channels in 16s -> 24 in 8s
    (1, 2, 4, 1),  # its last layer: 4 -> 1 channel
    (16, 2, 16, 16),
    (8, 3, 8, 8),
]


@pytest.mark.parametrize("c, k, ib, ob", CASES)
def test_reference_is_the_unpacked_dcr_shuffle(c, k, ib, ob):
    x = np.random.default_rng(0).standard_normal((2, c * k * k, 3, 5)).astype(np.float32)
    got = depth_to_space_packed(pack_array(x, ib), k, ob)
    np.testing.assert_array_equal(unpack_array(got), depth_to_space(x, k, "DCR"))
    assert got.shape == (2, c // ob, 3 * k, 5 * k, ob)


@pytest.mark.parametrize("c, k, ib, ob", CASES)
def test_compiled_matches_reference(c, k, ib, ob):
    xp = pack_array(np.random.default_rng(1).standard_normal((1, c * k * k, 4, 6)).astype(np.float32), ib)
    attrs = {"blocksize": k, "block": ob}
    (got,) = run_op(OP, [xp], attrs)
    np.testing.assert_array_equal(got, depth_to_space_packed(xp, k, ob))
    text = str(op_kernel(OP, [TensorType.of(xp)], attrs, "host"))
    if ob > 1:  # a block-wide vector (at most the host's), read contiguously
        width = min(ob, get_target("host").vector_lanes("float32"))
        assert f", 1, {width})] = in0[ramp(" in text, text
    assert "z_o//" not in text and "z_o%" not in text, text  # the pixel loop's index: adds only


def _head(mode: str) -> Graph:
    g = Graph("head")
    x = g.add_input("x", TensorType((1, 8, 5, 5)))
    conv = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}
    (c,) = g.add_node("conv", [x, const(g, (32, 8, 1, 1), 1), const(g, (32,), 2)], conv)
    (d,) = g.add_node("depth_to_space", [c], {"blocksize": 2, "mode": mode})
    (r,) = g.add_node("relu", [d])
    g.set_outputs([("y", r)])
    return g


def test_layout_keeps_a_dcr_shuffle_packed_and_a_crd_one_not():
    dcr = copy_graph(_head("DCR"))
    assert make_layout_pass("linux-arm64")(dcr)  # NCHW4c: 32 channels -> 8, both in blocks of 4
    ops = collections.Counter(dcr.node(n).op for n in dcr.op_nodes())
    # the transforms left: the model's input and output
    assert ops[OP] == 1 and ops["depth_to_space"] == 0 and ops["layout_transform"] == 2, str(dcr)
    assert "depth_to_space_packed(%9) block=4 blocksize=2 : f32[1,2,10,10,4]" in str(dcr)
    assert_same_results(_head("DCR"), dcr)
    crd = copy_graph(_head("CRD"))
    make_layout_pass("linux-arm64")(crd)
    ops = collections.Counter(crd.node(n).op for n in crd.op_nodes())
    assert ops[OP] == 0 and ops["depth_to_space"] == 1, str(crd)  # CRD's blocks would be gathered
    assert "layout_transform(%9) dst=NCHW src=NCHW4c" in str(crd)  # so the conv's output is unpacked
    assert_same_results(_head("CRD"), crd)
