"""One op of every family built for linux-arm64 with its default schedule and run under
qemu-aarch64, against the numpy reference.

Each kernel comes from `op_kernel(op, in_types, attrs, "linux-arm64")` and runs once
through `run_arm64` on inputs, fresh outputs and the kernel's scratch workspace. Needs the
cross toolchain (see tensorir/codegen/link.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tensorir.codegen.link import run_arm64
from tensorir.graph.types import TensorType, np_dtype
from tensorir.ops.kernel import op_kernel, scratch_arrays
from tensorir.ops.registry import get_op

pytestmark = pytest.mark.arm64
RNG = np.random.default_rng(3)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CONV = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
POOL = {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (1, 1)}
RESIZE = {
    "sizes": (1, 2, 9, 12),
    "scales": (1.0, 1.0, 1.8, 2.0),
    "mode": "linear",
    "coordinate_transformation_mode": "half_pixel",
}

# name: (op, inputs, attrs, tolerance; 0 means exact)
CASES: dict[str, tuple[str, list[np.ndarray], dict[str, Any], float]] = {
    "add_broadcast": ("add", [f32(2, 3, 16), f32(3, 1)], {}, 0),
    "sigmoid": ("sigmoid", [f32(4, 33)], {}, 1e-6),
    "reduce_sum": ("reduce_sum", [f32(3, 5, 7)], {"axes": (1,), "keepdims": 1}, 1e-5),
    "conv2d": ("conv", [f32(1, 3, 8, 8), f32(4, 3, 3, 3)], CONV, 1e-4),
    "matmul": ("matmul", [f32(5, 7), f32(7, 6)], {}, 1e-5),
    "max_pool": ("max_pool", [f32(1, 2, 7, 7)], POOL, 0),
    "softmax": ("softmax", [f32(3, 17)], {"axis": 1}, 1e-6),
    "transpose": ("transpose", [f32(2, 3, 16)], {"perm": (1, 0, 2)}, 0),
    "concat": ("concat", [f32(2, 3, 8), f32(2, 1, 8)], {"axis": 1}, 0),
    "slice": ("slice", [f32(4, 9)], {"starts": (1, 8), "ends": (4, -1), "axes": (0, 1), "steps": (2, -3)}, 0),
    "resize_linear": ("resize", [f32(1, 2, 5, 6)], RESIZE, 1e-6),
    "pad_reflect": ("pad", [f32(2, 5, 6)], {"pads": (0, 2, 1, 0, 1, 3), "mode": "reflect"}, 0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_under_qemu(name):
    op, inputs, attrs, tol = CASES[name]
    in_types = [TensorType.of(a) for a in inputs]
    func = op_kernel(op, in_types, attrs, "linux-arm64")
    outs = [np.empty(t.shape, np_dtype(t.dtype)) for t in get_op(op).infer(in_types, attrs)]
    after = run_arm64(func, [*inputs, *outs, *scratch_arrays(func)])
    got = after[len(inputs) : len(inputs) + len(outs)]
    for g, want in zip(got, get_op(op).run_reference(inputs, attrs), strict=True):
        if tol:
            np.testing.assert_allclose(g, want, rtol=tol, atol=tol, err_msg=name)
        else:
            np.testing.assert_array_equal(g, want, err_msg=name)


# The packed convs and products of the zoo with their NEON defaults (fmla by lane from one
# vector load: input channels / k unrolled by the lanes, benchmarks/arm64_mca.py), built as
# the compiler builds them (`build_kernel`: Winograd's weight transformed), under qemu.
PACKED = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
PACKED_CASES: dict[str, tuple[str, list[tuple[int, ...]], dict[str, Any]]] = {
    "conv1x1_nchw4c": ("conv2d_nchwc", [(1, 3, 5, 7, 4), (4, 3, 1, 1, 4, 4)], {**PACKED, "pads": (0,) * 4}),
    "conv3x3_direct": ("conv2d_nchwc", [(1, 2, 6, 5, 4), (2, 2, 3, 3, 4, 4)], {**PACKED, "strides": (2, 1)}),
    "conv3x3_winograd": ("conv2d_nchwc", [(1, 3, 8, 8, 4), (2, 3, 3, 3, 4, 4)], PACKED),
    "stem7x7_ib1": (
        "conv2d_nchwc",
        [(1, 3, 19, 21, 1), (4, 3, 7, 7, 1, 4)],
        {**PACKED, "strides": (2, 2), "pads": (3, 3, 3, 3)},
    ),
    "depthwise": ("conv2d_nchwc", [(1, 2, 9, 9, 4), (2, 1, 3, 3, 1, 4)], {**PACKED, "group": 8}),
    "dense_k16": ("dense", [(6, 16), (12, 16)], {}),
    "matmul_k8": ("matmul", [(2, 5, 8), (2, 8, 12)], {}),
}


@pytest.mark.parametrize("name", sorted(PACKED_CASES))
def test_packed_kernel_under_qemu(name):
    from tensorir.ops.kernel import build_kernel

    op, shapes, attrs = PACKED_CASES[name]
    inputs = [f32(*s) for s in shapes]
    in_types = [TensorType.of(a) for a in inputs]
    config = {"algorithm": "winograd4"} if name == "conv3x3_winograd" else None  # too small by default
    func, spec = build_kernel(op, in_types, dict(attrs), "linux-arm64", config, name, frozenset({1}))
    args = [spec.transforms[k](a) if k in spec.transforms else a for k, a in enumerate(inputs)]
    outs = [np.empty(t.shape, np_dtype(t.dtype)) for t in get_op(op).infer(in_types, attrs)]
    after = run_arm64(func, [*args, *outs, *scratch_arrays(func)])
    got = after[len(args) : len(args) + len(outs)]
    for g, want in zip(got, get_op(op).run_reference(inputs, attrs), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4, err_msg=name)
