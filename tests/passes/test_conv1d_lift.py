"""conv1d_lift: 1-D convs as 2-D ones of unit height; the unit-axis reshapes sink through
elementwise ops and slices and cancel, so a 1-D conv chain compiles to packed 2-D kernels."""

from __future__ import annotations

import numpy as np
import onnx.helper as oh
import pytest

from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.graph.verify import verify
from tensorir.passes import copy_graph
from tensorir.passes.conv1d_lift import conv1d_lift
from tensorir.passes.simplify import simplify

from .helpers import assert_same_results, check_pass, const, onnx_model


def _conv1d(g: Graph, x, w, *bias, stride=1, pad=(0, 0), dil=1, group=1):
    (y,) = g.add_node(
        "conv",
        [x, w, *bias],
        {"strides": (stride,), "pads": pad, "dilations": (dil,), "group": group},
    )
    return y


def _lift_and_simplify(g: Graph) -> bool:
    return conv1d_lift(g) | simplify(g)


def _lifted(g: Graph, pass_) -> Graph:
    """Run `pass_` on a copy of `g`: it changes the graph, which verifies and gives the same
    outputs (the callers check the shape of what it made)."""
    out = copy_graph(g)
    assert pass_(out)
    verify(out)
    assert_same_results(g, out)
    return out


def test_conv_relu_conv_becomes_a_2d_chain_with_one_reshape_at_each_end():
    g = Graph("c1d")
    x = g.add_input("x", TensorType((1, 4, 16)))
    a = _conv1d(g, x, const(g, (8, 4, 3), 1), const(g, (8,), 2), pad=(1, 1))
    (r,) = g.add_node("relu", [a])
    b = _conv1d(g, r, const(g, (6, 8, 3), 3), stride=2, pad=(1, 1))
    g.set_outputs([("y", b)])
    out = check_pass(
        g,
        _lift_and_simplify,
        """
        graph c1d(%x: f32[1,4,16]) {
          %c2 = constant f32[8] [ 0.18905339,-0.5227485 ,-0.41306356,-2.4414673 , 1.7997074 , 1.1441659 ,
         -0.32542282, 0.7738066 ]
          %7 = reshape(%x) shape=(1,4,1,16) : f32[1,4,1,16]
          %c8 = constant f32[8,4,1,3]
          %9 = conv(%7, %c8, %c2) dilations=(1,1) group=1 pads=(0,1,0,1) strides=(1,1) : f32[1,8,1,16]
          %11 = relu(%9) : f32[1,8,1,16]
          %c14 = constant f32[6,8,1,3]
          %15 = conv(%11, %c14) dilations=(1,1) group=1 pads=(0,1,0,1) strides=(1,2) : f32[1,6,1,8]
          %16 = reshape(%15) shape=(1,6,8) : f32[1,6,8]
          return %16 as y
        }
        """,
    )
    assert not conv1d_lift(out)  # a fixed point


@pytest.mark.parametrize(
    "stride,pad,dil,group,bias",
    [(128, (0, 0), 1, 1, False), (2, (2, 1), 2, 1, True), (1, (1, 1), 1, 4, True), (3, (0, 2), 1, 8, False)],
)
def test_strides_pads_dilations_and_groups_keep_the_result(stride, pad, dil, group, bias):
    g = Graph("c1d")
    c, m, k = 8, 16, 5 if stride != 128 else 256
    x = g.add_input("x", TensorType((2, c, 300)))
    b = [const(g, (m,), 2)] if bias else []
    y = _conv1d(g, x, const(g, (m, c // group, k), 1), *b, stride=stride, pad=pad, dil=dil, group=group)
    g.set_outputs([("y", y)])
    out = _lifted(g, conv1d_lift)
    convs = [out.node(n) for n in out.op_nodes() if out.node(n).op == "conv"]
    assert [c.outputs[0].ndim for c in convs] == [4]


def test_elementwise_ops_slices_and_constants_of_every_rank_stay_4d():
    """The STFT magnitude of Silero VAD (slices, pow, add, sqrt) between two convs, with
    constants of rank 0 to 3 and a rank-3 graph input joining: one reshape in, one out."""
    g = Graph("stft")
    x = g.add_input("x", TensorType((3, 1, 64)))
    z = g.add_input("z", TensorType((3, 4, 3)))
    s = _conv1d(g, x, const(g, (8, 1, 16), 1), stride=8)  # (3, 8, 7)
    (re,) = g.add_node("slice", [s], {"starts": (0, 1), "ends": (4, 4), "axes": (1, 2), "steps": (1, 1)})
    (im,) = g.add_node("slice", [s], {"starts": (4, 4), "ends": (8, 7), "axes": (1, 2), "steps": (1, 1)})
    (p,) = g.add_node("mul", [re, re])
    (q,) = g.add_node("mul", [im, const(g, (), 3)])
    (a,) = g.add_node("add", [p, q])
    (b,) = g.add_node("add", [a, const(g, (3,), 4)])
    (c,) = g.add_node("mul", [b, const(g, (4, 1), 5)])
    (d,) = g.add_node("sub", [c, const(g, (3, 4, 3), 6)])
    (e,) = g.add_node("add", [d, z])
    y = _conv1d(g, e, const(g, (2, 4, 3), 7), pad=(1, 1))
    g.set_outputs([("y", y)])
    out = _lifted(g, _lift_and_simplify)
    ranks = {
        out.node(n).op: out.node(n).outputs[0].ndim for n in out.op_nodes() if out.node(n).op != "reshape"
    }
    assert set(ranks.values()) == {4}, ranks
    assert sum(out.node(n).op == "reshape" for n in out.op_nodes()) == 3  # x and z in, y out


def test_a_2d_conv_and_a_rank3_consumer_that_is_not_elementwise_are_left_alone():
    g = Graph("two")
    x = g.add_input("x", TensorType((1, 4, 6, 6)))
    (y,) = g.add_node(
        "conv",
        [x, const(g, (4, 4, 3, 3))],
        {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1},
    )
    g.set_outputs([("y", y)])
    check_pass(g, conv1d_lift, None)

    h = Graph("tail")
    x = h.add_input("x", TensorType((1, 4, 6)))
    c = _conv1d(h, x, const(h, (4, 4, 1), 1))
    (t,) = h.add_node("transpose", [c], {"perm": (0, 2, 1)})
    h.set_outputs([("y", t)])
    out = _lifted(h, conv1d_lift)
    assert out.node(out.outputs[0][1].node).op == "transpose"


def test_compiled_1d_conv_net_matches_onnxruntime_on_packed_2d_kernels():
    import onnxruntime as ort

    import tensorir as tir

    rng = np.random.default_rng(0)
    w = {
        "w1": rng.standard_normal((32, 1, 64)).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((32, 32, 3)).astype(np.float32) * 0.1,
        "b2": rng.standard_normal(32).astype(np.float32),
        "w3": rng.standard_normal((16, 32, 3)).astype(np.float32) * 0.1,
    }
    nodes = [
        oh.make_node("Conv", ["x", "w1"], ["a"], strides=[32], kernel_shape=[64]),
        oh.make_node("Abs", ["a"], ["b"]),
        oh.make_node("Conv", ["b", "w2", "b2"], ["c"], pads=[1, 1], kernel_shape=[3]),
        oh.make_node("Relu", ["c"], ["d"]),
        oh.make_node("Conv", ["d", "w3"], ["y"], pads=[1, 1], strides=[2], kernel_shape=[3]),
    ]
    model = onnx_model(nodes, "c1d", [4, 1, 1024], [4, 16, 16], w)
    x = rng.standard_normal((4, 1, 1024)).astype(np.float32)
    mod = tir.compile(model)
    (ours,) = mod.run({"x": x})
    (ref,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)
    ops = [k["op"] for k in mod.manifest["kernels"]]
    assert "conv" not in ops and any("conv2d_nchwc" in str(k) for k in mod.manifest["kernels"]), ops


@pytest.mark.parametrize(
    "op, attrs",
    [
        ("max_pool", {"kernel_shape": (3,), "strides": (2,), "pads": (1, 1), "indices": 1}),
        (
            "max_pool",
            {"kernel_shape": (2,), "strides": (2,), "dilations": (2,), "indices": 0, "ceil_mode": 1},
        ),
        ("avg_pool", {"kernel_shape": (4,), "strides": (3,), "pads": (0, 2), "count_include_pad": 0}),
        ("global_avg_pool", {}),
        ("global_max_pool", {}),
    ],
)
def test_1d_pools_after_a_conv_are_lifted_with_it(op, attrs):
    """conv -> relu -> pool, 1-D: one 4-D chain; max_pool's indices come out the same."""
    g = Graph("pool")
    x = g.add_input("x", TensorType((2, 4, 21)))
    c = _conv1d(g, x, const(g, (8, 4, 3), 1), pad=(1, 1))
    (r,) = g.add_node("relu", [c])
    outs = g.add_node(op, [r], attrs)
    g.set_outputs([(f"y{i}", v) for i, v in enumerate(outs)])
    out = _lifted(g, _lift_and_simplify)
    lifted = [out.node(n) for n in out.op_nodes() if out.node(n).op in ("conv", op)]
    assert [n.outputs[0].ndim for n in lifted] == [4, 4], str(out)


def test_compiled_1d_pool_net_packs_and_matches_onnxruntime():
    import onnxruntime as ort

    import tensorir as tir

    rng = np.random.default_rng(1)
    w = {"w1": rng.standard_normal((32, 8, 5)).astype(np.float32) * 0.2}
    nodes = [
        oh.make_node("Conv", ["x", "w1"], ["a"], pads=[2, 2], kernel_shape=[5]),
        oh.make_node("Relu", ["a"], ["b"]),
        oh.make_node("MaxPool", ["b"], ["c"], kernel_shape=[3], strides=[2], pads=[1, 1]),
        oh.make_node("AveragePool", ["c"], ["y"], kernel_shape=[2], strides=[2]),
    ]
    model = onnx_model(nodes, "pool1d", [1, 8, 64], [1, 32, 16], w)
    x = rng.standard_normal((1, 8, 64)).astype(np.float32)
    mod = tir.compile(model)
    (ours,) = mod.run({"x": x})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(ours, sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    pools = [k["workload"] for k in mod.manifest["kernels"] if k["op"] in ("max_pool", "avg_pool")]
    assert len(pools) == 2 and all(w.split("]")[0].count(",") == 4 for w in pools), pools  # 5-D: packed
