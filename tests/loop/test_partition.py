"""partition_tails: a loop whose guarded tail is tested inside an inner loop runs as two loops,
the first without the guards (printed before / after, the cases left alone, numerics)."""

import numpy as np

from tensorir.loop.interp import run
from tensorir.loop.ir import Buffer, Cmp, Const, For, ForKind, If, Load, LoopFunc, Seq, Store, Var
from tensorir.loop.partition import first_false, partition_tails
from tensorir.loop.printer import to_text
from tensorir.loop.simplify import simplify

t, r = Var("t"), Var("r")
A = Buffer("A", (16, 8))  # 16 rows of 8 (a reduction of 8 per row)
C = Buffer("C", (18,))  # the block of 3 rows past row 15 is partly out of range
S = ForKind.SERIAL
F = "float32"


def block_nest() -> For:
    """Rows in blocks of 3 (6 blocks over 16 rows, the last guarded): C[row] = sum of A's row;
    the two rows after a block's first are guarded by `t*3 + k < 16`."""
    rows = []
    for k in range(3):
        row = t * 3 + Const(k)
        acc = Store(C, row, Load(C, row) + Load(A, row * 8 + r))
        step = acc if k == 0 else If(Cmp("<", row, Const(16)), acc)
        init = Store(C, row, Const(0.0, F))
        rows.append((init if k == 0 else If(Cmp("<", row, Const(16)), init), step))
    inits = Seq(tuple(i for i, _ in rows))
    body = Seq((inits, For(r, Const(0), Const(8), S, Seq(tuple(s for _, s in rows)))))
    return For(t, Const(0), Const(6), S, body)


def test_first_false_of_affine_guards():
    assert first_false(Cmp("<", t * 3 + Const(1), Const(16)), t) == 5  # 5*3 + 1 = 16
    assert first_false(Cmp("<=", t * 3 + Const(1), Const(16)), t) == 6  # 6*3 + 1 = 19 > 16
    assert first_false(Cmp(">", Const(16), t * 3 + Const(2)), t) == 5  # 16 > 17 fails at 5
    assert first_false(Cmp(">=", Const(16), t * 3), t) == 6
    assert first_false(Cmp(">=", t * 3 - Const(1), Const(0)), t) is None  # a head, not a tail
    assert first_false(Cmp("<", t * 3 + r, Const(16)), t) is None  # another variable
    assert first_false(Cmp("==", t, Const(3)), t) is None


def test_guarded_block_splits_and_the_full_blocks_lose_their_guards():
    text = to_text(simplify(partition_tails(block_nest())))
    assert text == (
        "for t in range(0, 5):\n"
        "  C[t*3] = 0.0\n"
        "  C[t*3 + 1] = 0.0\n"
        "  C[t*3 + 2] = 0.0\n"
        "  for r in range(0, 8):\n"
        "    C[t*3] = C[t*3] + A[t*24 + r]\n"
        "    C[t*3 + 1] = C[t*3 + 1] + A[t*24 + r + 8]\n"
        "    C[t*3 + 2] = C[t*3 + 2] + A[t*24 + r + 16]\n"
        # the last block (t = 5, one iteration: substituted) keeps row 15 only
        "C[15] = 0.0\n"
        "for r in range(0, 8):\n"
        "  C[15] = C[15] + A[r + 120]"
    ), text


def test_partitioned_nest_computes_what_the_guarded_one_does():
    a = np.random.default_rng(0).random((16, 8)).astype(np.float32)
    out = []
    for nest in (block_nest(), simplify(partition_tails(block_nest()))):
        c = np.full(18, -1.0, np.float32)
        run(LoopFunc("f", (A, C), nest), [a, c])
        out.append(c)
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_allclose(out[1][:16], a.sum(axis=1), rtol=1e-6)
    assert (out[1][16:] == -1.0).all()  # the rows past the end are never written


def test_a_guard_false_throughout_does_not_hide_the_tail():
    never = If(Cmp("<", t * 3 + Const(20), Const(16)), Store(C, t * 3, Const(0.0, F)))
    nest = block_nest()
    inner = For(r, Const(0), Const(8), S, never)
    text = to_text(simplify(partition_tails(For(t, Const(0), Const(6), S, Seq((nest.body, inner))))))
    assert text.startswith("for t in range(0, 5):") and "C[15] = 0.0" in text, text


def test_loops_left_alone():
    # a guard at the top of the body only: one branch per iteration, no second copy
    top = For(t, Const(0), Const(6), S, If(Cmp("<", t * 3 + Const(1), Const(16)), Store(C, t, Const(0.0, F))))
    assert partition_tails(top) == top
    # no iteration fails the guard: nothing to split
    inner = For(r, Const(0), Const(8), S, If(Cmp("<", t * 3, Const(16)), Store(C, t, Const(0.0, F))))
    whole = For(t, Const(0), Const(5), S, inner)
    assert partition_tails(whole) == whole
    # parallel loops keep their single range (the runtime splits them across threads)
    par = For(t, Const(0), Const(6), ForKind.PARALLEL, block_nest().body)
    assert partition_tails(par) == par
