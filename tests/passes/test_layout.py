"""layout: NCHW -> NCHW[x]c around conv chains; transforms only at boundaries; numerics kept."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorir as tir
from benchmarks.zoo import build
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.ops.conv import conv
from tensorir.ops.kernel import run_op
from tensorir.ops.layout import pack_array, pack_weight, unpack_array
from tensorir.ops.registry import get_op
from tensorir.passes import copy_graph
from tensorir.passes.layout import channel_block, make_layout_pass
from tensorir.pipeline import optimize
from tensorir.runtime.reference import run_reference
from tensorir.target import get_target
from tests.passes.helpers import assert_same_results, check_pass, const, random_inputs

CONV = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
HOST_LANES = get_target("host").vector_lanes("float32")


def _ops(g: Graph) -> collections.Counter:
    return collections.Counter(g.node(n).op for n in g.op_nodes())


def _chain() -> Graph:
    """conv -> relu -> conv -> add (residual) -> mul (per-channel) -> global pool."""
    g = Graph("chain")
    x = g.add_input("x", TensorType((1, 3, 8, 8)))
    (c1,) = g.add_node("conv", [x, const(g, (32, 3, 3, 3), 1), const(g, (32,), 2)], CONV)
    (r,) = g.add_node("relu", [c1])
    (c2,) = g.add_node("conv", [r, const(g, (32, 32, 3, 3), 3)], CONV)
    (a,) = g.add_node("add", [c2, r])
    (m,) = g.add_node("mul", [a, const(g, (32, 1, 1), 4)])
    (p,) = g.add_node("global_avg_pool", [m])
    g.set_outputs([("y", p)])
    return g


def test_chain_packs_with_transforms_only_at_the_ends():
    g = _chain()
    print(g)
    conv_attrs = "dilations=(1,1) group=1 pads=(1,1,1,1) strides=(1,1)"
    check_pass(
        g,
        make_layout_pass("linux-arm64"),  # NEON: 4 float32 lanes -> NCHW4c
        """
        graph chain(%x: f32[1,3,8,8]) {
          %11 = reshape(%x) shape=(1,3,8,8,1) : f32[1,3,8,8,1]
          %c12 = constant f32[8,3,3,3,1,4]
          %c13 = constant f32[8,4]
          %14 = conv2d_nchwc(%11, %c12, %c13) ATTRS : f32[1,8,8,8,4]
          %15 = relu(%14) : f32[1,8,8,8,4]
          %c16 = constant f32[8,8,3,3,4,4]
          %17 = conv2d_nchwc(%15, %c16) ATTRS : f32[1,8,8,8,4]
          %18 = add(%17, %15) : f32[1,8,8,8,4]
          %c19 = constant f32[1,8,1,1,4]
          %20 = mul(%18, %c19) : f32[1,8,8,8,4]
          %21 = reduce_mean(%20) axes=(2,3) keepdims=1 : f32[1,8,1,1,4]
          %27 = layout_transform(%21) dst=NCHW src=NCHW4c : f32[1,32,1,1]
          return %27 as y
        }
        """.replace("ATTRS", conv_attrs),
    )
    print(g)


def test_host_blocks_are_the_vector_lanes():
    g = _chain()
    before = copy_graph(g)
    assert make_layout_pass("host")(g)
    print(g)
    # 3 input channels: block 1, NCHW1c is a reshape (a view); the unpack at the end a transform
    assert _ops(g)["layout_transform"] == 1 and _ops(g)["reshape"] == 1
    blocks = {
        g.type_of(v).shape[-1] for n in g.op_nodes() for v in [g.inputs_of(n)[0]] if g.node(n).op == "relu"
    }
    assert blocks == {channel_block(32, HOST_LANES)}
    assert_same_results(before, g)


def test_channel_block():
    assert channel_block(64, 16) == 16
    assert channel_block(24, 16) == 8
    assert channel_block(3, 16) == 1
    assert channel_block(144, 4) == 4


def test_depthwise_pools_and_odd_blocks():
    """24 channels (block 8 on AVX-512), a depthwise conv, max/avg pools, clip and a bias add."""
    g = Graph("dw")
    x = g.add_input("x", TensorType((1, 24, 9, 9)))
    dw = {"strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 24}
    (c,) = g.add_node("conv", [x, const(g, (24, 1, 3, 3), 1)], dw)
    (b,) = g.add_node("add", [c, const(g, (1, 24, 1, 1), 2)])
    (k,) = g.add_node("clip", [b], {"min": 0.0, "max": 6.0})
    mp, _ = g.add_node("max_pool", [k], {"kernel_shape": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1)})
    (ap,) = g.add_node("avg_pool", [mp], {"kernel_shape": (2, 2), "strides": (2, 2)})
    (c2,) = g.add_node("conv", [ap, const(g, (16, 24, 1, 1), 3)], {"group": 1})
    g.set_outputs([("y", c2), ("k", k)])  # k: a packed value that is also a graph output
    before = copy_graph(g)
    assert make_layout_pass("host")(g)
    print(g)
    ops = _ops(g)
    assert ops["conv2d_nchwc"] == 2 and ops["conv"] == 0
    assert ops["layout_transform"] == 3  # in, and out for each graph output
    assert_same_results(before, g)


def test_convs_without_a_packed_form_stay():
    g = Graph("stay")
    x = g.add_input("x", TensorType((1, 4, 6, 6)))
    (c,) = g.add_node("conv", [x, const(g, (8, 2, 3, 3), 1)], {**CONV, "group": 2})  # grouped
    (d,) = g.add_node("conv", [c, const(g, (5, 8, 1, 1), 2)], {"group": 1})  # 5 outputs: block 1
    g.set_outputs([("y", d)])
    check_pass(g, make_layout_pass("host"), None)


def test_flatten_and_dense_get_one_unpack():
    g = Graph("head")
    x = g.add_input("x", TensorType((1, 16, 4, 4)))
    (c,) = g.add_node("conv", [x, const(g, (32, 16, 3, 3), 1)], CONV)
    (r,) = g.add_node("relu", [c])
    (f,) = g.add_node("reshape", [r], {"shape": (1, 512)})
    (s,) = g.add_node("sigmoid", [r])
    g.set_outputs([("f", f), ("s", s)])
    before = copy_graph(g)
    assert make_layout_pass("host")(g)
    print(g)
    assert _ops(g)["layout_transform"] == 3  # pack x, unpack r (for flatten), unpack s
    assert_same_results(before, g)


@pytest.mark.parametrize(
    "c, m, k, s, group, ib, ob",
    [
        (16, 32, 3, 1, 1, 16, 16),
        (3, 16, 3, 2, 1, 1, 16),
        (24, 16, 1, 1, 1, 8, 16),
        (32, 32, 3, 2, 32, 16, 16),
        (24, 24, 5, 1, 24, 8, 8),
        (8, 8, 3, 1, 1, 4, 4),
    ],
)
def test_compiled_conv2d_nchwc_matches_reference(c, m, k, s, group, ib, ob):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, 11, 11)).astype(np.float32)
    w = rng.standard_normal((m, c // group, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    attrs = {"strides": (s, s), "pads": (k // 2,) * 4, "dilations": (1, 1), "group": group}
    args = [pack_array(x, ib), pack_weight(w, ib, ob, group > 1), b.reshape(-1, ob)]
    ref = get_op("conv2d_nchwc").run_reference(args, attrs)[0]
    np.testing.assert_allclose(unpack_array(ref), conv(x, w, b, **attrs), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run_op("conv2d_nchwc", args, attrs)[0], ref, rtol=1e-4, atol=1e-4)


def test_compiled_layout_transform_round_trip():
    x = np.random.default_rng(0).standard_normal((2, 32, 5, 3)).astype(np.float32)
    p = run_op("layout_transform", [x], {"src": "NCHW", "dst": "NCHW8c"})[0]
    np.testing.assert_array_equal(p, pack_array(x, 8))
    np.testing.assert_array_equal(run_op("layout_transform", [p], {"src": "NCHW8c", "dst": "NCHW"})[0], x)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2_96"])
def test_zoo_models_need_few_transforms(name):
    g = from_onnx(build(name))
    out = optimize(g, fuse=False, layout=True)
    ops = _ops(out)
    print(f"{name}: {ops['layout_transform']} layout_transform, {ops['conv2d_nchwc']} conv2d_nchwc")
    assert ops["layout_transform"] <= 4 and ops["conv"] == 0
    if name == "mobilenet_v2_96":
        assert_same_results(optimize(g, fuse=False, layout=False), out, rtol=1e-4, atol=1e-4)


def test_layout_switches(monkeypatch):
    g = _chain()
    assert _ops(optimize(g, layout=False))["layout_transform"] == 0
    monkeypatch.setenv("TIR_LAYOUT", "0")
    assert _ops(optimize(g))["layout_transform"] == 0
    monkeypatch.setenv("TIR_LAYOUT", "1")
    assert _ops(optimize(g))["layout_transform"] == 1  # + the NCHW1c input view (a reshape)


def _small_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def init(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("MaxPool", ["a"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["mp"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["f"]),
        helper.make_node("Gemm", ["f", "wd"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [init("w1", (32, 3, 3, 3)), init("b1", (32,)), init("w2", (32, 32, 3, 3)), init("wd", (10, 32))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_compiled_model_matches_unpacked_reference():
    model = _small_model()
    mod = tir.compile(model)
    ops = [k["op"] for k in mod.manifest["kernels"]]
    print(ops)
    # the 3-channel input packs to NCHW1c, a view (no kernel); one unpack before the flatten
    assert ops.count("layout_transform") == 1 and "conv" not in ops and "reshape" not in ops
    g = from_onnx(model)
    feeds = random_inputs(g)
    (want,) = run_reference(g, feeds)
    (got,) = mod.run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _se_and_fire() -> Graph:
    """A squeeze-excite block (reduce_mean over H, W -> 1x1 convs -> hard_sigmoid -> mul)
    feeding a fire module (squeeze conv -> two expand convs -> concat along channels)."""
    g = Graph("se_fire")
    x = g.add_input("x", TensorType((1, 3, 8, 8)))
    (c,) = g.add_node("conv", [x, const(g, (16, 3, 3, 3), 1)], CONV)
    (s,) = g.add_node("reduce_mean", [c], {"axes": (2, 3), "keepdims": 1})
    (e1,) = g.add_node("conv", [s, const(g, (8, 16, 1, 1), 2)], {**CONV, "pads": (0, 0, 0, 0)})
    (r,) = g.add_node("relu", [e1])
    (e2,) = g.add_node("conv", [r, const(g, (16, 8, 1, 1), 3)], {**CONV, "pads": (0, 0, 0, 0)})
    (h,) = g.add_node("hard_sigmoid", [e2], {"alpha": 0.2, "beta": 0.5})
    (m,) = g.add_node("mul", [c, h])
    (sq,) = g.add_node("conv", [m, const(g, (8, 16, 1, 1), 4)], {**CONV, "pads": (0, 0, 0, 0)})
    (a,) = g.add_node("conv", [sq, const(g, (16, 8, 1, 1), 5)], {**CONV, "pads": (0, 0, 0, 0)})
    (b,) = g.add_node("conv", [sq, const(g, (16, 8, 3, 3), 6)], CONV)
    (cat,) = g.add_node("concat", [a, b], {"axis": 1})
    g.set_outputs([("y", cat)])
    return g


def test_squeeze_excite_and_concat_stay_packed():
    """The spatial mean, the (N, C, 1, 1) scale and the channel concat work on NCHW4c: the
    only transforms are the input's view and the output's unpack (issue 16's layout storms)."""
    g = _se_and_fire()
    packed = copy_graph(g)
    assert make_layout_pass("linux-arm64")(packed)
    text = str(packed)
    print(text)
    assert _ops(packed)["layout_transform"] == 1, text  # the output's unpack only
    assert "reduce_mean(%" in text and "keepdims=1 : f32[1,4,1,1,4]" in text
    assert "concat(" in text and "axis=1 : f32[1,8,8,8,4]" in text
    assert "layout_transform(%" in text and "dst=NCHW src=NCHW4c : f32[1,32,8,8]" in text
    assert_same_results(g, packed, rtol=1e-4, atol=1e-3)  # outputs up to ~50: float32 sums reordered


def test_concat_of_different_blocks_and_resize_stay_packed():
    """A concat whose inputs' channel blocks differ (12 channels: block 4 on NCHW4c, 6: block 2)
    writes the output's block (18: 2) itself (concat_packed), and a resize of (H, W) works on
    the packed tensor: one transform, the output's."""
    g = Graph("odd")
    x = g.add_input("x", TensorType((1, 3, 6, 6)))
    (a,) = g.add_node("conv", [x, const(g, (12, 3, 3, 3), 1)], CONV)
    (b,) = g.add_node("conv", [x, const(g, (6, 3, 3, 3), 2)], CONV)
    (cat,) = g.add_node("concat", [a, b], {"axis": 1})
    attrs = {"sizes": (1, 18, 12, 12), "scales": (1.0, 1.0, 2.0, 2.0), "mode": "linear"}
    (up,) = g.add_node("resize", [cat], {**attrs, "coordinate_transformation_mode": "half_pixel"})
    g.set_outputs([("y", up)])
    packed = copy_graph(g)
    make_layout_pass("linux-arm64")(packed)
    text = str(packed)
    print(text)
    assert _ops(packed)["layout_transform"] == 1 and _ops(packed)["concat_packed"] == 1, text
    assert "block=2 : f32[1,9,6,6,2]" in text and "sizes=(1,9,12,12,2)" in text
    assert_same_results(g, packed, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("blocks, out_block", [((8, 8, 8, 8), 16), ((4, 2), 2), ((16, 8), 8), ((1, 4), 4)])
def test_compiled_concat_packed_matches_reference(blocks, out_block):
    rng = np.random.default_rng(len(blocks))
    channels = [24 if b == 8 and out_block == 16 else 4 * b for b in blocks]
    xs = [
        pack_array(rng.standard_normal((1, c, 5, 7)).astype(np.float32), b)
        for c, b in zip(channels, blocks, strict=True)
    ]
    want = pack_array(np.concatenate([unpack_array(x) for x in xs], axis=1), out_block)
    (got,) = run_op("concat_packed", xs, {"block": out_block}, target="host")
    np.testing.assert_array_equal(got, want)
