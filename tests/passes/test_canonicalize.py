"""canonicalize: gemm/matmul -> dense, sub/div by constants -> add/mul, identity removed;
and the dense op it introduces."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tensorir.errors import ShapeError
from tensorir.graph.graph import Graph
from tensorir.graph.printer import print_graph
from tensorir.graph.types import TensorType
from tensorir.ops.registry import get_op
from tensorir.passes.canonicalize import canonicalize

from .helpers import check_pass, const


def _gemm(attrs: dict, a_const: bool = False, b_const: bool = True, c: str = "const") -> Graph:
    """gemm of A' (3, 4) by B' (4, 5) with a bias c of shape (5,): const, input or none."""
    g = Graph("gemm")
    ta, tb = attrs.get("trans_a", 0), attrs.get("trans_b", 0)
    a_shape, b_shape = (4, 3) if ta else (3, 4), (5, 4) if tb else (4, 5)
    a = const(g, a_shape, 1) if a_const else g.add_input("a", TensorType(a_shape))
    b = const(g, b_shape, 2) if b_const else g.add_input("b", TensorType(b_shape))
    ins = [a, b]
    if c == "const":
        ins.append(const(g, (5,), 3))
    elif c == "input":
        ins.append(g.add_input("c", TensorType((5,))))
    (y,) = g.add_node("gemm", ins, {"alpha": 1.0, "beta": 1.0, "trans_a": 0, "trans_b": 0, **attrs})
    g.set_outputs([("y", y)])
    return g


def test_gemm_trans_b_becomes_dense_plus_bias():
    check_pass(
        _gemm({"trans_b": 1}),
        canonicalize,
        """
        graph gemm(%a: f32[3,4]) {
          %c1 = constant f32[5,4]
          %c2 = constant f32[5] [ 2.040919  ,-2.555665  , 0.41809884,-0.5677696 ,-0.4526493 ]
          %4 = dense(%a, %c1) : f32[3,5]
          %5 = add(%4, %c2) : f32[3,5]
          return %5 as y
        }
        """,
    )


def test_gemm_constant_b_is_transposed_and_scaled_at_compile_time():
    g = check_pass(
        _gemm({"alpha": 0.5, "beta": 2.0}),
        canonicalize,
        """
        graph gemm(%a: f32[3,4]) {
          %c4 = constant f32[5,4]
          %5 = dense(%a, %c4) : f32[3,5]
          %c6 = constant f32[5] [ 4.081838 ,-5.11133  , 0.8361977,-1.1355392,-0.9052986]
          %7 = add(%5, %c6) : f32[3,5]
          return %7 as y
        }
        """,
    )
    b = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(g.node(4).value, 0.5 * b.T, rtol=1e-6)
    assert g.node(4).value.flags.c_contiguous


def test_gemm_with_inputs_gets_transpose_and_mul_ops():
    g = _gemm({"trans_a": 1, "alpha": 2.0, "beta": 0.5}, b_const=False, c="input")
    check_pass(
        g,
        canonicalize,
        """
        graph gemm(%a: f32[4,3], %b: f32[4,5], %c: f32[5]) {
          %4 = transpose(%a) perm=(1,0) : f32[3,4]
          %5 = transpose(%b) perm=(1,0) : f32[5,4]
          %6 = dense(%4, %5) : f32[3,5]
          %c7 = constant f32[] [2.]
          %8 = mul(%6, %c7) : f32[3,5]
          %c9 = constant f32[] [0.5]
          %10 = mul(%c, %c9) : f32[5]
          %11 = add(%8, %10) : f32[3,5]
          return %11 as y
        }
        """,
    )


def test_gemm_alpha_goes_into_a_constant_a():
    check_pass(
        _gemm({"alpha": 3.0, "trans_a": 1}, a_const=True, b_const=False, c="none"),
        canonicalize,
        """
        graph gemm(%b: f32[4,5]) {
          %c3 = constant f32[3,4]
          %4 = transpose(%b) perm=(1,0) : f32[5,4]
          %5 = dense(%c3, %4) : f32[3,5]
          return %5 as y
        }
        """,
    )


def test_gemm_beta_zero_drops_the_bias():
    check_pass(
        _gemm({"beta": 0.0, "trans_b": 1}),
        canonicalize,
        """
        graph gemm(%a: f32[3,4]) {
          %c1 = constant f32[5,4]
          %4 = dense(%a, %c1) : f32[3,5]
          return %4 as y
        }
        """,
    )


def test_integer_gemm_with_float_alpha_is_left_alone():
    g = Graph("igemm")
    a = g.add_input("a", TensorType((2, 3), "int32"))
    b = g.add_const(np.arange(12, dtype=np.int32).reshape(3, 4))
    (y,) = g.add_node("gemm", [a, b], {"alpha": 2.0})
    g.set_outputs([("y", y)])
    check_pass(g, canonicalize, None)


def test_integer_gemm_without_scaling_becomes_dense():
    g = Graph("igemm")
    a = g.add_input("a", TensorType((2, 3), "int32"))
    b = g.add_const(np.arange(12, dtype=np.int32).reshape(3, 4))
    (y,) = g.add_node("gemm", [a, b])
    g.set_outputs([("y", y)])
    check_pass(
        g,
        canonicalize,
        """
        graph igemm(%a: i32[2,3]) {
          %c3 = constant i32[4,3]
          %4 = dense(%a, %c3) : i32[2,4]
          return %4 as y
        }
        """,
    )


def _matmul(x_shape: tuple[int, ...], w_shape: tuple[int, ...], w_const: bool = True) -> Graph:
    g = Graph("mm")
    x = g.add_input("x", TensorType(x_shape))
    w = const(g, w_shape, 1) if w_const else g.add_input("w", TensorType(w_shape))
    (y,) = g.add_node("matmul", [x, w])
    g.set_outputs([("y", y)])
    return g


def test_matmul_by_constant_matrix_becomes_dense():
    check_pass(
        _matmul((3, 4), (4, 5)),
        canonicalize,
        """
        graph mm(%x: f32[3,4]) {
          %c3 = constant f32[5,4]
          %4 = dense(%x, %c3) : f32[3,5]
          return %4 as y
        }
        """,
    )


def test_batched_matmul_by_constant_matrix_is_reshaped_around_dense():
    check_pass(
        _matmul((2, 3, 4), (4, 5)),
        canonicalize,
        """
        graph mm(%x: f32[2,3,4]) {
          %3 = reshape(%x) shape=(6,4) : f32[6,4]
          %c4 = constant f32[5,4]
          %5 = dense(%3, %c4) : f32[6,5]
          %6 = reshape(%5) shape=(2,3,5) : f32[2,3,5]
          return %6 as y
        }
        """,
    )


def test_vector_matmul_by_constant_matrix():
    check_pass(
        _matmul((4,), (4, 5)),
        canonicalize,
        """
        graph mm(%x: f32[4]) {
          %3 = reshape(%x) shape=(1,4) : f32[1,4]
          %c4 = constant f32[5,4]
          %5 = dense(%3, %c4) : f32[1,5]
          %6 = reshape(%5) shape=(5,) : f32[5]
          return %6 as y
        }
        """,
    )


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "w_const"),
    [((3, 4), (4, 5), False), ((2, 3, 4), (2, 4, 5), True), ((3, 4), (4,), True)],
)
def test_other_matmuls_are_left_alone(x_shape, w_shape, w_const):
    check_pass(_matmul(x_shape, w_shape, w_const), canonicalize, None)


def _binary(op: str, c: np.ndarray, dtype: str = "float32", const_first: bool = False) -> Graph:
    g = Graph(op)
    x = g.add_input("x", TensorType((2, 3), dtype))
    k = g.add_const(c)
    (y,) = g.add_node(op, [k, x] if const_first else [x, k])
    g.set_outputs([("y", y)])
    return g


def test_sub_constant_becomes_add_of_negation():
    check_pass(
        _binary("sub", np.array([1.0, -2.0, 0.5], np.float32)),
        canonicalize,
        """
        graph sub(%x: f32[2,3]) {
          %c3 = constant f32[3] [-1. , 2. ,-0.5]
          %4 = add(%x, %c3) : f32[2,3]
          return %4 as y
        }
        """,
    )


def test_div_constant_becomes_mul_by_reciprocal():
    check_pass(
        _binary("div", np.array([4.0, -0.5, 8.0], np.float32)),
        canonicalize,
        """
        graph div(%x: f32[2,3]) {
          %c3 = constant f32[3] [ 0.25 ,-2.   , 0.125]
          %4 = mul(%x, %c3) : f32[2,3]
          return %4 as y
        }
        """,
    )


@pytest.mark.filterwarnings("ignore:divide by zero")
def test_div_by_zero_matches_mul_by_inf():
    g = _binary("div", np.array([0.0, 1.0, -0.0], np.float32))
    check_pass(
        g,
        canonicalize,
        """
        graph div(%x: f32[2,3]) {
          %c3 = constant f32[3] [ inf,  1.,-inf]
          %4 = mul(%x, %c3) : f32[2,3]
          return %4 as y
        }
        """,
    )


@pytest.mark.parametrize(
    "g",
    [
        _binary("div", np.array([2, 3, 4], np.int32), "int32"),
        _binary("sub", np.array([2, 3, 4], np.int32), "int32"),
        _binary("sub", np.array([1.0, 2.0, 3.0], np.float32), const_first=True),
        _binary("div", np.array([1.0, 2.0, 3.0], np.float32), const_first=True),
    ],
    ids=["int-div", "int-sub", "const-minus-x", "const-over-x"],
)
def test_integer_and_reversed_sub_div_are_left_alone(g):
    check_pass(g, canonicalize, None)


def test_identity_is_removed_even_as_an_output():
    g = Graph("ident")
    x = g.add_input("x", TensorType((2, 3)))
    (i1,) = g.add_node("identity", [x])
    (r,) = g.add_node("relu", [i1])
    (i2,) = g.add_node("identity", [r])
    (i3,) = g.add_node("identity", [x])
    g.set_outputs([("y", i2), ("z", i3)])
    check_pass(
        g,
        canonicalize,
        """
        graph ident(%x: f32[2,3]) {
          %2 = relu(%x) : f32[2,3]
          return %2 as y, %x as z
        }
        """,
    )


def test_flatten_reshape_is_left_alone():
    g = Graph("flat")
    x = g.add_input("x", TensorType((1, 8, 1, 1)))
    (y,) = g.add_node("reshape", [x], {"shape": (1, 8)})
    g.set_outputs([("y", y)])
    check_pass(g, canonicalize, None)


# ---- the dense op ---------------------------------------------------------------------
def test_dense_reference_is_x_times_w_transposed():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    (y,) = get_op("dense").run_reference([x, w], {})
    assert y.dtype == np.float32 and y.shape == (3, 5)
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-6, atol=1e-6)
    xi, wi = np.arange(6, dtype=np.int64).reshape(2, 3), np.arange(12, dtype=np.int64).reshape(4, 3)
    (yi,) = get_op("dense").run_reference([xi, wi], {})
    assert yi.dtype == np.int64 and np.array_equal(yi, xi @ wi.T)


@pytest.mark.parametrize(
    ("x", "w", "match"),
    [
        ((3, 4), (4, 5), "inner dims differ"),
        ((2, 3, 4), (5, 4), "must be matrices"),
        ((3, 4), (5,), "must be matrices"),
    ],
)
def test_dense_shape_errors(x, w, match):
    g = Graph()
    xv, wv = g.add_input("x", TensorType(x)), g.add_input("w", TensorType(w))
    with pytest.raises(ShapeError, match=match):
        g.add_node("dense", [xv, wv])


def test_dense_dtype_mismatch_is_an_error():
    g = Graph()
    xv, wv = g.add_input("x", TensorType((2, 3))), g.add_input("w", TensorType((4, 3), "float64"))
    with pytest.raises(ShapeError, match="share one dtype"):
        g.add_node("dense", [xv, wv])


def _spelled_hard_swish(x_users: int = 2) -> Graph:
    """Paddle's hard swish: x * clip(x + 3, 0, 6) / 6 on x = 4 * input (so both bends are hit);
    x_users=3 lets a third op read x."""
    g = Graph("hswish")
    a = g.add_input("a", TensorType((2, 8)))
    (x,) = g.add_node("mul", [a, g.add_const(np.array(4.0, np.float32))])
    (s,) = g.add_node("add", [x, g.add_const(np.array(3.0, np.float32))])
    (c,) = g.add_node("clip", [s], {"min": 0.0, "max": 6.0})
    (m,) = g.add_node("mul", [x, c])
    (y,) = g.add_node("div", [m, g.add_const(np.array(6.0, np.float32))])
    outs = [("y", y)]
    if x_users == 3:
        (z,) = g.add_node("relu", [x])
        outs.append(("z", z))
    g.set_outputs(outs)
    return g


def test_spelled_out_hard_swish_becomes_one_op():
    """The div by 6 becomes a mul by 1/6 first; then the chain is matched whole."""
    check_pass(
        _spelled_hard_swish(),
        canonicalize,
        """
        graph hswish(%a: f32[2,8]) {
          %c1 = constant f32[] [4.]
          %2 = mul(%a, %c1) : f32[2,8]
          %11 = hard_swish(%2) : f32[2,8]
          return %11 as y
        }
        """,
    )


def test_hard_swish_whose_input_is_read_elsewhere_is_left_spelled_out():
    g = _spelled_hard_swish(x_users=3)
    canonicalize(g)
    text = print_graph(g)
    assert "hard_swish" not in text and "clip(" in text


def _spelled_gelu(form: str = "torch", x_users: int = 2, half: float = 0.5) -> Graph:
    """The exact GELU written out on x = 2 * input: PyTorch's x * 0.5 * (1 + erf(x / sqrt 2))
    ("torch": (x * 0.5) * (erf + 1)) or x * (erf + 1) * 0.5 ("nested")."""
    g = Graph("gelu")
    a = g.add_input("a", TensorType((4, 8)))
    (x,) = g.add_node("mul", [a, g.add_const(np.array(2.0, np.float32))])
    (s,) = g.add_node("div", [x, g.add_const(np.array(math.sqrt(2), np.float32))])
    (e,) = g.add_node("erf", [s])
    (t,) = g.add_node("add", [e, g.add_const(np.array(1.0, np.float32))])
    c_half = g.add_const(np.array(half, np.float32))
    if form == "torch":
        (h,) = g.add_node("mul", [x, c_half])
        (y,) = g.add_node("mul", [h, t])
    else:
        (m,) = g.add_node("mul", [x, t])
        (y,) = g.add_node("mul", [m, c_half])
    outs = [("y", y)]
    if x_users == 3:
        (z,) = g.add_node("relu", [x])
        outs.append(("z", z))
    g.set_outputs(outs)
    return g


@pytest.mark.parametrize("form", ["torch", "nested"])
def test_spelled_out_gelu_becomes_one_op(form):
    check_pass(
        _spelled_gelu(form),
        canonicalize,
        """
        graph gelu(%a: f32[4,8]) {
          %c1 = constant f32[] [2.]
          %2 = mul(%a, %c1) : f32[4,8]
          %13 = gelu(%2) approximate=none : f32[4,8]
          return %13 as y
        }
        """,
    )


@pytest.mark.parametrize("case", ["x read elsewhere", "not a half"])
def test_gelu_lookalikes_stay_spelled_out(case):
    g = _spelled_gelu(x_users=3) if case == "x read elsewhere" else _spelled_gelu(half=0.25)
    canonicalize(g)
    text = print_graph(g)
    assert "= gelu(" not in text and "erf(" in text


def test_pow_two_becomes_a_square_and_other_exponents_stay():
    g = Graph("pow")
    x = g.add_input("x", TensorType((2, 3)))
    (y,) = g.add_node("pow", [x, g.add_const(np.array(2.0, np.float32))])
    (z,) = g.add_node("pow", [x, g.add_const(np.array([3.0], np.float32))])
    g.set_outputs([("y", y), ("z", z)])
    check_pass(
        g,
        canonicalize,
        """
        graph pow(%x: f32[2,3]) {
          %c3 = constant f32[1] [3.]
          %4 = pow(%x, %c3) : f32[2,3]
          %5 = mul(%x, %x) : f32[2,3]
          return %5 as y, %4 as z
        }
        """,
    )
    h = Graph("wider")  # a 2 of higher rank broadcasts: left alone
    x = h.add_input("x", TensorType((3,)))
    (y,) = h.add_node("pow", [x, h.add_const(np.full((1, 1), 2.0, np.float32))])
    h.set_outputs([("y", y)])
    check_pass(h, canonicalize, None)
