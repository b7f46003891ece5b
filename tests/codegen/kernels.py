"""Hand-built LoopFuncs with numpy references, shared by the host and ARM64 tests.

Each case: a LoopFunc, a function making its arguments (arrays in param order) and a
function giving the expected final value of every argument it writes ({index: array}).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tensorir.loop.ir import (
    Allocate,
    BinOp,
    Broadcast,
    Buffer,
    Call,
    Cast,
    Cmp,
    Const,
    For,
    ForKind,
    If,
    LetStmt,
    Load,
    LoopFunc,
    Not,
    Ramp,
    Select,
    Seq,
    Store,
    Var,
)


@dataclass
class Case:
    func: LoopFunc
    make: Callable[[np.random.Generator], list]
    expect: Callable[[list], dict[int, np.ndarray]]
    rtol: float = 1e-6
    atol: float = 1e-6


def f32(v: float) -> Const:
    return Const(v, "float32")


def vramp(base, lanes: int, stride: int = 1) -> Ramp:
    return Ramp(base, Const(stride), lanes)


def add_scalar(n: int = 1000) -> Case:
    A, B, C = (Buffer(x, (n,)) for x in "ABC")
    i = Var("i")
    f = LoopFunc(
        "add_scalar",
        (A, B, C),
        For(i, Const(0), Const(n), ForKind.SERIAL, Store(C, i, Load(A, i) + Load(B, i))),
    )
    return Case(
        f,
        lambda r: [r.random(n, np.float32), r.random(n, np.float32), np.zeros(n, np.float32)],
        lambda a: {2: a[0] + a[1]},
    )


def add_vector(n: int = 1024, lanes: int = 16) -> Case:
    """C[i:i+L] = A[i:i+L] + B[i:i+L] * 2.5 with Ramp/Broadcast."""
    A, B, C = (Buffer(x, (n,)) for x in "ABC")
    i = Var("i")
    idx = vramp(i * lanes, lanes)
    body = Store(C, idx, Load(A, idx) + Load(B, idx) * Broadcast(f32(2.5), lanes))
    f = LoopFunc(f"add_vector{lanes}", (A, B, C), For(i, Const(0), Const(n // lanes), ForKind.SERIAL, body))
    return Case(
        f,
        lambda r: [r.random(n, np.float32), r.random(n, np.float32), np.zeros(n, np.float32)],
        lambda a: {2: a[0] + a[1] * np.float32(2.5)},
    )


def row_sum(rows: int = 64, cols: int = 100) -> Case:
    A, S = Buffer("A", (rows, cols)), Buffer("S", (rows,))
    i, j = Var("i"), Var("j")
    body = Seq(
        (
            Store(S, i, f32(0.0)),
            For(j, Const(0), Const(cols), ForKind.SERIAL, Store(S, i, Load(S, i) + Load(A, i * cols + j))),
        )
    )
    f = LoopFunc("row_sum", (A, S), For(i, Const(0), Const(rows), ForKind.SERIAL, body))
    return Case(
        f,
        lambda r: [r.random((rows, cols), np.float32), np.zeros(rows, np.float32)],
        lambda a: {1: a[0].sum(1, dtype=np.float64)},
        rtol=1e-5,
    )


def matmul(m: int = 32, n: int = 48, k: int = 64, lanes: int = 16) -> Case:
    """C = A @ B: 16-wide rows of C, inner loop C[i, j:j+16] = fma(A[i,k], B[k, j:j+16], C)."""
    A, B, C = Buffer("A", (m, k)), Buffer("B", (k, n)), Buffer("C", (m, n))
    i, jo, kk = Var("i"), Var("jo"), Var("k")
    cidx = vramp(i * n + jo * lanes, lanes)
    upd = Store(
        C,
        cidx,
        Call(
            "fma",
            (
                Broadcast(Load(A, i * k + kk), lanes),
                Load(B, vramp(kk * n + jo * lanes, lanes)),
                Load(C, cidx),
            ),
        ),
    )
    body = Seq((Store(C, cidx, Broadcast(f32(0.0), lanes)), For(kk, Const(0), Const(k), ForKind.SERIAL, upd)))
    nest = For(
        i, Const(0), Const(m), ForKind.SERIAL, For(jo, Const(0), Const(n // lanes), ForKind.SERIAL, body)
    )
    f = LoopFunc(f"matmul{lanes}", (A, B, C), nest)
    return Case(
        f,
        lambda r: [r.random((m, k), np.float32), r.random((k, n), np.float32), np.zeros((m, n), np.float32)],
        lambda a: {2: a[0].astype(np.float64) @ a[1]},
        rtol=1e-5,
    )


def parallel_heavy(n: int = 256, m: int = 64, kind: ForKind = ForKind.PARALLEL) -> Case:
    """C[i] = sum_j exp(A[i] * j * 1e-3) with the outer loop parallel and a local accumulator."""
    A, C = Buffer("A", (n,)), Buffer("C", (n,))
    acc = Buffer("acc", (1,), "float32", "local")
    i, j = Var("i"), Var("j")
    term = Call("exp", (Load(A, i) * Cast("float32", j) * f32(1e-3),))
    body = Allocate(
        acc,
        Seq(
            (
                Store(acc, Const(0), f32(0.0)),
                For(j, Const(0), Const(m), ForKind.SERIAL, Store(acc, Const(0), Load(acc, Const(0)) + term)),
                Store(C, i, Load(acc, Const(0))),
            )
        ),
    )
    f = LoopFunc(f"par_heavy_{n}_{m}", (A, C), For(i, Const(0), Const(n), kind, body))

    def expect(a):
        return {1: np.exp(a[0][:, None].astype(np.float64) * np.arange(m)[None, :] * 1e-3).sum(1)}

    return Case(f, lambda r: [r.random(n, np.float32), np.zeros(n, np.float32)], expect, rtol=2e-6)


def parallel_nested(rows: int = 7, cols: int = 37) -> Case:
    """Parallel outer loop with a scalar Var param, a LetStmt and a nested parallel loop."""
    A, B = Buffer("A", (rows, cols)), Buffer("B", (rows, cols))
    i, j, s = Var("i"), Var("j"), Var("scale", "float32")
    base = Var("base")
    inner = For(
        j,
        Const(0),
        Const(cols),
        ForKind.PARALLEL,
        Store(B, base + j, Load(A, base + j) * s + Cast("float32", i)),
    )
    f = LoopFunc(
        "par_nested",
        (A, B, s),
        For(i, Const(0), Const(rows), ForKind.PARALLEL, LetStmt(base, i * cols, inner)),
    )

    def expect(a):
        return {1: a[0] * np.float32(a[2]) + np.arange(rows, dtype=np.float32)[:, None]}

    return Case(
        f, lambda r: [r.random((rows, cols), np.float32), np.zeros((rows, cols), np.float32), 1.5], expect
    )


def select_cast(n: int = 64, lanes: int = 8) -> Case:
    """Select/Cmp/Cast over float32, int32, int64, bool, float16 and uint8, as vectors."""
    X, Y = Buffer("X", (n,), "int32"), Buffer("Y", (n,), "float32")
    H, U = Buffer("H", (n,), "float16"), Buffer("U", (n,), "uint8")
    O1, O2 = Buffer("O1", (n,), "float32"), Buffer("O2", (n,), "int64")
    O3, O4 = Buffer("O3", (n,), "bool"), Buffer("O4", (n,), "float16")
    i = Var("i")
    v = vramp(i * lanes, lanes)
    x, y, h, u = Load(X, v), Load(Y, v), Load(H, v), Load(U, v)
    bl = lambda c: Broadcast(c, lanes)  # noqa: E731
    xi64 = Cast("int64", x)
    body = Seq(
        (
            Store(
                O1, v, Select(Cmp(">", x, bl(Const(3, "int32"))), Cast("float32", x) * y, y - bl(f32(1.0)))
            ),
            Store(O2, v, xi64 * bl(Const(3)) // bl(Const(2)) + xi64 % bl(Const(5)) + Cast("int64", u)),
            Store(
                O3,
                v,
                BinOp(
                    "and",
                    Cmp("==", x % bl(Const(3, "int32")), bl(Const(0, "int32"))),
                    Not(Cmp("<", y, bl(f32(0.5)))),
                ),
            ),
            Store(O4, v, Cast("float16", Cast("float32", h) * bl(f32(2.0)) + Cast("float32", Load(O3, v)))),
        )
    )
    f = LoopFunc(
        "select_cast", (X, Y, H, U, O1, O2, O3, O4), For(i, Const(0), Const(n // lanes), ForKind.SERIAL, body)
    )

    def make(r):
        return [
            r.integers(-50, 50, n).astype(np.int32),
            r.random(n, np.float32),
            r.standard_normal(n).astype(np.float16),
            r.integers(0, 255, n).astype(np.uint8),
            np.zeros(n, np.float32),
            np.zeros(n, np.int64),
            np.zeros(n, bool),
            np.zeros(n, np.float16),
        ]

    def expect(a):
        x, y, h, u = a[:4]
        o3 = (x % 3 == 0) & ~(y < 0.5)
        x64 = x.astype(np.int64)
        return {
            4: np.where(x > 3, x.astype(np.float32) * y, y - np.float32(1)),
            5: x64 * 3 // 2 + x64 % 5 + u.astype(np.int64),
            6: o3,
            7: (h.astype(np.float32) * 2 + o3.astype(np.float32)).astype(np.float16),
        }

    return Case(f, make, expect, rtol=1e-3, atol=1e-3)


def strided(n: int = 16, lanes: int = 8) -> Case:
    """Transpose with stride-n Ramps: a gather load and a scatter store, plus min/max."""
    A, B = Buffer("A", (n, n)), Buffer("B", (n, n))
    i, jo = Var("i"), Var("jo")
    src = vramp(jo * lanes * n + i, lanes, n)  # A[jo*L + l, i]
    dst = vramp(i * n + jo * lanes, lanes)  # B[i, jo*L + l]
    val = BinOp("max", BinOp("min", Load(A, src), Broadcast(f32(0.8), lanes)), Broadcast(f32(0.1), lanes))
    body = Seq((Store(B, dst, val), Store(A, src, Load(A, src) * Broadcast(f32(2.0), lanes))))
    f = LoopFunc(
        "strided",
        (A, B),
        For(
            i, Const(0), Const(n), ForKind.SERIAL, For(jo, Const(0), Const(n // lanes), ForKind.SERIAL, body)
        ),
    )
    return Case(
        f,
        lambda r: [r.random((n, n), np.float32), np.zeros((n, n), np.float32)],
        lambda a: {0: a[0] * 2, 1: np.clip(a[0].T, 0.1, 0.8)},
    )


def int_math(n: int = 200) -> Case:
    """Floor division/modulo, truncating '/', min/max, abs on int32 and int64 (scalar code)."""
    X, Y = Buffer("X", (n,), "int32"), Buffer("Y", (n,), "int32")
    Q, R, T, M = (
        Buffer("Q", (n,), "int32"),
        Buffer("R", (n,), "int32"),
        Buffer("T", (n,), "int64"),
        Buffer("M", (n,), "int32"),
    )
    i = Var("i", "int32")
    x, y = Load(X, i), Load(Y, i)
    body = Seq(
        (
            Store(Q, i, x // y),
            Store(R, i, x % y),
            Store(T, i, Cast("int64", x) / Cast("int64", y)),
            Store(M, i, BinOp("max", BinOp("min", x, y), Call("abs", (y,), "int32") * Const(-1, "int32"))),
        )
    )
    f = LoopFunc(
        "int_math", (X, Y, Q, R, T, M), For(i, Const(0, "int32"), Const(n, "int32"), ForKind.SERIAL, body)
    )

    def make(r):
        y = r.integers(-9, 10, n).astype(np.int32)
        y[y == 0] = 7
        zeros = [np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.int64), np.zeros(n, np.int32)]
        return [r.integers(-100, 100, n).astype(np.int32), y, *zeros]

    def expect(a):
        x, y = a[0], a[1]
        return {
            2: x // y,
            3: x % y,
            4: np.trunc(x / y).astype(np.int64),
            5: np.maximum(np.minimum(x, y), -np.abs(y)),
        }

    return Case(f, make, expect)


def control(n: int = 100) -> Case:
    """If/else, LetStmt, a scalar Var extent, UNROLLED and VECTORIZED loop kinds."""
    A, B = Buffer("A", (n,)), Buffer("B", (n,))
    i, j, t, cnt = Var("i"), Var("j"), Var("t", "float32"), Var("count")
    clamp = LetStmt(
        t, Load(A, i) * f32(3.0), If(Cmp(">", t, f32(1.5)), Store(B, i, f32(1.5)), Store(B, i, t))
    )
    body = Seq(
        (
            For(i, Const(0), cnt, ForKind.VECTORIZED, clamp),
            For(j, Const(0), Const(4), ForKind.UNROLLED, Store(B, j, Load(B, j) + f32(10.0))),
        )
    )
    f = LoopFunc("control", (A, B, cnt), body)

    def expect(a):
        b = np.zeros(n, np.float32)
        c = a[2]
        b[:c] = np.minimum(a[0][:c] * np.float32(3), 1.5)
        b[:4] += 10
        return {1: b}

    return Case(f, lambda r: [r.random(n, np.float32), np.zeros(n, np.float32), 90], expect)


def math_all(n: int = 512, lanes: int = 8) -> tuple[LoopFunc, Callable]:
    """Y_k = f_k(X) for every math intrinsic, vectorized; returns (func, make inputs)."""
    names = (
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "tanh",
        "erf",
        "sigmoid",
        "abs",
        "floor",
        "ceil",
        "round",
        "sin",
        "cos",
    )
    X, P = Buffer("X", (n,)), Buffer("P", (n,))
    outs = [Buffer(f"Y_{k}", (n,)) for k in names] + [Buffer("Y_pow", (n,)), Buffer("Y_fma", (n,))]
    i = Var("i")
    v = vramp(i * lanes, lanes)
    x, p = Load(X, v), Load(P, v)
    stores = [Store(o, v, Call(k, (x,))) for o, k in zip(outs, names, strict=False)]
    stores += [Store(outs[-2], v, Call("pow", (x, p))), Store(outs[-1], v, Call("fma", (x, p, x)))]
    f = LoopFunc(
        "math_all", (X, P, *outs), For(i, Const(0), Const(n // lanes), ForKind.SERIAL, Seq(tuple(stores)))
    )
    return f, names


ALL_CASES = {
    "add_scalar": add_scalar,
    "add_vector16": add_vector,
    "add_vector4": lambda: add_vector(lanes=4),
    "row_sum": row_sum,
    "matmul16": matmul,
    "matmul4": lambda: matmul(lanes=4),
    "parallel_heavy": parallel_heavy,
    "parallel_nested": parallel_nested,
    "select_cast": select_cast,
    "strided": strided,
    "int_math": int_math,
    "control": control,
}
