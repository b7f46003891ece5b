"""Stage.prefetch: before/after IR, numerics unchanged, trace round-trip, LLVM, errors."""

import numpy as np
import pytest

from tensorir.schedule import ScheduleError, compute, create_schedule, lower, placeholder, reduce_axis
from tensorir.schedule import sum_ as te_sum
from tests.schedule.workloads import body, check


def row_sums(rows=4, cols=64):
    W = placeholder((rows, cols), "float32", "W")
    k = reduce_axis(cols, "k")
    S = compute((rows,), lambda r: te_sum(W[r, k], axis=k), name="S")
    s = create_schedule([S])
    return W, S, s, s[S]


def test_before():
    W, S, s, _ = row_sums()
    assert body(check(s, [W], [S], lambda w: w.sum(1))) == (
        "for r in range(0, 4):\n  S[r] = 0.0\n  for k in range(0, 64):\n    S[r] = S[r] + W[r*64 + k]"
    )


def test_next_rows_first_lines_at_the_top_of_each_row():
    W, S, s, st = row_sums()
    r = st.op.axis[0]
    st.prefetch(W, r, [(r, 64, 1)], offset=64, count=2, stride=16)
    assert body(check(s, [W], [S], lambda w: w.sum(1))) == (
        "for r in range(0, 4):\n"
        "  prefetch(W[min(r*64 + 64, 255)])\n"
        "  prefetch(W[min(r*64 + 80, 255)])\n"
        "  S[r] = 0.0\n"
        "  for k in range(0, 64):\n"
        "    S[r] = S[r] + W[r*64 + k]"
    )


def test_inner_loops_count_as_zero_and_divisors_apply():
    W, S, s, st = row_sums()
    r, k = st.op.axis[0], st.op.reduce_axis[0]
    ko, _ = st.split(k, factor=16)
    st.prefetch(W, ko, [(r, 64, 1), (k, 4, 16)], offset=0, count=1, stride=16)
    text = body(check(s, [W], [S], lambda w: w.sum(1)))
    # k = k_o*16 + k_i with k_i (inside k_o) at 0: (k_o*16) // 16 * 4; the clamp is
    # simplified away where the index provably stays inside W
    assert "  for k_o in range(0, 4):\n    prefetch(W[r*64 + k_o*4])\n    for k_i in range(0, 16):" in text


def test_llvm_emits_the_intrinsic():
    from tensorir.codegen.llvm import build_ir
    from tensorir.target import get_target

    W, S, s, st = row_sums()
    st.prefetch(W, st.op.axis[0], [(st.op.axis[0], 64, 1)], offset=64, count=1, stride=16)
    ir_text, _ = build_ir(lower(s, [W, S]), get_target("host"))
    assert "call void @llvm.prefetch.p0(" in ir_text


def test_compiled_kernel_with_prefetch_matches_numpy():
    from tensorir.runtime.jit import compile_host

    W, S, s, st = row_sums(8, 256)
    r = st.op.axis[0]
    st.prefetch(W, r, [(r, 256, 1)], offset=256, count=16, stride=16)  # the next row, every line
    fn = compile_host(lower(s, [W, S]))
    w = np.random.default_rng(0).standard_normal((8, 256)).astype(np.float32)
    out = np.zeros(8, np.float32)
    fn(w, out)
    np.testing.assert_allclose(out, w.sum(1), rtol=1e-5, atol=1e-4)


def test_errors():
    W, _, _, st = row_sums()
    r, k = st.op.axis[0], st.op.reduce_axis[0]
    with pytest.raises(ScheduleError, match="prefetch count must be a positive int"):
        st.prefetch(W, r, [(r, 64, 1)], offset=0, count=0, stride=16)
    with pytest.raises(ScheduleError, match="prefetch divisor"):
        st.prefetch(W, r, [(r, 64, 0)], offset=0, count=1, stride=16)
    ko, _ = st.split(k, factor=16)
    with pytest.raises(ScheduleError, match="no root axis"):
        st.prefetch(W, r, [(ko, 1, 1)], offset=0, count=1, stride=16)
    T = compute((4, 64), lambda i, j: W[i, j] * 2.0, name="T")
    k2 = reduce_axis(64, "k2")
    U = compute((4,), lambda i: te_sum(T[i, k2], axis=k2), name="U")
    s2 = create_schedule([U])
    s2[U].prefetch(T, s2[U].op.axis[0], [], offset=0, count=1, stride=16)
    with pytest.raises(ScheduleError, match="prefetches T, not an input"):
        lower(s2, [W, U])
