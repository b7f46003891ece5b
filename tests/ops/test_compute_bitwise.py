"""Bitwise ops (ops/bitwise.py) compiled for the host against the numpy references: every
integer dtype, broadcasting, shift counts at and past the bit width, signed right shifts."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.graph.types import TensorType
from tensorir.loop.interp import run
from tensorir.ops.kernel import op_kernel, run_op
from tensorir.ops.registry import get_op

INTS = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"]
RNG = np.random.default_rng(0)


def _ints(shape, dtype):
    info = np.iinfo(np.dtype(dtype))
    return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _check(op, ins, attrs=None):
    attrs = attrs or {}
    (got,) = run_op(op, ins, attrs)
    (want,) = get_op(op).run_reference(ins, attrs)
    assert got.dtype == want.dtype == ins[0].dtype
    np.testing.assert_array_equal(got, want)
    return got


@pytest.mark.parametrize("dtype", INTS)
def test_and_or_xor_not(dtype):
    a, b = _ints((3, 40), dtype), _ints((40,), dtype)
    for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        _check(op, [a, b])
    assert (_check("bitwise_not", [a]) == ~a).all()


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_shift_counts_past_the_width_give_zero(dtype, direction):
    bits = np.dtype(dtype).itemsize * 8
    x = _ints((bits + 4,), dtype)
    counts = np.arange(bits + 4).astype(dtype)  # 0 .. bits + 3
    got = _check("bit_shift", [x, counts], {"direction": direction})
    assert (got[bits:] == 0).all()


def test_signed_right_shift_is_arithmetic():
    x = np.array([-8, -1, 7, -128], np.int8)
    got = _check("bit_shift", [x, np.array([1], np.int8)], {"direction": "RIGHT"})
    assert got.tolist() == [-4, -1, 3, -64]


def test_shift_kernel_is_a_vector_shift_guarded_by_the_width():
    types = [TensorType((64,), "uint32"), TensorType((64,), "uint32")]
    func = op_kernel("bit_shift", types, {"direction": "LEFT"})
    text = str(func)
    assert "ramp(" in text and " << " in text and "select(" in text, text
    x, y = _ints((64,), "uint32"), np.arange(64).astype(np.uint32)
    out = np.empty(64, np.uint32)
    run(func, [x, y, out])  # the loop interpreter agrees with the reference
    np.testing.assert_array_equal(out, get_op("bit_shift").run_reference([x, y], {"direction": "LEFT"})[0])
