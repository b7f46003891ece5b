"""Op traits (tensorir/ops/registry.py): declared at each op's registration, read by fuse_ops,
the layout pass, the compiler's manifest, the FLOP count and the GPU schedule table."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorir.graph.flops import graph_flops, node_flops
from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.registry import (
    GPU_FAMILIES,
    LAYOUTS,
    PATTERNS,
    all_ops,
    gpu_template,
    is_anchor,
    is_elementwise,
    is_tunable,
    kernel_op,
    layout_rule,
    op_flops,
    register_op,
    schedule_for,
)
from tensorir.passes.fuse_ops import fuse_ops

ANCHORS = {
    "conv",
    "conv2d_nchwc",
    "conv_transpose",
    "dense",
    "matmul",
    "gemm",
    "avg_pool",
    "global_avg_pool",
    "global_max_pool",
    "qdense",  # the int8 products (passes/fold_qdq.py): their requantize is an epilogue
    "qconv1x1",
    "qdwconv",
}
TUNABLE = {
    "conv",
    "conv2d_nchwc",
    "dense",
    "matmul",
    "gemm",
    "max_pool",
    "avg_pool",
    "qdense",
    "qconv1x1",
    "qdwconv",
}
RNG = np.random.default_rng(0)


def test_every_op_declares_valid_traits():
    for name, d in all_ops().items():
        assert d.pattern in PATTERNS, name
        assert d.layout in (None, *LAYOUTS), name
        assert d.gpu in (None, *GPU_FAMILIES), name
        assert not d.tunable or d.pattern in ("anchor", "reduction"), name


def test_register_op_refuses_an_unknown_trait_value():
    with pytest.raises(RuntimeError, match="pattern"):
        register_op("no_such_op", infer=lambda ins, attrs: ins, pattern="fancy")
    with pytest.raises(TypeError):
        register_op("no_such_op", infer=lambda ins, attrs: ins)  # pattern is required


def test_anchor_tunable_and_elementwise_sets():
    ops = all_ops()
    assert {n for n in ops if is_anchor(n)} == ANCHORS
    assert {n for n in ops if is_tunable(n)} == TUNABLE
    ew_modules = {"tensorir.ops.elementwise", "tensorir.ops.trig", "tensorir.ops.bitwise"}
    ew = {n for n, d in ops.items() if d.reference.__module__ in ew_modules}
    assert {n for n in ops if is_elementwise(n)} == ew
    assert not is_anchor("input") and not is_elementwise("constant")


def test_layout_rules():
    rules = {n: layout_rule(n) for n in all_ops() if layout_rule(n)}
    assert rules == {
        "conv": "conv",
        "max_pool": "pool",
        "avg_pool": "pool",
        "global_avg_pool": "global_avg",
        "global_max_pool": "global_max",
    }


def _pool_chain(op: str) -> Graph:
    g = Graph("pool")
    x = g.add_input("x", TensorType((1, 4, 8, 8)))
    attrs = {"kernel_shape": (2, 2), "strides": (2, 2)}
    attrs = {**attrs, "indices": 0} if op == "max_pool" else attrs
    (p,) = g.add_node(op, [x], attrs)
    (y,) = g.add_node("relu", [p])
    g.set_outputs([("y", y)])
    return g


def test_fuse_ops_grows_groups_from_anchors_only():
    g = _pool_chain("avg_pool")
    assert fuse_ops(g)
    (nid,) = g.op_nodes()
    body = g.node(nid).attr["body"]
    assert [s.op for s in body.steps] == ["avg_pool", "relu"] and body.anchor == 0
    assert is_tunable("fused", g.node(nid).attr) and kernel_op("fused", g.node(nid).attr) == "avg_pool"
    g = _pool_chain("max_pool")  # tunable, but not an anchor: relu stays its own kernel
    assert not fuse_ops(g)
    assert [g.node(n).op for n in g.op_nodes()] == ["max_pool", "relu"]


def _conv_gemm_model() -> onnx.ModelProto:
    def init(name, shape):
        return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["f"]),
        helper.make_node("Gemm", ["f", "g", "gb"], ["y0"], transB=1),
        helper.make_node("Softmax", ["y0"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [init("w", (8, 3, 3, 3)), init("g", (5, 8)), init("gb", (5,))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_compiler_manifest_counts_tunable_kernels():
    from tensorir.pipeline import compile_model

    build = compile_model(_conv_gemm_model())
    kernels = build.manifest["kernels"]
    steps = {k["op"] for k in kernels}
    assert "softmax" in steps and "max_pool" in steps
    # untuned: fused conv2d_nchwc+relu, max_pool, fused dense+add; not softmax, not the pools' reductions
    assert build.manifest["untuned_workloads"] == 3


def test_flops_of_conv_dense_matmul_and_fused_are_hand_counts():
    x, w = TensorType((1, 3, 8, 8)), TensorType((8, 3, 3, 3))
    out = TensorType((1, 8, 8, 8))
    conv = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    assert op_flops("conv", [x, w], conv, out) == 2 * (8 * 8 * 8) * (3 * 3 * 3)
    a, wd = TensorType((4, 16)), TensorType((10, 16))
    assert op_flops("dense", [a, wd], {}, TensorType((4, 10))) == 2 * 4 * 10 * 16
    b = TensorType((2, 16, 6))
    assert op_flops("matmul", [TensorType((2, 4, 16)), b], {}, TensorType((2, 4, 6))) == 2 * 2 * 4 * 6 * 16
    assert op_flops("relu", [out], {}, out) == 8 * 8 * 8  # the default: one per output element
    body = FusedBody((Step("conv", tuple(conv.items()), (0, 1)), Step("relu", (), (2,))), 2, anchor=0)
    g = Graph("f")
    xs = [g.add_input("x", x), g.add_input("w", w)]
    (y,) = g.add_node("fused", xs, {"body": body})
    g.set_outputs([("y", y)])
    assert node_flops(g, y.node) == 2 * 512 * 27 + 512
    assert graph_flops(g) == 2 * 512 * 27 + 512


def test_ops_with_a_gpu_template_trait_have_an_opencl_schedule():
    ops = all_ops()
    with_trait = [n for n in ops if gpu_template(n)]
    assert {"relu", "reshape", "softmax", "conv", "dense", "conv2d_nchwc", "fused"} <= set(with_trait)
    for name in with_trait:
        assert schedule_for(ops[name], "opencl") is not None, name
    for name in ("topk", "cumsum", "batch_norm_training", "dropout"):
        assert gpu_template(name) is None and schedule_for(ops[name], "opencl") is None, name
