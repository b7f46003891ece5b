"""Each invariant the verifier checks, with the statement named in the message."""

import pytest

from tensorir.loop.ir import (
    Allocate,
    BinOp,
    Broadcast,
    Buffer,
    Call,
    Const,
    For,
    ForKind,
    If,
    LetStmt,
    Load,
    LoopFunc,
    Ramp,
    Select,
    Store,
    Var,
)
from tensorir.loop.verify import VerifyError, verify

i, j, n = Var("i"), Var("i"), Var("n")
A = Buffer("A", (16,))
C = Buffer("C", (16,))
ZERO = Const(0.0, "float32")


def loop(var, extent, body, kind=ForKind.SERIAL):
    return For(var, Const(0), extent if not isinstance(extent, int) else Const(extent), kind, body)


def func(body, params=(A, C)):
    return LoopFunc("f", params, body)


def test_good_function_passes():
    body = loop(
        Var("i"), 4, Store(C, Ramp(Var("i") * 4, Const(1), 4), Load(A, Ramp(Var("i") * 4, Const(1), 4)))
    )
    verify(func(body))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (Store(C, Var("i"), ZERO), "variable i used before definition"),
        (loop(Var("i"), 4, loop(Var("i"), 4, Store(C, Var("i"), ZERO))), "already defined"),
        (loop(Var("i"), 4, Store(Buffer("T", (4,)), Var("i"), ZERO)), "neither a parameter nor allocated"),
        (loop(Var("i"), 4, Store(Buffer("C", (8,)), Var("i"), ZERO)), "does not match its declaration"),
        (loop(Var("i"), 4, Store(C, Var("i"), Const(0, "int32"))), "storing int32 into float32"),
        (loop(Var("i"), 4, Store(C, Var("i"), Load(A, Var("i")) + Const(1, "int64"))), "differ in dtype"),
        (loop(Var("i"), 4, Store(C, Var("i"), Broadcast(ZERO, 4))), "store of 4 lanes"),
        (loop(Var("i"), 4, Store(C, Load(A, Var("i")), ZERO)), "must be an integer"),
        (loop(Var("i"), n, Store(C, Var("i"), ZERO), ForKind.VECTORIZED), "constant extent"),
        (loop(Var("i"), 4, If(Var("i"), Store(C, Var("i"), ZERO))), "scalar bool"),
        (loop(Var("i"), 4, Store(C, Var("i"), Call("bogus", (ZERO,)))), "unknown intrinsic"),
        (loop(Var("i"), 4, Store(C, Var("i"), BinOp("**", ZERO, ZERO))), "unknown binary operator"),
        (loop(Var("i"), 4, Store(C, Var("i"), Select(Var("i"), ZERO, ZERO))), "select condition"),
        (loop(Var("i"), 20, Store(C, Var("i"), ZERO)), "index range [0, 19] is outside C"),
        (Store(C, Const(-1), ZERO), "outside C"),
        (LetStmt(Var("x"), ZERO, Store(C, Const(0), ZERO)), "let binds float32 to int64"),
        (Allocate(Buffer("A", (2,)), Store(C, Const(0), ZERO)), "already defined"),
        (Store(C, Ramp(Const(0), Const(1), 1), Broadcast(ZERO, 1)), "at least 2 lanes"),
    ],
)
def test_violation(body, message):
    with pytest.raises(VerifyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        verify(func(body, (A, C, n)))


def test_message_names_statement():
    body = loop(Var("i"), 4, Store(C, Var("k"), ZERO))
    with pytest.raises(VerifyError, match=r"in `C\[k\] = 0.0`"):
        verify(func(body))


def test_bounds_not_checked_under_guards_or_when_disabled():
    guarded = loop(Var("i"), 20, If(Var("i") < 16, Store(C, Var("i"), ZERO)))
    verify(func(guarded))
    verify(func(loop(Var("i"), 20, Store(C, Var("i"), ZERO))), check_bounds=False)


def test_sibling_loops_may_reuse_a_name():
    s = loop(Var("i"), 4, Store(C, Var("i"), ZERO))
    from tensorir.loop.ir import Seq

    verify(func(Seq((s, s))))
