"""A row's max or min over one float element (`s[i] = max(s[i], a[i, j])`, softmax's row max):
emitted as llvm.maximum / minimum so LLVM's loop vectorizer turns the row into vector lanes
and one vector.reduce (the fcmp + select form stayed a serial scalar chain), NaN propagating
as numpy's max does; vector stores (pooling, clamps) keep the one-instruction select."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.codegen.llvm import build_ir, build_module
from tensorir.loop.ir import BinOp, Buffer, Const, For, ForKind, Load, LoopFunc, Seq, Store, Var
from tensorir.runtime.jit import compile_host
from tensorir.target import get_target
from tests.codegen.kernels import vramp


def row_reduce(op: str, rows: int = 8, cols: int = 1000) -> LoopFunc:
    """S[i] = op over j of A[i, j], the accumulator read and written in place."""
    a, s = Buffer("A", (rows, cols)), Buffer("S", (rows,))
    i, j = Var("i"), Var("j")
    start = Const(-np.inf if op == "max" else np.inf, "float32")
    update = Store(s, i, BinOp(op, Load(s, i), Load(a, i * cols + j)))
    body = Seq((Store(s, i, start), For(j, Const(0), Const(cols), ForKind.SERIAL, update)))
    return LoopFunc(f"row_{op}", (a, s), For(i, Const(0), Const(rows), ForKind.SERIAL, body))


def vector_max(n: int = 64, lanes: int = 16) -> LoopFunc:
    """Y[v] = max(Y[v], X[v]) on whole vectors: pooling's form."""
    x, y = Buffer("X", (n,)), Buffer("Y", (n,))
    k = Var("k")
    idx = vramp(k * lanes, lanes)
    update = Store(y, idx, BinOp("max", Load(y, idx), Load(x, idx)))
    return LoopFunc("vector_max", (x, y), For(k, Const(0), Const(n // lanes), ForKind.SERIAL, update))


def _optimized(func: LoopFunc) -> str:
    return str(build_module(func, "host", with_runtime=False)[0])


@pytest.mark.parametrize("op", ["max", "min"])
def test_row_reduction_is_vectorized(op):
    text, _ = build_ir(row_reduce(op), "host")
    wide = "maximum" if op == "max" else "minimum"
    assert f"@llvm.{wide}.f32(" in text  # before: fcmp + select
    opt = _optimized(row_reduce(op))
    lanes = get_target("host").vector_lanes("float32")
    assert f"@llvm.vector.reduce.f{wide}.v{lanes}f32" in opt, opt[:3000]


def test_vector_store_keeps_select():
    text, _ = build_ir(vector_max(), "host")
    assert "llvm.maximum" not in text
    assert "fcmp" in text and "select" in text


@pytest.mark.parametrize("op", ["max", "min"])
def test_row_reduction_numerics_and_nan(op):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 1000)).astype(np.float32)
    a[3, 517] = np.nan  # numpy's max and min propagate it
    s = np.zeros(8, np.float32)
    compile_host(row_reduce(op))(a, s)
    want = a.max(axis=1) if op == "max" else a.min(axis=1)
    np.testing.assert_array_equal(s, want)
    assert np.isnan(s[3]) and not np.isnan(np.delete(s, 3)).any()
