"""simplify: reshape/transpose chains, neutral constants, clip -> relu, cast chains,
elementwise constants moved before a reshape."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.passes.simplify import simplify

from .helpers import check_pass, const


def test_docstring_example_reshape_and_transpose_chains_and_clip():
    g = Graph("chain")
    x = g.add_input("x", TensorType((3, 8)))
    (r1,) = g.add_node("reshape", [x], {"shape": (6, 4)})
    (r2,) = g.add_node("reshape", [r1], {"shape": (2, 12)})
    (t1,) = g.add_node("transpose", [r2], {"perm": (1, 0)})
    (t2,) = g.add_node("transpose", [t1], {"perm": (1, 0)})
    (c,) = g.add_node("clip", [t2], {"min": 0.0})
    g.set_outputs([("y", c)])
    check_pass(
        g,
        simplify,
        """
        graph chain(%x: f32[3,8]) {
          %6 = reshape(%x) shape=(2,12) : f32[2,12]
          %7 = relu(%6) : f32[2,12]
          return %7 as y
        }
        """,
    )


def test_transpose_pair_composes_to_one_perm():
    g = Graph("perm")
    x = g.add_input("x", TensorType((2, 3, 4)))
    (t1,) = g.add_node("transpose", [x], {"perm": (0, 2, 1)})
    (t2,) = g.add_node("transpose", [t1], {"perm": (2, 0, 1)})
    (i,) = g.add_node("transpose", [t2], {"perm": (0, 1, 2)})
    g.set_outputs([("y", i)])
    check_pass(
        g,
        simplify,
        """
        graph perm(%x: f32[2,3,4]) {
          %4 = transpose(%x) perm=(1,0,2) : f32[3,2,4]
          return %4 as y
        }
        """,
    )


def test_reshape_to_same_shape_and_identity_are_removed():
    g = Graph("noop")
    x = g.add_input("x", TensorType((2, 3)))
    (r,) = g.add_node("reshape", [x], {"shape": (2, 3)})
    (i,) = g.add_node("identity", [r])
    (y,) = g.add_node("relu", [i])
    g.set_outputs([("y", y)])
    check_pass(
        g,
        simplify,
        """
        graph noop(%x: f32[2,3]) {
          %3 = relu(%x) : f32[2,3]
          return %3 as y
        }
        """,
    )


def test_shared_inner_reshape_stays_for_its_other_use():
    g = Graph("shared")
    x = g.add_input("x", TensorType((2, 6)))
    (r1,) = g.add_node("reshape", [x], {"shape": (3, 4)})
    (r2,) = g.add_node("reshape", [r1], {"shape": (12,)})
    g.set_outputs([("a", r1), ("b", r2)])
    check_pass(
        g,
        simplify,
        """
        graph shared(%x: f32[2,6]) {
          %1 = reshape(%x) shape=(3,4) : f32[3,4]
          %3 = reshape(%x) shape=(12,) : f32[12]
          return %1 as a, %3 as b
        }
        """,
    )


def test_neutral_constants_are_dropped_on_either_side():
    g = Graph("neutral")
    x = g.add_input("x", TensorType((2, 3)))
    one, zero = g.add_const(np.ones(3, np.float32)), g.add_const(np.float32(0))
    (a,) = g.add_node("mul", [one, x])
    (b,) = g.add_node("add", [a, zero])
    (c,) = g.add_node("sub", [b, zero])
    (d,) = g.add_node("div", [c, one])
    (e,) = g.add_node("mul", [d, one])
    g.set_outputs([("y", e)])
    check_pass(
        g,
        simplify,
        """
        graph neutral(%x: f32[2,3]) {
          return %x as y
        }
        """,
    )


@pytest.mark.parametrize(
    ("op", "c", "first"),
    [
        ("mul", np.ones((4, 1, 3), np.float32), False),  # broadcasts x to a bigger shape
        ("add", np.zeros(3, np.float64), True),  # result dtype would change
        ("sub", np.zeros(3, np.float32), True),  # 0 - x is not x
        ("mul", np.array([1, 1, 2], np.float32), False),  # not all ones
    ],
    ids=["broadcast", "dtype", "zero-minus-x", "not-neutral"],
)
def test_neutral_looking_constants_that_change_the_result_stay(op, c, first):
    g = Graph("keep")
    x = g.add_input("x", TensorType((2, 3)))
    k = g.add_const(c)
    (y,) = g.add_node(op, [k, x] if first else [x, k])
    g.set_outputs([("y", y)])
    check_pass(g, simplify, None)


@pytest.mark.parametrize(
    ("attrs", "expect"),
    [
        ({"min": 0.0, "max": float("inf")}, "relu"),
        ({"min": 0}, "relu"),
        ({}, None),
        ({"min": 0.0, "max": 6.0}, "clip"),
        ({"min": -1.0}, "clip"),
    ],
)
def test_clip_bounds(attrs, expect):
    g = Graph("clip")
    x = g.add_input("x", TensorType((2, 3)))
    (y,) = g.add_node("clip", [x], attrs)
    g.set_outputs([("y", y)])
    before = [g.node(n).op for n in g.op_nodes()]
    changed = simplify(g)
    assert [g.node(n).op for n in g.op_nodes()] == ([expect] if expect else [])
    assert changed == (before != [g.node(n).op for n in g.op_nodes()])


def test_cast_chains():
    g = Graph("casts")
    x = g.add_input("x", TensorType((4,), "float16"))
    (a,) = g.add_node("cast", [x], {"to": "float32"})
    (b,) = g.add_node("cast", [a], {"to": "float32"})  # same dtype again
    (c,) = g.add_node("cast", [b], {"to": "float64"})  # f16 -> f32 exact: reads x
    (d,) = g.add_node("cast", [x], {"to": "float16"})  # to its own dtype
    g.set_outputs([("c", c), ("d", d)])
    check_pass(
        g,
        simplify,
        """
        graph casts(%x: f16[4]) {
          %5 = cast(%x) to=float64 : f64[4]
          return %5 as c, %x as d
        }
        """,
    )


def test_lossy_cast_round_trip_stays():
    g = Graph("lossy")
    x = g.add_input("x", TensorType((4,), "float32"))
    (a,) = g.add_node("cast", [x], {"to": "float16"})
    (b,) = g.add_node("cast", [a], {"to": "float32"})
    (i,) = g.add_node("cast", [g.add_input("i", TensorType((4,), "int64"))], {"to": "float64"})
    (j,) = g.add_node("cast", [i], {"to": "int32"})  # int64 -> f64 is not exact
    g.set_outputs([("y", b), ("j", j)])
    check_pass(g, simplify, None)


def test_exact_int_cast_chain_is_shortened():
    g = Graph("ints")
    x = g.add_input("x", TensorType((4,), "int16"))
    (a,) = g.add_node("cast", [x], {"to": "float32"})
    (b,) = g.add_node("cast", [a], {"to": "int64"})
    g.set_outputs([("y", b)])
    check_pass(
        g,
        simplify,
        """
        graph ints(%x: i16[4]) {
          %3 = cast(%x) to=int64 : i64[4]
          return %3 as y
        }
        """,
    )


def test_bias_moves_before_the_reshape_back_from_dense():
    g = Graph("bias")
    x = g.add_input("x", TensorType((6, 4)))
    (d,) = g.add_node("dense", [x, const(g, (5, 4), 1)])
    (r,) = g.add_node("reshape", [d], {"shape": (2, 3, 5)})
    (a,) = g.add_node("add", [r, const(g, (1, 1, 5), 2)])
    (m,) = g.add_node("mul", [g.add_const(np.float32(0.5)), a])
    (r2,) = g.add_node("reshape", [m], {"shape": (2, 15)})
    g.set_outputs([("y", r2)])
    check_pass(
        g,
        simplify,
        """
        graph bias(%x: f32[6,4]) {
          %c1 = constant f32[5,4]
          %2 = dense(%x, %c1) : f32[6,5]
          %c6 = constant f32[] [0.5]
          %c9 = constant f32[5] [ 0.18905339,-0.5227485 ,-0.41306356,-2.4414673 , 1.7997074 ]
          %10 = add(%2, %c9) : f32[6,5]
          %12 = mul(%c6, %10) : f32[6,5]
          %14 = reshape(%12) shape=(2,15) : f32[2,15]
          return %14 as y
        }
        """,
    )


def test_constant_varying_along_other_axes_stays_after_reshape():
    g = Graph("keep")
    x = g.add_input("x", TensorType((6, 5)))
    (r,) = g.add_node("reshape", [x], {"shape": (2, 3, 5)})
    (a,) = g.add_node("add", [r, const(g, (3, 1), 2)])
    (r2,) = g.add_node("reshape", [x], {"shape": (3, 10)})
    (b,) = g.add_node("add", [r2, const(g, (10,), 3)])  # last axis changed by the reshape
    g.set_outputs([("a", a), ("b", b)])
    check_pass(g, simplify, None)


def test_squeeze_excite_vector_reshaped_then_transposed_is_one_reshape():
    """[1, C] -> NHWC [1, 1, 1, C] -> NCHW [1, C, 1, 1]: only unit axes move, so no transpose."""
    g = Graph("se")
    x = g.add_input("x", TensorType((1, 8)))
    (r,) = g.add_node("reshape", [x], {"shape": (1, 1, 1, 8)})
    (t,) = g.add_node("transpose", [r], {"perm": (0, 3, 1, 2)})
    g.set_outputs([("y", t)])
    check_pass(
        g,
        simplify,
        """
        graph se(%x: f32[1,8]) {
          %3 = reshape(%x) shape=(1,8,1,1) : f32[1,8,1,1]
          return %3 as y
        }
        """,
    )


def test_classifier_output_transposed_back_then_flattened_is_one_reshape():
    """A 1x1 conv classifier's [1, K, 1, 1] taken to NHWC and flattened to [1, K]."""
    g = Graph("head")
    x = g.add_input("x", TensorType((1, 5, 1, 1)))
    (t,) = g.add_node("transpose", [x], {"perm": (0, 2, 3, 1)})
    (r,) = g.add_node("reshape", [t], {"shape": (1, 5)})
    g.set_outputs([("y", r)])
    check_pass(
        g,
        simplify,
        """
        graph head(%x: f32[1,5,1,1]) {
          %3 = reshape(%x) shape=(1,5) : f32[1,5]
          return %3 as y
        }
        """,
    )


@pytest.mark.parametrize(
    ("shape", "perm"),
    [((1, 2, 1, 3), (0, 3, 1, 2)), ((2, 1, 1, 3), (3, 1, 2, 0))],  # the non-unit axes change order
)
def test_transposes_that_reorder_data_stay(shape, perm):
    g = Graph("real")
    n = int(np.prod(shape))
    x = g.add_input("x", TensorType((n,)))
    (r,) = g.add_node("reshape", [x], {"shape": shape})
    (t,) = g.add_node("transpose", [r], {"perm": perm})
    (r2,) = g.add_node("reshape", [t], {"shape": (n,)})
    g.set_outputs([("y", r2)])
    check_pass(g, simplify, None)


def _dense_then_reshape(g: Graph, x, name: str = "d"):
    """dense(x) + bias, reshaped to 3-D: a transformer's linear layer as exported."""
    (d,) = g.add_node("dense", [x, const(g, (32, 6), seed=1)], name=name)
    (b,) = g.add_node("add", [d, const(g, (32,), seed=2)])
    (r,) = g.add_node("reshape", [b], {"shape": (1, 4, 32)})
    return r


def test_activation_and_residual_move_below_the_reshape_to_their_dense():
    """GELU and the residual adds end up on the dense's 2-D output, so fuse_ops can take them
    into its epilogue; the residual's reshape is a view."""
    g = Graph("ffn")
    x = g.add_input("x", TensorType((4, 6)))
    skip = g.add_input("skip", TensorType((1, 4, 32)))
    (a,) = g.add_node("gelu", [_dense_then_reshape(g, x)], {"approximate": "none"})
    (y,) = g.add_node("add", [a, skip])
    (z,) = g.add_node("add", [_dense_then_reshape(g, x, "e"), skip])
    g.set_outputs([("y", y), ("z", z)])
    check_pass(
        g,
        simplify,
        """
        graph ffn(%x: f32[4,6], %skip: f32[1,4,32]) {
          %c2 = constant f32[32,6]
          %3 = dense(%x, %c2) : f32[4,32]
          %c4 = constant f32[32]
          %5 = add(%3, %c4) : f32[4,32]
          %c9 = constant f32[32,6]
          %10 = dense(%x, %c9) : f32[4,32]
          %c11 = constant f32[32]
          %12 = add(%10, %c11) : f32[4,32]
          %15 = gelu(%5) approximate=none : f32[4,32]
          %17 = reshape(%skip) shape=(4,32) : f32[4,32]
          %18 = add(%15, %17) : f32[4,32]
          %19 = reshape(%18) shape=(1,4,32) : f32[1,4,32]
          %20 = reshape(%skip) shape=(4,32) : f32[4,32]
          %21 = add(%12, %20) : f32[4,32]
          %22 = reshape(%21) shape=(1,4,32) : f32[1,4,32]
          return %19 as y, %22 as z
        }
        """,
    )


def test_residual_between_two_dense_outputs_stays_put():
    """Both operands come from anchors: moving the reshape either way would only move it
    back, so the rule leaves the add."""
    g = Graph("two")
    x = g.add_input("x", TensorType((4, 6)))
    (y,) = g.add_node("add", [_dense_then_reshape(g, x), _dense_then_reshape(g, x, "e")])
    g.set_outputs([("y", y)])
    simplify(g)
    assert sum(g.node(n).op == "reshape" for n in g.op_nodes()) == 2
