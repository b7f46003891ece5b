"""hard_swish: Keras's x * relu6(x + 3) / 6 becomes the hard_swish op."""

from __future__ import annotations

import numpy as np

from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.passes import copy_graph
from tensorir.passes.hard_swish import hard_swish

from .helpers import assert_same_results, check_pass


def _spelled(scale: str = "mul", k: float = 1 / 6, swap: bool = False, other_x: bool = False) -> Graph:
    """x * (relu6(x + 3) * k) as Keras's MobileNetV3 writes it (`scale` "div": / (1 / k))."""
    g = Graph("hswish")
    x = g.add_input("x", TensorType((1, 16, 8, 8)))
    y = g.add_input("y", TensorType((1, 16, 8, 8))) if other_x else x
    three = g.add_const(np.array(3.0, np.float32))
    (s,) = g.add_node("add", [three, x] if swap else [x, three])
    (r,) = g.add_node("clip", [s], {"min": 0, "max": 6})
    c = g.add_const(np.array(k if scale == "mul" else 1 / k, np.float32))
    (h,) = g.add_node(scale, [c, r] if swap and scale == "mul" else [r, c])
    (out,) = g.add_node("mul", [h, y] if swap else [y, h])
    g.set_outputs([("z", out)])
    return g


def test_keras_hard_swish_becomes_the_op():
    check_pass(
        _spelled(),
        hard_swish,
        """
        graph hswish(%x: f32[1,16,8,8]) {
          %7 = hard_swish(%x) : f32[1,16,8,8]
          return %7 as z
        }
        """,
    )


def test_operands_either_way_and_division_by_six():
    for g in (_spelled(swap=True), _spelled(scale="div")):
        after = copy_graph(g)
        assert hard_swish(after)
        assert [after.node(n).op for n in after.op_nodes()] == ["hard_swish"]
        assert_same_results(g, after)


def test_other_gates_stay():
    for g in (_spelled(k=0.2), _spelled(other_x=True)):  # another slope; x * gate(y)
        check_pass(g, hard_swish, None)
