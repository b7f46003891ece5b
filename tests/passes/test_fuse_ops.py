"""fuse_ops: epilogues into anchors, elementwise chains together; meaning preserved."""

from __future__ import annotations

import numpy as np

from benchmarks.zoo import build, sample_inputs
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.graph import Graph
from tensorir.graph.printer import print_graph
from tensorir.graph.types import TensorType
from tensorir.graph.verify import verify
from tensorir.passes.fuse_ops import fuse_ops
from tensorir.pipeline import optimize
from tensorir.runtime.reference import run_reference

RNG = np.random.default_rng(0)


def _conv_block() -> Graph:
    g = Graph("block")
    x = g.add_input("x", TensorType((1, 3, 8, 8)))
    skip = g.add_input("skip", TensorType((1, 4, 8, 8)))
    w = g.add_const(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    b = g.add_const(RNG.standard_normal((1, 4, 1, 1)).astype(np.float32))
    conv_attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    (c,) = g.add_node("conv", [x, w], conv_attrs, name="conv")
    (a,) = g.add_node("add", [c, b], name="bias")
    (r,) = g.add_node("add", [a, skip], name="residual")
    (y,) = g.add_node("relu", [r], name="act")
    (z,) = g.add_node("sigmoid", [y], name="gate")  # y is also an output: the chain stops at y
    g.set_outputs([("y", y), ("z", z)])
    return g


def _body_lines(g: Graph) -> list[str]:
    return [ln for ln in print_graph(g).splitlines() if "constant" not in ln]


def test_epilogue_fuses_into_conv_and_stops_at_a_graph_output():
    g = _conv_block()
    feeds = {
        "x": RNG.standard_normal((1, 3, 8, 8), np.float32),
        "skip": RNG.standard_normal((1, 4, 8, 8), np.float32),
    }
    before = run_reference(g, feeds)
    assert fuse_ops(g)
    verify(g)
    assert _body_lines(g) == [
        "graph block(%x: f32[1,3,8,8], %skip: f32[1,4,8,8]) {",
        "  %9 = fused(%x, %c2, %c3, %skip) body=conv+add+add+relu : f32[1,4,8,8]",
        "  %8 = sigmoid(%9) : f32[1,4,8,8]",
        "  return %9 as y, %8 as z",
        "}",
    ]
    for p, q in zip(before, run_reference(g, feeds), strict=True):
        np.testing.assert_array_equal(p, q)


def _diamond(b_is_output: bool) -> Graph:
    g = Graph("chain")
    x = g.add_input("x", TensorType((16,)))
    (a,) = g.add_node("exp", [x])
    (b,) = g.add_node("neg", [a])
    (c,) = g.add_node("abs", [b])
    (d,) = g.add_node("mul", [c, b])  # b has two consumers, both after it
    g.set_outputs([("d", d), ("b", b)] if b_is_output else [("d", d)])
    return g


def test_elementwise_diamond_fuses_whole():
    g = _diamond(b_is_output=False)
    assert fuse_ops(g)
    assert _body_lines(g)[1:3] == ["  %5 = fused(%x) body=exp+neg+abs+mul : f32[16]", "  return %5 as d"]
    assert not fuse_ops(g)


def test_a_value_read_outside_ends_the_group():
    g = _diamond(b_is_output=True)  # b leaves the graph: the first kernel must write it
    assert fuse_ops(g)
    assert _body_lines(g)[1:3] == [
        "  %5 = fused(%x) body=exp+neg : f32[16]",
        "  %6 = fused(%5) body=abs+mul : f32[16]",
    ]
    assert not fuse_ops(g)


def _conv_silu(transpose_reads_conv: bool) -> Graph:
    g = Graph("silu")
    x = g.add_input("x", TensorType((1, 3, 8, 8)))
    w = g.add_const(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    conv_attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    (c,) = g.add_node("conv", [x, w], conv_attrs, name="conv")
    (s,) = g.add_node("sigmoid", [c])
    (y,) = g.add_node("mul", [c, s], name="silu")
    outs = [("y", y)]
    if transpose_reads_conv:
        (t,) = g.add_node("transpose", [c], {"perm": (0, 1, 3, 2)}, name="flip")
        outs.append(("t", t))
    g.set_outputs(outs)
    return g


def test_silu_diamond_joins_the_conv_epilogue():
    g = _conv_silu(transpose_reads_conv=False)
    feeds = {"x": RNG.standard_normal((1, 3, 8, 8), np.float32)}
    before = run_reference(g, feeds)
    assert fuse_ops(g)
    verify(g)
    assert _body_lines(g)[1] == "  %5 = fused(%x, %c1) body=conv+sigmoid+mul : f32[1,4,8,8]"
    np.testing.assert_array_equal(before[0], run_reference(g, feeds)[0])


def test_on_cpus_an_anchor_takes_a_plain_chain():
    """anchor_diamonds=False (the pipeline's choice for LLVM targets): the conv keeps its own
    kernel and the SiLU runs as one elementwise kernel after it; OpenCL builds merge them."""
    g = _conv_silu(transpose_reads_conv=False)
    feeds = {"x": RNG.standard_normal((1, 3, 8, 8), np.float32)}
    before = run_reference(g, feeds)
    assert fuse_ops(g, anchor_diamonds=False)
    verify(g)
    lines = _body_lines(g)
    assert any(ln.startswith("  %2 = conv(%x, %c1) ") for ln in lines)
    assert any("fused(%2) body=sigmoid+mul" in ln for ln in lines)
    np.testing.assert_array_equal(before[0], run_reference(g, feeds)[0])
    model = build("yolov8n_320")
    host = optimize(from_onnx(model), target="host")
    gpu = optimize(from_onnx(model), target="opencl:pocl")
    bodies = [str(n.attr.get("body")) for n in map(host.node, host.op_nodes()) if n.op == "fused"]
    assert "conv2d_nchwc+sigmoid+mul" not in bodies and "sigmoid+mul" in bodies
    bodies = [str(n.attr.get("body")) for n in map(gpu.node, gpu.op_nodes()) if n.op == "fused"]
    assert "conv2d_nchwc+sigmoid+mul" in bodies


def test_silu_diamond_stays_apart_when_the_conv_is_read_elsewhere():
    g = _conv_silu(transpose_reads_conv=True)  # the conv's output must reach memory for it
    feeds = {"x": RNG.standard_normal((1, 3, 8, 8), np.float32)}
    before = run_reference(g, feeds)
    assert fuse_ops(g)
    verify(g)
    lines = _body_lines(g)
    assert any(ln.startswith("  %2 = conv(%x, %c1) ") for ln in lines)
    assert any("fused(%2) body=sigmoid+mul" in ln for ln in lines)
    for p, q in zip(before, run_reference(g, feeds), strict=True):
        np.testing.assert_array_equal(p, q)


def test_zoo_models_keep_their_outputs():
    for name in ("mobilenet_v2_96", "bert_encoder"):
        model = build(name)
        g = from_onnx(model)
        feeds = sample_inputs(model)
        before = run_reference(g, feeds)
        count = len(g.op_nodes())
        fuse_ops(g)
        verify(g)
        assert len(g.op_nodes()) < count
        for p, q in zip(before, run_reference(g, feeds), strict=True):
            np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-6)
