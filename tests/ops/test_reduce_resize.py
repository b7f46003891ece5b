"""Reductions, TopK, CumSum, Pad and Resize: inference, references and ONNX import."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorir.errors import ShapeError
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.types import TensorType
from tensorir.ops.registry import get_op
from tensorir.ops.resize import interp_weights, source_coords
from tensorir.runtime.reference import run_reference


def infer(op: str, types: list[TensorType], **attrs) -> list[str]:
    return [str(t) for t in get_op(op).infer(types, attrs)]


def ref(op: str, *xs: np.ndarray, **attrs) -> list[np.ndarray]:
    return get_op(op).run_reference(list(xs), attrs)


def one_node(
    op_type: str, shape: list[int], opset: int, consts: tuple = (), name: str = "n0", **attrs
) -> onnx.ModelProto:
    """A model with one node reading input x and constant inputs (None: left out)."""
    inits, names = [], ["x"]
    for i, c in enumerate(consts):
        names.append("" if c is None else f"c{i}")
        if c is not None:
            inits.append(numpy_helper.from_array(np.asarray(c), f"c{i}"))
    node = helper.make_node(op_type, names, ["y"], name=name, **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def only_op(model: onnx.ModelProto):
    g = from_onnx(model)
    (nid,) = g.op_nodes()
    return g, g.node(nid)


# ---- reductions ----------------------------------------------------------------------
def test_keepdims_0_with_negative_axes_is_normalized():
    g, node = only_op(one_node("ReduceSum", [2, 3, 4], 13, (np.array([-1, -3], np.int64),), keepdims=0))
    assert node.attr == {"axes": (0, 2), "keepdims": 0}
    assert str(node.outputs[0]) == "f32[3]"
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (out,) = run_reference(g, {"x": x})
    np.testing.assert_array_equal(out, x.sum(axis=(0, 2)))


def test_axes_attribute_form_and_default_all_axes():
    _, node = only_op(one_node("ReduceMean", [2, 3], 11, axes=[-1]))
    assert node.attr == {"axes": (1,), "keepdims": 1}
    _, node = only_op(one_node("ReduceMax", [2, 3], 18, keepdims=0))
    assert node.attr == {"axes": (0, 1), "keepdims": 0}
    assert str(node.outputs[0]) == "f32[]"


def test_noop_with_empty_axes_reduces_nothing():
    empty = np.zeros(0, np.int64)
    _, node = only_op(one_node("ReduceL2", [2, 3], 18, (empty,), noop_with_empty_axes=1))
    assert node.attr["axes"] == ()
    x = np.array([[-3.0, 4.0]], np.float32)
    np.testing.assert_array_equal(ref("reduce_l2", x, axes=(), keepdims=1)[0], [[3.0, 4.0]])


def test_references_keep_dtype_and_empty_set_identities():
    ints = np.array([[1, 2], [3, 5]], np.int32)
    (mean,) = ref("reduce_mean", ints, axes=(1,), keepdims=0)
    assert mean.dtype == np.int32 and mean.tolist() == [1, 4]
    empty = np.zeros((2, 0), np.float32)
    assert ref("reduce_max", empty, axes=(1,), keepdims=1)[0].tolist() == [[-np.inf], [-np.inf]]
    assert ref("reduce_min", np.zeros((0,), np.int64), axes=(0,), keepdims=0)[0] == np.iinfo(np.int64).max
    assert ref("reduce_prod", empty, axes=(1,), keepdims=0)[0].tolist() == [1.0, 1.0]
    assert ref("reduce_log_sum_exp", empty, axes=(1,), keepdims=0)[0].tolist() == [-np.inf, -np.inf]
    big = np.array([1000.0, 1000.0], np.float32)  # stays finite: computed stably
    np.testing.assert_allclose(ref("reduce_log_sum_exp", big, axes=(0,), keepdims=0)[0], 1000 + np.log(2))


def test_argmax_select_last_index():
    x = np.array([[1, 3, 3], [2, 2, 0]], np.float32)
    assert ref("argmax", x, axis=1, keepdims=0)[0].tolist() == [1, 0]
    assert ref("argmax", x, axis=1, keepdims=1, select_last_index=1)[0].tolist() == [[2], [1]]
    assert infer("argmin", [TensorType((2, 3))], axis=0, keepdims=0) == ["i64[3]"]


def test_topk_ties_keep_lower_index_first():
    x = np.array([[3, 1, 3, 2, 1]], np.uint64)
    values, idx = ref("topk", x, k=3, axis=1, largest=1)
    assert values.tolist() == [[3, 3, 2]] and idx.tolist() == [[0, 2, 3]]
    values, idx = ref("topk", x, k=3, axis=1, largest=0)
    assert values.tolist() == [[1, 1, 2]] and idx.tolist() == [[1, 4, 3]]
    assert infer("topk", [TensorType((4, 5))], k=2, axis=1) == ["f32[4,2]", "i64[4,2]"]


def test_cumsum_exclusive_reverse():
    x = np.array([1, 2, 3, 4], np.int32)
    assert ref("cumsum", x, axis=0)[0].tolist() == [1, 3, 6, 10]
    assert ref("cumsum", x, axis=0, exclusive=1)[0].tolist() == [0, 1, 3, 6]
    out = ref("cumsum", x, axis=0, exclusive=1, reverse=1)[0]
    assert out.dtype == np.int32 and out.tolist() == [9, 7, 4, 0]
    assert ref("cumprod", x, axis=0, exclusive=1)[0].tolist() == [1, 1, 2, 6]
    out = ref("cumprod", x, axis=0, exclusive=1, reverse=1)[0]
    assert out.dtype == np.int32 and out.tolist() == [24, 12, 4, 1]


# ---- pad ------------------------------------------------------------------------------
def test_reflect_pad():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    (out,) = ref("pad", x, pads=(0, 2, 1, 1), mode="reflect")
    expected = [[3, 2, 1, 2, 3, 2], [6, 5, 4, 5, 6, 5], [3, 2, 1, 2, 3, 2]]
    np.testing.assert_array_equal(out, expected)
    assert infer("pad", [TensorType((2, 3))], pads=(0, 2, 1, 1), mode="reflect") == ["f32[3,6]"]


def test_negative_pads_crop_and_axes_input():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,) = ref("pad", x, pads=(0, -1, 1, 0), mode="constant", value=9.0)
    np.testing.assert_array_equal(out, [[1, 2], [4, 5], [9, 9]])
    pads, value, axes = np.array([1, 2], np.int64), np.array(7, np.float32), np.array([-1], np.int64)
    _, node = only_op(one_node("Pad", [2, 3], 18, (pads, value, axes), mode="edge"))
    assert node.attr == {"pads": (0, 1, 0, 2), "mode": "edge", "value": 7.0}
    _, node = only_op(one_node("Pad", [2, 3], 2, pads=[1, 0, 0, 1]))
    assert node.attr == {"pads": (1, 0, 0, 1), "mode": "constant", "value": 0.0}


# ---- resize ---------------------------------------------------------------------------
def resize_attrs(x_shape, sizes, mode="linear", ctm="half_pixel", **extra):
    scales = tuple(o / i for o, i in zip(sizes, x_shape, strict=True))
    return dict(sizes=sizes, scales=scales, mode=mode, coordinate_transformation_mode=ctm, **extra)


def test_bilinear_half_pixel_upscale_by_hand():
    x = np.array([[1, 2], [3, 4]], np.float32)
    (out,) = ref("resize", x, **resize_attrs((2, 2), (4, 4)))
    # source coordinates (i + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25, clamped at the edges
    expected = [
        [1.0, 1.25, 1.75, 2.0],
        [1.5, 1.75, 2.25, 2.5],
        [2.5, 2.75, 3.25, 3.5],
        [3.0, 3.25, 3.75, 4.0],
    ]
    np.testing.assert_allclose(out, expected)
    assert out.dtype == np.float32


def test_resize_coordinates_and_weights():
    np.testing.assert_allclose(source_coords("align_corners", 3, 5, 0.6, None), [0, 2, 4])
    np.testing.assert_allclose(source_coords("asymmetric", 4, 2, 2.0, None), [0, 0.5, 1, 1.5])
    idx, w = interp_weights(np.array([1.25]), "cubic", 0.5, -0.75, antialias=True)
    assert idx.shape == w.shape == (1, 8)  # the cubic kernel widened 2x when downscaling
    np.testing.assert_allclose(w.sum(), 1.0)


def test_resize_nearest_int_and_tf_crop_extrapolation():
    x = np.array([[0, 100], [200, 250]], np.uint8)
    (out,) = ref("resize", x, **resize_attrs((2, 2), (2, 4), mode="nearest", ctm="asymmetric"))
    assert out.dtype == np.uint8 and out.tolist() == [[0, 0, 100, 100], [200, 200, 250, 250]]
    # axis 1 samples x = 0, 0.75, 1.5: the last lies outside [0, 1] and extrapolates
    attrs = resize_attrs((2, 2), (2, 3), ctm="tf_crop_and_resize", roi=(0, 0, 1, 1.5))
    (out,) = ref("resize", x.astype(np.float32), **attrs, extrapolation_value=-1.0)
    np.testing.assert_allclose(out, [[0, 75, -1], [200, 237.5, -1]])


def test_resize_import_scales_sizes_and_policy():
    roi, scales = np.zeros(0, np.float32), np.array([1, 1, 2, 0.5], np.float32)
    _, node = only_op(one_node("Resize", [1, 2, 4, 6], 13, (roi, scales), mode="cubic"))
    assert node.attr["sizes"] == (1, 2, 8, 3) and node.attr["scales"] == (1, 1, 2, 0.5)
    assert node.attr["roi"] == () and node.attr["cubic_coeff_a"] == -0.75
    sizes = np.array([6, 6], np.int64)
    model = one_node(
        "Resize", [1, 1, 4, 6], 19, (None, None, sizes), axes=[2, 3], keep_aspect_ratio_policy="not_larger"
    )
    _, node = only_op(model)
    assert node.attr["sizes"] == (1, 1, 4, 6) and node.attr["scales"] == (1, 1, 1.0, 1.0)


def test_upsample_becomes_asymmetric_resize():
    g, node = only_op(one_node("Upsample", [1, 1, 2, 2], 9, (np.array([1, 1, 2, 3], np.float32),)))
    assert node.op == "resize" and node.attr["sizes"] == (1, 1, 4, 6)
    assert node.attr["coordinate_transformation_mode"] == "asymmetric"
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    (out,) = run_reference(g, {"x": x})
    np.testing.assert_array_equal(out, x.repeat(2, axis=2).repeat(3, axis=3))


# ---- errors ---------------------------------------------------------------------------
def test_shape_errors_name_the_node():
    with pytest.raises(ShapeError, match=r"node 'my_reduce' \(ReduceSum\).*axis 2 is out of range"):
        from_onnx(one_node("ReduceSum", [2, 3], 13, (np.array([2], np.int64),), name="my_reduce"))
    k = np.array([9], np.int64)
    with pytest.raises(ShapeError, match=r"node 'my_topk' \(TopK\).*k=9 is out of range"):
        from_onnx(one_node("TopK", [2, 3], 11, (k,), name="my_topk"))
    with pytest.raises(ShapeError, match="repeat an axis"):
        get_op("reduce_sum").infer([TensorType((2, 3))], {"axes": (1, 1), "keepdims": 1})
