"""Cross-work-item (tree) reductions: a reduction axis bound to local.x (schedule/allreduce.py).
Loop-IR text before/after, the merged and non-power-of-two forms, errors, and numerics on
PoCL against numpy (float32 sums: tolerance 1e-4)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.loop.ir import Barrier
from tensorir.loop.printer import to_text
from tensorir.loop.visitor import walk
from tensorir.schedule import (
    ScheduleError,
    compute,
    create_schedule,
    lower,
    max_,
    placeholder,
    reduce_axis,
    sum_,
    verify_trace_roundtrip,
)


def _row_sum(rows: int = 4, n: int = 100, threads: int = 32):
    """C[i] = sum_k A[i, k]: a work-group per row, k split by `threads`, k_i on local.x."""
    a = placeholder((rows, n), "float32", "A")
    k = reduce_axis(n, "k")
    c = compute((rows,), lambda i: sum_(a[i, k], axis=k), name="C")
    s = create_schedule([c])
    ko, ki = s[c].split(k, factor=threads)
    s[c].reorder(c.op.axis[0], ki, ko)
    s[c].bind(c.op.axis[0], "group.x")
    s[c].bind(ki, "local.x")
    return s, [a, c]


def _row_max_minus(threads: int = 32, red_threads: int = 16):
    """Y[i, j] = A[i, j] - max_k A[i, k]: Y's columns over local.x, the max computed at that
    loop with its reduction bound to the same (enclosing) local.x, narrower."""
    a = placeholder((4, 50), "float32", "A")
    k = reduce_axis(50, "k")
    m = compute((4,), lambda i: max_(a[i, k], axis=k), name="M")
    y = compute((4, 50), lambda i, j: a[i, j] - m[i], name="Y")
    s = create_schedule([y])
    i, j = y.op.axis
    s[y].bind(i, "group.x")
    jo, ji = s[y].split(j, factor=threads)
    s[y].reorder(ji, jo)
    s[y].bind(ji, "local.x")
    s[m].compute_at(s[y], ji)
    ko, ki = s[m].split(m.op.reduce_axis[0], factor=red_threads)
    s[m].reorder(ki, ko)
    s[m].bind(ki, "local.x")
    return s, [a, y]


def test_bound_reduction_lowers_to_partials_and_a_tree() -> None:
    s, args = _row_sum()
    before = to_text(lower(create_schedule([args[1]]), args))
    assert before == (
        "def main(A: f32[4,100], C: f32[4]):\n"
        "  for i in range(0, 4):\n"
        "    C[i] = 0.0\n"
        "    for k in range(0, 100):\n"
        "      C[i] = C[i] + A[i*100 + k]"
    )
    steps = "".join(
        f'      if k_i < {h}:\n        C_red[k_i] = C_red[k_i] + C_red[k_i + {h}]\n      barrier("shared")\n'
        for h in (16, 8, 4, 2, 1)
    )
    assert to_text(verify_trace_roundtrip(s, args)) == (
        "def main(A: f32[4,100], C: f32[4]):\n"
        '  for i in gpu_block(0, 4, "group.x"):\n'
        '    for k_i in gpu_thread(0, 32, "local.x"):\n'
        '      C_rf = allocate(f32[1], "local")\n'
        "      C_rf[0] = 0.0\n"
        "      for k_o in range(0, 4):\n"
        "        if k_o*32 + k_i < 100:\n"
        "          C_rf[0] = C_rf[0] + A[i*100 + k_o*32 + k_i]\n"
        '      C_red = allocate(f32[32], "shared")\n'
        "      C_red[k_i] = C_rf[0]\n"
        '      barrier("shared")\n' + steps + "      C[i] = C_red[0]\n"
        '      barrier("shared")'
    )
    assert "bind(" in s.trace.as_python()


def test_non_power_of_two_width_folds_its_top_first() -> None:
    s, args = _row_sum(3, 100, 24)
    text = to_text(lower(s, args))
    assert 'C_red = allocate(f32[24], "shared")' in text
    assert "if k_i < 8:\n        C_red[k_i] = C_red[k_i] + C_red[k_i + 16]" in text
    assert "if k_i < 8:\n        C_red[k_i] = C_red[k_i] + C_red[k_i + 8]" in text


def test_reduction_sharing_the_enclosing_id_is_guarded_on_its_partial_only() -> None:
    s, args = _row_max_minus()
    text = to_text(verify_trace_roundtrip(s, args))
    assert text.startswith(
        "def main(A: f32[4,50], Y: f32[4,50]):\n"
        '  for i in gpu_block(0, 4, "group.x"):\n'
        '    for j_i in gpu_thread(0, 32, "local.x"):\n'
        '      M = allocate(f32[1], "local")\n'
        '      M_rf = allocate(f32[1], "local")\n'
        "      M_rf[0] = -inf\n"
        "      if j_i < 16:\n"
        "        for k_o in range(0, 4):\n"
        "          if k_o*16 + j_i < 50:\n"
        "            M_rf[0] = max(M_rf[0], A[i*50 + k_o*16 + j_i])\n"
        '      M_red = allocate(f32[32], "shared")\n'  # the tree spans the launch width
        "      M_red[j_i] = M_rf[0]\n"
    )
    assert text.endswith(
        "      M[0] = M_red[0]\n"
        '      barrier("shared")\n'
        "      for j_o in range(0, 2):\n"
        "        if j_o*32 + j_i < 50:\n"
        "          Y[i*50 + j_o*32 + j_i] = A[i*50 + j_o*32 + j_i] - M[0]"
    )
    assert sum(isinstance(n, Barrier) for n in walk(lower(s, args).body)) == 7  # 1 + log2(32) + 1


def test_bound_reduction_errors() -> None:
    a = placeholder((4, 8, 16), "float32", "A")
    k = reduce_axis(16, "k")
    c = compute((4, 8), lambda i, j: sum_(a[i, j, k], axis=k), name="C")
    s = create_schedule([c])
    i, j = c.op.axis
    ko, ki = s[c].split(k, factor=8)
    s[c].bind(ki, "local.x")  # k_o is still an outer reduction loop
    with pytest.raises(ScheduleError, match="must be the outermost"):
        lower(s, [a, c])
    with pytest.raises(ScheduleError, match="already bound"):
        s[c].bind(ko, "local.y")
    s2 = create_schedule([c])
    ko, ki = s2[c].split(k, factor=8)
    s2[c].reorder(i, ki, ko, j)
    s2[c].bind(ki, "local.x")
    with pytest.raises(ScheduleError, match=r"data loops \['j'\]"):
        lower(s2, [a, c])
    with pytest.raises(ScheduleError, match="work-groups would race"):
        s2[c].bind(ko, "group.x")


@pytest.mark.parametrize("build", [_row_sum, lambda: _row_sum(3, 100, 24), _row_max_minus])
def test_tree_reductions_match_numpy_on_pocl(build) -> None:
    pytest.importorskip("pyopencl")
    from tensorir.codegen.opencl import render_opencl
    from tensorir.devices import get_profile
    from tensorir.runtime.opencl_device import run_gpu_kernel

    s, (a, out) = build()
    x = np.random.default_rng(0).standard_normal(a.shape).astype(np.float32)
    kernel = render_opencl(lower(s, [a, out], name="tree"), get_profile("pocl"))
    got, _ = run_gpu_kernel(kernel, [x, np.zeros(out.shape, np.float32)], "pocl")
    ref = x.sum(axis=1) if out.name == "C" else x - x.max(axis=1, keepdims=True)
    np.testing.assert_allclose(got[1], ref, rtol=1e-5, atol=1e-4)
