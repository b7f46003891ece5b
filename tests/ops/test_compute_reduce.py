"""Reduction, arg-reduction, cumsum, topk, softmax and normalization computes, compiled for
the host, against the numpy references; plus the shape of their default schedules.

Tolerances: integer results exact; float32 rtol 1e-5 / atol 1e-6, and for sums (which
accumulate in a different order than numpy's pairwise sum) at least the float32 bound on
reordering n terms, n x eps x max|term| (`sum_atol`: a sum that cancels to near zero has
an absolute, not a relative, error); float64 1e-12; float16 inputs (accumulated in float32,
rounded once) 2e-3.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensorir.graph.types import TensorType
from tensorir.loop.printer import to_text
from tensorir.ops.kernel import op_kernel, scratch_arrays
from tensorir.runtime.jit import compile_host
from tensorir.schedule import ScheduleError, compute, create_schedule, lower, placeholder
from tests.ops.test_compute_elementwise import check, data

TOL = {"float32": (1e-5, 1e-6), "float64": (1e-12, 1e-12), "float16": (2e-3, 2e-3)}
REDUCTIONS = [
    "reduce_sum",
    "reduce_mean",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "reduce_l1",
    "reduce_l2",
    "reduce_sum_square",
    "reduce_log_sum",
    "reduce_log_sum_exp",
]
AXES = [(), (0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2)]


def sum_atol(terms: np.ndarray, n: int) -> float:
    """The float32 error bound of a sum of n of these terms in any order (module docstring)."""
    return max(TOL["float32"][1], n * float(np.finfo(np.float32).eps) * float(np.abs(terms).max()))


SUM_TERMS = {"reduce_sum": lambda x: x, "reduce_sum_square": np.square}


def _reduce_input(op: str, shape, dtype: str) -> np.ndarray:
    if op == "reduce_log_sum":
        return data(shape, dtype, 0.1, 2)
    if op == "reduce_prod":
        return data(shape, dtype, 0.5, 1.5) if dtype.startswith("float") else data(shape, dtype, -2, 2)
    return data(shape, dtype, -3, 3)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("op", REDUCTIONS)
def test_reductions_float32(op, axes, keepdims):
    x = _reduce_input(op, (3, 4, 17), "float32")
    rtol, atol = TOL["float32"]
    if op in SUM_TERMS:
        atol = sum_atol(SUM_TERMS[op](x), int(np.prod([x.shape[a] for a in axes or range(3)])))
    check(op, [x], {"axes": axes, "keepdims": keepdims}, rtol, atol)


# log reductions of integers are not ONNX: those pairs are left out
OTHER_DTYPE_CASES = [
    (op, dtype)
    for op in REDUCTIONS
    for dtype in ("float64", "float16", "int32", "int64")
    if dtype.startswith("float") or op not in ("reduce_log_sum", "reduce_log_sum_exp")
]


@pytest.mark.parametrize(("op", "dtype"), OTHER_DTYPE_CASES)
def test_reductions_other_dtypes(op, dtype):
    x = _reduce_input(op, (5, 3, 16), dtype)
    check(op, [x], {"axes": (0, 2), "keepdims": 0}, *TOL.get(dtype, (0, 0)))


@pytest.mark.parametrize("axes", [(1,), (0, 1), (2,), (1, 2)], ids=str)
@pytest.mark.parametrize("op", ["reduce_max", "reduce_min", "reduce_log_sum_exp"])
def test_max_min_in_lanes_along_the_last_axis(op, axes):
    """Last-axis float max/min of a multiple of 16 runs as 16 running results (a vector loop)."""
    x = data((3, 5, 64), "float32", -50, 50)
    check(op, [x], {"axes": axes, "keepdims": 0}, *TOL["float32"])
    if axes == (2,):
        text = to_text(op_kernel(op, [TensorType(x.shape)], {"axes": axes, "keepdims": 0}))
        assert "_lanes[ramp(" in text


def test_log_sum_exp_is_stable_and_handles_infinities():
    x = np.array([[1000.0, 1000.0, -1000.0], [-np.inf, -np.inf, -np.inf], [np.inf, 0, 1]], np.float32)
    check("reduce_log_sum_exp", [x], {"axes": (1,), "keepdims": 1}, *TOL["float32"])


@pytest.mark.parametrize(
    ("op", "axis", "keepdims", "last"),
    list(itertools.product(["argmax", "argmin"], [0, 1, 2], [0, 1], [0, 1])),
)
def test_arg_reductions_with_ties(op, axis, keepdims, last):
    x = data((4, 5, 18), "int32", 0, 3)  # many ties: first vs last index matters
    check(op, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last})


@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
@pytest.mark.parametrize("n", [33, 64])
def test_argmax_dtypes(dtype, n):
    for last in (0, 1):
        attrs = {"axis": 1, "keepdims": 0, "select_last_index": last}
        check("argmax", [data((6, n), dtype, 0, 9)], attrs)
        check("argmin", [data((6, n), dtype, 0, 9)], attrs)


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_cumsum(axis, exclusive, reverse, dtype):
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    x = data((3, 5, 16), dtype, -5, 5)
    rtol, atol = TOL.get(dtype, (0, 0))
    check("cumsum", [x], attrs, rtol, sum_atol(x, x.shape[axis]) if dtype == "float32" else atol)
    check("cumprod", [data((3, 5, 16), dtype, -2, 2)], attrs, *TOL.get(dtype, (0, 0)))


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize(("shape", "axis"), [((2, 100), 1), ((130, 3), 0), ((2, 1000), 1)], ids=str)
def test_cumsum_blocked_long_axes(shape, axis, exclusive, reverse):
    """Axes longer than 64 use block sums (block size not dividing the length here)."""
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    check("cumsum", [data(shape, "int32", -9, 9)], attrs)
    check("cumsum", [data(shape, "float32")], attrs, 1e-4, 1e-4)
    signs = np.where(data(shape, "int32", 0, 1) > 0, 1, -1).astype(np.int32)
    check("cumprod", [signs], attrs)  # products of +-1: exact, and every block matters
    check("cumprod", [data(shape, "float32", 0.95, 1.05)], attrs, 1e-4, 1e-6)


def test_cumsum_float16_accumulates_in_float32():
    check("cumsum", [data((40,), "float16", 0, 4)], {"axis": 0}, *TOL["float16"])


@pytest.mark.parametrize(("k", "axis", "largest"), list(itertools.product([1, 3], [0, 1, 2], [0, 1])))
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_topk_sorted_with_ties(k, axis, largest, dtype):
    x = data((4, 5, 6), dtype, 0, 4)  # ties: the lower index comes first
    check("topk", [x], {"k": k, "axis": axis, "largest": largest, "sorted": 1})


def test_topk_k_equals_axis_size_sorts_the_axis():
    check("topk", [data((3, 8), "float32")], {"k": 8, "axis": 1, "largest": 1})


# ---- softmax -----------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_axes(op, axis):
    check(op, [data((3, 4, 33), "float32", -20, 20)], {"axis": axis}, *TOL["float32"])


@pytest.mark.parametrize("dtype", ["float64", "float16"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_dtypes(op, dtype):
    check(op, [data((5, 48), dtype, -5, 5)], {"axis": 1}, *TOL[dtype])


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_is_stable_for_large_inputs(op):
    x = np.array([[1e4, 1e4 + 1, 1e4 + 2], [-1e4, 0, 1e4]], np.float32)
    check(op, [x], {"axis": 1}, *TOL["float32"])


def test_softmax_schedule_keeps_the_row_in_the_row_loop():
    text = to_text(op_kernel("softmax", [TensorType((64, 128))], {"axis": 1}))
    assert text.startswith("def softmax(") and "for i0 in range(0, 64):" in text
    assert 'softmax_exp = allocate(f32[1,128], "local")' in text  # one row, inside the loop
    assert "ramp(" in text  # exp and normalization vectorized


# ---- normalizations ---------------------------------------------------------------------
def _params(c, *, positive=False, dtype="float32"):
    return data(c, dtype, 0.5, 2) if positive else data(c, dtype, -1, 1)


@pytest.mark.parametrize("per_spatial", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_batch_norm(dtype, per_spatial):
    x = data((2, 3, 4, 16), dtype)
    p = (3, 4, 16) if per_spatial else (3,)
    ins = [x, _params(p, dtype=dtype), _params(p, dtype=dtype), _params(p, dtype=dtype)]
    check("batch_norm", [*ins, _params(p, positive=True, dtype=dtype)], {"epsilon": 1e-3}, *TOL[dtype])


def test_batch_norm_training():
    x = data((4, 3, 5, 6), "float32")
    ins = [x, _params(3), _params(3), _params(3), _params(3, positive=True)]
    check("batch_norm_training", ins, {"epsilon": 1e-3, "momentum": 0.7}, *TOL["float32"])


@pytest.mark.parametrize("shape", [(2, 3, 17), (2, 3, 4, 16)], ids=str)
def test_instance_norm(shape):
    check(
        "instance_norm", [data(shape, "float32"), _params(3), _params(3)], {"epsilon": 1e-4}, *TOL["float32"]
    )


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_layer_norm(axis, with_bias):
    x = data((3, 4, 32), "float32")
    norm = x.shape[axis % 3 :]
    ins = [x, _params(norm), *([_params(norm[-1:])] if with_bias else [])]
    check("layer_norm", ins, {"axis": axis, "epsilon": 1e-5}, *TOL["float32"])


@pytest.mark.parametrize(("dtype", "stash"), [("float16", "float32"), ("float64", "float64")])
def test_layer_norm_dtypes(dtype, stash):
    x = data((6, 40), dtype)
    ins = [x, _params((40,), dtype=dtype), _params((40,), dtype=dtype)]
    check("layer_norm", ins, {"axis": 1, "stash_type": stash}, *TOL[dtype])


def test_layer_norm_schedule_computes_statistics_per_row():
    types = [TensorType((64, 256)), TensorType((256,)), TensorType((256,))]
    text = to_text(op_kernel("layer_norm", types, {"axis": 1}))
    loop = text.index("for i0 in parallel(0, 64):")
    assert loop < text.index("ln_sum = allocate(") < text.index("ln_mean[i0] =")
    assert "layer_norm[ramp(" in text


# ---- hypothesis: random reductions ----------------------------------------------------------
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=7),
    op=st.sampled_from(["reduce_sum", "reduce_max", "reduce_mean", "reduce_l2", "reduce_log_sum_exp"]),
    keepdims=st.sampled_from([0, 1]),
    pick=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_random_reductions(shape, op, keepdims, pick):
    axes = tuple(d for d in range(len(shape)) if pick[d])
    check(op, [data(shape, "float32")], {"axes": axes, "keepdims": keepdims}, *TOL["float32"])


# ---- compute_at with several readers in one loop (what schedule_rowwise relies on) ---------------
def _siblings(n: int = 10):
    a = placeholder((n + 2,), "float32", "A")
    p = compute((n + 2,), lambda i: a[i] * 2.0, name="P")
    q = compute((n,), lambda i: p[i] + p[i + 2], name="Q")
    c = compute((n,), lambda i: q[i] + p[i + 1], name="C")
    return a, p, q, c, create_schedule([c])


def _check_six_per_block(s, a, c) -> None:
    """P holds 6 values per block of 4 outputs (C reads a window of 4, Q one of 6), and the
    kernel computes C = Q + P[i + 1] = 2 (x[i] + x[i + 2]) + 2 x[i + 1]."""
    func = lower(s, [a, c])
    assert 'P = allocate(f32[6], "local")' in to_text(func)
    x = np.arange(12, dtype=np.float32)
    out = np.empty(10, np.float32)
    compile_host(func)(x, out, *scratch_arrays(func))
    np.testing.assert_array_equal(out, 2 * (x[:10] + x[2:]) + 2 * x[1:11])


def test_compute_at_region_covers_the_sibling_readers():
    a, p, q, c, s = _siblings()
    io, _ = s[c].split(s[c].op.axis[0], factor=4)
    s[q].compute_at(s[c], io)
    s[p].compute_at(s[c], io)  # read by C (window 4) and by Q (window 6): P needs 6 per block
    _check_six_per_block(s, a, c)


def test_compute_at_refuses_a_reader_outside_the_loop():
    a, p, q, c, s = _siblings()
    io, ii = s[c].split(s[c].op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match="P is also read by Q; it needs a single consumer"):
        s[p].compute_at(s[c], io)  # Q is still at root
    s[q].compute_at(s[c], ii)
    s[p].compute_at(s[c], ii)
    s[q].compute_at(s[c], io)  # Q moves outward afterwards: P, inside it, cannot cover it
    with pytest.raises(ScheduleError, match="P is computed at a loop of C but also read by Q outside"):
        lower(s, [a, c])


def test_compute_at_covers_a_reader_moved_to_an_inner_loop():
    """Q moves to C's inner loop after P is placed at the outer one: P's region is what Q
    reads over the inner loop's range (and C's own reads), 6 per block of 4."""
    a, p, q, c, s = _siblings()
    io, ii = s[c].split(s[c].op.axis[0], factor=4)
    s[q].compute_at(s[c], io)
    s[p].compute_at(s[c], io)
    s[q].compute_at(s[c], ii)  # before: refused, "P ... also read by Q outside that loop"
    _check_six_per_block(s, a, c)


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("op", REDUCTIONS)
def test_reducing_an_empty_axis_gives_the_identity(op, keepdims):
    check(op, [np.zeros((2, 0, 4), np.float32)], {"axes": (1,), "keepdims": keepdims})
