"""Quantized ONNX models (frontend/onnx_quant.py): QDQ from onnxruntime's own quantize_static
and the QOperator form, compiled for the host, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from tensorir.frontend.onnx import from_onnx
from tensorir.graph.printer import print_graph
from tensorir.runtime.executor import CompiledGraph
from tests.int8_oracle import ReferenceSession, quantize_options


def _float_cnn(path, head: bool = True):
    """conv 3->8 3x3 + relu, conv 8->8 1x1 (then with `head`: global pool, flatten, gemm 8->4)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 8, 1, 1)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.normal(0, 0.3, (4, 8)).astype(np.float32), "w3"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("GlobalAveragePool", ["c2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w3"], ["y"], transB=1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    if not head:
        nodes, inits = nodes[:3], inits[:3]
        y = helper.make_tensor_value_info("c2", TensorProto.FLOAT, [1, 8, 16, 16])
    graph = helper.make_graph(nodes, "cnn", [x], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


class _Reader(CalibrationDataReader):
    def __init__(self) -> None:
        rng = np.random.default_rng(1)
        self.data = iter([{"x": rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(8)])

    def get_next(self):
        return next(self.data, None)


@pytest.mark.parametrize("fmt", [QuantFormat.QDQ, QuantFormat.QOperator])
@pytest.mark.parametrize("per_channel", [False, True])
def test_model_quantized_by_onnxruntime_matches_it_within_one_step(tmp_path, fmt, per_channel):
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    # QOperator: convolutions only (its QGemm / QLinearGlobalAveragePool are com.microsoft ops)
    _float_cnn(src, head=fmt == QuantFormat.QDQ)
    quantize_static(
        str(src), str(dst), _Reader(), quant_format=fmt, per_channel=per_channel,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, **quantize_options(),
    )  # fmt: skip
    model = onnx.load(dst)
    ops = {n.op_type for n in model.graph.node}
    assert ops & ({"QuantizeLinear", "DequantizeLinear"} if fmt == QuantFormat.QDQ else {"QLinearConv"}), ops
    x = np.random.default_rng(2).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = CompiledGraph(from_onnx(model), "host").run({"x": x})[0]
    step = _output_scale(model)  # the last dequantization's scale: one step of the output
    assert np.abs(got - want).max() <= step * 1.0001, (np.abs(got - want).max(), step)


def _output_scale(model: onnx.ModelProto) -> float:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out = model.graph.output[0].name
    for n in model.graph.node:
        if out in n.output and n.op_type == "DequantizeLinear":
            return float(np.max(inits[n.input[1]]))
    raise AssertionError("the output is not a DequantizeLinear")


@pytest.mark.parametrize("fmt", [QuantFormat.QDQ, QuantFormat.QOperator])
def test_full_range_int8_weights_match_the_onnx_reference(tmp_path, fmt):
    """8-bit weights up to +-127 on every host, against the ONNX reference evaluator: the sums
    are exact int32 (onnxruntime saturates them on x86-64 without VNNI, tests/int8_oracle.py)."""
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    _float_cnn(src, head=fmt == QuantFormat.QDQ)
    quantize_static(
        str(src), str(dst), _Reader(), quant_format=fmt, per_channel=False, reduce_range=False,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
    )  # fmt: skip
    model = onnx.load(dst)
    weights = [numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == TensorProto.INT8]
    assert max(int(np.abs(w.astype(int)).max()) for w in weights) == 127  # the full range is used
    x = np.random.default_rng(2).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    want = ReferenceSession(model).run(None, {"x": x})[0]
    got = CompiledGraph(from_onnx(model), "host").run({"x": x})[0]
    assert np.abs(got - want).max() <= _output_scale(model) * 1.0001, np.abs(got - want).max()


def test_dequantize_per_axis_and_blocked_read_as_float_arithmetic():
    x = helper.make_tensor_value_info("x", TensorProto.INT8, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    scale = numpy_helper.from_array(np.array([[0.5, 2.0], [1.0, 4.0]], np.float32), "s")
    zp = numpy_helper.from_array(np.array([[1, -1], [0, 2]], np.int8), "z")
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=2)
    graph = helper.make_graph([node], "dq", [x], [y], [scale, zp])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    g = from_onnx(model)
    text = print_graph(g)
    assert "cast(%x) saturate=1 to=float32" in text and "sub(" in text and "mul(" in text
    xv = np.array([[1, 2, 3, 4], [-5, 6, -7, 8]], np.int8)
    want = (xv.astype(np.float32) - np.repeat(zp_v := numpy_helper.to_array(zp), 2, axis=1)) * np.repeat(
        numpy_helper.to_array(scale), 2, axis=1
    )
    assert zp_v.dtype == np.int8
    np.testing.assert_array_equal(CompiledGraph(g, "host").run({"x": xv})[0], want)
