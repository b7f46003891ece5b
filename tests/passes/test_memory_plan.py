"""Static memory plan: lifetimes, reuse, aliases, and the workspace bounds on the zoo."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from benchmarks.zoo import build
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType
from tensorir.passes.memory_plan import Buffer, _by_size, _in_order, _place, _place_best, plan_memory


def _chain(n: int, shape=(256,)) -> Graph:
    """x -> relu -> relu -> ... (n ops): at most two intermediates alive at once."""
    g = Graph("chain")
    v = g.add_input("x", TensorType(shape))
    for _ in range(n):
        (v,) = g.add_node("relu", [v])
    g.set_outputs([("y", v)])
    return g


def test_chain_reuses_two_buffers():
    plan = plan_memory(_chain(6))
    # 5 intermediates (the last op writes the output), 1 KiB each; ping-pong needs two
    assert plan.no_reuse == 5 * 1024
    assert plan.lower_bound == 2 * 1024
    assert plan.workspace == 2 * 1024
    offsets = [b.offset for b in sorted(plan.buffers, key=lambda b: b.start)]
    assert all(a != b for a, b in itertools.pairwise(offsets))


def test_live_tensors_never_overlap_in_memory():
    g = Graph("diamond")
    x = g.add_input("x", TensorType((64,)))
    (a,) = g.add_node("relu", [x])
    (b,) = g.add_node("exp", [x])
    (c,) = g.add_node("add", [a, b])
    (d,) = g.add_node("mul", [c, a])  # keeps a alive past c
    (y,) = g.add_node("neg", [d])
    g.set_outputs([("y", y)])
    plan = plan_memory(g)
    for p in plan.buffers:
        for q in plan.buffers:
            if p is not q and p.overlaps_in_time(q):
                assert p.offset + p.size <= q.offset or q.offset + q.size <= p.offset


def test_reshape_aliases_its_input():
    g = Graph("alias")
    x = g.add_input("x", TensorType((4, 16)))
    (a,) = g.add_node("relu", [x])
    (r,) = g.add_node("reshape", [a], {"shape": (64,)})
    (y,) = g.add_node("exp", [r])
    g.set_outputs([("y", y)])
    plan = plan_memory(g)
    assert len(plan.buffers) == 1
    assert plan.offsets[r] == plan.offsets[a]


@pytest.mark.parametrize("name", ["mobilenet_v2_224", "resnet50"])
def test_zoo_plan_meets_targets(name):
    plan = plan_memory(from_onnx(build(name)))
    print(name, plan.summary())
    assert plan.workspace <= 1.1 * plan.lower_bound
    assert plan.workspace <= 0.5 * plan.no_reuse
    assert np.isfinite(plan.workspace)


def _buffers(spec):
    return [Buffer(Value(k, 0), size, start, end) for k, (size, start, end) in enumerate(spec)]


# (bytes, first step, last step): A and B small and long-lived, C and D wide and short. Largest
# first puts C and D at 0, then A above C and B above A and D: 320 B. In execution order C, A,
# B (at 0: C is dead by then), D above B: 256 B.
FRAGMENTED_BY_SIZE = [(64, 2, 3), (64, 3, 5), (192, 2, 2), (192, 4, 5)]


def test_each_order_places_first_fit():
    by_size = _buffers(FRAGMENTED_BY_SIZE)
    assert _place(_by_size(by_size)) == 320
    assert [b.offset for b in by_size] == [192, 256, 0, 0]
    in_order = _buffers(FRAGMENTED_BY_SIZE)
    assert _place(_in_order(in_order)) == 256
    assert [b.offset for b in in_order] == [192, 0, 0, 64]


# Largest first with equal sizes by first write puts A under C's dead bytes at 0, and then D
# fits nowhere but on top: 448 B; by last read, D takes 128 beside A and B goes on top: 384 B.
# In order: C, B, then A and D above B: 448 B.
FRAGMENTED_BY_FIRST_WRITE = [(128, 3, 5), (128, 2, 3), (192, 2, 2), (128, 3, 5)]


def test_plan_keeps_the_smaller_order():
    bufs = _buffers(FRAGMENTED_BY_SIZE)
    assert _place_best(bufs) == (256, "in order")
    assert [b.offset for b in bufs] == [192, 0, 0, 64]  # the winner's offsets, not the last tried
    chain = _buffers([(1024, k, k + 1) for k in range(5)])  # a ping-pong: both reach 2 KiB
    assert _place_best(chain) == (2048, "size")
    ties = _buffers(FRAGMENTED_BY_FIRST_WRITE)
    assert _place(_by_size(ties)) == 448
    assert _place(_in_order(_buffers(FRAGMENTED_BY_FIRST_WRITE))) == 448
    assert _place_best(ties) == (384, "size, last read first")
    assert [b.offset for b in ties] == [0, 256, 0, 128]


def test_optimized_mobilenet_v2_plans_in_order():
    """After layout and fusion, MobileNetV2-224's largest-first plan leaves a hole (2,709,504
    B with the kernels' scratch); execution order reaches the lower bound."""
    from tensorir.pipeline import optimize

    plan = plan_memory(optimize(from_onnx(build("mobilenet_v2_224"))))
    assert plan.order == "in order"
    assert plan.workspace == plan.lower_bound
    by_size = [Buffer(b.value, b.size, b.start, b.end) for b in plan.buffers]
    assert _place(_by_size(by_size)) > plan.workspace
    for p in plan.buffers:
        for q in plan.buffers:
            if p is not q and p.overlaps_in_time(q):
                assert p.offset + p.size <= q.offset or q.offset + q.size <= p.offset
