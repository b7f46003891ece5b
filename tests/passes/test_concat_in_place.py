"""Copy-free concats (passes/concat_in_place.py): which concats go, where their inputs are
placed by the memory plan, and that compiled models still compute the same."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import onnxruntime as ort
import pytest

import tensorir as tir
from benchmarks.zoo import build_for_tests, sample_inputs
from benchmarks.zoo_mobile import densenet
from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.passes.concat_in_place import concat_slices
from tensorir.passes.memory_plan import plan_memory
from tensorir.pipeline import compile_graph
from tensorir.runtime.module import Module

from .helpers import onnx_model


def _graph(shape=(1, 16, 8, 8), axis=1):
    """x -> relu, exp -> concat(axis) -> neg: both concat inputs come from ops."""
    g = Graph("cat")
    x = g.add_input("x", TensorType(shape))
    (a,) = g.add_node("relu", [x])
    (b,) = g.add_node("exp", [x])
    (c,) = g.add_node("concat", [a, b], {"axis": axis})
    (y,) = g.add_node("neg", [c])
    g.set_outputs([("y", y)])
    return g, a, b, c


def test_channel_concat_places_inputs_in_its_output():
    g, a, b, c = _graph()
    slices = concat_slices(g)
    assert slices.nodes == {c.node}
    assert slices.slices == {a: (c, 0), b: (c, 16 * 64 * 4)}
    plan = plan_memory(g, slices=slices)
    assert plan.offsets[a] == plan.offsets[c]
    assert plan.offsets[b] == plan.offsets[c] + 16 * 64 * 4
    assert len(plan.buffers) == 1  # a, b and c are one buffer
    assert plan.concats_in_place == 1
    assert "1 concats in place" in plan.summary()


def test_inner_axis_concat_is_not_contiguous_so_it_copies():
    g, *_ = _graph(axis=2)  # rows: each channel interleaves a's and b's rows
    assert concat_slices(g).nodes == set()


@pytest.mark.parametrize("case", ["same input twice", "graph input", "graph output", "misaligned"])
def test_concats_that_must_copy(case):
    g = Graph("cat")
    x = g.add_input("x", TensorType((1, 3) if case == "misaligned" else (1, 16, 4, 4)))
    (a,) = g.add_node("relu", [x])
    (b,) = g.add_node("exp", [x])
    ins = {"same input twice": [a, a], "graph input": [x, a]}.get(case, [a, b])
    (c,) = g.add_node("concat", ins, {"axis": 1})
    if case == "graph output":
        g.set_outputs([("y", c)])
    else:
        (y,) = g.add_node("neg", [c])
        g.set_outputs([("y", y)])
    assert concat_slices(g).nodes == set()


def test_a_tensor_goes_into_one_concat_only():
    g = Graph("two")
    x = g.add_input("x", TensorType((1, 16)))
    (a,) = g.add_node("relu", [x])
    (b,) = g.add_node("exp", [x])
    (d,) = g.add_node("sigmoid", [x])
    (c1,) = g.add_node("concat", [a, b], {"axis": 1})
    (c2,) = g.add_node("concat", [a, d], {"axis": 1})  # a already lives in c1
    (y,) = g.add_node("add", [c1, c2])
    g.set_outputs([("y", y)])
    assert concat_slices(g).nodes == {c1.node}


def test_nested_concats_share_the_outer_buffer():
    g = Graph("nest")
    x = g.add_input("x", TensorType((1, 16)))
    (a,) = g.add_node("relu", [x])
    (b,) = g.add_node("exp", [x])
    (d,) = g.add_node("sigmoid", [x])
    (inner,) = g.add_node("concat", [a, b], {"axis": 1})
    (outer,) = g.add_node("concat", [d, inner], {"axis": 1})
    (y,) = g.add_node("neg", [outer])
    g.set_outputs([("y", y)])
    slices = concat_slices(g)
    assert slices.nodes == {inner.node, outer.node}
    plan = plan_memory(g, slices=slices)
    base = plan.offsets[outer]
    assert [plan.offsets[v] - base for v in (d, inner, a, b)] == [0, 64, 64, 128]
    assert len(plan.buffers) == 1


def _dense_block() -> tuple[Graph, list]:
    """DenseNet's pattern: each layer reads the concat of everything before it."""
    g = Graph("dense")
    x = g.add_input("x", TensorType((1, 16, 4, 4)))
    (x0,) = g.add_node("relu", [x])
    (y1,) = g.add_node("exp", [x0])
    (c1,) = g.add_node("concat", [x0, y1], {"axis": 1})
    (y2,) = g.add_node("sigmoid", [c1])  # 32 channels
    (c2,) = g.add_node("concat", [x0, y1, y2], {"axis": 1})
    (y,) = g.add_node("neg", [c2])
    g.set_outputs([("y", y)])
    return g, [x0, y1, c1, y2, c2]


def test_prefix_concat_is_the_first_bytes_of_the_longer_one():
    g, (x0, y1, c1, y2, c2) = _dense_block()
    slices = concat_slices(g)
    assert slices.nodes == {c1.node, c2.node}
    part = 16 * 16 * 4
    assert slices.slices == {x0: (c2, 0), y1: (c2, part), y2: (c2, 2 * part), c1: (c2, 0)}
    plan = plan_memory(g, slices=slices)
    base = plan.offsets[c2]
    assert [plan.offsets[v] - base for v in (x0, y1, c1, y2)] == [0, part, 0, 2 * part]
    (buf,) = plan.buffers  # the block's features, stored once, alive from x0 to c2's reader
    assert (buf.start, buf.end, buf.size) == (0, 5, 4 * part)


def test_a_concat_of_the_same_inputs_in_another_order_is_no_prefix():
    g = Graph("swap")
    x = g.add_input("x", TensorType((1, 16)))
    (a,) = g.add_node("relu", [x])
    (b,) = g.add_node("exp", [x])
    (d,) = g.add_node("sigmoid", [x])
    (c1,) = g.add_node("concat", [b, a], {"axis": 1})
    (c2,) = g.add_node("concat", [a, b, d], {"axis": 1})
    (p,) = g.add_node("neg", [c1])
    (q,) = g.add_node("neg", [c2])
    g.set_outputs([("p", p), ("q", q)])
    assert concat_slices(g).nodes == {c1.node}  # the first claims a and b; c2 copies


def test_dense_block_compiles_without_concat_kernels():
    g, _ = _dense_block()
    build = compile_graph(g, "host")
    assert not [c.symbol for c in build.calls if "concat" in c.symbol]
    assert build.manifest["concats_in_place"] == 2
    x = np.random.default_rng(0).standard_normal((1, 16, 4, 4)).astype(np.float32)
    x0 = np.maximum(x, 0)
    c1 = np.concatenate([x0, np.exp(x0)], axis=1)
    want = -np.concatenate([c1, 1 / (1 + np.exp(-c1))], axis=1)
    mod = Module(build.write(Path(tempfile.mkdtemp())))
    np.testing.assert_allclose(mod.run({"x": x})[0], want, rtol=1e-6, atol=1e-6)


def test_bind_text_shows_producers_writing_into_the_concat():
    g, *_ = _graph()
    build = compile_graph(g, "host")
    assert [c.symbol for c in build.calls if "concat" in c.symbol] == []
    relu, exp = (c for c in build.calls if c.symbol.endswith(("relu", "exp")))
    assert exp.args[-1].index - relu.args[-1].index == 16 * 64 * 4
    assert build.manifest["concats_in_place"] == 1


def _fire_model() -> onnx.ModelProto:
    """A SqueezeNet fire module whose squeeze output is also read after the concat."""
    rng = np.random.default_rng(0)
    w = {
        "ws": rng.standard_normal((8, 16, 1, 1)).astype(np.float32) * 0.3,
        "we1": rng.standard_normal((16, 8, 1, 1)).astype(np.float32) * 0.3,
        "we3": rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.3,
    }
    nodes = [
        oh.make_node("Conv", ["x", "ws"], ["s0"]),
        oh.make_node("Relu", ["s0"], ["s"]),
        oh.make_node("Conv", ["s", "we1"], ["e1"]),
        oh.make_node("Conv", ["s", "we3"], ["e3"], pads=[1, 1, 1, 1]),
        oh.make_node("Concat", ["e1", "e3"], ["cat"], axis=1),
        oh.make_node("Relu", ["cat"], ["r"]),
        oh.make_node("GlobalAveragePool", ["r"], ["p"]),
        oh.make_node("GlobalAveragePool", ["s"], ["q"]),
        oh.make_node("Concat", ["p", "q"], ["y"], axis=1),
    ]
    return onnx_model(nodes, "fire", [1, 16, 12, 12], [1, 40, 1, 1], w)


def test_fire_module_matches_onnxruntime():
    model = _fire_model()
    x = np.random.default_rng(1).standard_normal((1, 16, 12, 12)).astype(np.float32)
    mod = tir.compile(model)
    assert mod.manifest["concats_in_place"] >= 1
    (ours,) = mod.run({"x": x})
    (ref,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["squeezenet1_1", "yolov8n_320", "densenet"])
def test_zoo_models_with_concats_match_onnxruntime(name):
    # DenseNet with channel counts that fill the NCHW16c blocks (the zoo's test size starts at
    # 24): every concat of its blocks in place, the shorter ones as the longer's first bytes
    model = (
        densenet((2, 3), 16, 32, 32, name="densenet_aligned") if name == "densenet" else build_for_tests(name)
    )
    feeds = sample_inputs(model)
    mod = tir.compile(model)
    assert mod.manifest["concats_in_place"] >= 1
    if name == "densenet":
        concats = sum(n.op_type == "Concat" for n in model.graph.node)
        assert mod.manifest["concats_in_place"] == concats == 5  # 1 + 2 prefixes, 2 block outputs
        assert not [k for k in mod.manifest["kernels"] if k["op"] == "concat"]
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for ours, want in zip(mod.run(feeds), ref, strict=True):
        np.testing.assert_allclose(ours, want, rtol=2e-3, atol=2e-3)
