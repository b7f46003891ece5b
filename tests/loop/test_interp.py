"""The reference interpreter follows the IR's semantics and catches bad memory use."""

import numpy as np
import pytest

from tensorir.loop.interp import InterpError, run
from tensorir.loop.ir import (
    Allocate,
    BinOp,
    Broadcast,
    Buffer,
    Call,
    Cast,
    Const,
    For,
    ForKind,
    If,
    LetStmt,
    Load,
    LoopFunc,
    Ramp,
    Select,
    Seq,
    Store,
    Var,
)

i = Var("i")
F = Buffer("F", (8,))
I = Buffer("I", (8,), "int64")


def loop(extent, body):
    return For(i, Const(0), Const(extent), ForKind.SERIAL, body)


def test_integer_division_semantics():
    a, b = Const(-7), Const(2)
    body = Seq((Store(I, Const(0), BinOp("/", a, b)), Store(I, Const(1), a // b), Store(I, Const(2), a % b)))
    out = np.zeros(8, np.int64)
    run(LoopFunc("f", (I,), body), [out])
    assert list(out[:3]) == [-3, -4, 1]


def test_float32_rounding_and_intrinsics():
    x = Load(F, i)
    body = loop(4, Store(F, i + 4, Call("exp", (x,)) + Cast("float32", i)))
    data = np.array([0, 1, 2, 3, 0, 0, 0, 0], np.float32)
    run(LoopFunc("f", (F,), body), [data])
    np.testing.assert_allclose(data[4:], np.exp(data[:4]) + np.arange(4), rtol=1e-6)
    assert data.dtype == np.float32


def test_vectors_and_select():
    r = Ramp(Const(0), Const(2), 4)
    zero, minus_one = Broadcast(Const(0.0, "float32"), 4), Broadcast(Const(-1.0, "float32"), 4)
    body = Store(F, Ramp(Const(1), Const(2), 4), Select(Load(F, r) > zero, Load(F, r), minus_one))
    data = np.array([1, 0, -2, 0, 3, 0, -4, 0], np.float32)
    run(LoopFunc("f", (F,), body), [data])
    assert list(data[1::2]) == [1, -1, 3, -1]


def test_out_of_bounds_is_an_error():
    with pytest.raises(InterpError, match="out of bounds for F"):
        run(LoopFunc("f", (F,), loop(9, Store(F, i, Const(0.0, "float32")))), [np.zeros(8, np.float32)])
    with pytest.raises(InterpError, match="out of bounds"):
        run(LoopFunc("f", (F,), Store(F, Const(-1), Const(0.0, "float32"))), [np.zeros(8, np.float32)])


def test_uninitialised_local_reads_are_nan():
    t = Buffer("t", (2,), scope="local")
    body = Allocate(
        t, Seq((Store(t, Const(0), Const(1.0, "float32")), Store(F, Const(0), Load(t, Const(1)))))
    )
    out = np.zeros(8, np.float32)
    run(LoopFunc("f", (F,), body), [out])
    assert np.isnan(out[0])


def test_let_if_and_scalar_params():
    n = Var("n")
    body = LetStmt(
        Var("x"), n * 2, If(Var("x") > 4, Store(I, Const(0), Var("x")), Store(I, Const(0), Const(-1)))
    )
    out = np.zeros(8, np.int64)
    run(LoopFunc("f", (I, n), body), [out, 3])
    assert out[0] == 6


def test_bad_arguments():
    f = LoopFunc("f", (F,), Seq(()))
    with pytest.raises(InterpError, match="float32 array of 8"):
        run(f, [np.zeros(8, np.float64)])
    with pytest.raises(InterpError, match="takes 1 arguments"):
        run(f, [])
