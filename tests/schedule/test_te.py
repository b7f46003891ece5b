"""Tensor expressions: construction, dtypes, reducers, and their lowering with the default
schedule (numerics through the interpreter)."""

import numpy as np
import pytest

from tensorir.loop.printer import expr_text
from tensorir.schedule import (
    TensorExprError,
    call,
    cast,
    compute,
    create_schedule,
    if_then_else,
    max_,
    min_,
    placeholder,
    prod_,
    reduce_axis,
    sum_,
)
from tests.schedule.workloads import body, check, matmul


def test_tensor_shape_dtype_and_access():
    A, B, C = matmul(4, 3, 2)
    assert (C.shape, C.dtype, C.ndim) == ((4, 2), "float32", 2)
    assert [a.name for a in C.op.axis] == ["i", "j"] and [a.name for a in C.op.reduce_axis] == ["k"]
    assert expr_text(C.op.body) == "sum(A[i, k]*B[k, j], axis=[k])"
    assert C.op.input_tensors() == [A, B]


def test_matmul_default_lowering():
    A, B, C = matmul(4, 3, 2)
    text = check(create_schedule([C]), [A, B], [C], lambda a, b: a @ b)
    assert body(text) == (
        "for i in range(0, 4):\n"
        "  for j in range(0, 2):\n"
        "    C[i*2 + j] = 0.0\n"
        "    for k in range(0, 3):\n"
        "      C[i*2 + j] = C[i*2 + j] + A[i*3 + k]*B[k*2 + j]"
    )


def test_elementwise_on_a_compute_uses_a_temporary():
    A, B, C = matmul(4, 3, 2)
    D = compute(C.shape, lambda i, j: max_(C[i, j], 0.0), name="D")
    text = check(create_schedule([D]), [A, B], [D], lambda a, b: np.maximum(a @ b, 0))
    # the intermediate C is workspace the caller passes: a scratch parameter after the outputs
    assert text.splitlines()[0].endswith("D: f32[4,2], C: f32[4,2]):")
    assert "D[i*2 + j] = max(C[i*2 + j], 0.0)" in text


@pytest.mark.parametrize(
    ("reducer", "ref"),
    [(sum_, np.sum), (prod_, np.prod), (max_, np.max), (min_, np.min)],
)
def test_reducers_over_two_axes(reducer, ref):
    X = placeholder((3, 4, 5), "float32", "X")
    r1, r2 = reduce_axis(4, "r1"), reduce_axis(5, "r2")
    Y = compute((3,), lambda i: reducer(X[i, r1, r2], axis=[r1, r2]), name="Y")
    check(create_schedule([Y]), [X], [Y], lambda x: ref(x, axis=(1, 2)), atol=1e-3)


def test_identity_values():
    X = placeholder((4,), "int32", "X")
    r = reduce_axis(4, "r")
    assert max_(X[r], axis=r).identity.value == np.iinfo(np.int32).min
    assert expr_text(max_(placeholder((4,), "float32", "F")[r], axis=r).identity) == "-inf"
    assert min_(X[r], axis=r).identity.value == np.iinfo(np.int32).max


def test_select_cast_call_and_broadcast_indexing():
    X = placeholder((2, 3, 4), "float32", "X")
    b = placeholder((3, 1), "float32", "b")
    Y = compute(
        X.shape,
        lambda n, c, w: if_then_else(
            X[n, c, w] > 0.0, call("exp", X[n, c, w]), b.bcast[n, c, w] + cast(w, "float32")
        ),
        name="Y",
    )
    ref = lambda x, bb: np.where(x > 0, np.exp(x), bb.reshape(1, 3, 1) + np.arange(4, dtype=np.float32))  # noqa: E731
    check(create_schedule([Y]), [X, b], [Y], ref)


def test_elementwise_min_max_with_number_on_the_left():
    X = placeholder((4,), "float32", "X")
    Y = compute((4,), lambda i: min_(1.0, max_(0.0, X[i])), name="Y")
    check(create_schedule([Y]), [X], [Y], lambda x: np.clip(x, 0, 1))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda A: A[0], "has 2 dimensions, indexed with 1"),
        (lambda A: A[0, 1.5], "integer expression"),
        (
            lambda A: compute((2,), lambda i: sum_(A[i, reduce_axis(2)], axis=reduce_axis(2)) * 2.0),
            "whole body",
        ),
        (lambda A: compute((2,), lambda i: A[i, 0] + cast(A[i, 0], "float64")), "mixes float32 and float64"),
        (lambda A: sum_(A[0, 0], axis=A.op.shape), "axis must be reduce_axis"),
        (lambda A: max_(A[0, 0]), "second operand"),
        (lambda A: call("nope", A[0, 0]), "unknown intrinsic"),
        (lambda A: reduce_axis(0), "positive int"),
        (lambda A: placeholder((2, 0)), "non-positive"),
    ],
)
def test_malformed_expressions(build, message):
    A = placeholder((2, 2), "float32", "A")
    with pytest.raises(TensorExprError, match=message):
        build(A)


def test_reduce_axis_outside_its_reduction():
    A = placeholder((2, 2), "float32", "A")
    k = reduce_axis(2, "k")
    with pytest.raises(TensorExprError, match="outside its reduction"):
        compute((2,), lambda i: A[i, k])
