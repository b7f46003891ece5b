"""GPU templates on PoCL against the numpy references: default knobs and random configs."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from tensorir.graph.types import TensorType
from tensorir.ops.kernel import build_kernel, kernel_space, scratch_arrays
from tensorir.ops.registry import get_op
from tensorir.target import get_target

pytest.importorskip("pyopencl")
GPU = dataclasses.replace(get_target("host"), kind="opencl")

CASES = [
    ("relu", [(1, 8, 7, 7, 4)], {}),
    ("add", [(2, 3, 5, 4), (3, 1, 4)], {}),
    ("transpose", [(3, 5, 7)], {"perm": (2, 0, 1)}),
    ("concat", [(2, 3, 4), (2, 5, 4)], {"axis": 1}),
    ("split", [(1, 10, 6, 4)], {"axis": 1, "sizes": (3, 7)}),  # two nests of unequal launch
    ("softmax", [(6, 10)], {"axis": -1}),
    ("reduce_mean", [(1, 16, 7, 7)], {"axes": (2, 3), "keepdims": 1}),
    ("layer_norm", [(4, 32), (32,), (32,)], {"axis": -1}),
    (
        "max_pool",
        [(1, 2, 8, 8, 4)],
        {"kernel_shape": (3, 3, 1), "strides": (2, 2, 1), "pads": (1, 1, 0, 1, 1, 0), "indices": 0},
    ),
    ("avg_pool", [(1, 3, 9, 9)], {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}),
    ("dense", [(64, 48), (40, 48)], {}),
    ("dense", [(1, 64), (10, 64)], {}),
    ("matmul", [(2, 33, 20), (2, 20, 17)], {}),
    ("gemm", [(16, 8), (8, 12), (12,)], {}),
    ("conv2d_nchwc", [(1, 2, 8, 8, 4), (3, 2, 3, 3, 4, 4), (3, 4)], {"pads": (1, 1, 1, 1)}),
    ("conv2d_nchwc", [(1, 1, 9, 7, 4), (2, 1, 1, 1, 4, 4)], {"strides": (2, 2)}),
    (
        "conv2d_nchwc",
        [(1, 2, 8, 8, 4), (2, 1, 3, 3, 1, 4)],
        {"pads": (1, 1, 1, 1), "group": 8, "strides": (2, 2)},
    ),
]


def _run(op: str, shapes: list, attrs: dict, config: dict | None) -> float:
    from tensorir.codegen.opencl import render_opencl
    from tensorir.devices import get_profile
    from tensorir.runtime.opencl_device import run_gpu_kernel

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    types = [TensorType(s) for s in shapes]
    # build_kernel: a sampled conv algorithm rewrites the op (winograd: the weight transformed)
    func, spec = build_kernel(op, types, attrs, GPU, config=config)
    args = [spec.transforms[k](a) if k in spec.transforms else a for k, a in enumerate(xs)]
    outs = [np.zeros(t.shape, np.float32) for t in get_op(op).infer(types, attrs)]
    kernel = render_opencl(func, get_profile("pocl"))
    got, _ = run_gpu_kernel(kernel, args + outs + scratch_arrays(func), "pocl")
    ref = get_op(op).run_reference(xs, attrs)
    ys = got[len(xs) : len(xs) + len(outs)]
    return max(float(np.max(np.abs(g - r))) for g, r in zip(ys, ref, strict=True))


@pytest.mark.parametrize("op, shapes, attrs", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_default_config_matches_reference(op: str, shapes: list, attrs: dict) -> None:
    assert _run(op, shapes, attrs, None) < 1e-4


@pytest.mark.parametrize(
    "op, shapes, attrs", [CASES[10], *CASES[-3:]], ids=["dense", "conv", "conv1x1", "dw"]
)
def test_random_configs_match_reference(op: str, shapes: list, attrs: dict) -> None:
    space = kernel_space(op, [TensorType(s) for s in shapes], attrs, GPU)
    rng = random.Random(1)
    for _ in range(3):
        assert _run(op, shapes, attrs, space.sample(rng)) < 1e-4
