"""Tensor-manipulation ops: shape inference, numpy references, and version-aware ONNX import."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorir.errors import ShapeError
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.graph import Graph
from tensorir.graph.printer import print_graph
from tensorir.graph.types import TensorType
from tensorir.ops.registry import get_op
from tensorir.ops.tensor import normalize_slice, reshape_target
from tensorir.runtime.reference import run_reference


def infer(op: str, types: list[TensorType], **attrs) -> list[str]:
    return [str(t) for t in get_op(op).infer(types, attrs)]


def ref(op: str, *xs: np.ndarray, **attrs) -> list[np.ndarray]:
    return get_op(op).run_reference(list(xs), attrs)


# ---- inference ---------------------------------------------------------------------
def test_reshape_target_zero_and_minus_one():
    assert reshape_target((2, 3, 4), (0, -1)) == (2, 12)
    assert reshape_target((2, 3, 4), (-1, 0, 2)) == (4, 3, 2)
    assert reshape_target((0, 3), (0, 3), allowzero=True) == (0, 3)
    with pytest.raises(ShapeError, match="at most one -1"):
        reshape_target((2, 3), (-1, -1))


def test_inference_prints_types():
    f32 = TensorType((2, 3, 4))
    assert infer("reshape", [f32], shape=(6, 4)) == ["f32[6,4]"]
    assert infer("transpose", [f32], perm=(2, 0, 1)) == ["f32[4,2,3]"]
    assert infer("concat", [f32, TensorType((2, 5, 4))], axis=1) == ["f32[2,8,4]"]
    assert infer("split", [f32], axis=2, sizes=(3, 1)) == ["f32[2,3,3]", "f32[2,3,1]"]
    assert infer("gather", [f32, TensorType((5, 1), "int64")], axis=1) == ["f32[2,5,1,4]"]
    assert infer("gather_elements", [f32, TensorType((2, 3, 2), "int32")], axis=2) == ["f32[2,3,2]"]
    assert infer("expand", [TensorType((3, 1), "bool")], shape=(2, 3, 5)) == ["bool[2,3,5]"]
    assert infer("tile", [TensorType((2, 3), "bfloat16")], repeats=(2, 1)) == ["bf16[4,3]"]
    assert infer("depth_to_space", [TensorType((1, 8, 2, 3))], blocksize=2, mode="CRD") == ["f32[1,2,4,6]"]
    assert infer("space_to_depth", [TensorType((1, 2, 4, 6))], blocksize=2) == ["f32[1,8,2,3]"]


def test_slice_normalization_and_inference():
    attrs = normalize_slice((10, 4), starts=[-1, 9], ends=[-100, 0], axes=[1, 0], steps=[-2, -3])
    assert attrs == {"starts": (9, 3), "ends": (0, -1), "axes": (0, 1), "steps": (-3, -2)}
    assert infer("slice", [TensorType((10, 4))], **attrs) == ["f32[3,2]"]
    big = normalize_slice((5,), [2], [2**63 - 1])
    assert big == {"starts": (2,), "ends": (5,), "axes": (0,), "steps": (1,)}
    with pytest.raises(ShapeError, match="step must not be 0"):
        normalize_slice((5,), [0], [5], steps=[0])


def test_shape_error_names_the_node():
    g = Graph()
    x = g.add_input("x", TensorType((2, 3)))
    with pytest.raises(ShapeError, match=r"node 'r1' \(reshape\): cannot reshape \[2, 3\]"):
        g.add_node("reshape", [x], {"shape": (4, 2)}, name="r1")
    with pytest.raises(ShapeError, match="do not add up"):
        g.add_node("split", [x], {"axis": 1, "sizes": (1, 1)}, name="s")


# ---- references --------------------------------------------------------------------
def test_slice_negative_steps_reference():
    x = np.arange(10, dtype=np.int8)
    attrs = normalize_slice(x.shape, [-2], [-100], steps=[-3])
    np.testing.assert_array_equal(ref("slice", x, **attrs)[0], x[8::-3])
    attrs = normalize_slice(x.shape, [100], [2], steps=[-1])
    np.testing.assert_array_equal(ref("slice", x, **attrs)[0], x[9:2:-1])


def test_gather_negative_indices_reference():
    x = np.arange(12, dtype=np.float16).reshape(3, 4)
    (out,) = ref("gather", x, np.array([-1, 0], np.int32), axis=1)
    np.testing.assert_array_equal(out, x[:, [3, 0]])
    idx = np.array([[-1, 0], [2, -3]], np.int64)
    (out,) = ref("gather_elements", x, idx, axis=0)
    np.testing.assert_array_equal(out, [[x[2, 0], x[0, 1]], [x[2, 0], x[0, 1]]])
    with pytest.raises(IndexError):
        ref("gather", x, np.array([4]), axis=1)


def test_split_uneven_reference():
    x = np.arange(7, dtype=np.uint64)
    outs = ref("split", x, axis=0, sizes=(3, 3, 1))
    assert [o.tolist() for o in outs] == [[0, 1, 2], [3, 4, 5], [6]]


DTYPES = [np.bool_, np.int8, np.uint16, np.int64, np.uint64, np.float16, np.float64, ml_dtypes.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_references_keep_dtype(dtype):
    x = (np.arange(16) % 3).astype(dtype).reshape(1, 4, 2, 2)
    cases = [
        ("identity", (), {}),
        ("reshape", (), {"shape": (4, 4)}),
        ("transpose", (), {"perm": (3, 2, 1, 0)}),
        ("concat", (x,), {"axis": 1}),
        ("slice", (), {"starts": (3,), "ends": (-1,), "axes": (1,), "steps": (-2,)}),
        ("gather", (np.array([1, -1]),), {"axis": 1}),
        ("gather_elements", (np.zeros((1, 4, 2, 1), np.int64),), {"axis": 3}),
        ("expand", (), {"shape": (2, 1, 4, 2, 2)}),
        ("tile", (), {"repeats": (2, 1, 1, 3)}),
        ("depth_to_space", (), {"blocksize": 2, "mode": "DCR"}),
        ("space_to_depth", (), {"blocksize": 2}),
    ]
    for op, extra, attrs in cases:
        types = [TensorType.of(a) for a in (x, *extra)]
        (want,) = get_op(op).infer(types, attrs)
        (got,) = ref(op, x, *extra, **attrs)
        assert TensorType.of(got) == want, op


def test_depth_to_space_modes_invert_space_to_depth():
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 6)).astype(np.float32)
    (y,) = ref("space_to_depth", x, blocksize=2)
    (back,) = ref("depth_to_space", y, blocksize=2, mode="DCR")
    np.testing.assert_array_equal(back, x)
    (crd,) = ref("depth_to_space", y, blocksize=2, mode="CRD")
    assert crd.shape == x.shape and not np.array_equal(crd, x)


# ---- ONNX import across opsets -------------------------------------------------------
def _model(nodes, opset: int, in_shape=(2, 1, 3), inits=()) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in nodes[-1].output]
    graph = helper.make_graph(nodes, "m", [x], outs, [numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_axes_attribute_then_input(opset):
    if opset < 13:
        nodes = [
            helper.make_node("Squeeze", ["x"], ["s"], axes=[-2]),
            helper.make_node("Unsqueeze", ["s"], ["y"], axes=[0, 3]),
        ]
        inits = ()
    else:
        nodes = [
            helper.make_node("Squeeze", ["x", "a1"], ["s"]),
            helper.make_node("Unsqueeze", ["s", "a2"], ["y"]),
        ]
        inits = (("a1", np.array([-2])), ("a2", np.array([0, 3])))
    g = from_onnx(_model(nodes, opset, inits=inits))
    assert "reshape(%x) shape=(2,3) : f32[2,3]" in print_graph(g)
    assert "shape=(1,2,3,1) : f32[1,2,3,1]" in print_graph(g)


@pytest.mark.parametrize("opset", [9, 10])
def test_slice_attributes_then_inputs(opset):
    if opset < 10:
        nodes = [helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[100], axes=[-1])]
        inits = ()
    else:
        nodes = [helper.make_node("Slice", ["x", "b", "e", "a", "st"], ["y"])]
        inits = [(n, np.array([v])) for n, v in (("b", -1), ("e", -10), ("a", 2), ("st", -1))]
    g = from_onnx(_model(nodes, opset, inits=inits))
    x = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    want = x[:, :, 1:] if opset < 10 else x[:, :, ::-1]
    np.testing.assert_array_equal(run_reference(g, {"x": x})[0], want)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_sizes_by_opset(opset):
    if opset < 13:
        node = helper.make_node("Split", ["x"], ["a", "b"], axis=-1, split=[2, 1])
        inits = ()
    elif opset == 13:
        node = helper.make_node("Split", ["x", "sp"], ["a", "b"], axis=-1)
        inits = (("sp", np.array([2, 1])),)
    else:
        node = helper.make_node("Split", ["x"], ["a", "b"], axis=-1, num_outputs=2)
        inits = ()
    g = from_onnx(_model([node], opset, inits=inits))
    assert "split(%x) axis=2 sizes=(2,1) : f32[2,1,2], f32[2,1,1]" in print_graph(g)


def test_shape_size_range_constant_fold_at_import():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=-2),
        helper.make_node("Size", ["x"], ["n"]),
        helper.make_node("Range", ["zero", "n", "two"], ["r"]),
        helper.make_node(
            "ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(np.array([7], np.int8))
        ),
        helper.make_node("Constant", [], ["k"], value_ints=[1, 2]),
        helper.make_node("Concat", ["r", "k"], ["y"], axis=0),
    ]
    inits = (("zero", np.int64(0)), ("two", np.int64(2)))
    model = _model(nodes, 13, inits=inits)
    model.graph.output.append(helper.make_tensor_value_info("c", TensorProto.INT8, None))
    g = from_onnx(model)
    y, c = run_reference(g, {"x": np.zeros((2, 1, 3), np.float32)})
    assert y.tolist() == [0, 2, 4, 1, 2]
    assert c.dtype == np.int8 and c.shape == (1, 3) and (c == 7).all()


def test_reshape_error_names_the_onnx_node():
    node = helper.make_node("Reshape", ["x", "sh"], ["y"], name="bad_reshape")
    model = _model([node], 14, inits=(("sh", np.array([4, -1])),))
    with pytest.raises(ShapeError, match=r"node 'bad_reshape' \(Reshape\): cannot reshape \[2, 1, 3\]"):
        from_onnx(model)
