"""onnxruntime's QOperator models (quantize_static with QuantFormat.QOperator) and their
com.microsoft QLinear* / QGemm contrib ops (frontend/onnx_qlinear_contrib.py): compiled by
tensorir and run by its numpy reference, each within one output quantization step of
onnxruntime per element."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantFormat

import tensorir as tir
from tensorir.errors import UnsupportedOpError
from tensorir.frontend.onnx import from_onnx
from tensorir.runtime.reference import run_reference
from tests.int8_oracle import weight_max
from tests.quantize.test_fold_qdq import _quantized as quantized_by_ort

RNG = np.random.default_rng(23)


def _quantized(
    tmp: Path, nodes: list, inits: dict, x_shape: tuple, y_shape: tuple, **extra
) -> onnx.ModelProto:
    """The QOperator model onnxruntime's quantize_static writes (U8S8; per tensor by default)."""
    options = {"quant_format": QuantFormat.QOperator, "per_channel": False}
    return quantized_by_ort(tmp, nodes, inits, x_shape, y_shape, **(options | extra))


def _resnet_head(tmp: Path) -> onnx.ModelProto:
    """Conv -> residual Add -> Relu -> GlobalAveragePool -> Flatten -> Gemm (transB, bias), the
    weights quantized per channel (QGemm's per-column b_scale)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2", "b2"], ["c2"]),
        helper.make_node("Add", ["c1", "c2"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1),
    ]
    inits = {
        "w1": RNG.standard_normal((8, 3, 3, 3)) / 3,
        "b1": RNG.standard_normal(8) / 4,
        "w2": RNG.standard_normal((8, 8, 1, 1)) / 3,
        "b2": RNG.standard_normal(8) / 4,
        "w3": RNG.standard_normal((10, 8)),
        "b3": RNG.standard_normal(10) / 4,
    }
    return _quantized(tmp, nodes, inits, (2, 3, 12, 12), (2, 10), per_channel=True)


def _swish_concat_softmax(tmp: Path) -> onnx.ModelProto:
    """Conv -> x * Sigmoid(x) and LeakyRelu(x) -> Concat -> AveragePool -> Softmax over channels."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("LeakyRelu", ["c"], ["lr"], alpha=0.1),
        helper.make_node("Concat", ["m", "lr"], ["cat"], axis=1),
        helper.make_node(
            "AveragePool", ["cat"], ["ap"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Softmax", ["ap"], ["y"], axis=1),
    ]
    inits = {"w1": RNG.standard_normal((6, 4, 1, 1)), "b1": RNG.standard_normal(6) / 4}
    return _quantized(tmp, nodes, inits, (1, 4, 9, 9), (1, 12, 5, 5))


def _where(tmp: Path) -> onnx.ModelProto:
    """Where(x > 0, conv1(x), conv2(x)): QLinearWhere with ForceQuantizeNoInputCheck."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"]),
        helper.make_node("Conv", ["x", "w2"], ["c2"]),
        helper.make_node("Greater", ["x", "zero"], ["g"]),
        helper.make_node("Where", ["g", "c1", "c2"], ["y"]),
    ]
    inits = {"w1": RNG.standard_normal((4, 4, 1, 1)), "w2": RNG.standard_normal((4, 4, 1, 1)), "zero": 0.0}
    extra = {"ForceQuantizeNoInputCheck": True}
    return _quantized(tmp, nodes, inits, (1, 4, 6, 6), (1, 4, 6, 6), extra_options=extra)


CONTRIB_OPS = {
    _resnet_head: {"QLinearAdd", "QLinearGlobalAveragePool", "QGemm"},
    _swish_concat_softmax: {
        "QLinearSigmoid",
        "QLinearMul",
        "QLinearLeakyRelu",
        "QLinearConcat",
        "QLinearAveragePool",
        "QLinearSoftmax",
    },
    _where: {"QLinearWhere"},
}


def _output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear writing the output y: one output quantization step."""
    (dq,) = [n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y"]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(inits[dq.input[1]])


@pytest.mark.parametrize("make", list(CONTRIB_OPS), ids=lambda f: f.__name__)
def test_qoperator_model_matches_onnxruntime_within_one_step(tmp_path, make):
    model = make(tmp_path)
    contrib = {n.op_type for n in model.graph.node if n.domain == "com.microsoft"}
    assert contrib == CONTRIB_OPS[make], contrib  # onnxruntime still writes these ops
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    mod = tir.compile(model)
    graph = from_onnx(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    step = _output_step(model)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 1.5
        want = sess.run(None, {"x": x})[0]
        got = mod.run({"x": x})[0]
        assert np.abs(got - want).max() <= step * 1.001, (seed, np.abs(got - want).max() / step)
        ref = run_reference(graph, {"x": x})[0]
        assert np.abs(ref - want).max() <= step * 1.001, (seed, np.abs(ref - want).max() / step)
        assert np.unique(want).size > 8  # a varied output, not a saturated one


def _contrib_model(node: onnx.NodeProto, x: np.ndarray, inits: dict, y_type: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))],
        [helper.make_tensor_value_info("y", y_type, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


_PARAMS = {
    "xs": np.float32(0.05),
    "xz": np.uint8(120),
    "ys": np.float32(0.03),
    "yz": np.uint8(100),
}


@pytest.mark.parametrize(
    "op, attrs",
    [
        ("QLinearGlobalAveragePool", {"channels_last": 1}),
        ("QLinearAveragePool", {"channels_last": 1, "kernel_shape": [2, 3], "strides": [2, 1]}),
    ],
)
def test_channels_last_pooling_matches_onnxruntime(op, attrs):
    x = np.random.default_rng(4).integers(0, 256, (2, 5, 7, 6), dtype=np.uint8)
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", **attrs)
    model = _contrib_model(node, x, _PARAMS, TensorProto.UINT8)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    got = tir.compile(model).run({"x": x})[0]
    assert got.shape == want.shape and got.dtype == np.uint8
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_qgemm_without_output_scale_gives_float_like_onnxruntime():
    """No y_scale: Y = alpha * a_scale * b_scale * (A' B' + C) in float32 (per-column b_scale)."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (3, 16), dtype=np.uint8)
    inits = {
        "as": np.float32(0.02),
        "az": np.uint8(128),
        "b": rng.integers(-weight_max(), weight_max() + 1, (5, 16), dtype=np.int8),  # tests/int8_oracle.py
        "bs": rng.uniform(0.01, 0.03, 5).astype(np.float32),
        "bz": np.zeros(5, np.int8),
        "c": rng.integers(-500, 500, 5, dtype=np.int32),
    }
    inputs = ["x", "as", "az", "b", "bs", "bz", "c"]
    node = helper.make_node("QGemm", inputs, ["y"], domain="com.microsoft", transB=1, alpha=0.5)
    model = _contrib_model(node, x, inits, TensorProto.FLOAT)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    got = tir.compile(model).run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_unsupported_contrib_op_is_named_in_one_line():
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])
    node = helper.make_node("QAttention", ["x"], ["y"], name="attn", domain="com.microsoft", num_heads=1)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=opsets)
    with pytest.raises(UnsupportedOpError) as err:
        from_onnx(model)
    assert "com.microsoft.QAttention x1 (e.g. node 'attn')" in str(err.value)
    assert "\n" not in str(err.value)
