"""Layout segments (the values that share one channel-block cap) and the layout pass with a
cap per segment: dense convs join segments, everything else keeps one block; numerics kept."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

import tensorir as tir
from benchmarks.zoo import save
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.passes import copy_graph
from tensorir.passes.layout import make_layout_pass
from tensorir.passes.layout_segments import layout_segments, segment_count
from tensorir.pipeline import optimize
from tests.passes.helpers import assert_same_results, check_pass, const

CONV = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
DW = {**CONV, "group": 32}


def _graph() -> Graph:
    """conv -> relu -> depthwise -> add (residual) -> conv -> relu."""
    g = Graph("segs")
    x = g.add_input("x", TensorType((1, 3, 8, 8)))
    (c1,) = g.add_node("conv", [x, const(g, (32, 3, 3, 3), 1)], CONV)
    (r1,) = g.add_node("relu", [c1])
    (d,) = g.add_node("conv", [r1, const(g, (32, 1, 3, 3), 2)], DW)
    (a,) = g.add_node("add", [d, r1])
    (c2,) = g.add_node("conv", [a, const(g, (32, 32, 3, 3), 3)], CONV)
    (r2,) = g.add_node("relu", [c2])
    g.set_outputs([("y", r2)])
    return g


def test_segments_break_at_dense_convs_only():
    g = _graph()
    seg = layout_segments(g)
    by_op = {g.node(v.node).op + str(k): s for k, (v, s) in enumerate(seg.items())}
    print(by_op)
    ops = [(g.node(v.node).op, s) for v, s in seg.items()]
    # the input; the first conv's output with the relu, the depthwise and the add (the
    # depthwise reads and writes one block, the add joins its inputs); the last conv and relu
    assert ops == [("input", 0), ("conv", 1), ("relu", 1), ("conv", 1), ("add", 1), ("conv", 2), ("relu", 2)]
    assert segment_count(g) == 3


def test_a_cap_per_segment_packs_each_segment_in_its_own_block():
    g = _graph()
    before = copy_graph(g)
    conv = "dilations=(1,1) group=1 pads=(1,1,1,1) strides=(1,1)"
    dw = "dilations=(1,1) group=32 pads=(1,1,1,1) strides=(1,1)"
    check_pass(
        g,
        make_layout_pass("host", [16, 8, 32]),  # segment 1 in NCHW8c, segment 2 in NCHW32c
        """
        graph segs(%x: f32[1,3,8,8]) {
          %10 = reshape(%x) shape=(1,3,8,8,1) : f32[1,3,8,8,1]
          %c11 = constant f32[4,3,3,3,1,8]
          %12 = conv2d_nchwc(%10, %c11) CONV : f32[1,4,8,8,8]
          %13 = relu(%12) : f32[1,4,8,8,8]
          %c14 = constant f32[4,1,3,3,1,8]
          %15 = conv2d_nchwc(%13, %c14) DW : f32[1,4,8,8,8]
          %16 = add(%15, %13) : f32[1,4,8,8,8]
          %c17 = constant f32[1,4,3,3,8,32]
          %18 = conv2d_nchwc(%16, %c17) CONV : f32[1,1,8,8,32]
          %19 = relu(%18) : f32[1,1,8,8,32]
          %25 = layout_transform(%19) dst=NCHW src=NCHW32c : f32[1,32,8,8]
          return %25 as y
        }
        """.replace("CONV", conv).replace("DW", dw),
    )
    assert_same_results(before, g)


def test_caps_for_another_graph_are_ignored():
    """A list of caps whose length is not the graph's segment count (a record from other
    code) leaves every segment at the target's lanes."""
    g, h = _graph(), _graph()
    make_layout_pass("host", [8, 8])(g)
    make_layout_pass("host")(h)
    assert str(g) == str(h)


def test_mixed_caps_on_a_zoo_model_match_onnxruntime(tmp_path):
    """MobileNetV2-96 with each segment's cap drawn from 8 / 16 / 32: inverted residuals,
    depthwise + 1x1 merges and the residual adds all meet blocks other than their neighbours'."""
    path = tmp_path / "mv2.onnx"
    save("mobilenet_v2_96", path)
    n = segment_count(optimize(from_onnx(str(path)), fuse=False, layout=False))
    caps = [int(c) for c in np.random.default_rng(1).choice([8, 16, 32], n)]
    mod = tir.compile(str(path), layout_block=caps)
    assert mod.manifest["layout_block"] == caps
    blocks = {
        k["workload"].split("]")[0].rsplit(",", 1)[1]
        for k in mod.manifest["kernels"]
        if "nchwc" in k["workload"]
    }
    assert {"8", "16", "32"} <= blocks
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 96, 96)).astype(np.float32)
    want = ort.InferenceSession(str(path)).run(None, {"input": x})[0]
    np.testing.assert_allclose(mod.run({"input": x})[0], want, rtol=1e-4, atol=1e-5)
