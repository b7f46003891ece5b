"""lower(): arguments, reductions' init/update shape, select hoisting, pass pipeline."""

import numpy as np
import pytest

from tensorir.loop.ir import ForKind
from tensorir.loop.printer import to_text
from tensorir.loop.visitor import walk
from tensorir.schedule import (
    ScheduleError,
    compute,
    create_schedule,
    if_then_else,
    lower,
    placeholder,
    reduce_axis,
    sum_,
)
from tests.schedule.workloads import body, check, execute, matmul


def test_params_follow_argument_order():
    A, B, C = matmul(4, 3, 2)
    f = lower(create_schedule([C]), [C, B, A], name="mm")
    assert to_text(f).splitlines()[0] == "def mm(C: f32[4,2], B: f32[3,2], A: f32[4,3]):"


def test_argument_errors():
    A, B, C = matmul(4, 3, 2)
    s = create_schedule([C])
    with pytest.raises(ScheduleError, match="output C is not among the arguments"):
        lower(s, [A, B])
    with pytest.raises(ScheduleError, match="input B .read by C. is not among the arguments"):
        lower(s, [A, C])
    with pytest.raises(ScheduleError, match="is not a tensor of this schedule"):
        lower(s, [A, B, C, placeholder((2,), "float32", "Z")])
    with pytest.raises(ScheduleError, match="repeat a name"):
        lower(s, [A, B, C, C])


def test_inlined_tensor_cannot_be_an_argument():
    A = placeholder((4,), "float32", "A")
    B = compute((4,), lambda i: A[i] + 1.0, name="B")
    C = compute((4,), lambda i: B[i] * 2.0, name="C")
    s = create_schedule([C])
    s[B].compute_inline()
    with pytest.raises(ScheduleError, match="B is inlined"):
        lower(s, [A, B, C])


def test_duplicate_tensor_names_are_refused():
    A = placeholder((4,), "float32", "A")
    A2 = placeholder((4,), "float32", "A")
    C = compute((4,), lambda i: A[i] + A2[i], name="C")
    with pytest.raises(ScheduleError, match="two different tensors are named 'A'"):
        create_schedule([C])


def test_before_passes():
    A = placeholder((4,), "float32", "A")
    B = compute((4,), lambda i: A[i] * 2.0, name="B")
    s = create_schedule([B])
    s[B].split(s[B].op.axis[0], factor=4)
    assert body(to_text(lower(s, [A, B], passes=False))) == (
        "for i_o in range(0, 1):\n  for i_i in range(0, 4):\n    B[i_o*4 + i_i] = A[i_o*4 + i_i]*2.0"
    )
    assert body(to_text(lower(s, [A, B]))) == "for i_i in range(0, 4):\n  B[i_i] = A[i_i]*2.0"


def test_select_reading_memory_becomes_if():
    A = placeholder((6,), "float32", "A")
    B = compute((8,), lambda i: if_then_else(i >= 1, if_then_else(i < 7, A[i - 1], 0.0), 0.0) * 3.0, name="B")
    text = check(create_schedule([B]), [A], [B], lambda a: np.pad(a, 1) * 3)
    assert body(text) == (
        "for i in range(0, 8):\n"
        "  if i >= 1:\n"
        "    if i < 7:\n"
        "      B[i] = A[i - 1]*3.0\n"
        "    else:\n"
        "      B[i] = 0.0\n"
        "  else:\n"
        "    B[i] = 0.0"
    )


def test_arithmetic_select_stays_select():
    A = placeholder((4,), "float32", "A")
    B = compute((4,), lambda i: if_then_else(i < 2, 1.0, 2.0) * A[i], name="B")
    assert "select(i < 2, 1.0, 2.0)*A[i]" in check(create_schedule([B]), [A], [B], lambda a: a * [1, 1, 2, 2])


def test_select_reading_a_cached_region_stays_a_vector_select():
    """A PReLU-style epilogue reading a producer computed at its outer loop: the cached
    region's index (global minus the region's start) is in bounds only once simplified; then
    the select stays a select and vectorizes. It was hoisted into an if per element, which made
    PReLU convs 5-20x slower (MediaPipe's face landmark model: 4.8x TensorFlow Lite)."""
    A = placeholder((8, 4), "float32", "A")
    B = placeholder((4, 16), "float32", "B")
    S = placeholder((16,), "float32", "S")
    k = reduce_axis(4, "k")
    C = compute((8, 16), lambda i, j: sum_(A[i, k] * B[k, j], axis=k), name="C")
    D = compute((8, 16), lambda i, j: if_then_else(C[i, j] >= 0.0, C[i, j], C[i, j] * S[j]), name="D")
    s = create_schedule([D])
    io, _ = s[D].split(s[D].op.axis[0], factor=4)
    s[C].compute_at(s[D], io)
    s[D].vectorize(s[D].op.axis[1])

    def ref(a, b, w):
        c = a @ b
        return np.where(c >= 0, c, c * w)

    text = check(s, [A, B, S], [D], ref)
    assert "if " not in text, text
    assert (
        "D[ramp(i_o*64 + i_i*16, 1, 16)] = select(C[ramp(i_i*16, 1, 16)] >= broadcast(0.0, 16), "
        "C[ramp(i_i*16, 1, 16)], C[ramp(i_i*16, 1, 16)]*S[ramp(0, 1, 16)])" in text
    ), text


def test_full_reduction_to_one_element():
    X = placeholder((3, 4), "float32", "X")
    r, c = reduce_axis(3, "r"), reduce_axis(4, "c")
    S = compute((1,), lambda i: sum_(X[r, c], axis=[r, c]), name="S")
    assert body(check(create_schedule([S]), [X], [S], lambda x: x.sum().reshape(1))) == (
        "S[0] = 0.0\nfor r in range(0, 3):\n  for c in range(0, 4):\n    S[0] = S[0] + X[r*4 + c]"
    )


def test_int_and_mixed_dtypes():
    X = placeholder((4,), "int32", "X")
    Y = compute((4,), lambda i: X[i] * 3 + X[3 - i], name="Y")
    f = lower(create_schedule([Y]), [X, Y])
    x = np.arange(4, dtype=np.int32)
    (y,) = execute(f, [x], [Y])
    assert list(y) == list(x * 3 + x[::-1]) and y.dtype == np.int32


def test_parallel_loops_stay_for_codegen():
    A, B, C = matmul(4, 3, 2)
    s = create_schedule([C])
    s[C].parallel(s[C].op.axis[0])
    f = lower(s, [A, B, C])
    kinds = [n.kind for n in walk(f.body) if hasattr(n, "kind")]
    assert kinds[0] is ForKind.PARALLEL and ForKind.VECTORIZED not in kinds
