"""dead_code and cse; the shared pass toolkit (rewrite engine, copy_graph)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.graph.graph import Graph
from tensorir.graph.printer import print_graph
from tensorir.graph.types import TensorType
from tensorir.passes import add_op, copy_graph, replace, rewrite
from tensorir.passes.cse import MAX_CONST_BYTES, cse
from tensorir.passes.dead_code import dead_code

from .helpers import check_pass, const


def test_dead_code_drops_unused_nodes_and_keeps_inputs():
    g = Graph("dead")
    x = g.add_input("x", TensorType((4,)))
    g.add_input("unused", TensorType((2,)))
    (y,) = g.add_node("relu", [x])
    (e,) = g.add_node("exp", [x])
    g.add_node("add", [e, const(g, (4,))])
    g.set_outputs([("y", y)])
    check_pass(
        g,
        dead_code,
        """
        graph dead(%x: f32[4], %unused: f32[2]) {
          %2 = relu(%x) : f32[4]
          return %2 as y
        }
        """,
    )
    check_pass(g, dead_code, None)


def test_dead_code_keeps_a_multi_output_node_with_one_used_output():
    g = Graph("split")
    x = g.add_input("x", TensorType((6,)))
    parts = g.add_node("split", [x], {"axis": 0, "sizes": (2, 4)})
    g.set_outputs([("a", parts[0])])
    check_pass(g, dead_code, None)


def test_cse_merges_duplicate_ops_and_then_their_users():
    g = Graph("cse")
    x = g.add_input("x", TensorType((2, 4)))
    (r1,) = g.add_node("reshape", [x], {"shape": (4, 2)})
    (r2,) = g.add_node("reshape", [x], {"shape": (4, 2)})
    (r3,) = g.add_node("reshape", [x], {"shape": (8,)})  # other attrs: kept
    (e1,) = g.add_node("exp", [r1])
    (e2,) = g.add_node("exp", [r2])
    (s,) = g.add_node("add", [e1, e2])
    g.set_outputs([("s", s), ("r3", r3)])
    check_pass(
        g,
        cse,
        """
        graph cse(%x: f32[2,4]) {
          %1 = reshape(%x) shape=(4,2) : f32[4,2]
          %3 = reshape(%x) shape=(8,) : f32[8]
          %4 = exp(%1) : f32[4,2]
          %6 = add(%4, %4) : f32[4,2]
          return %6 as s, %3 as r3
        }
        """,
    )


def test_cse_merges_small_equal_constants_only():
    g = Graph("consts")
    x = g.add_input("x", TensorType((3,)))
    a = g.add_const(np.array([1.0, 2.0, 3.0], np.float32))
    b = g.add_const(np.array([1.0, 2.0, 3.0], np.float32))
    c = g.add_const(np.array([1.0, 2.0, 3.0], np.float64))  # other dtype: kept
    big = np.ones(MAX_CONST_BYTES // 4 + 1, np.float32)  # too big to compare: kept
    (y1,) = g.add_node("add", [x, a])
    (y2,) = g.add_node("add", [x, b])
    (z,) = g.add_node("cast", [c], {"to": "float32"})
    (w,) = g.add_node("add", [g.add_const(big), g.add_const(big)])
    g.set_outputs([("y1", y1), ("y2", y2), ("z", z), ("w", w)])
    check_pass(
        g,
        cse,
        """
        graph consts(%x: f32[3]) {
          %c1 = constant f32[3] [1.,2.,3.]
          %c3 = constant f64[3] [1.,2.,3.]
          %4 = add(%x, %c1) : f32[3]
          %6 = cast(%c3) to=float32 : f32[3]
          %c7 = constant f32[4097]
          %c8 = constant f32[4097]
          %9 = add(%c7, %c8) : f32[4097]
          return %4 as y1, %4 as y2, %6 as z, %9 as w
        }
        """,
    )


def test_cse_merges_multi_output_nodes():
    g = Graph("split")
    x = g.add_input("x", TensorType((6,)))
    p = g.add_node("split", [x], {"axis": 0, "sizes": (3, 3)})
    q = g.add_node("split", [x], {"axis": 0, "sizes": (3, 3)})
    (a,) = g.add_node("mul", [p[0], q[1]])
    (b,) = g.add_node("mul", [q[0], p[1]])
    g.set_outputs([("a", a), ("b", b)])
    check_pass(
        g,
        cse,
        """
        graph split(%x: f32[6]) {
          %1 = split(%x) axis=0 sizes=(3,3) : f32[3], f32[3]
          %3 = mul(%1.0, %1.1) : f32[3]
          return %3 as a, %3 as b
        }
        """,
    )


# ---- toolkit ----------------------------------------------------------------------------
def test_copy_graph_is_independent():
    g = Graph("orig")
    x = g.add_input("x", TensorType((2,)))
    (y,) = g.add_node("relu", [x])
    g.set_outputs([("y", y)])
    text = print_graph(g)
    h = copy_graph(g)
    (z,) = h.add_node("exp", [y])
    h.set_outputs([("z", z)])
    assert print_graph(g) == text
    assert z.node not in g.nx and z.node == 2


def test_rewrite_that_never_settles_is_an_error():
    def churn(g: Graph, nid: int) -> bool:  # relu(x) -> relu(x): always fires
        return replace(g, nid, [add_op(g, "relu", g.inputs_of(nid))])

    g = Graph("loop")
    (y,) = g.add_node("relu", [g.add_input("x", TensorType((2,)))])
    g.set_outputs([("y", y)])
    with pytest.raises(RuntimeError, match="churn.*fixed point"):
        rewrite(g, [("relu", churn)])
