"""benchmarks/ort_nodes.py: onnxruntime's profiled nodes summed per anchor, beside tensorir's
kernels."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks.ort_nodes import anchor_names, join, ort_base_name, ort_node_ms


def _block() -> onnx.ModelProto:
    """x -> Conv c1 -> BatchNorm bn1 -> Relu r1 -> MaxPool mp -> Conv c2 -> Add(c2, mp) -> Relu r2
    -> Flatten fl -> Gemm fc."""
    rng = np.random.default_rng(0)

    def const(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [const("w1", 8, 3, 3, 3), const("w2", 8, 8, 3, 3), const("wf", 10, 8 * 4 * 4), const("bf", 10)]
    inits += [const(n, 8) for n in ("s", "b", "m")] + [numpy_helper.from_array(np.ones(8, np.float32), "v")]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["bn1"], name="bn1"),
        helper.make_node("Relu", ["bn1"], ["r1"], name="r1"),
        helper.make_node("MaxPool", ["r1"], ["mp"], name="mp", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["mp", "w2"], ["c2"], name="c2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "mp"], ["add"], name="add"),
        helper.make_node("Relu", ["add"], ["r2"], name="r2"),
        helper.make_node("Flatten", ["r2"], ["fl"], name="fl"),
        helper.make_node("Gemm", ["fl", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_each_node_leads_back_to_its_anchor():
    names = anchor_names(_block())
    assert names == {
        "c1": "c1",
        "bn1": "c1",
        "r1": "c1",
        "mp": "c1",
        "c2": "c2",
        "add": "c2",
        "r2": "c2",
        "fl": "c2",
        "fc": "fc",
    }


def test_ort_suffixes_are_dropped():
    assert ort_base_name("layer4.0.relu2_nchwc") == "layer4.0.relu2"
    assert ort_base_name("r1_token_3") == "r1"
    assert ort_base_name("ReorderOutput") == "ReorderOutput"
    assert ort_base_name("Mul_43/QuickGeluFusion/") == "Mul_43"


def test_join_sums_per_anchor_and_sorts_by_distance_from_the_goal():
    model = _block()
    tir = [
        {"node": "c1", "symbol": "tir_k1_fused", "ms": 1.0},
        {"node": "", "symbol": "tir_k2_max_pool", "ms": 0.25},
        {"node": "mp", "symbol": "tir_k4_max_pool", "ms": 0.5},
        {"node": "c2", "symbol": "tir_k3_fused", "ms": 0.5},
    ]
    ort_ms = {"r1_nchwc": 0.75, "mp": 0.25, "r2_nchwc": 1.0, "y_nchwc": 0.125, "ReorderOutput": 0.125}
    rows = {r["node"]: r for r in join(model, tir, ort_ms)}
    assert rows["c1"]["tir_ms"] == 1.5 and rows["c1"]["ort_ms"] == 1.0  # r1 and mp both lead to c1
    assert rows["c2"]["ratio"] == 0.5
    assert rows["fc"]["ort_ms"] == 0.125  # named after the Gemm's output tensor, y
    assert rows["tir_k2_max_pool"]["ort_ms"] == 0.0 and rows["tir_k2_max_pool"]["ratio"] is None
    assert rows["ReorderOutput"]["tir_ms"] == 0.0
    order = [r["node"] for r in join(model, tir, ort_ms)]
    assert order[0] == "c1" and order[-1] == "c2"  # 1.5 - 0.8 first, 0.5 - 0.8 last


def test_onnxruntime_profile_names_every_node():
    """A real profile: every node onnxruntime ran is timed and leads back to an ONNX node of
    the model (fused nodes included) or is one of its own reorders."""
    model = _block()
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    per_node, run_ms = ort_node_ms(model, {"x": x}, threads=1, runs=5)
    assert per_node and run_ms > 0 and all(ms > 0 for ms in per_node.values())
    anchors = anchor_names(model)
    for name in per_node:
        base = ort_base_name(name)
        assert base in anchors or base.startswith("Reorder"), name
    assert {anchors[ort_base_name(n)] for n in per_node if ort_base_name(n) in anchors} == {"c1", "c2", "fc"}


def test_a_merged_kernel_takes_the_onnxruntime_nodes_of_all_its_anchors():
    """A kernel that computes c1 and c2 (a merged depthwise + 1x1 block) is one row, beside
    the onnxruntime nodes that lead back to either."""
    tir = [
        {"node": "c1+c2", "members": ["c1", "c2"], "symbol": "tir_k1_fused", "ms": 1.0},
        {"node": "mp", "symbol": "tir_k2_max_pool", "ms": 0.25},  # leads back to c1: the same row
        {"node": "fc", "members": ["fc"], "symbol": "tir_k3_fused", "ms": 0.5},
    ]
    ort_ms = {"r1_nchwc": 0.75, "r2_nchwc": 1.0, "y_nchwc": 0.125}
    rows = {r["node"]: r for r in join(_block(), tir, ort_ms)}
    assert set(rows) == {"c1+c2", "fc"}
    assert rows["c1+c2"]["tir_ms"] == 1.25 and rows["c1+c2"]["ort_ms"] == 1.75
    assert rows["fc"]["ort_ms"] == 0.125


def test_the_anchors_of_a_merged_mobilenet_block_are_named():
    """benchmarks.layers names each conv of a merged kernel after its ONNX node."""
    from benchmarks.layers import compile_layers, joined_name

    *_, members = compile_layers("mobilenet_v2_96")
    assert ["features.1.dw", "features.1.project"] in members.values()
    assert ["classifier.1"] in members.values()  # the Gemm's dense, named after its bias add
    assert all(m != "?" for names in members.values() for m in names)
    assert (
        joined_name(["features.2.expand", "features.2.dw", "features.2.project"])
        == "features.2.expand+dw+project"
    )
    assert joined_name(["a", "b"]) == "a+b"
