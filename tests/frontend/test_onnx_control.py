"""If, Loop and Scan imported by unrolling (frontend/onnx_control.py), against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tensorir.errors import ModelError
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.printer import print_graph
from tensorir.runtime.executor import CompiledGraph

F = TensorProto.FLOAT


def _vi(name, dtype=F, shape=(2, 3)):
    return helper.make_tensor_value_info(name, dtype, list(shape) if shape is not None else None)


def _model(nodes, inputs, outputs, opset=17, inits=()):
    graph = helper.make_graph(nodes, "cf", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, rtol=1e-5, atol=1e-6):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    got = CompiledGraph(from_onnx(model), "host").run(feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return want


def _branch(name, op, out):
    node = helper.make_node(op, ["x", "x"], [out])
    return helper.make_graph([node], name, [], [_vi(out)])


def _if_model():
    n = helper.make_node(
        "If", ["c"], ["y"], then_branch=_branch("then", "Add", "t"), else_branch=_branch("else", "Mul", "e")
    )
    return _model([n], [_vi("c", TensorProto.BOOL, [1]), _vi("x")], [_vi("y")])


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_run_time_condition_computes_both_branches_and_selects(cond):
    model = _if_model()
    text = print_graph(from_onnx(model))
    assert "= add(%x, %x)" in text and "= mul(%x, %x)" in text and "where(" in text
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    _check(model, {"c": np.array([cond]), "x": x})


def test_if_with_a_compile_time_condition_imports_the_taken_branch_only():
    model = _if_model()
    g = from_onnx(model, input_values={"c": np.array([False])})
    text = print_graph(g)
    assert "mul(%x, %x)" in text and "add(" not in text and "where(" not in text


def _loop_body(with_scan: bool, run_time_cond: bool = True):
    """carried s -> s + x * i; cond_out = sum(s) < limit (or cond_in); scan output: s."""
    i_cast = helper.make_node("Cast", ["i"], ["fi"], to=F)
    step = helper.make_node("Mul", ["x", "fi"], ["xi"])
    add = helper.make_node("Add", ["s_in", "xi"], ["s_out"])
    total = helper.make_node("ReduceSum", ["s_out"], ["tot"], keepdims=0)
    cond = helper.make_node("Less", ["tot", "limit"], ["c_out"])
    if not run_time_cond:
        cond = helper.make_node("Identity", ["c_in"], ["c_out"])
    copy = helper.make_node("Identity", ["s_out"], ["scan_s"])
    inputs = [_vi("i", TensorProto.INT64, []), _vi("c_in", TensorProto.BOOL, []), _vi("s_in")]
    outputs = [_vi("c_out", TensorProto.BOOL, []), _vi("s_out")] + ([_vi("scan_s")] if with_scan else [])
    nodes = [i_cast, step, add, total, cond] + ([copy] if with_scan else [])
    return helper.make_graph(nodes, "body", inputs, outputs)


def _loop_model(with_scan: bool, limit: float):
    inits = [
        helper.make_tensor("M", TensorProto.INT64, [], [5]),
        helper.make_tensor("limit", F, [], [limit]),
    ]
    outs = ["s"] + (["stack"] if with_scan else [])
    node = helper.make_node("Loop", ["M", "", "s0"], outs, body=_loop_body(with_scan))
    out_vis = [_vi("s")] + ([_vi("stack", shape=(5, 2, 3))] if with_scan else [])
    return _model([node], [_vi("s0"), _vi("x")], out_vis, inits=inits)


@pytest.mark.parametrize("limit", [1e9, 30.0, -1.0])
def test_loop_with_a_run_time_condition_masks_later_iterations(limit):
    """The condition depends on x: the iterations after it turns false leave s unchanged."""
    model = _loop_model(with_scan=False, limit=limit)
    x = np.ones((2, 3), np.float32)
    (s,) = _check(model, {"s0": np.zeros((2, 3), np.float32), "x": x})
    if limit == 30.0:  # sums 0, 6, 18, 36: stops after i = 3
        np.testing.assert_array_equal(s, np.full((2, 3), 6.0))


def test_loop_scan_outputs_are_stacked():
    inits = [helper.make_tensor("M", TensorProto.INT64, [], [5]), helper.make_tensor("limit", F, [], [1e9])]
    node = helper.make_node("Loop", ["M", "", "s0"], ["s", "stack"], body=_loop_body(True, False))
    model = _model([node], [_vi("s0"), _vi("x")], [_vi("s"), _vi("stack", shape=(5, 2, 3))], inits=inits)
    rng = np.random.default_rng(0)
    feeds = {"s0": rng.standard_normal((2, 3)).astype(np.float32), "x": np.ones((2, 3), np.float32)}
    _check(model, feeds)


def test_loop_whose_stop_needs_run_time_values_and_has_scan_outputs_is_refused():
    with pytest.raises(ModelError, match="condition is computed at run time and it has scan outputs"):
        from_onnx(_loop_model(with_scan=True, limit=30.0))


def test_loop_with_a_run_time_trip_count_and_scan_outputs_is_refused():
    """A run-time trip count becomes a loop node (tests/e2e/test_runtime_loop.py); scan
    outputs would then have a run-time length."""
    node = helper.make_node("Loop", ["M", "", "s0"], ["s", "stack"], body=_loop_body(True, False))
    inits = [helper.make_tensor("limit", F, [], [1.0])]
    outs = [_vi("s"), _vi("stack", shape=(5, 2, 3))]
    model = _model([node], [_vi("M", TensorProto.INT64, []), _vi("s0"), _vi("x")], outs, inits=inits)
    with pytest.raises(ModelError, match=r"node 's' \(Loop\): .*known only at run time .* 1 scan output"):
        from_onnx(model)


@pytest.mark.parametrize("directions", [(0, 0), (1, 0), (0, 1)])
def test_scan_runs_each_step_with_states_and_directions(directions):
    """state h (3) -> tanh(h + x_t); outputs per step: h; over x (4, 3) along axis 0."""
    nodes = [
        helper.make_node("Add", ["h", "xt"], ["a"]),
        helper.make_node("Tanh", ["a"], ["h2"]),
        helper.make_node("Identity", ["h2"], ["y"]),
    ]
    body = helper.make_graph(
        nodes,
        "step",
        [_vi("h", shape=(3,)), _vi("xt", shape=(3,))],
        [_vi("h2", shape=(3,)), _vi("y", shape=(3,))],
    )
    node = helper.make_node(
        "Scan",
        ["h0", "x"],
        ["hT", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_directions=[directions[0]],
        scan_output_directions=[directions[1]],
        scan_output_axes=[1],
    )
    model = _model(
        [node],
        [_vi("h0", shape=(3,)), _vi("x", shape=(4, 3))],
        [_vi("hT", shape=(3,)), _vi("ys", shape=(3, 4))],
    )
    rng = np.random.default_rng(1)
    feeds = {
        "h0": rng.standard_normal(3).astype(np.float32),
        "x": rng.standard_normal((4, 3)).astype(np.float32),
    }
    _check(model, feeds)
    assert print_graph(from_onnx(model)).count("tanh(") == 4  # unrolled: one step per element
