"""ONNX function ops imported through their schema's function body (frontend/onnx_functions.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tensorir.errors import UnsupportedOpError
from tensorir.frontend.onnx import check_supported, expand_unsupported, from_onnx
from tensorir.graph.printer import print_graph
from tensorir.runtime.executor import CompiledGraph
from tensorir.runtime.reference import run_reference


def _model(nodes, inputs, outputs, opset=23):
    graph = helper.make_graph(nodes, "f", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _celu_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    return _model([helper.make_node("Celu", ["x"], ["y"], alpha=0.5, name="celu")], [x], [y])


def test_function_op_is_replaced_by_its_body_and_computes_the_op():
    model = _celu_model()
    expanded = expand_unsupported(model)
    assert [n.op_type for n in expanded.graph.node] != ["Celu"]
    assert "Elu" in {n.op_type for n in expanded.graph.node}
    g = from_onnx(model)  # Celu(x) = alpha * Elu(x / alpha)
    text = print_graph(g)
    assert "= div(%x, %c1)" in text and "= elu(%2) alpha=1" in text and "= mul(%c1, %3)" in text
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    want = np.maximum(0, x) + np.minimum(0, 0.5 * (np.exp(x / 0.5) - 1))
    np.testing.assert_allclose(run_reference(g, {"x": x})[0], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(CompiledGraph(g, "host").run({"x": x})[0], want, rtol=1e-5, atol=1e-6)


def test_supported_ops_are_never_expanded():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    model = _model([helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")], [x, s], [y])
    assert expand_unsupported(model) is model  # LayerNormalization has a converter and a body


def test_nested_function_bodies_expand_round_after_round():
    """SoftmaxCrossEntropyLoss's body holds NegativeLogLikelihoodLoss, itself a function."""
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [3, 5])
    labels = helper.make_tensor_value_info("labels", TensorProto.INT64, [3])
    loss = helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss"], reduction="mean")
    model = _model([node], [scores, labels], [loss], opset=13)
    ops = {n.op_type for n in expand_unsupported(model).graph.node}
    assert not ops & {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}, ops
    rng = np.random.default_rng(0)
    feeds = {"scores": rng.standard_normal((3, 5)).astype(np.float32), "labels": np.array([0, 4, 2])}
    got = CompiledGraph(from_onnx(model), "host").run(feeds)[0]
    np.testing.assert_allclose(got, _ort(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_attention_compiles_and_matches_onnxruntime():
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 2, 4, 8])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 2, 6, 8])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 2, 6, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 8])
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1, name="attn")
    model = _model([node], [q, k, v], [y])
    rng = np.random.default_rng(1)
    shapes = {"q": (1, 2, 4, 8), "k": (1, 2, 6, 8), "v": (1, 2, 6, 8)}
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    got = CompiledGraph(from_onnx(model), "host").run(feeds)[0]
    np.testing.assert_allclose(got, _ort(model, feeds)[0], rtol=1e-4, atol=1e-5)


def test_a_body_needing_an_unsupported_op_names_the_models_op():
    """LinearAttention's body is a Scan, which tensorir lacks: the error names LinearAttention."""
    schema = onnx.defs.get_schema("LinearAttention")
    assert schema.has_context_dependent_function or schema.has_function
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 3, 4]) for n in ("q", "k", "v")]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("LinearAttention", ["q", "k", "v"], ["y"], name="lin_attn")
    model = _model([node], ins, [out], opset=max(27, schema.since_version))
    with pytest.raises(UnsupportedOpError, match=r"LinearAttention x1 \(e.g. node 'lin_attn'\)"):
        check_supported(model)
