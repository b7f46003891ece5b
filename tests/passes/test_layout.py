"""layout: NCHW -> NCHW[x]c around conv chains; transforms only at boundaries; numerics kept."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorir as tir
from benchmarks.zoo import build
from benchmarks.zoo_mobile import densenet, mobilenet_v3_small, squeezenet1_1
from benchmarks.zoo_yolo import yolov8n
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


SMALL_ZOO = {  # issue 16's storm-prone architectures at sizes the reference executor runs quickly
    "squeezenet1_1": lambda: squeezenet1_1(64),
    "mobilenet_v3_small": lambda: mobilenet_v3_small(64),
    "yolov8n": lambda: yolov8n(64),  # C2f split / concat, SPPF, upsample + concat, DFL head
    "densenet": lambda: densenet((2, 3), growth=8, init=16, resolution=32),
}


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2_96", *SMALL_ZOO])
def test_zoo_models_need_few_transforms(name):
    g = from_onnx(SMALL_ZOO[name]() if name in SMALL_ZOO else build(name))
    out = optimize(g, fuse=False, layout=True)
    ops = _ops(out)
    print(f"{name}: {ops['layout_transform']} layout_transform, {ops['conv2d_nchwc']} conv2d_nchwc")
    # YOLO: one unpack per detection level, where [1, 144, H, W] is reshaped to [1, 144, H*W]
    assert ops["layout_transform"] <= (3 if name == "yolov8n" else 1 if name in SMALL_ZOO else 4)
    assert ops["conv"] == (1 if name == "yolov8n" else 0)  # YOLO: the DFL's 1x1 conv over [1,16,4,A]
    if name in ("mobilenet_v2_96", *SMALL_ZOO):
        assert_same_results(optimize(g, fuse=False, layout=False), out, rtol=1e-4, atol=1e-3)


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


@pytest.mark.parametrize("target", ["host", "opencl:pocl"])
@pytest.mark.parametrize("blocks, out_block", [((8, 8, 8, 8), 16), ((4, 2), 2), ((16, 8), 8), ((1, 4), 4)])
def test_compiled_concat_packed_matches_reference(blocks, out_block, target):
    rng = np.random.default_rng(len(blocks))
    channels = [24 if b == 8 and out_block == 16 else 4 * b for b in blocks]
    xs = [
        pack_array(rng.standard_normal((1, c, 5, 7)).astype(np.float32), b)
        for c, b in zip(channels, blocks, strict=True)
    ]
    want = pack_array(np.concatenate([unpack_array(x) for x in xs], axis=1), out_block)
    (got,) = run_op("concat_packed", xs, {"block": out_block}, target=target)
    np.testing.assert_array_equal(got, want)


def _c2f() -> Graph:
    """A YOLO C2f-like block: a conv, a split along channels (6 -> 2 + 4), a conv on each
    part, a slice of channels 4:8 (and columns 0:5) of one, a concat of the two."""
    g = Graph("c2f")
    x = g.add_input("x", TensorType((1, 3, 6, 6)))
    (c,) = g.add_node("conv", [x, const(g, (6, 3, 3, 3), 1)], CONV)
    p, q = g.add_node("split", [c], {"axis": 1, "sizes": (2, 4)})
    (r,) = g.add_node("conv", [q, const(g, (8, 4, 3, 3), 2)], CONV)
    (s,) = g.add_node("slice", [r], {"starts": (4, 0), "ends": (8, 5), "axes": (1, 3), "steps": (1, 1)})
    (t,) = g.add_node("conv", [p, const(g, (4, 2, 3, 3), 3)], {**CONV, "pads": (1, 1, 1, 0)})
    (cat,) = g.add_node("concat", [s, t], {"axis": 1})
    g.set_outputs([("y", cat)])
    return g


def test_split_and_slice_stay_packed():
    """Before: every split / slice along channels unpacked its input and packed each part again
    (YOLOv8n-320: 24 of its 27 transforms). After: the split and the slice cut the packed
    channel-block axis (6 channels: NCHW2c, cut at 2 -> 1 block of 2 + 2 blocks of 2); the
    4-channel part, whose own block is 4, is rewritten in it by a one-input concat_packed. The
    output's unpack is the only transform."""
    conv = "dilations=(1,1) group=1 pads=(1,1,1,1) strides=(1,1)"
    check_pass(
        _c2f(),
        make_layout_pass("linux-arm64"),
        """
        graph c2f(%x: f32[1,3,6,6]) {
          %10 = reshape(%x) shape=(1,3,6,6,1) : f32[1,3,6,6,1]
          %c11 = constant f32[3,3,3,3,1,2]
          %12 = conv2d_nchwc(%10, %c11) CONV : f32[1,3,6,6,2]
          %13 = split(%12) axis=1 sizes=(1,2) : f32[1,1,6,6,2], f32[1,2,6,6,2]
          %14 = concat_packed(%13.1) block=4 : f32[1,1,6,6,4]
          %c15 = constant f32[2,1,3,3,4,4]
          %16 = conv2d_nchwc(%14, %c15) CONV : f32[1,2,6,6,4]
          %17 = slice(%16) axes=(1,3) ends=(2,5) starts=(1,0) steps=(1,1) : f32[1,1,6,5,4]
          %c18 = constant f32[1,1,3,3,2,4]
          %19 = conv2d_nchwc(%13.0, %c18) CONV_RIGHT0 : f32[1,1,6,5,4]
          %20 = concat(%17, %19) axis=1 : f32[1,2,6,5,4]
          %27 = layout_transform(%20) dst=NCHW src=NCHW4c : f32[1,8,6,5]
          return %27 as y
        }
        """.replace("CONV_RIGHT0", conv.replace("(1,1,1,1)", "(1,1,1,0)")).replace("CONV", conv),
    )


def test_split_off_the_blocks_still_unpacks():
    """Cuts that fall inside a channel block (6 channels in blocks of 2, cut at 1) cannot cut
    the packed tensor: the split reads the unpacked input, as before."""
    g = Graph("odd_split")
    x = g.add_input("x", TensorType((1, 3, 6, 6)))
    (c,) = g.add_node("conv", [x, const(g, (6, 3, 3, 3), 1)], CONV)
    p, q = g.add_node("split", [c], {"axis": 1, "sizes": (1, 5)})
    (a,) = g.add_node("relu", [p])
    g.set_outputs([("a", a), ("q", q)])
    packed = copy_graph(g)
    make_layout_pass("linux-arm64")(packed)
    text = str(packed)
    assert "split(%" in text and "sizes=(1,5) : f32[1,1,6,6], f32[1,5,6,6]" in text, text
    assert _ops(packed)["layout_transform"] == 1  # the conv output's unpack, read by the split
    assert_same_results(g, packed, rtol=1e-4, atol=1e-4)


def test_split_for_a_head_unpacks_once():
    """A split whose parts go (through elementwise ops) only to reshapes, as in a detection
    head, unpacks its input once and splits NCHW: packed, it would trade that one unpack for
    one per part. A part that goes on to a graph output is unpacked from the split's own block,
    not through a relayout to its block first."""
    g = Graph("head")
    x = g.add_input("x", TensorType((1, 3, 6, 6)))
    (c,) = g.add_node("conv", [x, const(g, (6, 3, 3, 3), 1)], CONV)
    p, q = g.add_node("split", [c], {"axis": 1, "sizes": (2, 4)})
    (s,) = g.add_node("sigmoid", [p])
    (rp,) = g.add_node("reshape", [s], {"shape": (1, 2, 36)})
    (rq,) = g.add_node("reshape", [q], {"shape": (1, 4, 36)})
    g.set_outputs([("cls", rp), ("box", rq)])
    packed = copy_graph(g)
    make_layout_pass("linux-arm64")(packed)
    text = str(packed)
    print(text)
    assert "sizes=(2,4) : f32[1,2,6,6], f32[1,4,6,6]" in text and _ops(packed)["layout_transform"] == 1, text
    assert_same_results(g, packed, rtol=1e-4, atol=1e-4)

    (t,) = g.add_node("conv", [p, const(g, (4, 2, 3, 3), 2)], CONV)  # now one part feeds a conv
    g.set_outputs([("cls", rp), ("box", q), ("t", t)])
    packed = copy_graph(g)
    make_layout_pass("linux-arm64")(packed)
    text = str(packed)
    print(text)
    assert "sizes=(1,2) : f32[1,1,6,6,2], f32[1,2,6,6,2]" in text and "concat_packed" not in text, text
    assert "dst=NCHW src=NCHW2c : f32[1,4,6,6]" in text  # the box part, from the split's block
    assert_same_results(g, packed, rtol=1e-4, atol=1e-4)


def _split_slice_model() -> onnx.ModelProto:
    """conv (24 channels: NCHW8c on AVX-512 / AVX2) -> Split 8 + 16 (the 16: block 16 on
    AVX-512) -> conv each -> Slice channels 8:24 of one -> HardSwish -> Concat -> Resize x2."""
    rng = np.random.default_rng(1)

    def init(name: str, value) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(value), name)

    def w(shape: tuple[int, ...]) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Split", ["c1", "sizes"], ["p", "q"], axis=1),
        helper.make_node("Conv", ["p", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["q", "w3"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Slice", ["c3", "starts", "ends", "axes"], ["s"]),
        helper.make_node("HardSwish", ["s"], ["h"]),
        helper.make_node("Concat", ["c2", "h"], ["cat"], axis=1),
        helper.make_node("Resize", ["cat", "", "scales"], ["y"], mode="nearest"),
    ]
    inits = [
        init("w1", w((24, 3, 3, 3))),
        init("sizes", np.array([8, 16], np.int64)),
        init("w2", w((16, 8, 3, 3))),
        init("w3", w((24, 16, 3, 3))),
        init("starts", np.array([8], np.int64)),
        init("ends", np.array([24], np.int64)),
        init("axes", np.array([1], np.int64)),
        init("scales", np.array([1, 1, 2, 2], np.float32)),
    ]
    graph = helper.make_graph(
        nodes,
        "split_slice",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 20, 20])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_compiled_split_and_slice_match_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    model = _split_slice_model()
    mod = tir.compile(model)
    kernels = [k["op"] for k in mod.manifest["kernels"]]
    assert kernels.count("layout_transform") == 1, kernels  # the output's
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 10, 10)).astype(np.float32)}
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    (got,) = mod.run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(1, 9, 40, 40, 16), (1, 3, 5, 7, 8), (2, 2, 3, 10, 4), (1, 5, 4, 4, 2)])
def test_compiled_unpack_matches_reference(shape):
    """NCHW[x]c -> NCHW with its own schedule (channels of a block unrolled, w in vectors,
    tails where w is no multiple of the lanes)."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (got,) = run_op("layout_transform", [x], {"src": f"NCHW{shape[4]}c", "dst": "NCHW"}, target="host")
    np.testing.assert_array_equal(got, unpack_array(x))


def test_unpacking_block_one_is_a_view():
    """A packed value of an odd channel count (11 classes: NCHW1c) read by a reshape, as in a
    detection head, is unpacked by a reshape (a view): no layout_transform kernel."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    shapes = {"w1": (16, 3, 3, 3), "w2": (11, 16, 1, 1)}
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
        for n, s in shapes.items()
    ]
    inits.append(numpy_helper.from_array(np.array([1, 11, -1], np.int64), "shape"))
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"]),
        helper.make_node("Reshape", ["c2", "shape"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 11, 64])
    model = helper.make_model(
        helper.make_graph(nodes, "head", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    g = optimize(from_onnx(model), fuse=False)
    assert _ops(g)["layout_transform"] == 0 and "reshape(%" in str(g) and "f32[1,11,8,8,1]" in str(g), str(g)
    mod = tir.compile(model)
    assert [k["op"] for k in mod.manifest["kernels"]] == ["conv2d_nchwc", "conv2d_nchwc"]
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    np.testing.assert_allclose(mod.run(feeds)[0], want, rtol=1e-4, atol=1e-5)


def _neck(extra_reader: bool) -> Graph:
    """Two 24-channel convs (block 8 of 16 lanes) concatenated to 48 channels (block 16), read
    by a conv, and with `extra_reader` by a relu too."""
    g = Graph("neck")
    x = g.add_input("x", TensorType((1, 3, 6, 6)))
    (a,) = g.add_node("conv", [x, const(g, (24, 3, 3, 3), 1)], CONV)
    (b,) = g.add_node("conv", [x, const(g, (24, 3, 3, 3), 2)], CONV)
    (cat,) = g.add_node("concat", [a, b], {"axis": 1})
    (y,) = g.add_node("conv", [cat, const(g, (16, 48, 3, 3), 3)], CONV)
    outs = [("y", y)]
    if extra_reader:
        (r,) = g.add_node("relu", [cat])
        outs.append(("r", r))
    g.set_outputs(outs)
    return g


def test_concat_read_only_by_convs_keeps_its_parts_block():
    """Only a conv reads the concat: it stays a plain concat in its parts' block (8), which the
    conv takes as its input block, instead of a relayout into 48 channels' block (16); with a
    relu reading it too, the relayout (concat_packed) stays."""
    g = _neck(extra_reader=False)
    packed = copy_graph(g)
    assert make_layout_pass("host", 16)(packed)
    text = str(packed)
    assert "concat_packed" not in text and "axis=1 : f32[1,6,6,6,8]" in text, text
    assert "conv2d_nchwc(%" in text and ": f32[1,1,6,6,16]" in text, text
    assert_same_results(g, packed, rtol=1e-4, atol=1e-3)

    h = _neck(extra_reader=True)
    packed = copy_graph(h)
    assert make_layout_pass("host", 16)(packed)
    assert _ops(packed)["concat_packed"] == 1, str(packed)
    assert_same_results(h, packed, rtol=1e-4, atol=1e-3)


def test_compiled_concat_in_its_parts_block_is_copy_free_and_matches_reference(tmp_path):
    from tensorir.pipeline import compile_graph, load_folder

    g = _neck(extra_reader=False)
    mod = load_folder(compile_graph(g, "host", layout_block=16).write(tmp_path))
    assert not any(k["op"] in ("concat", "concat_packed") for k in mod.manifest["kernels"])
    feeds = random_inputs(g)
    (want,) = run_reference(g, feeds)
    (got,) = mod.run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def _channel_pad_residual(value: float) -> Graph:
    """BlazeFace's block: x (24 channels, block 8) -> depthwise -> 1x1 to 28 channels (block
    4), added to x padded with `value` to 28 channels, relu."""
    g = Graph("pad_residual")
    x = g.add_input("x", TensorType((1, 3, 8, 8)))
    (a,) = g.add_node("conv", [x, const(g, (24, 3, 3, 3), 1)], CONV)
    (d,) = g.add_node("conv", [a, const(g, (24, 1, 3, 3), 2)], {**CONV, "group": 24})
    (b,) = g.add_node("conv", [d, const(g, (28, 24, 1, 1), 3)], {**CONV, "pads": (0, 0, 0, 0)})
    pad = {"mode": "constant", "pads": (0, 0, 0, 0, 0, 4, 0, 0), "value": value}
    (p,) = g.add_node("pad", [a], pad)
    (s,) = g.add_node("add", [p, b])
    (r,) = g.add_node("relu", [s])
    (y,) = g.add_node("conv", [r, const(g, (16, 28, 3, 3), 4)], CONV)
    g.set_outputs([("y", y)])
    return g


def test_zero_channel_pad_of_a_residual_stays_packed():
    """The zero pad of the residual's channels is a pad_packed from block 8 into block 4: no
    transform but the output's (before: unpack, pad, pack again); a pad with 1.0 is not."""
    g = _channel_pad_residual(0.0)
    packed = copy_graph(g)
    assert make_layout_pass("host", 16)(packed)
    text = str(packed)
    assert _ops(packed)["layout_transform"] == 1, text
    assert "pad_packed(%" in text and "block=4 pads=(0,0,0,4,0,0) : f32[1,7,8,8,4]" in text, text
    assert_same_results(g, packed, rtol=1e-4, atol=1e-3)

    h = _channel_pad_residual(1.0)
    packed = copy_graph(h)
    assert make_layout_pass("host", 16)(packed)
    assert _ops(packed)["pad_packed"] == 0 and _ops(packed)["layout_transform"] == 3, str(packed)
    assert_same_results(h, packed, rtol=1e-4, atol=1e-3)
