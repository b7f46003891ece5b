"""vectorize / unroll / parallel: before/after IR, numerics, trace round-trip, errors."""

import pytest

from tensorir.schedule import ScheduleError, compute, create_schedule, lower, placeholder
from tests.schedule.workloads import body, check, matmul


def bias_scale(n=4, m=8):
    A = placeholder((n, m), "float32", "A")
    b = placeholder((n,), "float32", "b")
    B = compute((n, m), lambda i, j: A[i, j] * 2.0 + b[i], name="B")
    s = create_schedule([B])
    return A, b, B, s, s[B]


def run(s, A, b, B):
    return body(check(s, [A, b], [B], lambda a, bb: a * 2 + bb[:, None]))


def test_before():
    A, b, B, s, _ = bias_scale()
    assert run(s, A, b, B) == (
        "for i in range(0, 4):\n  for j in range(0, 8):\n    B[i*8 + j] = A[i*8 + j]*2.0 + b[i]"
    )


def test_vectorize_and_parallel():
    A, b, B, s, st = bias_scale()
    i, j = st.op.axis
    st.vectorize(j)
    st.parallel(i)
    assert run(s, A, b, B) == (
        "for i in parallel(0, 4):\n"
        "  B[ramp(i*8, 1, 8)] = A[ramp(i*8, 1, 8)]*broadcast(2.0, 8) + broadcast(b[i], 8)"
    )


def test_unroll_expands_and_vectorize_inner():
    A, b, B, s, st = bias_scale()
    jo, ji = st.split(st.op.axis[1], factor=4)
    st.unroll(jo)
    st.vectorize(ji)
    assert run(s, A, b, B) == (
        "for i in range(0, 4):\n"
        "  B[ramp(i*8, 1, 4)] = A[ramp(i*8, 1, 4)]*broadcast(2.0, 4) + broadcast(b[i], 4)\n"
        "  B[ramp(i*8 + 4, 1, 4)] = A[ramp(i*8 + 4, 1, 4)]*broadcast(2.0, 4) + broadcast(b[i], 4)"
    )


def test_long_unrolled_loop_is_left_to_codegen():
    A, b, B, s, st = bias_scale(2, 100)
    st.unroll(st.op.axis[1])
    assert "for j in unrolled(0, 100):" in run(s, A, b, B)


def test_vectorize_strided_lanes():
    A, b, B, s, st = bias_scale()
    i, j = st.op.axis
    st.reorder(j, i)
    st.vectorize(i)
    assert run(s, A, b, B) == (
        "for j in range(0, 8):\n  B[ramp(j, 8, 4)] = A[ramp(j, 8, 4)]*broadcast(2.0, 4) + b[ramp(0, 1, 4)]"
    )


def test_vectorize_with_tail_guard_runs_whole_blocks_on_vectors():
    """8 = 3 + 3 + 2: the blocks the guard holds for at both ends run on vectors, the last
    one lane by lane (loop/passes.py: _edge_split)."""
    A, b, B, s, st = bias_scale()
    _, ji = st.split(st.op.axis[1], factor=3)
    st.vectorize(ji)
    text = run(s, A, b, B)
    assert "if j_o*3 + 2 < 8:\n      B[ramp(i*8 + j_o*3, 1, 3)] = A[ramp(i*8 + j_o*3, 1, 3)]" in text
    assert "for j_i in range(0, 3):\n        if j_o*3 + j_i < 8:" in text


def test_vectorized_accumulation_inside_unrolled_reduction():
    A, B, C = matmul(4, 3, 8)
    s = create_schedule([C])
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    s[C].reorder(i, k, j)
    s[C].vectorize(j)
    s[C].unroll(k)
    assert body(check(s, [A, B], [C], lambda a, b: a @ b)) == (
        "for i in range(0, 4):\n"
        "  C[ramp(i*8, 1, 8)] = broadcast(0.0, 8)\n"
        "  C[ramp(i*8, 1, 8)] = C[ramp(i*8, 1, 8)] + broadcast(A[i*3], 8)*B[ramp(0, 1, 8)]\n"
        "  C[ramp(i*8, 1, 8)] = C[ramp(i*8, 1, 8)] + broadcast(A[i*3 + 1], 8)*B[ramp(8, 1, 8)]\n"
        "  C[ramp(i*8, 1, 8)] = C[ramp(i*8, 1, 8)] + broadcast(A[i*3 + 2], 8)*B[ramp(16, 1, 8)]"
    )


# ---- illegal requests ----------------------------------------------------------------------
def test_vectorize_not_innermost():
    *_, st = bias_scale()
    with pytest.raises(ScheduleError, match="axis i is not the innermost loop of stage B"):
        st.vectorize(st.op.axis[0])


def test_vectorize_moved_outward_later_fails_at_lowering():
    A, b, B, s, st = bias_scale()
    i, j = st.op.axis
    st.vectorize(j)
    st.reorder(j, i)  # j is no longer innermost
    with pytest.raises(ScheduleError, match="vectorized axis j of B is no longer the innermost loop"):
        lower(s, [A, b, B])


def test_vectorize_reduction_axis():
    _A, _B, C = matmul(4, 3, 2)
    s = create_schedule([C])
    with pytest.raises(ScheduleError, match="k is a reduction axis"):
        s[C].vectorize(s[C].op.reduce_axis[0])


def test_vectorize_too_many_lanes():
    *_, st = bias_scale(2, 128)
    with pytest.raises(ScheduleError, match="over 64 lanes; split it"):
        st.vectorize(st.op.axis[1])


def test_parallel_reduction_axis():
    _A, _B, C = matmul(4, 3, 2)
    s = create_schedule([C])
    with pytest.raises(ScheduleError, match="threads would race"):
        s[C].parallel(s[C].op.reduce_axis[0])


def test_conflicting_annotations_and_split_after_annotation():
    *_, st = bias_scale()
    i, _j = st.op.axis
    st.parallel(i)
    with pytest.raises(ScheduleError, match="already parallel"):
        st.unroll(i)
    with pytest.raises(ScheduleError, match="annotate after split"):
        st.split(i, factor=2)
