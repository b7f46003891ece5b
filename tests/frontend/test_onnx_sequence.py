"""ONNX sequences and optionals resolved at import (frontend/onnx_sequence.py, structured.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tensorir.errors import ModelError
from tensorir.frontend.onnx import from_onnx
from tensorir.frontend.structured import regroup
from tensorir.graph.printer import print_graph
from tensorir.runtime.executor import CompiledGraph

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs):
    graph = helper.make_graph(nodes, "seq", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _split_map_concat():
    """x (6, 4) -> 3 row pairs -> each: relu(row pair) * 2 -> concatenated back along a new axis."""
    body = helper.make_graph(
        [helper.make_node("Relu", ["e"], ["r"]), helper.make_node("Add", ["r", "r"], ["o"])],
        "each",
        [helper.make_tensor_value_info("e", F, [2, 4])],
        [helper.make_tensor_value_info("o", F, [2, 4])],
    )
    nodes = [
        helper.make_node("SplitToSequence", ["x", "two"], ["s"], axis=0),
        helper.make_node("SequenceMap", ["s"], ["m"], body=body),
        helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=0, new_axis=1),
        helper.make_node("SequenceLength", ["m"], ["n"]),
    ]
    two = helper.make_node("Constant", [], ["two"], value=helper.make_tensor("v", TensorProto.INT64, [], [2]))
    x = helper.make_tensor_value_info("x", F, [6, 4])
    outs = [
        helper.make_tensor_value_info("y", F, [3, 2, 4]),
        helper.make_tensor_value_info("n", TensorProto.INT64, []),
    ]
    return _model([two, *nodes], [x], outs)


def test_sequence_ops_inside_a_model_leave_plain_tensors_and_match_onnxruntime():
    model = _split_map_concat()
    g = from_onnx(model)
    text = print_graph(g)
    assert text.count("relu(") == 3 and "concat(" in text  # one body import per element
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    got = CompiledGraph(g, "host").run({"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert int(got[1]) == int(want[1]) == 3


def _insert_model():
    seq_t = helper.make_tensor_sequence_value_info
    node = helper.make_node("SequenceInsert", ["s", "t"], ["out"])
    return _model(
        [node], [seq_t("s", F, None), helper.make_tensor_value_info("t", F, [3])], [seq_t("out", F, None)]
    )


def test_sequence_graph_input_and_output_are_flattened_into_tensors():
    g = from_onnx(_insert_model(), input_shapes={"s": [(2,), (4,)], "t": (3,)})
    assert g.input_names() == ["s.0", "s.1", "t"]
    assert [n for n, _ in g.outputs] == ["out.0", "out.1", "out.2"]
    feeds = {
        "s.0": np.ones(2, np.float32),
        "s.1": np.zeros(4, np.float32),
        "t": np.arange(3, dtype=np.float32),
    }
    outs = CompiledGraph(g, "host").run(feeds)
    (grouped,) = regroup(_insert_model().graph.output, [n for n, _ in g.outputs], outs)
    assert [a.tolist() for a in grouped] == [[1, 1], [0, 0, 0, 0], [0, 1, 2]]


def test_a_sequence_input_without_shapes_is_one_clear_error():
    with pytest.raises(ModelError, match=r"input 's' is a sequence: give its tensors' shapes"):
        from_onnx(_insert_model(), input_shapes={"t": (3,)})


def test_an_empty_optional_output_is_refused_and_a_filled_one_is_its_tensor():
    opt = helper.make_tensor_value_info("o", F, [2])
    node = helper.make_node("Optional", ["x"], ["o"])
    model = _model([node], [helper.make_tensor_value_info("x", F, [2])], [opt])
    assert [n for n, _ in from_onnx(model).outputs] == ["o"]
    empty = helper.make_node("Optional", [], ["o"], type=helper.make_tensor_type_proto(F, [2]))
    with pytest.raises(ModelError, match="graph output 'o' is an empty optional"):
        from_onnx(_model([empty], [], [opt]))
