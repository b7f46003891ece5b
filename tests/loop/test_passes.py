"""vectorize / unroll lowering passes: printed before/after, fallbacks, and numerics."""

import numpy as np

from tensorir.loop.interp import run
from tensorir.loop.ir import BinOp, Buffer, Cast, Const, For, ForKind, If, Load, LoopFunc, Seq, Store, Var
from tensorir.loop.passes import unroll, vectorize
from tensorir.loop.printer import to_text
from tensorir.loop.simplify import simplify

i, j = Var("i"), Var("j")
A = Buffer("A", (4, 8))
B = Buffer("B", (4,))
C = Buffer("C", (4, 8))
IDX = Buffer("IDX", (8,), "int64")
V, S, U = ForKind.VECTORIZED, ForKind.SERIAL, ForKind.UNROLLED


def nest(inner, kind=V, extent=8):
    return For(i, Const(0), Const(4), S, For(j, Const(0), Const(extent), kind, inner))


def lowered(s):
    return to_text(simplify(unroll(vectorize(s))))


def test_vectorize_contiguous_with_broadcast():
    s = nest(Store(C, i * 8 + j, Load(A, i * 8 + j) + Load(B, i)))
    assert lowered(s) == (
        "for i in range(0, 4):\n  C[ramp(i*8, 1, 8)] = A[ramp(i*8, 1, 8)] + broadcast(B[i], 8)"
    )


def test_vectorize_strided_and_lane_values():
    s = nest(Store(C, i * 8 + j, Load(A, j * 4 + i % 4) * Cast("float32", j)), extent=4)
    assert lowered(s) == (
        "for i in range(0, 4):\n  C[ramp(i*8, 1, 4)] = A[ramp(i, 4, 4)]*float32(ramp(0, 1, 4))"
    )


def test_invariant_if_is_kept_around_vector_store():
    s = nest(If(i < 2, Store(C, i * 8 + j, Const(1.0, "float32"))))
    assert lowered(s) == "for i in range(0, 4):\n  if i < 2:\n    C[ramp(i*8, 1, 8)] = broadcast(1.0, 8)"


def test_impossible_vectorization_stays_serial():
    cases = [
        Store(C, i * 8 + j, Load(A, Load(IDX, j))),  # data-dependent index
        Store(C, i * 8, Load(A, i * 8 + j)),  # every lane writes one element
        Store(C, i * 8 + j, Load(A, (i * 8 + j) // 2)),  # not affine in the lane
        If(j < 3, Store(C, i * 8 + j, Const(0.0, "float32"))),  # lane-dependent condition
        Seq((Store(C, i * 8 + j, Const(0.0, "float32")), Store(C, i * 8 + j + 1, Load(C, i * 8 + j)))),
        For(Var("k"), Const(0), Const(2), S, Store(C, i * 8 + j, Const(0.0, "float32"))),  # not innermost
    ]
    for inner in cases:
        out = lowered(nest(inner))
        assert "for j in range(0, 8):" in out and "ramp" not in out and "vectorized" not in out


def test_unroll_expands_small_loops_and_keeps_big_ones():
    s = For(j, Const(0), Const(3), U, Store(B, j, Load(A, j * 8)))
    assert lowered(s) == "B[0] = A[0]\nB[1] = A[8]\nB[2] = A[16]"
    big = For(j, Const(0), Const(100), U, Store(C, j % 32, Const(0.0, "float32")))
    assert to_text(unroll(big, max_unroll=64)).startswith("for j in unrolled(0, 100):")


def _assert_same_as_serial(body, optimized) -> None:
    """The optimized loop nest computes C as `body` in a serial i, j nest does."""
    ref_f = LoopFunc("f", (A, B, C), nest(body, S))
    opt_f = LoopFunc("f", (A, B, C), optimized)
    a, b = np.random.rand(4, 8).astype(np.float32), np.random.rand(4).astype(np.float32)
    c1, c2 = np.zeros((4, 8), np.float32), np.zeros((4, 8), np.float32)
    run(ref_f, [a, b, c1])
    run(opt_f, [a, b, c2])
    np.testing.assert_array_equal(c1, c2)


def test_vectorized_then_unrolled_matches_serial():
    body = Store(C, i * 8 + j, Load(A, i * 8 + j) * Const(2.0, "float32") + Load(B, i))
    opt = simplify(unroll(vectorize(For(i, Const(0), Const(4), U, For(j, Const(0), Const(8), V, body)))))
    _assert_same_as_serial(body, opt)
    assert "for" not in to_text(opt)


def test_lane_blocks_inside_one_divisor_block_vectorize():
    """(i*8 + j) // 16 is one value for the 8 lanes (8 divides 16 and i*8): a broadcast
    scalar load, as a per-channel operand of a flattened NCHW loop is; % 16 stays a ramp."""
    body = Store(C, i * 8 + j, Load(A, (i * 8 + j) % 16) * Load(B, (i * 8 + j) // 16))
    text = lowered(nest(body))
    assert text == (
        "for i in range(0, 4):\n  C[ramp(i*8, 1, 8)] = A[ramp(i*8%16, 1, 8)]*broadcast(B[i*8//16], 8)"
    ), text
    _assert_same_as_serial(body, simplify(vectorize(nest(body))))
    # a divisor the lanes straddle (12) or a base off the lane grid (i*4) stays serial
    for idx in ((i * 8 + j) // 12, (i * 4 + j) // 16):
        assert "ramp" not in lowered(nest(Store(C, i * 8 + j, Load(B, idx))))


def test_lane_dependent_window_bounds_split_into_vector_and_edge_blocks():
    """`if 0 <= i*8 + j - 1 < 12: C = A[...] else: C = 0` (a padded row read by a window):
    blocks with every lane inside run on vectors, blocks with every lane outside store the
    fill as a vector, the block across an edge stays lane by lane; results as serial."""
    col = i * 8 + j - 1
    cond = BinOp("and", col >= 0, col < 12)
    body = If(cond, Store(C, i * 8 + j, Load(A, col)), Store(C, i * 8 + j, Const(0.0, "float32")))
    text = lowered(nest(body))
    assert (
        text.startswith("for i in range(0, 4):\n  if ")
        and "C[ramp(i*8, 1, 8)] = A[ramp(i*8 - 1, 1, 8)]" in text
    )
    assert "C[ramp(i*8, 1, 8)] = broadcast(0.0, 8)" in text and "for j in range(0, 8):" in text
    _assert_same_as_serial(body, simplify(vectorize(nest(body))))
    # a bound that is not affine in the lane keeps the whole loop serial
    odd = If(Load(IDX, j) < 3, Store(C, i * 8 + j, Const(1.0, "float32")))
    assert "ramp" not in lowered(nest(odd))
