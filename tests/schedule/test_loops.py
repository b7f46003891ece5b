"""split / fuse / reorder / tile: before/after IR, numerics, trace round-trip, errors."""

import pytest

from tensorir.schedule import ScheduleError, compute, create_schedule, placeholder
from tests.schedule.workloads import body, check, matmul

DEFAULT = "for i in range(0, 10):\n  for j in range(0, 6):\n    B[i*6 + j] = A[i*6 + j]*2.0"


def scale():
    A = placeholder((10, 6), "float32", "A")
    B = compute((10, 6), lambda i, j: A[i, j] * 2.0, name="B")
    s = create_schedule([B])
    return A, B, s, s[B]


def run(s, A, B):
    return body(check(s, [A], [B], lambda a: a * 2))


def test_before():
    A, B, s, _ = scale()
    assert run(s, A, B) == DEFAULT


def test_split_factor_guards_the_tail():
    A, B, s, st = scale()
    io, ii = st.split(st.op.axis[0], factor=4)
    assert (io.name, io.extent, ii.name, ii.extent) == ("i_o", 3, "i_i", 4)
    assert run(s, A, B) == (
        "for i_o in range(0, 3):\n"
        "  for i_i in range(0, 4):\n"
        "    if i_o*4 + i_i < 10:\n"
        "      for j in range(0, 6):\n"
        "        B[i_o*24 + i_i*6 + j] = A[i_o*24 + i_i*6 + j]*2.0"
    )


def test_split_nparts():
    A, B, s, st = scale()
    st.split(st.op.axis[1], nparts=2)
    assert run(s, A, B) == (
        "for i in range(0, 10):\n"
        "  for j_o in range(0, 2):\n"
        "    for j_i in range(0, 3):\n"
        "      B[i*6 + j_o*3 + j_i] = A[i*6 + j_o*3 + j_i]*2.0"
    )


def test_fuse_then_split():
    A, B, s, st = scale()
    f = st.fuse(*st.op.axis)
    assert (f.name, f.extent) == ("i_j_f", 60)
    st.split(f, factor=16)
    assert run(s, A, B) == (
        "for i_j_f_o in range(0, 4):\n"
        "  for i_j_f_i in range(0, 16):\n"
        "    if i_j_f_o*16 + i_j_f_i < 60:\n"
        "      B[i_j_f_o*16 + i_j_f_i] = A[i_j_f_o*16 + i_j_f_i]*2.0"
    )


def test_split_then_fuse_inner_with_next():
    A, B, s, st = scale()
    i, j = st.op.axis
    _, ii = st.split(i, factor=5)
    st.fuse(ii, j)
    assert run(s, A, B) == (
        "for i_o in range(0, 2):\n"
        "  for i_i_j_f in range(0, 30):\n"
        "    B[i_o*30 + i_i_j_f] = A[i_o*30 + i_i_j_f]*2.0"
    )


def test_reorder():
    A, B, s, st = scale()
    st.reorder(*reversed(st.op.axis))
    assert run(s, A, B) == (
        "for j in range(0, 6):\n  for i in range(0, 10):\n    B[i*6 + j] = A[i*6 + j]*2.0"
    )


def test_reorder_reduction_outside_keeps_init_before_it():
    A, Bm, C = matmul(4, 3, 2)
    s = create_schedule([C])
    _i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    s[C].reorder(k, j)  # i, k, j
    assert body(check(s, [A, Bm], [C], lambda a, b: a @ b)) == (
        "for i in range(0, 4):\n"
        "  for j in range(0, 2):\n"
        "    C[i*2 + j] = 0.0\n"
        "  for k in range(0, 3):\n"
        "    for j in range(0, 2):\n"
        "      C[i*2 + j] = C[i*2 + j] + A[i*3 + k]*B[k*2 + j]"
    )


def test_tile():
    A, Bm, C = matmul(8, 4, 8)
    s = create_schedule([C])
    axes = s[C].tile(*s[C].op.axis, 4, 2)
    assert [a.name for a in axes] == ["i_o", "j_o", "i_i", "j_i"]
    assert body(check(s, [A, Bm], [C], lambda a, b: a @ b)) == (
        "for i_o in range(0, 2):\n"
        "  for j_o in range(0, 4):\n"
        "    for i_i in range(0, 4):\n"
        "      for j_i in range(0, 2):\n"
        "        C[i_o*32 + i_i*8 + j_o*2 + j_i] = 0.0\n"
        "        for k in range(0, 4):\n"
        "          C[i_o*32 + i_i*8 + j_o*2 + j_i] = C[i_o*32 + i_i*8 + j_o*2 + j_i]"
        " + A[i_o*16 + i_i*4 + k]*B[k*8 + j_o*2 + j_i]"
    )
    assert len(s.trace) == 1 and s.trace.instructions[0].kind == "tile"


def test_split_reduction_axis_not_dividing():
    A, Bm, C = matmul(2, 5, 2)
    s = create_schedule([C])
    _ko, _ki = s[C].split(s[C].op.reduce_axis[0], factor=2)
    text = body(check(s, [A, Bm], [C], lambda a, b: a @ b))
    assert "    for k_o in range(0, 3):\n      for k_i in range(0, 2):\n        if k_o*2 + k_i < 5:" in text


# ---- illegal requests ----------------------------------------------------------------------
def test_split_an_axis_split_away():
    _, _, _, st = scale()
    i = st.op.axis[0]
    st.split(i, factor=2)
    with pytest.raises(ScheduleError, match="i of stage B was already split or fused away"):
        st.split(i, factor=2)  # i no longer exists as a loop


def test_split_a_fused_axis():
    _, _, _, st = scale()
    st.fuse(*st.op.axis)
    with pytest.raises(ScheduleError, match="already split or fused away"):
        st.split(st.op.axis[1], factor=2)


def test_split_bad_factor():
    _, _, s, st = scale()
    with pytest.raises(ScheduleError, match="factor must be a positive int"):
        st.split(st.op.axis[0], factor=0)
    with pytest.raises(ScheduleError, match="exactly one of"):
        st.split(st.op.axis[0], factor=2, nparts=2)
    assert len(s.trace) == 0  # failed calls record nothing


def test_reorder_with_axis_of_another_stage():
    _A, B, s, _st = scale()
    C = compute((10, 6), lambda i, j: B[i, j] + 1.0, name="C")
    s = create_schedule([C])
    with pytest.raises(ScheduleError, match="axis i belongs to stage C, not to stage B"):
        s[B].reorder(s[C].op.axis[0], s[B].op.axis[1])


def test_reorder_same_axis_twice():
    _, _, _, st = scale()
    with pytest.raises(ScheduleError, match="given twice"):
        st.reorder(st.op.axis[0], st.op.axis[0])


def test_fuse_non_adjacent_or_mixed_kinds():
    _A, _Bm, C = matmul(4, 3, 2)
    s = create_schedule([C])
    i, j = s[C].op.axis
    with pytest.raises(ScheduleError, match="not adjacent"):
        s[C].fuse(j, i)  # wrong order
    with pytest.raises(ScheduleError, match="data axis with a reduction axis"):
        s[C].fuse(j, s[C].op.reduce_axis[0])
