"""grid_sample (ops/grid_sample.py) compiled for the host against its numpy reference on
every mode / padding / align_corners, grid points far outside [-1, 1] (several reflections),
3-D inputs; the reference against onnxruntime on the same; and the kernel's stages."""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tensorir.graph.types import TensorType
from tensorir.ops.kernel import op_kernel, run_op
from tensorir.ops.registry import get_op

RNG = np.random.default_rng(0)
CASES = list(itertools.product(["nearest", "linear", "cubic"], ["zeros", "border", "reflection"], [0, 1]))


def _inputs(spatial, points, spread=2.5):
    x = RNG.standard_normal((2, 3, *spatial)).astype(np.float32)
    grid = RNG.uniform(-spread, spread, (2, *points, len(spatial))).astype(np.float32)
    return x, grid


def _ort(x, grid, attrs):
    node = helper.make_node("GridSample", ["x", "g"], ["y"], **attrs)
    ins = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape)) for n, a in (("x", x), ("g", grid))
    ]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph([node], "g", ins, [out]), opset_imports=[helper.make_opsetid("", 22)]
    )
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x, "g": grid})[0]


@pytest.mark.parametrize(("mode", "padding", "align"), CASES)
def test_compiled_matches_reference_and_reference_matches_onnxruntime(mode, padding, align):
    x, grid = _inputs((5, 7), (3, 8))
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    (want,) = get_op("grid_sample").run_reference([x, grid], attrs)
    (got,) = run_op("grid_sample", [x, grid], attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(want, _ort(x, grid, attrs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("mode", "padding"), [("linear", "reflection"), ("nearest", "border"), ("linear", "zeros")]
)
def test_volumetric(mode, padding):
    x, grid = _inputs((3, 4, 5), (2, 3, 4), spread=1.4)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": 0}
    (want,) = get_op("grid_sample").run_reference([x, grid], attrs)
    (got,) = run_op("grid_sample", [x, grid], attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_positions_and_taps_are_computed_once_per_point_not_per_channel():
    types = [TensorType((2, 16, 5, 7)), TensorType((2, 3, 8, 2))]
    text = str(
        op_kernel("grid_sample", types, {"mode": "linear", "padding_mode": "zeros", "align_corners": 0})
    )
    for stage in ("grid_pos0", "grid_pos1", "grid_idx0_0", "grid_w1_1"):
        assert f"{stage}: f32[2,3,8]" in text or f"{stage}: i64[2,3,8]" in text, stage
    # the output sums 4 taps, each weight a product of one weight per axis
    out = text[text.index("grid_sample[") :]
    assert out.count("in0[") == 4 and "grid_w0_1[" in out and "grid_w1_0[" in out
