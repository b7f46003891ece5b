"""The 1x1 conv as a GEMM on the GPU (ops/conv1x1_gpu.py, `algorithm` "gemm") on PoCL against
numpy: MobileNetV2-like layers with the fused epilogue (bias, clip, residual add), pixel
counts and channel counts that are not multiples of the tiles, batch 2, random knob configs,
and that the choice is offered only for 1x1, stride-1, unpadded, group-1 convs.
Tolerance: max |err| / max |y| < 1e-4."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from tensorir.graph.types import TensorType
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import build_kernel, kernel_space
from tensorir.ops.registry import get_op
from tensorir.target import get_target

pytest.importorskip("pyopencl")
GPU = dataclasses.replace(get_target("host"), kind="opencl")
TOL = 1e-4
KNOBS = {"threads_p", "threads_m", "c1_pixels", "c1_oc_blocks", "tile_k"}


def _case(n: int, c: int, h: int, w: int, m: int, seed: int = 0, bias: bool = True) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c // 4, h, w, 4)).astype(np.float32)
    wt = (rng.standard_normal((m // 4, c // 4, 1, 1, 4, 4)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal((m // 4, 4)).astype(np.float32)
    return [x, wt, b] if bias else [x, wt]


def _run(op: str, ins: list[np.ndarray], attrs: dict, config: dict) -> np.ndarray:
    from tensorir.codegen.opencl import render_opencl
    from tensorir.devices import get_profile
    from tensorir.runtime.opencl_device import run_gpu_kernel

    types = [TensorType(a.shape) for a in ins]
    func, spec = build_kernel(op, types, attrs, GPU, config=config)
    assert spec.algorithm == config["algorithm"] and spec.op == op
    out = np.zeros(get_op(op).infer(types, attrs)[0].shape, np.float32)
    got, _ = run_gpu_kernel(render_opencl(func, get_profile("pocl")), [*ins, out], "pocl")
    return got[-1]


def _check(got: np.ndarray, ref: np.ndarray) -> None:
    err = float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))
    assert err < TOL, f"relative error {err}"


def _conv(ins: list[np.ndarray]) -> np.ndarray:
    return get_op("conv2d_nchwc").run_reference(ins, {})[0]


def _fused(ins: list[np.ndarray], tail: tuple[Step, ...]) -> dict:
    conv = Step("conv2d_nchwc", (), tuple(range(len(ins))))
    return {"body": FusedBody((conv, *tail), len(ins), 0)}


GEMM = {"algorithm": "gemm"}


@pytest.mark.parametrize(
    "shape",
    [(1, 24, 14, 14, 144), (1, 16, 7, 7, 40), (2, 12, 5, 9, 20), (1, 8, 3, 3, 4), (2, 64, 10, 10, 24)],
    ids=["mnv2_expand", "49px_40ch", "batch2_odd", "tiny", "batch2_k16"],
)
def test_gemm_with_bias(shape: tuple) -> None:
    ins = _case(*shape)
    _check(_run("conv2d_nchwc", ins, {}, GEMM), _conv(ins))


def test_gemm_no_bias() -> None:
    ins = _case(1, 20, 6, 11, 28, seed=2, bias=False)
    _check(_run("conv2d_nchwc", ins, {}, GEMM), _conv(ins))


def test_gemm_residual_add() -> None:
    """MobileNetV2's projection with the residual: 240 -> 40 channels at 7x7, + x."""
    ins = _case(1, 240, 7, 7, 40, seed=3)
    res = np.random.default_rng(4).standard_normal((1, 10, 7, 7, 4)).astype(np.float32)
    attrs = _fused(ins, (Step("add", (), (4, 3)),))  # inputs 0-3 (x, w, b, res), conv = 4
    _check(_run("fused", [*ins, res], attrs, GEMM), _conv(ins) + res)


def test_gemm_clip() -> None:
    """MobileNetV2's first expansion layer at 112x112 (16 -> 24 channels), ReLU6."""
    ins = _case(1, 16, 112, 112, 24, seed=5)
    attrs = _fused(ins, (Step("clip", (("max", 6.0), ("min", 0.0)), (3,)),))
    got = _run("fused", ins, attrs, GEMM)
    assert (got == 0).any() and (got == 6).any()
    _check(got, np.clip(_conv(ins), 0, 6))


@pytest.mark.parametrize("shape", [(1, 24, 13, 13, 36), (2, 48, 7, 5, 60)], ids=["13x13", "batch2"])
def test_gemm_random_configs(shape: tuple) -> None:
    ins = _case(*shape, seed=7)
    ref = _conv(ins)
    space = kernel_space("conv2d_nchwc", [TensorType(a.shape) for a in ins], {}, GPU)
    assert space.algorithms == ["direct", "gemm", "splitk"] and space.default_algorithm == "direct"
    names = {k.name for k in space.knobs("gemm")}
    assert names == KNOBS, names
    rng = random.Random(str(shape))
    for _ in range(4):
        cfg = {**space.sample(rng), "algorithm": "gemm"}
        cfg = {k: v for k, v in cfg.items() if k in names or k == "algorithm"}
        _check(_run("conv2d_nchwc", ins, {}, cfg), ref)


def test_choice_only_for_pointwise(monkeypatch) -> None:
    from tensorir.devices import get_profile
    from tensorir.ops.winograd_gpu import gpu_algorithm_choices

    pocl = get_profile("pocl")
    x, w1 = (1, 6, 14, 14, 4), (36, 6, 1, 1, 4, 4)
    pair = (["direct", "gemm", "splitk"], "direct")
    assert gpu_algorithm_choices(x, w1, {}, True, pocl) == pair
    assert gpu_algorithm_choices(x, w1, {}, False, pocl) == pair  # no weight transform: any weight
    direct = (["direct", "splitk"], "direct")
    assert gpu_algorithm_choices(x, w1, {"strides": (2, 2)}, True, pocl) == direct
    assert gpu_algorithm_choices(x, w1, {"pads": (1, 1, 1, 1)}, True, pocl) == direct
    dw = gpu_algorithm_choices(x, (6, 1, 1, 1, 1, 4), {"group": 24}, True, pocl)
    assert dw == (["direct"], "direct")  # depthwise
    w3 = (36, 6, 3, 3, 4, 4)
    assert "gemm" not in gpu_algorithm_choices(x, w3, {"pads": (1, 1, 1, 1)}, True, pocl)[0]
    monkeypatch.setenv("TIR_GPU_CONV_ALGORITHM", "gemm")
    assert gpu_algorithm_choices(x, w1, {}, True, pocl) == (["direct", "gemm", "splitk"], "gemm")
    assert gpu_algorithm_choices(x, w1, {"strides": (2, 2)}, True, pocl) == direct
    # the CPU keeps its own choices
    from tensorir.ops.conv_algorithms import algorithm_choices

    assert "gemm" not in algorithm_choices(x, w1, {})[0]


def test_default_build_is_direct() -> None:
    ins = _case(1, 24, 14, 14, 144)
    _, spec = build_kernel("conv2d_nchwc", [TensorType(a.shape) for a in ins], {}, GPU)
    assert spec.algorithm == "direct"
