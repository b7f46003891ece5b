"""A whole packaged model with conv weights read as images, through the C runtime on PoCL
(which has images on the CPU), against onnxruntime: the `storage` knob forced to "image" by
tuning records, embedded and external weights. Fails, never skips, without OpenCL."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorir as tir
from tensorir.codegen.opencl_package import OpenCLPlan, plan_c
from tensorir.errors import TirError
from tensorir.plan import Arg, GpuKernel, ImageParam, KernelCall

RTOL = ATOL = 1e-4


def _conv_net() -> onnx.ModelProto:
    """conv 3x3 8->16 + relu, depthwise 3x3 stride 2 + relu, conv 1x1 16->8 (+ bias)."""
    rng = np.random.default_rng(0)
    init = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), n)
        for n, s in (
            ("w1", (16, 8, 3, 3)),
            ("b1", (16,)),
            ("w2", (16, 1, 3, 3)),
            ("w3", (8, 16, 1, 1)),
            ("b3", (8,)),
        )
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], group=16),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
        init,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class ImageRecords:
    """Tuning records that force every conv's `storage` knob to "image" (other knobs default)."""

    def best(self, key: str) -> dict | None:
        return {"storage": "image"} if key.startswith("conv2d_nchwc") else None


@pytest.mark.parametrize("weights", ["embedded", "external"])
def test_conv_net_with_image_weights_matches_onnxruntime(weights: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TIR_DUMP_DIR", str(tmp_path / "dump"))
    model = _conv_net()
    mod = tir.compile(model, target="opencl:pocl", records=ImageRecords(), weights=weights)
    convs = [k for k in mod.manifest["kernels"] if k["workload"].startswith("conv2d_nchwc")]  # + relu
    assert len(convs) == 3 and all(
        k["config"] == {"storage": "image"} and k["device"] == "gpu" for k in convs
    )
    sources = [p.read_text() for p in (tmp_path / "dump" / "opencl").glob("*.cl")]
    assert sum("__read_only image2d_t" in s for s in sources) == 3
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"x": x})
    for _ in range(2):  # the images are made once, at load
        (got,) = mod.run({"x": x})
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


def test_an_image_param_must_be_a_weight() -> None:
    k = GpuKernel("k", "", (4,), (4,), (("w", "float32"), ("y", "float32")), (ImageParam(0, 1, 1),))
    plan = OpenCLPlan(
        [k], [KernelCall("k", (Arg("workspace", 0), Arg("output", 0)), "gpu")], output_bytes=[16]
    )
    with pytest.raises(TirError, match="image parameter 0 is a workspace, not a weight"):
        plan_c(plan, embedded=True, thread_stubs=True)
    plan.calls = [KernelCall("k", (Arg("weight", 64), Arg("output", 0)), "gpu")]
    text = plan_c(plan, embedded=True, thread_stubs=True)
    assert "static const tir_image images[] = {\n    {64ULL, 1, 1, 0},\n};" in text
    assert "{TIR_IMAGE, 0ULL, 0ULL}, {TIR_OUTPUT, 0ULL, 0ULL}" in text
