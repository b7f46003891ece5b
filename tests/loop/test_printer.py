"""The printed form is the contract tests compare against: keep it stable."""

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
from tensorir.loop.printer import expr_text, to_text

i, j, k = Var("i"), Var("j"), Var("k")
A = Buffer("A", (64, 32))
C = Buffer("C", (64, 16))


def test_function_matches_design_example():
    body = For(i, Const(0), Const(64), ForKind.PARALLEL,
               For(j, Const(0), Const(16), ForKind.VECTORIZED,
                   Store(C, i * 16 + j, Const(0.0, "float32"))))  # fmt: skip
    f = LoopFunc("matmul", (A, Buffer("B", (32, 16)), C), body)
    assert to_text(f) == (
        "def matmul(A: f32[64,32], B: f32[32,16], C: f32[64,16]):\n"
        "  for i in parallel(0, 64):\n"
        "    for j in vectorized(0, 16):\n"
        "      C[i*16 + j] = 0.0"
    )


def test_loop_kinds():
    for kind, word in [
        (ForKind.SERIAL, "range"),
        (ForKind.UNROLLED, "unrolled"),
        (ForKind.GPU_BLOCK, "gpu_block"),
    ]:
        s = For(k, Const(2), Const(4), kind, Store(C, k, Const(1.0, "float32")))
        assert to_text(s).splitlines()[0] == f"for k in {word}(2, 4):"


def test_precedence_and_spacing():
    assert expr_text((i + j) * 4) == "(i + j)*4"
    assert expr_text(i + j * 4) == "i + j*4"
    assert expr_text(i - (j - k)) == "i - (j - k)"
    assert expr_text((i - j) - k) == "i - j - k"
    assert expr_text(i // (j * 2)) == "i//(j*2)"
    assert expr_text((i // 4) % 2) == "i//4%2"
    assert expr_text(i * Const(-1)) == "i*-1"
    assert expr_text(Not(Cmp("<", i, j))) == "not i < j"
    assert expr_text(BinOp("and", i < 4, j >= 2)) == "i < 4 and j >= 2"
    assert expr_text(BinOp("or", BinOp("and", i < 1, j < 1), k < 1)) == "i < 1 and j < 1 or k < 1"
    assert expr_text(BinOp("and", BinOp("or", i < 1, j < 1), k < 1)) == "(i < 1 or j < 1) and k < 1"
    assert expr_text(BinOp("xor", i, j)) == "i ^ j"
    assert expr_text(BinOp("and", i, Const(7))) == "i & 7"


def test_constants_and_calls():
    assert expr_text(Const(0.1, "float32")) == "0.1"
    assert expr_text(Const(3, "float32")) == "3.0"
    assert expr_text(Const(float("-inf"), "float32")) == "-inf"
    assert expr_text(Const(5, "int32")) == "int32(5)"
    assert expr_text(Const(1.5, "float16")) == "float16(1.5)"
    assert expr_text(Const(True, "bool")) == "True"
    assert expr_text(BinOp("max", i, Const(0))) == "max(i, 0)"
    assert expr_text(Cast("float32", i)) == "float32(i)"
    assert expr_text(Call("exp", (Load(A, i),))) == "exp(A[i])"
    assert expr_text(Select(i < 3, Const(1.0, "float32"), Load(A, i))) == "select(i < 3, 1.0, A[i])"


def test_vectors():
    r = Ramp(i * 16, Const(1), 8)
    assert expr_text(Load(A, r)) == "A[ramp(i*16, 1, 8)]"
    assert expr_text(Broadcast(Load(A, i), 4)) == "broadcast(A[i], 4)"


def test_statements():
    t = Buffer("t", (4,), scope="local")
    s = Allocate(t, Seq((
        LetStmt(Var("x"), i * 2, Store(t, Var("x"), Const(0.0, "float32"))),
        If(i < 2, Store(t, i, Const(1.0, "float32")), Store(t, i, Const(2.0, "float32"))),
        Seq(()),
    )))  # fmt: skip
    assert to_text(s) == (
        't = allocate(f32[4], "local")\n'
        "x = i*2\n"
        "t[x] = 0.0\n"
        "if i < 2:\n"
        "  t[i] = 1.0\n"
        "else:\n"
        "  t[i] = 2.0\n"
        "pass"
    )


def test_scalar_params_and_determinism():
    n = Var("n")
    f = LoopFunc("f", (A, n), For(i, Const(0), n, ForKind.SERIAL, Store(A, i, Const(0.0, "float32"))))
    assert to_text(f).splitlines()[0] == "def f(A: f32[64,32], n: int64):"
    assert to_text(f) == to_text(f)
