"""One level of Strassen's algorithm as one `dense` kernel: the `algorithm` "strassen" of a
dense with a constant weight (x: (M, K) @ w: (N, K)^T, M, N, K even).

Quadrants A_ij of x (rows half i, columns half j) and B_ij of B = w^T; seven half-size
products replace eight:

    P0 = (A11 + A22)(B11 + B22)   P1 = (A21 + A22) B11   P2 = A11 (B12 - B22)
    P3 = A22 (B21 - B11)          P4 = (A11 + A12) B22   P5 = (A21 - A11)(B11 + B12)
    P6 = (A12 - A22)(B21 + B22)
    C11 = P0 + P3 - P4 + P6   C12 = P2 + P4   C21 = P1 + P3   C22 = P0 - P1 + P2 + P5

The weight is constant, so its seven operands are formed at compile time (`weight_transform`:
w (N, K) -> bt (7, N/2, K/2), bt[t] = the t-th B operand transposed, in dense's (N, K)
layout; B_ij^T = W_ji): 5 of the 18 quadrant additions leave the kernel, and the weight the
kernel streams is 7/4 of w. The kernel (`strassen_compute`) is three root stages:

    strassen_x  x7[t, i, k] = the t-th A operand                  (scratch, 7/4 of x)
    strassen_p  p[t, i, j]  = sum_k x7[t, i, k] * bt[t, j, k]     (scratch: the batched
                              product, dense's register-blocked schedule, t in the parallel loop)
    dense       y[i, j]     = the C quadrant combination of p     (+ the fused epilogue)

The stages are built from accessor functions (`operand_stage`: the operands from a quadrant
loader; `product_stage`; `combine_stage`: the C quadrants written through a locator) and
scheduled by `schedule_products` / `schedule_quadrants`, which the 1x1 conv
(conv_strassen.py: packed activations) and the matmul of two run-time operands
(matmul_strassen.py: B's operands formed in the kernel) share.

One level only: a second would multiply the scratch and the passes over memory again, and
the leaves of a first level are what dense's kernel handles well.

Accuracy (fp32, uniform [-1, 1) inputs, error = max |C - C64| / max |C64| against the float64
product; measured with the Python-driven sequence this kernel replaced): 512^3 1.0e-6 (plain)
vs 1.0e-6 (one level), 1024^3 1.2e-6 vs 1.4e-6: a level adds ~1.2x rounding. The analytic default and
where Strassen wins are at `strassen_default` (measured on this machine).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.registry import register_compute, register_op

OP = "dense_strassen"
Terms = Sequence[tuple[tuple[int, int], int]]
# per product: (quadrant (row half, column half), sign) of the A operand ...
A_TERMS = (
    (((0, 0), 1), ((1, 1), 1)),
    (((1, 0), 1), ((1, 1), 1)),
    (((0, 0), 1),),
    (((1, 1), 1),),
    (((0, 0), 1), ((0, 1), 1)),
    (((1, 0), 1), ((0, 0), -1)),
    (((0, 1), 1), ((1, 1), -1)),
)
# ... and of the B operand, as quadrants W_ab of w (N, K) (B_ij^T = W_ji)
W_TERMS = (
    (((0, 0), 1), ((1, 1), 1)),
    (((0, 0), 1),),
    (((1, 0), 1), ((1, 1), -1)),
    (((0, 1), 1), ((0, 0), -1)),
    (((1, 1), 1),),
    (((0, 0), 1), ((1, 0), 1)),
    (((0, 1), 1), ((1, 1), 1)),
)
# C quadrant -> (product, sign)
C_TERMS = {
    (0, 0): ((0, 1), (3, 1), (4, -1), (6, 1)),
    (0, 1): ((2, 1), (4, 1)),
    (1, 0): ((1, 1), (3, 1)),
    (1, 1): ((0, 1), (1, -1), (2, 1), (5, 1)),
}


def _quadrant(a: np.ndarray, q: tuple[int, int]) -> np.ndarray:
    h, w = a.shape[0] // 2, a.shape[1] // 2
    return a[q[0] * h : (q[0] + 1) * h, q[1] * w : (q[1] + 1) * w]


def _combine(a: np.ndarray, terms: Sequence[tuple[tuple[int, int], int]]) -> np.ndarray:
    return sum(sign * _quadrant(a, q) for q, sign in terms)


def weight_transform(w: np.ndarray) -> np.ndarray:
    """dense's weight (N, K) -> the seven B operands (7, N/2, K/2), in w's dtype."""
    wt = w.astype(np.float64)
    return np.stack([_combine(wt, terms) for terms in W_TERMS]).astype(w.dtype)


def eligible(x_shape: Sequence[int], w_shape: Sequence[int]) -> bool:
    """Even M, N and K (one level halves each)."""
    return len(x_shape) == 2 and all(d % 2 == 0 and d >= 2 for d in (*x_shape, w_shape[0]))


def algorithm_choices(
    x_shape: Sequence[int], w_shape: Sequence[int], weight_const: bool
) -> tuple[list[str], str]:
    """(choices, default) of a dense's `algorithm` knob on a CPU target."""
    if not weight_const or not eligible(x_shape, w_shape):
        return ["direct"], "direct"
    m, k = x_shape
    return ["direct", "strassen"], "strassen" if strassen_default(m, w_shape[0], k) else "direct"


MIN_SAVING = 24  # saved multiply-adds per element of extra memory traffic (measured, below)
MIN_SAVING_RUNTIME_B = 16  # the same for a matmul of two run-time operands (measured, below)
MIN_ROWS = 512  # fewer rows of A lose whatever the saving (measured, below)


def strassen_default(m: int, n: int, k: int, runtime_b: bool = False) -> bool:
    """One level where A has at least MIN_ROWS rows and the multiply-adds it saves (m*n*k/8)
    reach MIN_SAVING times the elements it moves in addition: x7 written (7/4 m*k), p written
    and read back (7/4 + 12/4 of m*n), and with `runtime_b` (matmul_strassen.py) b7 written
    (7/4 n*k, against MIN_SAVING_RUNTIME_B); a constant weight's operands cost nothing at run
    time (formed at compile time). MNN's rule (m*n*k/8 > 3mk + 3nk + 5.25mn) says yes to every
    shape below but 56x56x64->64 and 12x128x64x128.

    Measured here (AMD EPYC Zen 4, `python -m benchmarks.strassen_cutoff`, cold caches,
    strassen / direct of medians over interleaved rounds). "wall": the tuner's Measurer, 3
    rounds, quiet machine, T threads; "cpu": `--clock cpu` (CPU seconds of the calling
    process, 1 thread, 7 rounds) on the machine shared with other work, where wall times
    spread up to 8x between rounds and CPU times 1.02-1.3x (up to 1.9x for the direct conv at
    C >= 512, whose input re-reads from the shared L3 made its time vary 1.6x between runs;
    two figures: a shape timed twice). saving: the rule's ratio.

        dense M x K -> N  wall T=1   T=2     cpu     saving
        128^3             1.26               1.25    2.5
        256^3             1.11               1.18    4.9
        512^3             1.01       0.99    1.02    9.8
        1024^3            1.01       0.97    0.97 0.97  19.7
        196x256->1024     1.15               1.19    6.2    (a 14x14 1x1 conv's product)
        3136x256->64                         1.19    2.7    (a 56x56 one)
        128x768->3072     1.14               1.16    18.5   (BERT-base FFN up, 128 tokens)
        512x768->3072     1.00       1.03    0.99    18.5   (... 512 tokens)
        1024x768->3072    0.97               0.97    18.5
        784x1024->1024                       0.96    19.7
        512x3072->768     0.94       0.87    0.95 0.93  32.7  (FFN down, 512 tokens)
        1024x3072->768    0.92       0.91    0.94    32.8
        2048x3072->768    0.91               0.91    32.7
        1024x4096->1024   0.96               0.96    43.6
        2048^3            0.91       0.92    0.90    39.0
        256x2048->2048                       1.15    39.4   (m = 256 < MIN_ROWS)

        1x1 conv H x W x C -> M, batch 1 (conv_strassen.py: m = H*W, k = C, n = M), cpu:
        ResNet-50's stride-1 1x1s (7x7 is odd: not eligible)
          56x56x64->64 1.56, 64->256 1.62, 256->64 1.58 1.61, 256->128 1.28;
          28x28x128->512 1.30, 512->128 1.25, 512->256 1.14;
          14x14x256->1024 1.24, 1024->256 1.31, 1024->512 1.19   (savings 1.2 to 15.5)
        larger maps: 112x112x64->256 1.83, 112x112x128->128 1.51, 128x128x256->256 1.64
          (savings 1.5 to 4.9), 28x28x1024->256 1.10 (10.9), 32x32x2048->256 1.21 (13.7),
          64x64x2048->256 0.88 (13.7), 56x56x512->512 0.85 1.13 0.76 (9.8),
          56x56x1024->256 0.66 1.10 (10.9), 28x28x2048->512 0.55 0.91 (21.8)
        many channels: 24x24x1024->1024 1.05 1.01, 28x28x1024->1024 0.95 0.95 (19.7);
          14x14x2048->2048 1.09, 16x16x2048->2048 1.06 (39.4, m < MIN_ROWS),
          32x32x2048->2048 0.55, wall 0.75 (39.4; the direct conv at 64 GFLOP/s there)

        matmul B x M x K x N, both at run time (matmul_strassen.py, saving with b7), cpu:
          BERT-base attention at 512 tokens, 12 heads: QK^T 12x512x64x512 1.52 1.57 (1.5),
          scores x V 12x512x512x64 1.66 (3.1); 12x128x64x128 1.49 (1.2); 512^3 1.09 (7.8);
          1024^3 1.00 0.97, 4x1024^3 1.02 (15.5); 2048x768x2048 0.93 (15.8);
          4096x1024x1024 0.93 (18.5); 1024x3072x1024 0.94 (25.2); 2048^3 0.89 (31.0)

    The direct dense kernel runs at the machine's peak (1024^3: 102 GFLOP/s at 1 thread), so
    a level wins at most the 1/8 it saves; below a saving of ~20 the extra passes over memory
    take it all back (at 1 thread the break-even is ~18, at 2 threads FFN-up's 18.5 lost 3%:
    MIN_SAVING stays 24). With few rows a level loses even at a saving of 39 (dense 256 rows
    1.15, convs of 196 and 256 pixels 1.06-1.09): MIN_ROWS. The conv keeps dense's rule:
    every ResNet-50 1x1 loses (1.14-1.62); below a saving of 24 the conv figures go both
    ways at one saving (13.7: 1.21 and 0.88; 19.7: 1.05 and 0.95), and the largest wins
    there (0.55-0.76) did not repeat (the direct conv slowed by the shared L3), so they
    support no other constant; of those measured only 32x32x2048->2048 passes. A matmul of
    run-time operands pays b7 (counted in its saving), and with it breaks even at ~15.5 and
    wins from 15.8: MIN_SAVING_RUNTIME_B = 16 (1 thread only; 2048x768x2048, 0.93 at 15.8,
    is a missed win). In a whole model (`--ffn TOKENS`: BERT-base's FFN block, only its down
    projection passes the rule), default / all-direct: 512 tokens 0.969 at 1 thread, 1.009
    at 2; 1024 tokens 0.949 at 1 thread."""
    extra = 1.75 * m * k + 4.75 * m * n + (1.75 * n * k if runtime_b else 0)
    least = MIN_SAVING_RUNTIME_B if runtime_b else MIN_SAVING
    return m >= MIN_ROWS and m * n * k / 8 >= least * extra


def _infer(ins: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
    if len(ins) != 2:
        raise ShapeError(f"{OP} takes (x, bt), got {len(ins)} inputs")
    x, bt = ins
    if x.ndim != 2 or bt.ndim != 3 or bt.shape[0] != 7 or 2 * bt.shape[2] != x.shape[1] or x.shape[0] % 2:
        raise ShapeError(f"{OP}: x must be (M, K) with M even and bt (7, N/2, K/2), got {x} and {bt}")
    return [TensorType((x.shape[0], 2 * bt.shape[1]), x.dtype)]


@register_op(OP, infer=_infer, pattern="opaque")
def dense_strassen(x: np.ndarray, bt: np.ndarray) -> np.ndarray:
    """y = x @ w^T from x and the transformed weight bt = weight_transform(w)."""
    xt = x.astype(np.float64)
    p = [_combine(xt, A_TERMS[t]) @ bt[t].astype(np.float64).T for t in range(7)]
    rows = [np.hstack([sum(s * p[t] for t, s in C_TERMS[(i, j)]) for j in (0, 1)]) for i in (0, 1)]
    return np.vstack(rows).astype(x.dtype)


Quad = tuple[int, int]


def signed_sum(terms: Sequence[tuple[Any, int]], load: Callable[[Any], Any]) -> Any:
    """sum of sign * load(key) over `terms` (every first term is positive)."""
    out = None
    for key, sign in terms:
        v = load(key)
        out = v if out is None else (out + v if sign > 0 else out - v)
    return out


def named(fn: Callable[..., Any], names: Sequence[str]) -> Callable[..., Any]:
    """`fn` (taking *idx) with a signature naming its axes (compute takes loop names from it)."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    fn.__signature__ = inspect.Signature([inspect.Parameter(n, kind) for n in names])  # type: ignore[attr-defined]
    return fn


def operand_stage(
    terms: Sequence[Terms],
    load: Callable[..., Any],
    shape: Sequence[int],
    name: str,
    axes: tuple[str, str] = ("i", "k"),
) -> Any:
    """op[*batch, t, r, c] = the t-th operand, signed_sum(terms[t], q -> load(q, *batch, r, c))
    with `load(q, ...)` an element of quadrant q of the matrix in the accumulation dtype;
    `axes` names (r, c) in the loop nest."""
    from tensorir.schedule.te import compute, select

    nb = len(shape) - 3

    def body(*idx: Any) -> Any:
        batch, t, r, c = idx[:nb], idx[nb], idx[nb + 1], idx[nb + 2]

        def operand(s: int) -> Any:
            return signed_sum(terms[s], lambda q: load(q, *batch, r, c))

        v = operand(6)
        for s in range(5, -1, -1):
            v = select(t.eq(s), operand(s), v)
        return v

    names = [f"b{d}" for d in range(nb)] + ["t", *axes]
    return compute(shape, named(body, names), name=name)


def product_stage(x7: Any, b7: Any, trans_b: bool, out_batch: Sequence[int]) -> Any:
    """p[*batch, t, i, j] = the t-th product of the A operands x7 and the B operands b7
    ((.., 7, N/2, K/2) if trans_b else (.., 7, K/2, N/2)), dense's matmul_parts."""
    from tensorir.ops.matmul_compute import matmul_parts
    from tensorir.schedule.te import compute

    acc, _ = matmul_parts(x7, b7, False, trans_b, "strassen", (*out_batch, 7))
    return compute(acc.shape, lambda *i: acc[i], name="strassen_p")


def combine_stage(
    p: Any,
    shape: Sequence[int],
    locate: Callable[..., Any],
    finish: Callable[..., Any],
    name: str,
    dtype: str,
) -> Any:
    """y[idx] = finish(the C quadrant combination of p, *idx), where locate(*idx) = (p's batch
    indices, row half, column half, row and column in the quadrant)."""
    from tensorir.schedule.te import compute, select

    def body(*idx: Any) -> Any:
        batch, qi, qj, i, j = locate(*idx)

        def quad(q: Quad) -> Any:
            return signed_sum(C_TERMS[q], lambda t: p[(*batch, t, i, j)])

        top = select(qj.eq(0), quad((0, 0)), quad((0, 1)))
        bottom = select(qj.eq(0), quad((1, 0)), quad((1, 1)))
        return finish(select(qi.eq(0), top, bottom), *idx)

    names = list(inspect.signature(locate).parameters)
    return compute(shape, named(body, names), name=name, dtype=dtype)


def strassen_compute(x: Any, bt: Any) -> Any:
    """The three stages of the module docstring."""
    from tensorir.ops.nn_compute import acc_type, load
    from tensorir.schedule.te import cast

    m, k = x.shape
    m2, k2, n2 = m // 2, k // 2, bt.shape[1]
    dt = acc_type(x.dtype)

    def a(q: Quad, i: Any, kk: Any) -> Any:
        return load(x, (q[0] * m2 + i, q[1] * k2 + kk), dt)

    xs = operand_stage(A_TERMS, a, (7, m2, k2), "strassen_x")
    p = product_stage(xs, bt, True, ())

    def locate(i: Any, j: Any) -> Any:
        return (), i // m2, j // n2, i % m2, j % n2

    return combine_stage(p, (m, 2 * n2), locate, lambda v, *_: cast(v, x.dtype), "dense", x.dtype)


def schedule_products(s: Any, target: Any, a_block: int = 0) -> None:
    """The operand stages at root and the batched product: everything but the output.
    `a_block`: A's contiguous run along k (packed channels), 0 when rows are contiguous."""
    from tensorir.ops.matmul_compute import schedule_matmul_block
    from tensorir.ops.nn_compute import inline_elementwise, stage_named

    xs, bs, p, bt = (stage_named(s, n) for n in ("strassen_x", "strassen_b", "strassen_p", "strassen_bt"))
    inline_elementwise(s, keep=[st for st in (xs, bs, p, bt) if st is not None])
    _schedule_operand(xs, target, a_block)
    if bs is not None:
        _schedule_operand(bs, target, 0)
    *batch, t, i, j = p.op.axis
    schedule_matmul_block(s, p, ([*batch, t], i, j), stage_named(s, "strassen_acc"), bt, target)


def _schedule_operand(st: Any, target: Any, block: int) -> None:
    """Per row of operands (parallel): the seven unrolled (their selects fold away), columns
    vectorized (within `block` when one is given)."""
    from tensorir.ops.nn_compute import fuse_all, maybe_parallel, pick_vector, work_of

    *batch, t, r, c = st.op.axis
    run = math.gcd(c.extent, block) if block else c.extent
    co, cv = st.split(c, factor=pick_vector(run, target.vector_lanes(st.tensor.dtype)))
    st.reorder(*batch, r, t, co, cv)
    st.unroll(t)
    st.vectorize(cv)
    maybe_parallel(st, fuse_all(st, [*batch, r]), work_of(st))


def schedule_quadrants(y: Any, target: Any) -> None:
    """A row-major output (*batch, rows, cols) per row pair (parallel), its four quadrants
    unrolled (the quadrant selects fold away), columns vectorized."""
    from tensorir.ops.nn_compute import fuse_all, maybe_parallel, pick_vector

    *batch, yi, yj = y.op.axis
    m2, n2 = yi.extent // 2, yj.extent // 2
    qi, ii = y.split(yi, factor=m2)
    qj, jj = y.split(yj, factor=n2)
    jo, jv = y.split(jj, factor=pick_vector(n2, target.vector_lanes(y.tensor.dtype)))
    y.reorder(*batch, ii, qi, qj, jo, jv)
    y.unroll(qi)
    y.unroll(qj)
    y.vectorize(jv)
    maybe_parallel(y, fuse_all(y, [*batch, ii]), math.prod(y.tensor.shape))


def schedule_strassen(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """x7 per row of operands (parallel), the seven unrolled, columns vectorized; the batched
    product with dense's register-blocked schedule (t fused into its parallel loop); the
    output per row pair (parallel), its four quadrants unrolled, columns vectorized."""
    schedule_products(s, target)
    schedule_quadrants(next(st for st in s.stages if st.is_output), target)


register_compute(OP, schedule=schedule_strassen)(strassen_compute)
