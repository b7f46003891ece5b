"""convt_unshuffle: a k x k stride-k conv_transpose becomes a 1x1 conv to M*k*k channels and a
depth_to_space (printed before / after, numerics against the reference conv_transpose, the forms
left alone), and a compiled model with one matches onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.graph.verify import verify
from tensorir.passes import copy_graph
from tensorir.passes.convt_unshuffle import convt_unshuffle

from .helpers import assert_same_results, check_pass, const, onnx_model


def _convt(g: Graph, x, w, *bias, k=2, stride=2, pads=(0, 0, 0, 0), group=1, out_pad=(0, 0)):
    attrs = {
        "strides": (stride, stride),
        "pads": pads,
        "dilations": (1, 1),
        "group": group,
        "output_padding": out_pad,
    }
    (y,) = g.add_node("conv_transpose", [x, w, *bias], attrs)
    return y


def _graph(c=3, m=4, k=2, stride=2, bias=True, **kw) -> Graph:
    g = Graph("ct")
    x = g.add_input("x", TensorType((1, c, 5, 6)))
    b = [const(g, (m * kw.get("group", 1),), 2)] if bias else []
    y = _convt(g, x, const(g, (c, m, k, k), 1), *b, k=k, stride=stride, **kw)
    g.set_outputs([("y", y)])
    return g


def test_stride_2x2_becomes_conv_and_depth_to_space():
    g = _graph()
    out = check_pass(
        g,
        convt_unshuffle,
        """
        graph ct(%x: f32[1,3,5,6]) {
          %c4 = constant f32[16,3,1,1]
          %c5 = constant f32[16]
          %6 = conv(%x, %c4, %c5) dilations=(1,1) group=1 pads=(0,0,0,0) strides=(1,1) : f32[1,16,5,6]
          %7 = depth_to_space(%6) blocksize=2 mode=DCR : f32[1,4,10,12]
          return %7 as y
        }
        """,
    )
    assert [out.node(n).op for n in out.topo_order() if out.node(n).op not in ("input", "constant")] == [
        "conv",
        "depth_to_space",
    ]


@pytest.mark.parametrize("k", [3, 4])
def test_other_square_strides_and_no_bias(k):
    g = _graph(c=5, m=2, k=k, stride=k, bias=False)
    before = copy_graph(g)
    assert convt_unshuffle(g)
    verify(g)
    assert_same_results(before, g)
    ops = {g.node(n).op: g.node(n) for n in g.topo_order()}
    assert "conv_transpose" not in ops and ops["depth_to_space"].attr["blocksize"] == k
    assert g.type_of(g.inputs_of(g.topo_order()[-1])[0]).shape == (1, 2 * k * k, 5, 6)


@pytest.mark.parametrize(
    "kw",
    [
        {"k": 3, "stride": 2},  # windows overlap
        {"pads": (1, 1, 1, 1)},
        {"out_pad": (1, 1)},
        {"group": 3, "m": 1},
    ],
)
def test_forms_left_alone(kw):
    g = _graph(**kw)
    check_pass(g, convt_unshuffle, None)


def test_runtime_weight_is_left_alone():
    g = Graph("ct")
    x = g.add_input("x", TensorType((1, 3, 4, 4)))
    w = g.add_input("w", TensorType((3, 2, 2, 2)))
    g.set_outputs([("y", _convt(g, x, w))])
    check_pass(g, convt_unshuffle, None)


def test_compiled_head_matches_onnxruntime():
    """PP-OCR's DB head in small: two 2x2 stride-2 ConvTransposes (the second to one channel)
    with batch norm, relu and sigmoid between, compiled for the host."""
    import onnx.helper as oh
    import onnxruntime as ort

    import tensorir as tir

    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.standard_normal((16, 16, 2, 2)).astype(np.float32) * 0.2,
        "b1": rng.standard_normal(16).astype(np.float32),
        "w2": rng.standard_normal((16, 1, 2, 2)).astype(np.float32) * 0.2,
        "b2": rng.standard_normal(1).astype(np.float32),
    }
    up = {"kernel_shape": [2, 2], "strides": [2, 2]}
    nodes = [
        oh.make_node("ConvTranspose", ["x", "w1", "b1"], ["t1"], **up),
        oh.make_node("Relu", ["t1"], ["r1"]),
        oh.make_node("ConvTranspose", ["r1", "w2", "b2"], ["t2"], **up),
        oh.make_node("Sigmoid", ["t2"], ["y"]),
    ]
    model = onnx_model(nodes, "head", [1, 16, 12, 12], [1, 1, 48, 48], weights)
    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    mod = tir.compile(model)
    assert not any("conv_transpose" in k["workload"] for k in mod.manifest["kernels"])
    (got,) = mod.bind({"x": x})()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
