"""The split-K conv GPU template (ops/conv_splitk_gpu.py) on PoCL against the numpy reference:
splits, bias or none, strides, batch 2, a fused residual add + relu, random knob configs; the
default split per device profile; a whole ONNX model forced to split-K, compiled into a
library, against onnxruntime with its per-step profile. Tolerance: max |err| / max |y| < 1e-5
(float32 sums of at most 576 terms, regrouped)."""

from __future__ import annotations

import random

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorir as tir
from tensorir.codegen.opencl import render_opencl
from tensorir.devices import get_profile
from tensorir.graph.types import TensorType
from tensorir.ops.conv_splitk_gpu import default_split
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import build_kernel, kernel_space, scratch_arrays
from tensorir.ops.registry import get_op
from tensorir.runtime.opencl_device import run_gpu_kernel
from tensorir.runtime.opencl_module import OpenCLModule
from tensorir.target import get_target

POCL = get_target("opencl:pocl")
TOL = 1e-5
PADS = (1, 1, 1, 1)


def _case(n: int, c: int, h: int, w: int, m: int, k: int = 3, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c // 4, h, w, 4)).astype(np.float32)
    wt = (rng.standard_normal((m // 4, c // 4, k, k, 4, 4)) / np.sqrt(k * k * c)).astype(np.float32)
    return [x, wt, rng.standard_normal((m // 4, 4)).astype(np.float32)]


def _run(op: str, ins: list[np.ndarray], attrs: dict, config: dict) -> np.ndarray:
    types = [TensorType(a.shape) for a in ins]
    func, spec = build_kernel(op, types, attrs, POCL, config=config)
    assert spec.algorithm == "splitk" and func.attrs["num_scratch"] == 1
    kernel = render_opencl(func, get_profile("pocl"))
    assert len(kernel.launches) == 2
    out = np.zeros(get_op(op).infer(types, attrs)[0].shape, np.float32)
    got, _ = run_gpu_kernel(kernel, [*ins, out, *scratch_arrays(func)], "pocl")
    return got[len(ins)]


def _check(got: np.ndarray, ref: np.ndarray) -> None:
    err = float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))
    assert err < TOL, f"relative error {err}"


def _conv(ins: list[np.ndarray], attrs: dict) -> np.ndarray:
    return get_op("conv2d_nchwc").run_reference(ins, attrs)[0]


CASES = [
    ((1, 32, 7, 7, 32), {"pads": PADS}, 8),
    ((1, 16, 14, 14, 8), {"pads": PADS}, 2),
    ((2, 16, 9, 6, 12), {"pads": PADS, "strides": (2, 2)}, 4),
    ((1, 64, 5, 5, 16), {}, 16),
]


IDS = ["7x7-s8", "14x14-s2", "batch2-strided-s4", "valid-s16"]


@pytest.mark.parametrize("shape, attrs, split", CASES, ids=IDS)
def test_splitk_with_bias(shape: tuple, attrs: dict, split: int) -> None:
    ins = _case(*shape)
    _check(_run("conv2d_nchwc", ins, attrs, {"algorithm": "splitk", "split_k": split}), _conv(ins, attrs))


def test_splitk_no_bias_1x1() -> None:
    ins = _case(1, 32, 6, 6, 16, k=1, seed=2)[:2]
    _check(_run("conv2d_nchwc", ins, {}, {"algorithm": "splitk", "split_k": 4}), _conv(ins, {}))


def test_splitk_fused_residual_relu() -> None:
    ins = _case(1, 16, 13, 9, 20, seed=5)
    res = np.random.default_rng(6).standard_normal((1, 5, 13, 9, 4)).astype(np.float32)
    conv = Step("conv2d_nchwc", (("pads", PADS),), (0, 1, 2))
    body = FusedBody((conv, Step("add", (), (4, 3)), Step("relu", (), (5,))), 4, 0)
    got = _run("fused", [*ins, res], {"body": body}, {"algorithm": "splitk", "split_k": 2})
    ref = np.maximum(_conv(ins, {"pads": PADS}) + res, 0)
    assert (got == 0).any()
    _check(got, ref)


def test_splitk_random_configs() -> None:
    ins = _case(1, 32, 7, 7, 16, seed=7)
    ref = _conv(ins, {"pads": PADS})
    space = kernel_space("conv2d_nchwc", [TensorType(a.shape) for a in ins], {"pads": PADS}, POCL)
    knobs = {k.name: k for k in space.knobs("splitk")}
    assert knobs["split_k"].choices == (2, 4, 8) and {"ow_tile", "sum_group", "work_group"} <= set(knobs)
    rng = random.Random(0)
    for _ in range(4):
        cfg = {name: rng.choice(k.choices) for name, k in knobs.items()} | {"algorithm": "splitk"}
        _check(_run("conv2d_nchwc", ins, {"pads": PADS}, cfg), ref)


def test_default_split_fills_the_device() -> None:
    h100 = get_profile("nvidia")  # 132 compute units: 33792 work-items wanted
    assert default_split(h100, 7 * 7 * 128, 128) == 8  # ResNet-18 layer4: 6272 -> 50176
    assert default_split(h100, 14 * 14 * 64, 64) == 4
    assert default_split(h100, 28 * 28 * 32, 32) == 2
    assert default_split(h100, 56 * 56 * 16, 16) == 1  # already full
    assert default_split(h100, 100, 3) == 1  # no split divides 3 blocks
    assert default_split(get_profile("pocl"), 100, 128) == 1  # a CPU device
    assert default_split(get_profile("adreno640"), 7 * 7 * 128, 128) == 1  # 2 compute units


def _conv_relu_model() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array((rng.standard_normal((32, 64, 3, 3)) / 24).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 7, 7])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_model_forced_to_splitk_matches_onnxruntime(monkeypatch) -> None:
    monkeypatch.setenv("TIR_GPU_CONV_ALGORITHM", "splitk")
    model = _conv_relu_model()
    mod = tir.compile(model, target="opencl:pocl")
    assert isinstance(mod, OpenCLModule)
    library = (mod.dir / mod.manifest["library"]).read_bytes()  # the program source is embedded
    assert b"__kernel" in library and b"_then1(" in library  # the conv's second launch
    x = {"x": np.random.default_rng(2).standard_normal((1, 64, 7, 7)).astype(np.float32)}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, x)
    (got,) = mod.run(x)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    rows = mod.profile(x, repeat=2)  # one row per call, its launches summed
    assert [r["symbol"] for r in rows] == [k["symbol"] for k in mod.manifest["kernels"]]
    assert all(r["seconds"] > 0 for r in rows if r["device"] == "gpu")
