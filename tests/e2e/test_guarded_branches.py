"""If and Loop with run-time conditions run only what the condition selects: the graph marks
each branch's ops with its flag (graph.guards), the compiled entry branches around their
kernels, and the untaken branch's output buffer is left untouched (checked through the
workspace). Results equal onnxruntime's for every path."""

from __future__ import annotations

import ctypes

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h

import tensorir
from tensorir.compiler_link import entry_module_ir
from tensorir.frontend.onnx import from_onnx
from tensorir.pipeline import compile_model


def _if_model():
    then = h.make_graph(
        [h.make_node("Exp", ["x"], ["a"]), h.make_node("Mul", ["a", "x"], ["t"])],
        "then",
        [],
        [h.make_tensor_value_info("t", T.FLOAT, [4, 8])],
    )
    other = h.make_graph(
        [h.make_node("Neg", ["x"], ["e"])], "else", [], [h.make_tensor_value_info("e", T.FLOAT, [4, 8])]
    )
    nodes = [
        h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        h.make_node("Greater", ["s", "zero"], ["c"]),
        h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        h.make_node("Add", ["y", "x"], ["z"]),
    ]
    graph = h.make_graph(
        nodes,
        "branchy",
        [h.make_tensor_value_info("x", T.FLOAT, [4, 8])],
        [h.make_tensor_value_info("z", T.FLOAT, [4, 8])],
        initializer=[h.make_tensor("zero", T.FLOAT, [], [0.0])],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )


def test_if_branches_are_guarded_in_the_graph_and_the_entry():
    model = _if_model()
    text = str(from_onnx(model))
    assert "exp(%x) : f32[4,8] when %3" in text and "neg(%x) : f32[4,8] unless %3" in text, text
    build = compile_model(model, "host")
    ir = entry_module_ir(build, embedded=True)
    assert ir.count("label %run") == 2 and ir.count("\nrun") == 2 and ir.count("\nskip") == 2, ir


def test_only_the_taken_branch_runs():
    model = _if_model()
    mod = tensorir.compile(model)
    lib, ws = mod.lib, mod.lib.tir_workspace(mod.handle)
    guarded = {bool(k["guard"][0][2]): k for k in mod.manifest["kernels"] if "guard" in k}
    assert set(guarded) == {True, False}
    nbytes = 4 * 8 * 4

    def out_region(k):
        kind, offset = k["args"][-1]
        assert kind == "workspace"
        return ws + offset

    for sign, taken in ((1.0, True), (-1.0, False)):
        for k in guarded.values():
            ctypes.memset(out_region(k), 0x7F, nbytes)
        x = (sign * (np.arange(32, dtype=np.float32).reshape(4, 8) / 32 + 0.1)).astype(np.float32)
        (ours,) = mod.run({"x": x})
        (theirs,) = _ort(model, {"x": x})
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
        # the workspace is shared: earlier kernels may have used the region's first bytes (the
        # sum, 4 bytes), but the untaken branch would have written all of it
        untouched = ctypes.string_at(out_region(guarded[not taken]), nbytes)
        assert untouched[nbytes // 2 :] == b"\x7f" * (nbytes // 2), f"the {not taken} branch ran"
        written = np.frombuffer(ctypes.string_at(out_region(guarded[taken]), nbytes), np.float32)
        want = (np.exp(x) * x if taken else -x).ravel()
        np.testing.assert_allclose(written, want, rtol=1e-6, err_msg=f"the {taken} branch did not run")
    assert lib is not None


def test_loop_iterations_after_a_run_time_exit_are_skipped_and_match_onnxruntime():
    """while (sum(v) < limit and i < 8): v = v * 2 (cond computed at run time, M = 8)."""
    body = h.make_graph(
        [
            h.make_node("Mul", ["v_in", "two"], ["v_out"]),
            h.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0),
            h.make_node("Less", ["s", "limit"], ["go"]),
        ],
        "body",
        [
            h.make_tensor_value_info("i", T.INT64, []),
            h.make_tensor_value_info("c", T.BOOL, []),
            h.make_tensor_value_info("v_in", T.FLOAT, [3]),
        ],
        [h.make_tensor_value_info("go", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, [3])],
    )
    nodes = [h.make_node("Loop", ["M", "start", "v0"], ["v"], body=body)]
    graph = h.make_graph(
        nodes,
        "doubling",
        [h.make_tensor_value_info("v0", T.FLOAT, [3]), h.make_tensor_value_info("limit", T.FLOAT, [])],
        [h.make_tensor_value_info("v", T.FLOAT, [3])],
        initializer=[
            h.make_tensor("M", T.INT64, [], [8]),
            h.make_tensor("start", T.BOOL, [], [True]),
            h.make_tensor("two", T.FLOAT, [], [2.0]),
        ],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    g = from_onnx(model)
    assert sum(1 for n in g.op_nodes() if n in g.guards) >= 7  # iterations 2..8 are guarded
    mod = tensorir.compile(model)
    assert sum("guard" in k for k in mod.manifest["kernels"]) >= 7
    for limit in (5.0, 40.0, 1e6):
        feeds = {"v0": np.array([0.5, 1.0, 1.5], np.float32), "limit": np.array(limit, np.float32)}
        (ours,), (theirs,) = mod.run(feeds), _ort(model, feeds)
        np.testing.assert_array_equal(ours, theirs)


def test_a_branch_that_forwards_an_outer_value_does_not_guard_it():
    """else: Identity(m) with m computed before the If and read by the then-branch too: the
    identity is dropped by the passes, and m's kernel must not take over its guard (it did:
    m was then skipped whenever the then-branch ran)."""
    then = h.make_graph(
        [h.make_node("Neg", ["m"], ["t"])], "then", [], [h.make_tensor_value_info("t", T.FLOAT, [4, 8])]
    )
    other = h.make_graph(
        [h.make_node("Identity", ["m"], ["e"])], "else", [], [h.make_tensor_value_info("e", T.FLOAT, [4, 8])]
    )
    nodes = [
        h.make_node("Mul", ["x", "two"], ["m"]),
        h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        h.make_node("Greater", ["s", "zero"], ["c"]),
        h.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other),
    ]
    graph = h.make_graph(
        nodes,
        "forward",
        [h.make_tensor_value_info("x", T.FLOAT, [4, 8])],
        [h.make_tensor_value_info("z", T.FLOAT, [4, 8])],
        initializer=[h.make_tensor("zero", T.FLOAT, [], [0.0]), h.make_tensor("two", T.FLOAT, [], [2.0])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    mod = tensorir.compile(model)
    assert not any("guard" in k for k in mod.manifest["kernels"] if k["op"] in ("mul", "fused"))
    for sign in (1.0, -1.0):
        x = (sign * (np.arange(32, dtype=np.float32).reshape(4, 8) / 32 + 0.1)).astype(np.float32)
        np.testing.assert_array_equal(mod.run({"x": x})[0], _ort(model, {"x": x})[0])
