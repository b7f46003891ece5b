"""ONNX Loop whose trip count is known only at run time: one `loop` node whose body the
generated entry runs in a loop (ops/loop.py, frontend/onnx_loop.py, compiler_loop.py,
codegen/entry.py), against onnxruntime: exact for these integer-valued sums."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import tensorir
from tensorir.compiler_link import entry_module_ir
from tensorir.errors import ModelError, TirError
from tensorir.frontend.onnx import from_onnx
from tensorir.pipeline import compile_graph

F = T.FLOAT
_SHAPE = [2, 3]


def _vi(name, dtype=F, shape=_SHAPE):
    return h.make_tensor_value_info(name, dtype, shape)


def _body(name="body", scale="w", limit="limit"):
    """acc -> acc * scale + i; cond' = sum(acc') < limit. `scale` and `limit` are read from the
    enclosing graph by name."""
    nodes = [
        h.make_node("Cast", ["i"], ["fi"], to=F),
        h.make_node("Mul", ["acc", scale], ["aw"]),
        h.make_node("Add", ["aw", "fi"], ["acc_out"]),
        h.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
        h.make_node("Less", ["s", limit], ["cond_out"]),
    ]
    ins = [_vi("i", T.INT64, []), _vi("cond", T.BOOL, []), _vi("acc")]
    return h.make_graph(nodes, name, ins, [_vi("cond_out", T.BOOL, []), _vi("acc_out")])


def _model(nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _trip_model():
    """y = Loop(M, c0, x) with the scale w computed outside the loop (w2 = w + w)."""
    nodes = [
        h.make_node("Add", ["w", "w"], ["w2"]),
        h.make_node("Loop", ["M", "c0", "x"], ["y"], body=_body(scale="w2"), name="lp"),
    ]
    ins = [_vi("M", T.INT64, []), _vi("c0", T.BOOL, []), _vi("x"), _vi("w"), _vi("limit", F, [])]
    return _model(nodes, ins, [_vi("y")])


def _feeds(m, c0, limit, w=0.55):
    return {
        "M": np.array(m, np.int64),
        "c0": np.array(c0),
        "x": np.ones(_SHAPE, np.float32),
        "w": np.full(_SHAPE, w, np.float32),
        "limit": np.array(limit, np.float32),
    }


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )


def test_run_time_trip_count_imports_as_one_loop_node_with_its_body_graph():
    text = str(from_onnx(_trip_model()))
    lines = [line.strip() for line in text.splitlines()]
    assert "%5 = add(%w, %w) : f32[2,3]" in lines
    assert any(line.startswith("%6 = loop(%M, %c0, %x, %5, %limit) body=body") for line in lines), text
    params = "%iter: i64[], %cond: bool[], %carried0: f32[2,3], %capture0: f32[2,3], %capture1: f32[]"
    head = f"graph lp.body({params}) {{"
    assert any(line.endswith(head) for line in lines), text
    assert "%6 = mul(%carried0, %capture0) : f32[2,3]" in lines
    assert "return %9 as cond, %7 as carried0" in lines


def test_the_entry_loops_over_the_body_kernels():
    build = compile_graph(from_onnx(_trip_model()), "host")
    (span,) = build.loops
    assert span.end - span.first == len(build.manifest["kernels"]) - 1  # all but the outer add
    loops = build.manifest["loops"]
    assert loops == json.loads(json.dumps([span.to_json()]))
    assert all(k["loop"] == "lp.body" for k in build.manifest["kernels"][span.first : span.end])
    ir = entry_module_ir(build, embedded=True)
    assert "icmp slt i64" in ir and ir.count("br label %L0h") == 2  # into the header, and back from the latch


@pytest.mark.parametrize(
    ("m", "c0", "limit"),
    [(7, True, 1e6), (0, True, 1e6), (3, False, 1e6), (60, True, 1e9), (60, True, 40.0), (-2, True, 1e6)],
)
def test_run_time_trip_count_and_exit_match_onnxruntime(m, c0, limit):
    model = _trip_model()
    mod = tensorir.compile(model)
    feeds = _feeds(m, c0, limit)
    (ours,), (theirs,) = mod.run(feeds), _ort(model, feeds)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    if m <= 0 or not c0:
        np.testing.assert_array_equal(ours, feeds["x"])  # no iteration ran


def test_while_loop_without_trip_count_runs_until_its_condition_fails():
    """Loop("", c0, x): PyTorch's while-loop export; M absent, the condition alone stops it."""
    model = _model(
        [h.make_node("Loop", ["", "c0", "x"], ["y"], body=_body())],
        [_vi("c0", T.BOOL, []), _vi("x"), _vi("w"), _vi("limit", F, [])],
        [_vi("y")],
    )
    mod = tensorir.compile(model)
    for limit in (10.0, 500.0, 1e5):
        feeds = {k: v for k, v in _feeds(0, True, limit, w=1.25).items() if k != "M"}
        (ours,), (theirs,) = mod.run(feeds), _ort(model, feeds)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_nested_loops_both_with_run_time_trip_counts():
    """outer: acc -> inner_loop(N, acc) + 1, M times; inner: the body above."""
    inner = h.make_node("Loop", ["N", "c_in", "acc"], ["acc_inner"], body=_body("inner"))
    plus = h.make_node("Add", ["acc_inner", "one"], ["acc_out"])
    keep = h.make_node("Identity", ["c_in"], ["cond_out"])
    ins = [_vi("j", T.INT64, []), _vi("c_in", T.BOOL, []), _vi("acc")]
    outer = h.make_graph([inner, plus, keep], "outer", ins, [_vi("cond_out", T.BOOL, []), _vi("acc_out")])
    one = h.make_tensor("one", F, [], [1.0])
    model = _model(
        [h.make_node("Loop", ["M", "c0", "x"], ["y"], body=outer)],
        [
            _vi("M", T.INT64, []),
            _vi("N", T.INT64, []),
            _vi("c0", T.BOOL, []),
            _vi("x"),
            _vi("w"),
            _vi("limit", F, []),
        ],
        [_vi("y")],
        inits=[one],
    )
    build = compile_graph(from_onnx(model), "host")
    outer_span, inner_span = build.loops
    assert outer_span.first <= inner_span.first < inner_span.end <= outer_span.end
    mod = tensorir.compile(model)
    for m, n in [(3, 4), (0, 5), (5, 0), (2, 1)]:
        feeds = {**_feeds(m, True, 1e9, w=0.5), "N": np.array(n, np.int64)}
        (ours,), (theirs,) = mod.run(feeds), _ort(model, feeds)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_loop_inside_a_run_time_if_branch_runs_only_when_taken():
    then = h.make_graph(
        [h.make_node("Loop", ["M", "", "x"], ["t"], body=_body("tb"))], "then", [], [_vi("t")]
    )
    other = h.make_graph([h.make_node("Neg", ["x"], ["e"])], "else", [], [_vi("e")])
    model = _model(
        [h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        [_vi("c", T.BOOL, []), _vi("M", T.INT64, []), _vi("x"), _vi("w"), _vi("limit", F, [])],
        [_vi("y")],
    )
    build = compile_graph(from_onnx(model), "host")
    (span,) = build.loops
    assert span.guard and span.guard[0][1] is True
    mod = tensorir.compile(model)
    for c in (True, False):
        feeds = {**_feeds(4, True, 1e9), "c": np.array(c)}
        del feeds["c0"]
        (ours,), (theirs,) = mod.run(feeds), _ort(model, feeds)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_carried_value_that_changes_shape_is_refused():
    grow = h.make_node("Concat", ["acc", "acc"], ["acc_out"], axis=0)
    keep = h.make_node("Identity", ["c"], ["c_out"])
    ins = [_vi("i", T.INT64, []), _vi("c", T.BOOL, []), _vi("acc")]
    body = h.make_graph([grow, keep], "b", ins, [_vi("c_out", T.BOOL, []), _vi("acc_out", shape=[4, 3])])
    model = _model(
        [h.make_node("Loop", ["M", "", "x"], ["y"], body=body, name="grow")],
        [_vi("M", T.INT64, []), _vi("x")],
        [_vi("y", shape=None)],
    )
    with pytest.raises(
        ModelError, match=r"node 'grow' \(Loop\): carried value 'acc_out' goes from f32\[2,3\]"
    ):
        from_onnx(model)


def test_loop_with_neither_trip_count_nor_condition_is_refused():
    model = _model(
        [h.make_node("Loop", ["", "", "x"], ["y"], body=_body(), name="forever")],
        [_vi("x"), _vi("w"), _vi("limit", F, [])],
        [_vi("y")],
    )
    with pytest.raises(ModelError, match=r"node 'forever' \(Loop\): neither a trip count nor a condition"):
        from_onnx(model)


def test_opencl_target_refuses_a_run_time_loop_in_one_line():
    with pytest.raises(
        TirError, match=r"\(loop\): .*known only at run time needs a loop in the generated entry"
    ):
        compile_graph(from_onnx(_trip_model()), "opencl:pocl")


@pytest.mark.arm64
def test_run_time_loop_on_linux_arm64_under_qemu():
    model = _trip_model()
    mod = tensorir.compile(model, "linux-arm64")
    for m, limit in [(9, 1e9), (30, 50.0)]:
        feeds = _feeds(m, True, limit)
        (ours,), (theirs,) = mod.run(feeds), _ort(model, feeds)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
