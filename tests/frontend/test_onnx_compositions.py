"""ONNX ops imported as compositions of existing graph ops (onnx_matrix.py, onnx_math.py,
onnx_normpool.py), compiled for the host against onnxruntime on cases the node tests leave
out: ceil-mode LpPool, LRN windows past the edges and an even size, a zero norm, ties in
Hardmax, negative OneHot indices along axis 0, opset-11 Hardmax's 2-D view."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tensorir.frontend.onnx import from_onnx
from tensorir.graph.printer import print_graph
from tensorir.runtime.executor import CompiledGraph

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def _model(node, inputs, out_shape, opset=18, inits=(), out_type=F):
    ins = [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs]
    shape = None if out_shape is None else list(out_shape)
    out = helper.make_tensor_value_info(node.output[0], out_type, shape)
    graph = helper.make_graph([node], "m", ins, [out], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, rtol=1e-5, atol=1e-6):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, feeds)
    (got,) = CompiledGraph(from_onnx(model), "host").run(feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_lp_pool_ceil_mode_counts_only_the_taps_inside():
    node = helper.make_node(
        "LpPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0], ceil_mode=1, p=3
    )
    x = RNG.standard_normal((1, 2, 8, 9)).astype(np.float32)
    _check(_model(node, [("x", F, x.shape)], None), {"x": x})


def test_lrn_window_wider_than_the_edges():
    node = helper.make_node("LRN", ["x"], ["y"], size=5, alpha=0.02, beta=0.6, bias=1.5)
    x = RNG.standard_normal((2, 4, 3, 5)).astype(np.float32)
    _check(_model(node, [("x", F, x.shape)], x.shape), {"x": x})


def test_lrn_even_size_follows_the_spec_window():
    """ONNX: channels c - floor((size-1)/2) .. c + ceil((size-1)/2) (onnxruntime refuses even sizes)."""
    size, alpha, beta, bias = 4, 0.02, 0.6, 1.5
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)
    x = RNG.standard_normal((1, 7, 3, 2)).astype(np.float32)
    sq = np.zeros_like(x)
    for c in range(7):
        sq[:, c] = (x[:, max(0, c - 1) : c + 3] ** 2).sum(axis=1)
    want = x / (bias + alpha / size * sq) ** beta
    (got,) = CompiledGraph(from_onnx(_model(node, [("x", F, x.shape)], x.shape)), "host").run({"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_lp_normalization_of_a_zero_row_is_zero():
    node = helper.make_node("LpNormalization", ["x"], ["y"], axis=1, p=1)
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    x[1] = 0
    _check(_model(node, [("x", F, x.shape)], x.shape, opset=17), {"x": x})


def test_hardmax_ties_pick_the_first_and_opset_11_views_the_input_as_2d():
    x = RNG.integers(0, 3, (2, 3, 4)).astype(np.float32)  # many ties
    new = helper.make_node("Hardmax", ["x"], ["y"], axis=1)
    _check(_model(new, [("x", F, x.shape)], x.shape, opset=13), {"x": x})
    old = helper.make_node("Hardmax", ["x"], ["y"], axis=1)
    _check(_model(old, [("x", F, x.shape)], x.shape, opset=11), {"x": x})


def test_one_hot_wraps_negative_indices_along_axis_0():
    node = helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=0)
    inits = [numpy_helper.from_array(np.array(5, np.int64), "d")]
    inits.append(numpy_helper.from_array(np.array([-1.0, 2.0], np.float32), "v"))
    i = np.array([[0, 4], [-1, -5]], np.int64)
    _check(_model(node, [("i", TensorProto.INT64, i.shape)], (5, 2, 2), opset=11, inits=inits), {"i": i})


def test_trilu_is_a_where_with_a_constant_mask():
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=0)
    inits = [numpy_helper.from_array(np.array(-1, np.int64), "k")]
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    model = _model(node, [("x", F, x.shape)], x.shape, opset=14, inits=inits)
    assert "where(" in print_graph(from_onnx(model))
    _check(model, {"x": x})


def test_is_inf_positive_only():
    node = helper.make_node("IsInf", ["x"], ["y"], detect_negative=0)
    x = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    _check(_model(node, [("x", F, x.shape)], x.shape, opset=20, out_type=TensorProto.BOOL), {"x": x})


def test_mel_weight_matrix_is_a_constant_equal_to_onnxruntimes():
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    values = [np.int32(40), np.int32(512), np.int32(16000), np.float32(20.0), np.float32(7600.0)]
    inits = [numpy_helper.from_array(np.array(v), n) for n, v in zip(names, values, strict=True)]
    node = helper.make_node("MelWeightMatrix", list(names), ["y"])
    model = _model(node, [], (257, 40), opset=17, inits=inits)
    graph = from_onnx(model)
    assert "constant" in print_graph(graph) and "mel" not in print_graph(graph).lower()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {})
    (got,) = CompiledGraph(graph, "host").run({})
    np.testing.assert_array_equal(got, want)
