"""lower_scan: a step's schedule inside a serial loop, a state updated in place and a per-step
output scattered into a sequence at data-dependent positions."""

import numpy as np
import pytest

from tensorir.loop.interp import run
from tensorir.loop.ir import Var
from tensorir.schedule import ScheduleError, compute, create_schedule, placeholder, reduce_axis, sum_
from tensorir.schedule.scan import lower_scan
from tensorir.schedule.te import if_then_else


def _running_sums(steps: int, n: int):
    """state[j] += x[perm[t], j] each step t (state = s0 at t = 0), y[perm[t], j] = state[j]:
    the running sums of x's rows in the order perm gives, written back at those rows."""
    t = Var("time")
    x = placeholder((steps, n), "float32", "x")
    perm = placeholder((steps,), "int32", "perm")
    s0 = placeholder((n,), "float32", "s0")
    state = placeholder((n,), "float32", "state")
    y_seq = placeholder((steps, n), "float32", "y_seq")
    row = perm[t]
    prev = compute((n,), lambda j: if_then_else(t.eq(0), s0[j], state[j]), name="prev")
    new = compute((n,), lambda j: prev[j] + x[row, j], name="new")
    y = compute((n,), lambda j: new[j], name="y")
    return t, (x, perm, s0, state, y_seq), (prev, new, y)


def test_state_in_place_and_scattered_output():
    steps, n = 5, 8
    t, (x, perm, s0, state, y_seq), (prev, new, y) = _running_sums(steps, n)
    s = create_schedule([new, y])
    s[prev].compute_inline()
    s[new].vectorize(s[new].op.axis[0])
    place = {new: (state, lambda j: (j,)), y: (y_seq, lambda j: (perm[t], j))}
    f = lower_scan(s, [x, perm, s0, state, y_seq], place, (t, steps), "cumsum")
    text = str(f)
    assert text.splitlines()[1].strip() == "for time in range(0, 5):", text
    assert f.attrs["num_scratch"] == 0  # new and y live in the arguments' buffers
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((steps, n)).astype(np.float32)
    pv = rng.permutation(steps).astype(np.int32)
    s0v = rng.standard_normal(n).astype(np.float32)
    sv, yv = np.full(n, np.nan, np.float32), np.zeros((steps, n), np.float32)
    run(f, [xv, pv, s0v, sv, yv])
    want = s0v + np.cumsum(xv[pv], axis=0)
    np.testing.assert_allclose(yv[pv], want, rtol=1e-6)
    np.testing.assert_allclose(sv, want[-1], rtol=1e-6)


def test_a_reduction_over_the_old_state_runs_first():
    """total = sum_k state[k] (a scratch stage) is read after the state is overwritten: the
    scan gives each step the sum over the previous state."""
    steps, n = 4, 3
    t = Var("time")
    state = placeholder((n,), "float32", "state")
    k = reduce_axis(n, "k")
    prev = compute((n,), lambda j: if_then_else(t.eq(0), 1.0, state[j]), name="prev")
    total = compute((1,), lambda i: sum_(prev[k], axis=k), name="total")
    new = compute((n,), lambda j: prev[j] * 0.5 + total[0], name="new")
    s = create_schedule([new])
    s[prev].compute_inline()
    f = lower_scan(s, [state], {new: (state, lambda j: (j,))}, (t, steps))
    assert f.attrs["num_scratch"] == 1
    sv = np.zeros(n, np.float32)
    run(f, [sv, np.zeros(1, np.float32)])
    want = np.ones(n)
    for _ in range(steps):
        want = want * 0.5 + want.sum()
    np.testing.assert_allclose(sv, want, rtol=1e-6)


def test_placement_errors():
    steps, n = 3, 4
    t, (x, perm, s0, state, y_seq), (prev, new, y) = _running_sums(steps, n)
    s = create_schedule([new, y])
    s[prev].compute_inline()
    args = [x, perm, s0, state, y_seq]
    ys = {y: (y_seq, lambda j: (t, j))}
    with pytest.raises(ScheduleError, match="prev is placed, so it must be a stage at root"):
        lower_scan(s, args, {prev: (state, lambda j: (j,)), new: (state, lambda j: (j,)), **ys}, (t, steps))
    other = placeholder((n,), "float32", "other")
    with pytest.raises(ScheduleError, match="new is placed into other, which is no argument"):
        lower_scan(s, args, {new: (other, lambda j: (j,)), **ys}, (t, steps))
