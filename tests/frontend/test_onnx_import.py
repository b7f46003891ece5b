"""ONNX import: initializers, external data, opset-aware attributes, static-shape specialization."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorir.errors import ModelError
from tensorir.frontend.onnx import from_onnx, supported_op_types
from tensorir.graph.printer import print_graph
from tensorir.runtime.reference import run_reference

ISSUE_OPS = """Conv ConvTranspose Gemm MatMul Add Sub Mul Div Pow Sqrt Exp Log Abs Neg Reciprocal Floor Ceil
Erf Relu LeakyRelu PRelu Elu Selu Sigmoid HardSigmoid HardSwish Tanh Softplus Softsign Gelu Mish Clip Min Max
Sum Mean Where Equal Less Greater Not And Or Cast Softmax LogSoftmax BatchNormalization InstanceNormalization
LayerNormalization MaxPool AveragePool GlobalAveragePool GlobalMaxPool ReduceMean ReduceSum ReduceMax
ReduceMin ReduceProd ReduceL2 ArgMax ArgMin Reshape Flatten Transpose Squeeze Unsqueeze Concat Split
Slice Gather GatherElements Expand Tile Pad Resize Upsample DepthToSpace SpaceToDepth Shape Size
ConstantOfShape Constant Range Identity Dropout TopK Einsum CumSum""".split()


def test_converter_table_covers_every_required_op():
    assert set(ISSUE_OPS) <= supported_op_types(), sorted(set(ISSUE_OPS) - supported_op_types())


def _clip_model(opset: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])
    if opset < 11:
        node = helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=2.0, name="clip")
        inits = []
    else:
        node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="clip")
        inits = [numpy_helper.from_array(np.float32(v), n) for n, v in (("lo", -1.0), ("hi", 2.0))]
    graph = helper.make_graph([node], "clip", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [7, 11, 13])
def test_clip_attribute_form_depends_on_opset(opset):
    g = from_onnx(_clip_model(opset))
    assert "clip(%x) max=2 min=-1 : f32[5]" in print_graph(g)
    x = np.array([-3, -1, 0, 1.5, 9], np.float32)
    np.testing.assert_array_equal(run_reference(g, {"x": x})[0], np.clip(x, -1, 2))


def test_input_value_specializes_only_when_a_constant_is_needed():
    # Clip's bounds must be static; bound as input values they become constants.
    model = _clip_model(13)
    lo = model.graph.initializer[0]
    del model.graph.initializer[0]
    model.graph.input.append(helper.make_tensor_value_info("lo", TensorProto.FLOAT, []))
    with pytest.raises(ModelError, match="node 'clip' \\(Clip\\): min \\('lo'\\) must be a constant"):
        from_onnx(model)
    g = from_onnx(model, input_values={"lo": numpy_helper.to_array(lo), "x": np.zeros(5, np.float32)})
    assert g.input_names() == ["x"]


def test_external_data_is_loaded(tmp_path):
    model = _clip_model(7)
    add = helper.make_node("Add", ["y", "w"], ["z"], name="add")
    model.graph.node.append(add)
    model.graph.initializer.append(numpy_helper.from_array(np.arange(5, dtype=np.float32), "w"))
    model.graph.output[0].name = "z"
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    assert (tmp_path / "w.bin").exists()
    out = run_reference(from_onnx(str(path)), {"x": np.zeros(5, np.float32)})[0]
    np.testing.assert_array_equal(out, np.arange(5, dtype=np.float32))
    (tmp_path / "w.bin").unlink()
    with pytest.raises(ModelError, match="ext.onnx: cannot load external weights"):
        from_onnx(str(path))


def test_input_shapes_override_symbolic_dims():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))
    with pytest.raises(ModelError, match="input 'x' has a symbolic dimension 'n'"):
        from_onnx(model)
    g = from_onnx(model, input_shapes={"x": [4, 3]})
    assert "%x: f32[4,3]" in print_graph(g)
    with pytest.raises(ModelError, match="'nope', which is not a model input"):
        from_onnx(model, input_shapes={"nope": [1]})
