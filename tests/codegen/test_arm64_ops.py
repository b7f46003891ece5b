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
