"""Random legal schedules (split / fuse / reorder / vectorize / unroll / parallel, plus
cache_write, compute_at, compute_inline and pack) must not change the result."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorir.schedule import MAX_LANES, create_schedule
from tests.schedule.workloads import check, conv2d, conv2d_ref, matmul

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_loops(data, stage) -> None:
    """Splits (factor or nparts, dividing or not), an optional fuse, then a reorder."""
    for ax in list(stage.leaves):
        if data.draw(st.booleans(), label=f"split {ax.name}"):
            mode = data.draw(st.sampled_from(["factor", "nparts"]))
            stage.split(ax, **{mode: data.draw(st.integers(1, ax.extent + 1))})
    leaves = stage.leaves
    pairs = [p for p in range(len(leaves) - 1) if leaves[p].kind == leaves[p + 1].kind]
    if pairs and data.draw(st.booleans(), label="fuse"):
        p = data.draw(st.sampled_from(pairs))
        stage.fuse(leaves[p], leaves[p + 1])
    stage.reorder(*data.draw(st.permutations(stage.leaves), label="order"))


def random_kinds(data, stage, keep_serial=()) -> None:
    """vectorize the innermost loop when legal; unroll or parallel some others."""
    inner = stage.leaves[-1]
    legal = inner.kind == "data" and inner.extent <= MAX_LANES and inner not in keep_serial
    if legal and data.draw(st.booleans(), label="vectorize"):
        stage.vectorize(inner)
    for ax in stage.leaves[:-1]:
        kind = data.draw(st.sampled_from([None, "unroll", "parallel"]), label=f"kind {ax.name}")
        if kind == "unroll":
            stage.unroll(ax)
        elif kind == "parallel" and ax.kind == "data":
            stage.parallel(ax)


@SETTINGS
@given(data=st.data(), m=st.integers(1, 6), k=st.integers(1, 6), n=st.integers(1, 9), cache=st.booleans())
def test_random_matmul_schedules(data, m, k, n, cache):
    A, B, C = matmul(m, k, n)
    s = create_schedule([C])
    if cache:
        CC = s.cache_write(C, "local")
        random_loops(data, s[C])
        at = data.draw(st.sampled_from(s[C].leaves), label="compute_at")
        s[CC].compute_at(s[C], at)
        random_kinds(data, s[C], keep_serial=[at])
        random_loops(data, s[CC])
        random_kinds(data, s[CC])
    else:
        random_loops(data, s[C])
        random_kinds(data, s[C])
    check(s, [A, B], [C], lambda a, b: a.astype(np.float64) @ b)


@SETTINGS
@given(
    data=st.data(),
    ci=st.integers(1, 3),
    hw=st.integers(3, 5),
    co=st.integers(1, 3),
    kk=st.integers(1, 3),
    pad=st.integers(0, 1),
    place=st.sampled_from(["root", "inline", "at"]),
    pack=st.booleans(),
)
def test_random_conv2d_schedules(data, ci, hw, co, kk, pad, place, pack):
    X, W, P, Y = conv2d(1, ci, hw, co, kk, pad)
    s = create_schedule([Y])
    if pack:
        Wp = s.pack(W, data.draw(st.integers(0, 1)), data.draw(st.integers(1, 3)))
    if place == "inline":
        s[P].compute_inline()
    random_loops(data, s[Y])
    attached = []
    if place == "at":
        attached.append(data.draw(st.sampled_from(s[Y].leaves), label="P at"))
        s[P].compute_at(s[Y], attached[-1])
    if pack and data.draw(st.booleans(), label="pack at"):
        attached.append(data.draw(st.sampled_from(s[Y].leaves), label="W_pack at"))
        s[Wp].compute_at(s[Y], attached[-1])
    random_kinds(data, s[Y], keep_serial=attached)
    if place != "inline":
        random_kinds(data, s[P])
    check(s, [X, W], [Y], lambda x, w: conv2d_ref(x, w, pad))
