"""compute_at / compute_inline: before/after IR, numerics, trace round-trip, errors."""

import numpy as np
import pytest

from tensorir.loop.printer import to_text
from tensorir.schedule import (
    ScheduleError,
    call,
    compute,
    create_schedule,
    lower,
    placeholder,
    reduce_axis,
    sum_,
)
from tests.schedule.workloads import body, check, conv2d, conv2d_ref, matmul


def chain(n=10):
    A = placeholder((n, 4), "float32", "A")
    B = compute((n, 4), lambda i, j: A[i, j] + 1.0, name="B")
    C = compute((n, 4), lambda i, j: B[i, j] * 2.0, name="C")
    return A, B, C, create_schedule([C])


def run(s, A, C):
    return body(check(s, [A], [C], lambda a: (a + 1) * 2))


def test_before():
    A, _B, C, s = chain()
    assert run(s, A, C) == (
        "for i in range(0, 10):\n"
        "  for j in range(0, 4):\n"
        "    B[i*4 + j] = A[i*4 + j] + 1.0\n"
        "for i in range(0, 10):\n"
        "  for j in range(0, 4):\n"
        "    C[i*4 + j] = B[i*4 + j]*2.0"
    )


def test_compute_at_row():
    A, B, C, s = chain()
    s[B].compute_at(s[C], s[C].op.axis[0])
    assert run(s, A, C) == (
        "for i in range(0, 10):\n"
        '  B = allocate(f32[1,4], "local")\n'
        "  for j in range(0, 4):\n"
        "    B[j] = A[i*4 + j] + 1.0\n"
        "  for j in range(0, 4):\n"
        "    C[i*4 + j] = B[j]*2.0"
    )


def test_compute_at_split_tail_is_guarded():
    A, B, C, s = chain()
    io, _ = s[C].split(s[C].op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    assert run(s, A, C) == (
        "for i_o in range(0, 3):\n"
        '  B = allocate(f32[4,4], "local")\n'
        "  for i in range(0, 4):\n"
        "    if i_o*4 + i < 10:\n"
        "      for j in range(0, 4):\n"
        "        B[i*4 + j] = A[i_o*16 + i*4 + j] + 1.0\n"
        "  for i_i in range(0, 4):\n"
        "    if i_o*4 + i_i < 10:\n"
        "      for j in range(0, 4):\n"
        "        C[i_o*16 + i_i*4 + j] = B[i_i*4 + j]*2.0"
    )


def test_compute_inline():
    A, B, C, s = chain()
    s[B].compute_inline()
    assert run(s, A, C) == (
        "for i in range(0, 10):\n  for j in range(0, 4):\n    C[i*4 + j] = (A[i*4 + j] + 1.0)*2.0"
    )


def stencil():
    A = placeholder((12,), "float32", "A")
    B = compute((11,), lambda i: A[i] + A[i + 1], name="B")
    C = compute((10,), lambda i: B[i] * B[i + 1], name="C")
    D = compute((8,), lambda i: C[i] - C[i + 2], name="D")

    def ref(a):
        b = a[:-1] + a[1:]
        c = b[:-1] * b[1:]
        return c[:-2] - c[2:]

    return A, B, C, D, ref


def test_chained_compute_at_with_overlapping_windows():
    A, B, C, D, ref = stencil()
    s = create_schedule([D])
    do, _ = s[D].split(s[D].op.axis[0], factor=4)
    s[C].compute_at(s[D], do)  # D reads C[i .. i+2]: 6 elements per 4 outputs
    s[B].compute_at(s[C], s[C].op.axis[0])  # C reads B[i], B[i+1]
    assert body(check(s, [A], [D], ref)) == (
        "for i_o in range(0, 2):\n"
        '  C = allocate(f32[6], "local")\n'
        "  for i in range(0, 6):\n"
        '    B = allocate(f32[2], "local")\n'
        "    for i_1 in range(0, 2):\n"
        "      B[i_1] = A[i_o*4 + i + i_1] + A[i_o*4 + i + i_1 + 1]\n"
        "    C[i] = B[0]*B[1]\n"
        "  for i_i in range(0, 4):\n"
        "    D[i_o*4 + i_i] = C[i_i] - C[i_i + 2]"
    )


def softmax_denominator():
    X = placeholder((4, 6), "float32", "X")
    E = compute((4, 6), lambda i, k: call("exp", X[i, k]), name="E")
    k = reduce_axis(6, "k")
    S = compute((4,), lambda i: sum_(E[i, k], axis=k), name="S")
    return X, E, S, create_schedule([S])


def test_compute_at_inside_reduction_loop():
    X, E, S, s = softmax_denominator()
    s[E].compute_at(s[S], s[S].op.reduce_axis[0])
    assert body(check(s, [X], [S], lambda x: np.exp(x).sum(1))) == (
        "for i in range(0, 4):\n"
        "  S[i] = 0.0\n"
        "  for k in range(0, 6):\n"
        '    E = allocate(f32[1,1], "local")\n'
        "    E[0] = exp(X[i*6 + k])\n"
        "    S[i] = S[i] + E[0]"
    )


def test_inline_into_reduction():
    X, E, S, s = softmax_denominator()
    s[E].compute_inline()
    assert "S[i] = S[i] + exp(X[i*6 + k])" in check(s, [X], [S], lambda x: np.exp(x).sum(1))


def test_compute_at_of_an_argument_writes_the_global_buffer():
    X, E, S, s = softmax_denominator()
    s[E].compute_at(s[S], s[S].op.axis[0])
    text = to_text(lower(s, [X, E, S]))
    assert body(text) == (
        "for i in range(0, 4):\n"
        "  for k in range(0, 6):\n"
        "    E[i*6 + k] = exp(X[i*6 + k])\n"
        "  S[i] = 0.0\n"
        "  for k in range(0, 6):\n"
        "    S[i] = S[i] + E[i*6 + k]"
    )


def test_conv_padding_computed_per_output_row():
    X, W, P, Y = conv2d()
    s = create_schedule([Y])
    s[P].compute_at(s[Y], s[Y].op.axis[2])
    text = check(s, [X, W], [Y], lambda x, w: conv2d_ref(x, w, 1))
    assert 'P = allocate(f32[1,3,3,8], "local")' in text  # 3 rows of the padded input per row


def test_conv_padding_inlined():
    X, W, P, Y = conv2d()
    s = create_schedule([Y])
    s[P].compute_inline()
    text = check(s, [X, W], [Y], lambda x, w: conv2d_ref(x, w, 1))
    assert "P" not in text.split("\n", 1)[1]  # no buffer for the padded input
    assert "if y + rh >= 1 and y + rh < 7 and x + rw >= 1 and x + rw < 7:" in text


# ---- illegal requests ----------------------------------------------------------------------
def test_compute_at_axis_of_another_stage():
    _A, B, C, s = chain()
    with pytest.raises(ScheduleError, match="axis i belongs to stage B, not to stage C"):
        s[B].compute_at(s[C], s[B].op.axis[0])


def test_compute_at_axis_split_away():
    _A, B, C, s = chain()
    i = s[C].op.axis[0]
    s[C].split(i, factor=2)
    with pytest.raises(ScheduleError, match="already split or fused away"):
        s[B].compute_at(s[C], i)


def test_attach_axis_split_away_afterwards():
    A, B, C, s = chain()
    i = s[C].op.axis[0]
    s[B].compute_at(s[C], i)
    s[C].split(i, factor=2)
    with pytest.raises(ScheduleError, match="computed at C's axis i, which was split or fused away"):
        lower(s, [A, C])


def test_compute_at_stage_that_does_not_read_it():
    _A, B, C, s = chain()
    with pytest.raises(ScheduleError, match="stage B does not read C"):
        s[C].compute_at(s[B], s[B].op.axis[0])


def test_compute_at_with_two_consumers():
    _A, B, C, _ = chain()
    D = compute((10, 4), lambda i, j: B[i, j] + C[i, j], name="D")
    s = create_schedule([D])
    with pytest.raises(ScheduleError, match="B is also read by D; it needs a single consumer"):
        s[B].compute_at(s[C], s[C].op.axis[0])


def test_inline_output_or_reduction():
    _A, _B, C, s = chain()
    with pytest.raises(ScheduleError, match="C is an output"):
        s[C].compute_inline()
    _Am, _Bm, Cm = matmul(2, 2, 2)
    D = compute((2, 2), lambda i, j: Cm[i, j] + 1.0, name="D")
    s = create_schedule([D])
    with pytest.raises(ScheduleError, match="C is a reduction"):
        s[Cm].compute_inline()


def test_inline_a_stage_others_are_computed_at():
    _A, B, C, _ = chain()
    D = compute((10, 4), lambda i, j: C[i, j] + 1.0, name="D")
    s = create_schedule([D])
    s[B].compute_at(s[C], s[C].op.axis[0])
    with pytest.raises(ScheduleError, match=r"stages \['B'\] are computed at C"):
        s[C].compute_inline()


def test_loops_of_an_inlined_stage():
    _A, B, _C, s = chain()
    s[B].compute_inline()
    with pytest.raises(ScheduleError, match="inlined"):
        s[B].split(s[B].op.axis[0], factor=2)


def test_compute_at_region_before_the_tensor_starts_at_zero():
    """A padded consumer reads B one row before its own (guarded at the border): the rows of
    B computed per chunk start at max(chunk - 1, 0), never at row -1 (which would read A out
    of bounds)."""
    from tensorir.schedule import if_then_else

    A = placeholder((8, 4), "float32", "A")
    B = compute((8, 4), lambda i, j: A[i, j] + 1.0, name="B")
    C = compute((8, 4), lambda i, j: if_then_else(i >= 1, B[i - 1, j], 0.0) + B[i, j], name="C")
    s = create_schedule([C])
    io, _ = s[C].split(s[C].op.axis[0], factor=4)
    s[B].compute_at(s[C], io)

    def ref(a):
        b = a + 1
        return b + np.concatenate([np.zeros((1, 4), np.float32), b[:-1]])

    text = body(check(s, [A], [C], ref))
    assert text.splitlines()[:5] == [
        "for i_o in range(0, 2):",
        '  B = allocate(f32[5,4], "local")',
        "  for i in range(0, 5):",
        "    for j in range(0, 4):",
        "      B[i*4 + j] = A[max(i_o*4 - 1, 0)*4 + i*4 + j] + 1.0",
    ], text


def test_compute_at_an_outer_loop_of_a_reader_computed_deeper():
    """B is computed at C's outer loop while its reader D sits at C's inner loop (the merged
    depthwise + 1x1 kernel: the depthwise rows per chunk, the 1x1 sums per register tile):
    B's region is what D reads over the loops between."""
    A = placeholder((8, 4), "float32", "A")
    B = compute((8, 4), lambda i, j: A[i, j] + 1.0, name="B")
    D = compute((8, 4), lambda i, j: B[i, j] * 2.0, name="D")
    C = compute((8, 4), lambda i, j: D[i, j] + 3.0, name="C")
    s = create_schedule([C])
    io, ii = s[C].split(s[C].op.axis[0], factor=4)
    s[D].compute_at(s[C], ii)
    s[B].compute_at(s[C], io)
    text = body(check(s, [A], [C], lambda a: (a + 1) * 2 + 3))
    assert text == (
        "for i_o in range(0, 2):\n"
        '  B = allocate(f32[4,4], "local")\n'
        "  for i in range(0, 4):\n"
        "    for j in range(0, 4):\n"
        "      B[i*4 + j] = A[i_o*16 + i*4 + j] + 1.0\n"
        "  for i_i in range(0, 4):\n"
        '    D = allocate(f32[1,4], "local")\n'
        "    for j in range(0, 4):\n"
        "      D[j] = B[i_i*4 + j]*2.0\n"
        "    for j in range(0, 4):\n"
        "      C[i_o*16 + i_i*4 + j] = D[j] + 3.0"
    ), text
