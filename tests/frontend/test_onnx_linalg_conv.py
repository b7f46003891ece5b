"""ONNX Col2Im, Det and DeformConv (compositions of existing graph ops) compiled for the host
against onnxruntime on cases the node tests leave out: 1-D and 3-D Col2Im with strides wider
than the kernel (positions no column reaches), dilations and uneven pads, checked against ONNX's
reference (onnxruntime 1-D Col2Im with more than one channel adds channels together); Det of
matrices that need row swaps, a singular one (0, not NaN), batched float64 8 x 8 against numpy;
DeformConv with groups, strides and dilations."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from tensorir.errors import ModelError
from tensorir.frontend.onnx import from_onnx
from tensorir.runtime.executor import CompiledGraph

F = TensorProto.FLOAT
I64 = TensorProto.INT64
RNG = np.random.default_rng(0)


def _model(node, inputs, inits=(), opset=19):
    ins = [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs]
    out = helper.make_tensor_value_info(node.output[0], F, None)
    graph = helper.make_graph([node], "m", ins, [out], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, rtol=1e-5, atol=1e-6, ref=False):
    if ref:
        (want,) = ReferenceEvaluator(model).run(None, feeds)
    else:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        (want,) = sess.run(None, feeds)
    (got,) = CompiledGraph(from_onnx(model), "host").run(feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _col2im(image, block, x_shape, **attrs):
    inits = [
        helper.make_tensor("image", I64, [len(image)], image),
        helper.make_tensor("block", I64, [len(block)], block),
    ]
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    x = RNG.standard_normal(x_shape).astype(np.float32)
    _check(_model(node, [("x", F, x_shape)], inits), {"x": x}, ref=True)


def test_col2im_1d_stride_wider_than_the_dilated_kernel():
    # padded length 1 + 11 + 2 = 14, kernel 2 dilated 2 spans 3, stride 4: L = 3, gaps between
    _col2im([11], [2], (2, 3 * 2, 3), strides=[4], dilations=[2], pads=[1, 2])


def test_col2im_3d_uneven_pads_and_strides():
    # padded 6 x 7 x 5; kernel 2 x 3 x 1 -> L = 3 x 3 x 2 (strides 2, 2, 3)
    _col2im([5, 5, 4], [2, 3, 1], (1, 2 * 6, 18), strides=[2, 2, 3], pads=[1, 0, 0, 0, 2, 1])


def _det(a: np.ndarray) -> np.ndarray:
    t = TensorProto.DOUBLE if a.dtype == np.float64 else F
    node = helper.make_node("Det", ["x"], ["y"])
    model = _model(node, [("x", t, a.shape)])
    model.graph.output[0].type.tensor_type.elem_type = t
    (got,) = CompiledGraph(from_onnx(model), "host").run({"x": a})
    assert got.shape == a.shape[:-2] and got.dtype == a.dtype
    return got


def test_det_needs_pivoting_and_keeps_the_sign():
    # zero leading entries: elimination without row swaps divides by 0
    a = np.array([[0, 2, 1], [3, 0, 4], [1, 1, 0]], np.float32)
    perm = np.array([[0, 1, 0, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 0, 1, 0]], np.float32)
    batch = np.stack([np.pad(a, ((0, 1), (0, 1))) + np.diag([0, 0, 0, 5]).astype(np.float32), perm])
    np.testing.assert_allclose(_det(batch), [55.0, np.linalg.det(perm)], rtol=1e-6)


def test_det_singular_is_zero_not_nan():
    a = np.array([[1, 2, 3], [2, 4, 6], [0, 0, 0]], np.float32)
    np.testing.assert_array_equal(_det(a[None]), [0.0])


def test_det_float64_batched_8x8_against_numpy():
    a = RNG.standard_normal((2, 3, 8, 8))
    np.testing.assert_allclose(_det(a), np.linalg.det(a), rtol=1e-12)


def test_det_refuses_larger_than_8():
    with pytest.raises(ModelError, match="n <= 8"):
        _det(np.eye(9, dtype=np.float32))


def test_deform_conv_groups_strides_dilations_and_mask():
    """group 2 with offset_group 2, stride 2, dilation 2, uneven pads, offsets reaching past the
    edges (zeros there), a mask and a bias; the node tests have group 1 and stride 1."""
    n, c, h, w, oc, kh, kw, g = 2, 4, 7, 6, 6, 2, 3, 2
    node = helper.make_node(
        "DeformConv",
        ["x", "w", "offset", "b", "mask"],
        ["y"],
        group=2,
        offset_group=g,
        strides=[2, 2],
        dilations=[2, 1],
        pads=[1, 0, 2, 1],
    )
    oh, ow = (h + 3 - 2 - 1) // 2 + 1, (w + 1 - 2 - 1) // 2 + 1
    feeds = {
        "x": RNG.standard_normal((n, c, h, w)).astype(np.float32),
        "w": RNG.standard_normal((oc, c // 2, kh, kw)).astype(np.float32),
        "offset": (3 * RNG.standard_normal((n, g * kh * kw * 2, oh, ow))).astype(np.float32),
        "b": RNG.standard_normal(oc).astype(np.float32),
        "mask": RNG.random((n, g * kh * kw, oh, ow)).astype(np.float32),
    }
    _check(_model(node, [(k, F, v.shape) for k, v in feeds.items()]), feeds, rtol=1e-4, atol=1e-5)
