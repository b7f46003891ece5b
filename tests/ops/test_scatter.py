"""Scatter kernels and gather_nd (ops/scatter.py, scatter_compute.py) compiled for the host
against the numpy references: every reduction with duplicate indices, negative and int32
indices, slices of scatter_nd, gather_nd with batch dims; and the kernels' loop IR."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.graph.types import TensorType
from tensorir.ops.kernel import op_kernel, run_op
from tensorir.ops.registry import get_op

RNG = np.random.default_rng(0)
REDUCTIONS = ["none", "add", "mul", "max", "min"]


def _check(op, ins, attrs):
    (got,) = run_op(op, ins, attrs)
    (want,) = get_op(op).run_reference(ins, attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("axis", [0, 2])
def test_scatter_elements_duplicates_in_order(reduction, axis):
    data = RNG.standard_normal((4, 3, 6)).astype(np.float32)
    shape = (3, 3, 5)
    dim = data.shape[axis]
    idx = RNG.integers(-dim, dim, shape)  # many duplicates, negative ones too
    upd = RNG.standard_normal(shape).astype(np.float32)
    _check("scatter_elements", [data, idx, upd], {"axis": axis, "reduction": reduction})


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_nd_slices_int32_indices(reduction):
    data = RNG.integers(-5, 5, (5, 4, 8)).astype(np.int32)
    idx = RNG.integers(-5, 5, (2, 3, 1)).astype(np.int32)  # rows of data, repeated
    upd = RNG.integers(-3, 3, (2, 3, 4, 8)).astype(np.int32)
    _check("scatter_nd", [data, idx, upd], {"reduction": reduction})


def test_scatter_nd_of_single_elements():
    data = np.zeros((3, 4), np.float32)
    idx = np.array([[0, 1], [2, -1], [0, 1]])
    upd = np.array([1.0, 2.0, 3.0], np.float32)
    _check("scatter_nd", [data, idx, upd], {"reduction": "add"})


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(batch_dims):
    data = RNG.standard_normal((3, 4, 5, 6)).astype(np.float32)
    idx = RNG.integers(-4, 4, (3, 2, 2))
    if batch_dims == 0:
        idx[..., 0] %= 3
    _check("gather_nd", [data, idx], {"batch_dims": batch_dims})


def test_scatter_kernel_is_a_copy_then_a_serial_loop_over_the_updates():
    types = [TensorType((8, 16)), TensorType((2, 16), "int64"), TensorType((2, 16))]
    text = str(op_kernel("scatter_elements", types, {"axis": 0, "reduction": "add"}, "x86_64-v4"))  # 16 lanes
    head, copy, scatter = text.split("\n", 1)[0], *text.split("\n", 1)[1].split("  for u0 in range(0, 2):")
    assert "in0: f32[8,16], in1: i64[2,16], in2: f32[2,16], out: f32[8,16]" in head
    assert "out[ramp(i0*16, 1, 16)] = in0[ramp(i0*16, 1, 16)]" in copy  # the copy, vectorized
    assert "for u1 in range(0, 16):" in scatter and "ramp(" not in scatter  # serial, in order
    assert "+ in2[u0*16 + u1]" in scatter  # out[k] = out[k] + update


def test_scatter_nd_kernel_stores_whole_rows():
    types = [TensorType((5, 8)), TensorType((3, 1), "int64"), TensorType((3, 8))]
    text = str(op_kernel("scatter_nd", types, {"reduction": "none"}))
    assert "for u0 in range(0, 3):" in text and "for u1 in range(0, 8):" in text
    assert "= in2[u0*8 + u1]" in text
