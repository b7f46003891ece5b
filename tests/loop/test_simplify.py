"""Simplifier rules: before -> after on printed text, under known loop ranges."""

import pytest

from tensorir.loop.ir import (
    BinOp,
    Buffer,
    Cast,
    Cmp,
    Const,
    For,
    ForKind,
    If,
    Load,
    Not,
    Select,
    Seq,
    Store,
    Var,
)
from tensorir.loop.printer import expr_text, to_text
from tensorir.loop.simplify import BINOP_RULES, RULES, Wild, match, rewrite, simplify

i, j, k, n = Var("i"), Var("j"), Var("k"), Var("n")
x = Var("x", "float32")
RANGES = {i: (0, 3), j: (0, 7), k: (0, 15)}
A = Buffer("A", (64,))
C = Buffer("C", (64,))
f32 = "float32"


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (Const(2) + Const(3) * Const(4), "14"),  # constant folding
        (Const(7) // Const(2), "3"),
        (Const(-7) // Const(2), "-4"),  # floor division
        (Const(-7) % Const(3), "2"),  # floor modulo
        (BinOp("/", Const(-7), Const(2)), "-3"),  # integer / truncates
        (Const(1.5, f32) * Const(2.0, f32), "3.0"),
        (n + 0, "n"),  # x + 0 -> x
        (0 + n, "n"),
        (n * 1, "n"),  # x * 1 -> x
        (n * 0, "0"),  # x * 0 -> 0
        (x + 0.0, "x"),
        (x * 1.0, "x"),
        (x * 0.0, "x*0.0"),  # not folded for floats (NaN, inf)
        ((n * 4) * 2, "n*8"),  # (a*c1)*c2 -> a*(c1*c2)
        ((x * 4.0) * 2.0, "x*4.0*2.0"),  # floats are not reassociated
        ((i * 4 + j) * 16 + k, "i*64 + j*16 + k"),  # linear form
        (n - n, "0"),
        (3 + n - 5, "n - 2"),
        (0 - n * 2 + 5, "5 - n*2"),
        (j - i * 2, "j - i*2"),
        ((i * 8 + j) // 8, "i"),  # (x*c + y)//c -> x when 0 <= y < c
        ((i * 8 + j) % 8, "j"),  # (x*c + y)%c -> y when 0 <= y < c
        ((i * 8 + j + 1) // 8, "i + (j + 1)//8"),  # y may reach c: kept
        ((n * 8 + j) % 8, "j"),  # n unbounded, but its term divides out
        (j // 8, "0"),
        (k % 16, "k"),
        ((j - 1) // 8, "(j - 1)//8"),
        ((i * 8 + j) // 4 // 2, "i"),  # (x//a)//b -> x//(a*b)
        ((n % 16) % 4, "n%4"),
        ((n + 1) // 6 * 6 + (n + 1) % 6 + j, "n + j + 1"),  # (x//c)*c + x%c -> x
        (n % 49 // 7 * 7 + n % 7, "n%49"),  # (x%(c*k))//c*c + x%c -> x%(c*k)
        (n % 50 // 7 * 7 + n % 7, "n%50//7*7 + n%7"),  # 7 does not divide 50: kept
        (n // 12 * 12 + n // 4 % 3 * 4 + n % 4, "n"),  # a fused (.., 3, 4) index: flat again
        (n // 4 % 3 * 4 + n % 4, "n%12"),  # (x//c)%m*c + x%c -> x%(c*m)
        (n // 4 % 3 * 8 + n % 4, "n//4%3*8 + n%4"),  # coefficients that do not line up: kept
        (n // 1, "n"),
        (n % 1, "0"),
        (BinOp("min", i, j + 4), "i"),  # min/max of provable ranges
        (BinOp("max", i, j + 4), "j + 4"),
        (BinOp("min", n, n + 1), "n"),  # constant difference
        (BinOp("max", n, j), "max(n, j)"),
        (BinOp("max", x, x), "x"),
        (i < 4, "True"),
        (j >= 8, "False"),
        (i * 8 + j < 32, "True"),
        (i * 8 + j < 30, "i*8 + j < 30"),
        (Cmp("==", n, n), "True"),
        (Not(i < 4), "False"),
        (Not(n < 4), "n >= 4"),
        (Not(Not(n < 4)), "n < 4"),
        (Select(i < 4, x, x * 2.0), "x"),  # select with a constant condition
        (Select(n < 4, x, x), "x"),
        (Cast(f32, Const(3)), "3.0"),  # Cast of Const
        (Cast("int64", Const(-2.7, f32)), "-2"),  # truncation
        (Cast("int64", n), "n"),
        (BinOp("and", Const(True, "bool"), n < 2), "n < 2"),
        (BinOp("or", n < 2, Const(True, "bool")), "True"),
        (BinOp("and", n < 2, i < 9), "n < 2"),
    ],
)
def test_rule(before, after):
    assert expr_text(simplify(before, RANGES)) == after


def test_vector_select_with_a_uniform_condition():
    """select(broadcast(True/False, n), a, b) takes one arm (an unrolled quadrant of Strassen's
    output); a vector condition that varies by lane stays."""
    from tensorir.loop.ir import Broadcast, Ramp

    a, b = Load(A, Ramp(i * 16, 1, 4)), Load(C, Ramp(i * 16, 1, 4))
    true, false = Broadcast(Const(True, "bool"), 4), Broadcast(Const(False, "bool"), 4)
    assert expr_text(simplify(Select(true, a, b), RANGES)) == "A[ramp(i*16, 1, 4)]"
    assert expr_text(simplify(Select(false, a, Select(true, b, a)), RANGES)) == "C[ramp(i*16, 1, 4)]"
    varying = Select(Broadcast(n < 4, 4), a, b)
    assert expr_text(simplify(varying, RANGES)) == expr_text(varying)


def test_idempotent():
    e = simplify((i * 4 + j) * 16 + k - 3, RANGES)
    assert simplify(e, RANGES) == e


def test_rules_are_data():
    binds: dict = {}
    assert match(BinOp("+", Wild("x"), Wild("x")), n + n, binds) and binds["x"] == n
    assert not match(BinOp("+", Wild("x"), Wild("x")), n + i, {})
    assert all(len(rule) == 2 for rule in BINOP_RULES)
    assert rewrite(n + 0, RULES, {}) == n
    assert rewrite(n, RULES, {}) is None


def _loop(var, extent, body, start=0):
    return For(var, Const(start), Const(extent), ForKind.SERIAL, body)


def test_extent_one_loop_is_removed():
    s = _loop(i, 1, Store(C, (i * 8 + j) % 8 + i, Load(A, (j * 4 + 3) * 1)), start=2)
    assert to_text(simplify(s, RANGES)) == "C[j + 2] = A[j*4 + 3]"


def test_empty_loops_vanish_and_seqs_flatten():
    s = Seq((_loop(i, 0, Store(C, i, Const(0.0, f32))), Seq((Store(C, j, Const(1.0, f32)),)), Seq(())))
    assert to_text(simplify(s)) == "C[j] = 1.0"


def test_loop_ranges_drive_div_mod_and_guards():
    inner = If((i * 4 + j) < 16, Store(C, (i * 4 + j) // 4, Load(A, (i * 4 + j) % 4)))
    s = _loop(i, 4, _loop(j, 4, inner))
    assert to_text(simplify(s)) == "for i in range(0, 4):\n  for j in range(0, 4):\n    C[i] = A[j]"


def test_false_if_keeps_else_and_unknown_if_stays():
    s = If(n >= 10, Store(C, n, Const(0.0, f32)))
    assert to_text(simplify(If(Const(False, "bool"), s, Store(C, i, x)))) == "C[i] = x"
    assert to_text(simplify(s)) == "if n >= 10:\n  C[n] = 0.0"
    s2 = If(n < 3, Seq(()), Store(C, i, x))
    assert to_text(simplify(s2)) == "if n >= 3:\n  C[i] = x"


def test_guard_of_nondividing_split_is_kept():
    s = _loop(i, 3, _loop(j, 4, If(i * 4 + j < 10, Store(C, i * 4 + j, x))))
    assert "if i*4 + j < 10:" in to_text(simplify(s))


def test_what_was_simplified_is_forgotten_when_the_ranges_change():
    # one expression, i // 8, under two loops of i: 0 under range(0, 4), kept under range(0, 16);
    # the simplifier remembers results only while the loop ranges stay the same
    s = Seq((_loop(i, 4, Store(C, i // 8, x)), _loop(i, 16, Store(C, i // 8, x)), Store(C, i // 8, x)))
    assert to_text(simplify(s)) == (
        "for i in range(0, 4):\n  C[0] = x\nfor i in range(0, 16):\n  C[i//8] = x\nC[i//8] = x"
    )


def test_a_repeated_expression_simplifies_alike_each_time():
    e = (i * 4 + j) // 4
    s = Seq((Store(C, e, x), Store(C, e + 1, x), Store(C, e, x)))
    assert to_text(simplify(s, RANGES)) == "C[i + j//4] = x\nC[i + j//4 + 1] = x\nC[i + j//4] = x"
