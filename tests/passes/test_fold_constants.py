"""fold_constants: all-constant subgraphs become constants; big expansions and failing
references are left alone."""

from __future__ import annotations

import numpy as np

from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.passes.fold_constants import MAX_BYTES, fold_constants

from .helpers import check_pass, const


def test_transposed_weight_is_folded():
    g = Graph("fold")
    x = g.add_input("x", TensorType((4, 3)))
    (wt,) = g.add_node("transpose", [const(g, (2, 3))], {"perm": (1, 0)})
    (y,) = g.add_node("matmul", [x, wt])
    g.set_outputs([("y", y)])
    check_pass(
        g,
        fold_constants,
        """
        graph fold(%x: f32[4,3]) {
          %c4 = constant f32[3,2] [ 0.12573022, 0.10490011,-0.13210486,-0.5356694 , 0.64042264, 0.36159506]
          %3 = matmul(%x, %c4) : f32[4,2]
          return %3 as y
        }
        """,
    )
    np.testing.assert_array_equal(
        g.node(4).value, np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32).T
    )


def test_constant_chain_folds_to_one_constant_output():
    g = Graph("chain")
    x = g.add_input("x", TensorType((3,)))
    a = g.add_const(np.array([1.0, 2.0, 3.0], np.float32))
    b = g.add_const(np.array([0.5, 0.5, 2.0], np.float32))
    (s,) = g.add_node("add", [a, b])
    (p,) = g.add_node("mul", [s, b])
    (e,) = g.add_node("exp", [g.add_const(np.zeros(3, np.float32))])
    (y,) = g.add_node("add", [x, p])
    g.set_outputs([("y", y), ("p", p), ("e", e)])
    check_pass(
        g,
        fold_constants,
        """
        graph chain(%x: f32[3]) {
          %c9 = constant f32[3] [ 0.75, 1.25,10.  ]
          %7 = add(%x, %c9) : f32[3]
          %c10 = constant f32[3] [1.,1.,1.]
          return %7 as y, %c9 as p, %c10 as e
        }
        """,
    )


def test_multi_output_node_folds_only_used_outputs():
    g = Graph("split")
    x = g.add_input("x", TensorType((2,)))
    parts = g.add_node(
        "split", [g.add_const(np.arange(6, dtype=np.float32))], {"axis": 0, "sizes": (2, 1, 3)}
    )
    (y,) = g.add_node("add", [x, parts[0]])
    g.set_outputs([("y", y), ("last", parts[2])])
    check_pass(
        g,
        fold_constants,
        """
        graph split(%x: f32[2]) {
          %c4 = constant f32[2] [0.,1.]
          %3 = add(%x, %c4) : f32[2]
          %c5 = constant f32[3] [3.,4.,5.]
          return %3 as y, %c5 as last
        }
        """,
    )


def test_big_expansion_is_not_folded_small_one_is():
    g = Graph("expand")
    x = g.add_input("x", TensorType((1024, 512)))
    c = g.add_const(np.ones((1, 512), np.float32))
    (big,) = g.add_node("expand", [c], {"shape": (1024, 512)})  # 2 MiB from 2 KiB
    (small,) = g.add_node("expand", [c], {"shape": (4, 512)})  # 8 KiB: folded
    (y,) = g.add_node("add", [x, big])
    g.set_outputs([("y", y), ("s", small)])
    assert g.type_of(big).nbytes > MAX_BYTES
    check_pass(
        g,
        fold_constants,
        """
        graph expand(%x: f32[1024,512]) {
          %c1 = constant f32[1,512]
          %2 = expand(%c1) shape=(1024,512) : f32[1024,512]
          %4 = add(%x, %2) : f32[1024,512]
          %c5 = constant f32[4,512]
          return %4 as y, %c5 as s
        }
        """,
    )


def test_node_with_an_input_is_not_folded():
    g = Graph("live")
    x = g.add_input("x", TensorType((3,)))
    (y,) = g.add_node("add", [x, const(g, (3,))])
    g.set_outputs([("y", y)])
    check_pass(g, fold_constants, None)


def test_failing_reference_is_left_for_run_time():
    g = Graph("gather")
    x = g.add_input("x", TensorType((2,)))
    idx = g.add_const(np.array([0, 7], np.int64))  # 7 is out of range
    (v,) = g.add_node("gather", [g.add_const(np.arange(3, dtype=np.float32)), idx], {"axis": 0})
    (y,) = g.add_node("add", [x, v])
    g.set_outputs([("y", y)])
    assert not fold_constants(g)
    assert [g.node(n).op for n in g.op_nodes()] == ["gather", "add"]
