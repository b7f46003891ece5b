"""GPU schedule primitives: bind, shared-memory staging with barriers, float4 vectorization,
per-target-kind schedules (loop-IR text before/after and trace replay)."""

from __future__ import annotations

import dataclasses

import pytest

from tensorir.graph.types import TensorType
from tensorir.loop.ir import Ramp
from tensorir.loop.printer import to_text
from tensorir.loop.visitor import walk
from tensorir.ops.kernel import default_schedule, op_kernel
from tensorir.ops.registry import NoScheduleError
from tensorir.schedule import (
    ScheduleError,
    compute,
    create_schedule,
    lower,
    placeholder,
    reduce_axis,
    sum_,
    verify_trace_roundtrip,
)
from tensorir.schedule.defaults import schedule_injective
from tensorir.target import get_target


def _scale(n: int = 1000):
    a = placeholder((n,), "float32", "A")
    b = compute((n,), lambda i: a[i] * 2.0, name="B")
    return a, b


def test_bind_lowers_to_gpu_loops_with_tail_guard() -> None:
    a, b = _scale()
    s = create_schedule([b])
    o, i = s[b].split(b.op.axis[0], factor=64)
    s[b].bind(o, "group.x")
    s[b].bind(i, "local.x")
    assert to_text(verify_trace_roundtrip(s, [a, b])) == (
        "def main(A: f32[1000], B: f32[1000]):\n"
        '  for i_o in gpu_block(0, 16, "group.x"):\n'
        '    for i_i in gpu_thread(0, 64, "local.x"):\n'
        "      if i_o*64 + i_i < 1000:\n"
        "        B[i_o*64 + i_i] = A[i_o*64 + i_i]*2.0"
    )
    assert "bind" in s.trace.as_python()


def test_gpu_loop_of_extent_one_is_kept() -> None:
    a, b = _scale(64)
    s = create_schedule([b])
    o, i = s[b].split(b.op.axis[0], factor=64)
    s[b].bind(o, "group.x")
    s[b].bind(i, "local.x")
    assert 'gpu_block(0, 1, "group.x")' in to_text(lower(s, [a, b]))


@pytest.mark.parametrize(
    "tag, msg",
    [("thread.x", "unknown tag"), ("local.x", "already bound")],
)
def test_bind_errors(tag: str, msg: str) -> None:
    _, b = _scale()
    s = create_schedule([b])
    o, i = s[b].split(b.op.axis[0], factor=64)
    s[b].bind(i, "local.x")
    with pytest.raises(ScheduleError, match=msg):
        s[b].bind(o, tag)


def test_bind_reduce_axis_and_split_after_bind_fail() -> None:
    a = placeholder((8, 8), "float32", "A")
    k = reduce_axis(8, "k")
    c = compute((8,), lambda i: sum_(a[i, k], axis=k), name="C")
    s = create_schedule([c])
    with pytest.raises(ScheduleError, match="reduction axis"):
        s[c].bind(k, "group.x")  # local.x is a tree reduction (test_allreduce.py)
    s[c].bind(c.op.axis[0], "local.x")
    with pytest.raises(ScheduleError, match="already"):
        s[c].split(c.op.axis[0], factor=2)


def _tiled_matmul():
    a = placeholder((64, 64), "float32", "A")
    b = placeholder((64, 64), "float32", "B")
    k = reduce_axis(64, "k")
    c = compute((64, 64), lambda i, j: sum_(a[i, k] * b[k, j], axis=k), name="C")
    s = create_schedule([c])
    i, j = c.op.axis
    io, ii = s[c].split(i, factor=8)
    jo, ji = s[c].split(j, factor=8)
    ko, ki = s[c].split(k, factor=8)
    s[c].reorder(io, jo, ii, ji, ko, ki)
    for ax, tag in ((io, "group.y"), (jo, "group.x"), (ii, "local.y"), (ji, "local.x")):
        s[c].bind(ax, tag)
    return s, a, b, c, ko


def test_cache_read_shared_cooperative_load_between_barriers() -> None:
    s, a, b, c, ko = _tiled_matmul()
    a_sh = s.cache_read(a, "shared", [s[c]])
    s[a_sh].compute_at(s[c], ko)
    r, col = s[a_sh].op.axis
    s[a_sh].bind(r, "local.y")
    s[a_sh].bind(col, "local.x")
    text = to_text(verify_trace_roundtrip(s, [a, b, c]))
    assert (
        "          for k_o in range(0, 8):\n"
        '            A_shared = allocate(f32[8,8], "shared")\n'
        '            barrier("shared")\n'
        "            A_shared[i_i*8 + j_i] = A[i_o*512 + i_i*64 + k_o*8 + j_i]\n"
        '            barrier("shared")\n'
    ) in text
    assert "A_shared[i_i*8 + k_i]" in text


def test_shared_load_wider_than_the_group_is_an_error() -> None:
    s, a, b, c, ko = _tiled_matmul()
    a_sh = s.cache_read(a, "shared", [s[c]])
    s[a_sh].compute_at(s[c], ko)
    f = s[a_sh].fuse(*s[a_sh].op.axis)
    s[a_sh].bind(f, "local.x")  # 64 elements on an 8-wide local.x
    with pytest.raises(ScheduleError, match="launches 8 wide"):
        lower(s, [a, b, c])


def test_cache_read_errors() -> None:
    s, a, b, c, _ = _tiled_matmul()
    with pytest.raises(ScheduleError, match="unknown scope"):
        s.cache_read(a, "texture", [s[c]])
    with pytest.raises(ScheduleError, match="inside GPU loops"):
        s.cache_read(a, "shared", [s[c]])
        lower(s, [a, b, c])


def test_local_accumulator_under_thread_loops_and_float4() -> None:
    a = placeholder((16, 8, 4), "float32", "A")
    k = reduce_axis(8, "k")
    c = compute((16, 4), lambda i, j: sum_(a[i, k, j], axis=k), name="C")
    s = create_schedule([c])
    cl = s.cache_write(c, "local")
    i, j = s[c].op.axis
    io, ii = s[c].split(i, factor=4)
    s[c].bind(io, "group.x")
    s[c].bind(ii, "local.x")
    s[c].vectorize(j)
    s[cl].compute_at(s[c], ii)
    ci, cj = s[cl].op.axis
    s[cl].reorder(ci, *s[cl].op.reduce_axis, cj)
    s[cl].vectorize(cj)
    func = verify_trace_roundtrip(s, [a, c])
    text = to_text(func)
    assert 'C_local = allocate(f32[1,4], "local")' in text
    assert "C_local[ramp(0, 1, 4)] = C_local[ramp(0, 1, 4)] + A[ramp(" in text
    assert any(isinstance(n, Ramp) and n.count == 4 for n in walk(func.body))


def test_default_schedule_per_target_kind() -> None:
    host = get_target("host")
    gpu = dataclasses.replace(host, kind="opencl")
    assert default_schedule("relu", {}) is default_schedule("relu", {}, host) is schedule_injective
    assert default_schedule("relu", {}, gpu) is not schedule_injective
    with pytest.raises(NoScheduleError, match="no opencl schedule"):
        default_schedule("cumsum", {"axis": 0}, gpu)
    func = op_kernel("relu", [TensorType((4, 16))], {}, gpu)
    assert 'gpu_thread(0, 32, "local.x")' in to_text(func) or "local.x" in to_text(func)
