"""GPU (OpenCL) conv algorithms on PoCL against numpy: the Winograd template (winograd_gpu.py)
through `build_kernel` (the `algorithm` knob, U = G w G^T applied to the weight), with and
without the fused epilogue, odd spatial sizes, C and M not multiples of the blocks, random
knob configs. Tolerance (max |err| / max |y|): 1e-4 for F(2,3), 1e-3 for F(4,3)."""

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
TOL = {"winograd2": 1e-4, "winograd4": 1e-3}
PADS = (1, 1, 1, 1)


def _case(n: int, c: int, h: int, w: int, m: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c // 4, h, w, 4)).astype(np.float32)
    wt = (rng.standard_normal((m // 4, c // 4, 3, 3, 4, 4)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal((m // 4, 4)).astype(np.float32)
    return [x, wt, b]


def _run(op: str, ins: list[np.ndarray], attrs: dict, config: dict) -> np.ndarray:
    from tensorir.codegen.opencl import render_opencl
    from tensorir.devices import get_profile
    from tensorir.runtime.opencl_device import run_gpu_kernel

    types = [TensorType(a.shape) for a in ins]
    func, spec = build_kernel(op, types, attrs, GPU, config=config)
    assert spec.algorithm == config["algorithm"]
    args = [spec.transforms[k](a) if k in spec.transforms else a for k, a in enumerate(ins)]
    out = np.zeros(get_op(op).infer(types, attrs)[0].shape, np.float32)
    got, _ = run_gpu_kernel(render_opencl(func, get_profile("pocl")), [*args, out], "pocl")
    return got[-1]


def _check(got: np.ndarray, ref: np.ndarray, algo: str) -> None:
    err = float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))
    assert err < TOL[algo], f"{algo}: relative error {err}"


def _conv(ins: list[np.ndarray], pads: tuple = PADS) -> np.ndarray:
    return get_op("conv2d_nchwc").run_reference(ins, {"pads": pads})[0]


SHAPES = [(1, 8, 7, 7, 8), (1, 16, 14, 14, 16), (1, 12, 13, 9, 20), (2, 4, 6, 5, 12)]


@pytest.mark.parametrize("algo", ["winograd2", "winograd4"])
@pytest.mark.parametrize("shape", SHAPES, ids=["7x7", "14x14", "13x9", "batch2"])
def test_winograd_with_bias(algo: str, shape: tuple) -> None:
    ins = _case(*shape)
    got = _run("conv2d_nchwc", ins, {"pads": PADS}, {"algorithm": algo})
    _check(got, _conv(ins), algo)


@pytest.mark.parametrize("algo", ["winograd2", "winograd4"])
def test_winograd_no_bias_asymmetric_pads(algo: str) -> None:
    ins = _case(1, 8, 9, 10, 8, seed=3)[:2]
    pads = (1, 0, 2, 1)
    got = _run("conv2d_nchwc", ins, {"pads": pads}, {"algorithm": algo})
    _check(got, _conv(ins, pads), algo)


@pytest.mark.parametrize("algo", ["winograd2", "winograd4"])
def test_winograd_fused_residual_relu(algo: str) -> None:
    ins = _case(1, 12, 13, 9, 20, seed=5)
    res = np.random.default_rng(6).standard_normal((1, 5, 13, 9, 4)).astype(np.float32)
    conv = Step("conv2d_nchwc", (("pads", PADS),), (0, 1, 2))
    body = FusedBody((conv, Step("add", (), (4, 3)), Step("relu", (), (5,))), 4, 0)
    got = _run("fused", [*ins, res], {"body": body}, {"algorithm": algo})
    ref = np.maximum(_conv(ins) + res, 0)
    assert (got == 0).any()
    _check(got, ref, algo)


@pytest.mark.parametrize("algo", ["winograd2", "winograd4"])
def test_winograd_random_configs(algo: str) -> None:
    ins = _case(1, 12, 13, 9, 20, seed=7)
    ref = _conv(ins)
    space = kernel_space("conv2d_nchwc", [TensorType(a.shape) for a in ins], {"pads": PADS}, GPU)
    assert {"direct", "winograd2", "winograd4"} <= set(space.algorithms)
    names = {k.name for k in space.knobs(algo)}
    assert {"wino_row_block", "wino_oc_blocks", "wino_oc_regs", "wino_tile_c"} <= names
    rng = random.Random(algo)
    for _ in range(3):
        cfg = {**space.sample(rng), "algorithm": algo}
        cfg = {k: v for k, v in cfg.items() if k in names or k == "algorithm"}
        _check(_run("conv2d_nchwc", ins, {"pads": PADS}, cfg), ref, algo)


def test_default_rule(monkeypatch) -> None:
    """Winograd is a choice where it applies, never the default (it lost to direct on an
    H100: winograd_gpu.gpu_algorithm_choices); TIR_GPU_CONV_ALGORITHM forces it. splitk is a
    choice of every dense conv whose input channel blocks split, the default only on a GPU
    whose direct work-items would not fill it (conv_splitk_gpu.default_split)."""
    from tensorir.devices import get_profile
    from tensorir.ops.winograd_gpu import gpu_algorithm_choices

    pocl, h100 = get_profile("pocl"), get_profile("nvidia")
    x, w = (1, 64, 14, 14, 4), (64, 64, 3, 3, 4, 4)  # 256 -> 256 channels
    both = ["direct", "winograd2", "winograd4", "splitk"]
    assert gpu_algorithm_choices(x, w, {"pads": PADS}, True, pocl) == (both, "direct")
    assert gpu_algorithm_choices(x, w, {"pads": PADS}, False, pocl) == (["direct", "splitk"], "direct")
    strided = {"pads": PADS, "strides": (2, 2)}
    assert gpu_algorithm_choices(x, w, strided, True, pocl) == (["direct", "splitk"], "direct")
    assert gpu_algorithm_choices(x, w, {"pads": PADS}, True, h100) == (both, "splitk")  # 12544 work-items
    big = (1, 16, 56, 56, 4), (16, 16, 3, 3, 4, 4)  # 50176 work-items fill 132 compute units
    assert gpu_algorithm_choices(*big, {"pads": PADS}, True, h100) == (both, "direct")
    assert gpu_algorithm_choices(x, w, {"pads": PADS}, True, get_profile("adreno640")) == (both, "direct")
    monkeypatch.setenv("TIR_GPU_CONV_ALGORITHM", "winograd4")
    assert gpu_algorithm_choices(x, w, {"pads": PADS}, True, pocl) == (both, "winograd4")
    assert gpu_algorithm_choices(x, w, strided, True, pocl) == (["direct", "splitk"], "direct")


@pytest.mark.parametrize("algo", ["winograd2", "winograd4"])
def test_compiler_path_resnet_layer(algo: str) -> None:
    # the compiler lowers with passes=False first: the barrier check must see through the
    # (always true) edge guards of the register stages; ResNet-18's 3x3 256 -> 256 at 14x14
    types = [TensorType((1, 64, 14, 14, 4)), TensorType((64, 64, 3, 3, 4, 4)), TensorType((64, 4))]
    cfg = {"algorithm": algo}
    _, spec = build_kernel("conv2d_nchwc", types, {"pads": PADS}, GPU, config=cfg, passes=False)
    assert spec.op == "conv2d_winograd_nchwc"
