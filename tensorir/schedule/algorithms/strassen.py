"""Strassen's algorithm for a large fp32 matrix product, as a sequence of compiled kernels.

    mm = StrassenMatmul(M, K, N)          # depth from the cut-off rule (or depth=/max_depth=)
    c = mm(a, b)                          # a: (M, K), b: (K, N) -> (M, N) float32
    c = mm.dense(a, w)                    # w: (N, K), the `dense` layout (no transpose)

One level splits every operand into 2x2 quadrants and forms 7 products instead of 8:

    P1 = (A11 + A22)(B11 + B22)   P2 = (A21 + A22) B11   P3 = A11 (B12 - B22)
    P4 = A22 (B21 - B11)          P5 = (A11 + A12) B22   P6 = (A21 - A11)(B11 + B12)
    P7 = (A12 - A22)(B21 + B22)
    C11 = P1 + P4 - P5 + P7   C12 = P3 + P5   C21 = P2 + P4   C22 = P1 - P2 + P3 + P6

The leaf products are the existing `dense` kernel (op_kernel + the backend's jit, register-
blocked, parallel); the right operand stays in dense's (N, K) layout all the way down
(B_ij = W_ji^T, so B's quadrant sums are W's quadrant sums with 12 and 21 swapped). The
operand sums and the C quadrant combinations are small generated elementwise kernels
(`combine_func`: out quadrant = sum of +/- input quadrants, rows PARALLEL, columns
VECTORIZED) that read quadrants of the full matrices in place, so nothing is copied out.
Temporaries are allocated once per (level, slot) and reused across calls; the kernel
sequence is bound once per (a, w, out) arrays, so a repeated call is one loop of raw calls.

Cut-off (the MNN rule): one level saves m*n*k/8 multiply-adds (1 of 8 sub-products) and
costs about 3mk + 3nk + 5.25mn element operations of extra memory-bound work (the 18
quadrant additions: 5 on A's, 5 on B's, 8 on C's), so recurse while

    m*n*k / 8 > 3*m*k + 3*n*k + 5.25*m*n   and m, n, k are even

`should_recurse` is the default; pass `cutoff=` (a predicate on (m, n, k)) or `max_depth=`
to override it (`depth=` forces an exact depth, still only on even dims).

Accuracy (fp32, uniform [-1, 1) inputs, seed 0, error = max|C - C64| / max|C64| where
C64 is the float64 product; measured on the 2-core AVX-512 dev machine):

    size        depth 0 (dense)   depth 1    depth 2
    512^3       1.0e-06           1.0e-06    1.5e-06
    1024^3      1.2e-06           1.4e-06    1.8e-06

(median elementwise relative error: 512^3 3.3e-7 / 4.7e-7 / 6.7e-7, 1024^3 4.7e-7 /
6.6e-7 / 9.4e-7.)
Each level adds rounding from the quadrant sums (and grows the summed operands), ~1.2-1.5x
per level here; two levels stay within 1.5x of the plain product, far from fp32 trouble
for inference.

Speed (2 threads, shared machine, best of 7, a 1-level plan has 7 dense calls + 18 adds):
Strassen does not beat the plain dense kernel yet: 512^3 4.1 ms (dense) vs 4.7 (depth 1),
9.0 (2), 17.7 (3 = rule); 1024^3 21.6 vs 25.4, 28.7, 99.6 (4 = rule); 2048x512x2048 51.1 vs
52.4, 69.0, 194 (4 = rule). The dense kernel is less efficient on the half-size leaves than
on the full product, and the MNN rule (tuned for MNN's kernels) recurses to 64^3 leaves,
where call overhead and the memory-bound additions dominate: prefer max_depth=1 here.
tests/schedule/test_strassen.py checks the accuracy bounds (with margin).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tensorir.errors import TirError
from tensorir.loop.ir import Buffer, Const, For, ForKind, Load, LoopFunc, Store, Var

Cutoff = Callable[[int, int, int], bool]


def should_recurse(m: int, n: int, k: int) -> bool:
    """MNN's rule for one more Strassen level on an (m x k) @ (k x n) product."""
    if m % 2 or n % 2 or k % 2:
        return False
    return m * n * k / 8 > 3 * m * k + 3 * n * k + 5.25 * m * n


def strassen_depth(
    m: int, n: int, k: int, cutoff: Cutoff = should_recurse, max_depth: int | None = None
) -> int:
    """Levels of recursion the cut-off allows (halving m, n, k each level)."""
    d = 0
    while (max_depth is None or d < max_depth) and cutoff(m, n, k):
        m, n, k, d = m // 2, n // 2, k // 2, d + 1
    return d


# ---- the elementwise kernels ------------------------------------------------------------
# A term: (input index, row offset, column offset, sign); inputs are full 2-D matrices.
Term = tuple[int, int, int, int]


def combine_func(
    in_shapes: Sequence[tuple[int, int]],
    terms: Sequence[Term],
    out_shape: tuple[int, int],
    out_at: tuple[int, int],
    h: int,
    w: int,
    name: str = "strassen_combine",
) -> LoopFunc:
    """out[r0 + i, c0 + j] = sum_t sign_t * in_t[rt + i, ct + j] for an h x w block."""
    ins = tuple(Buffer(f"X{i}", tuple(s)) for i, s in enumerate(in_shapes))
    out = Buffer("Y", tuple(out_shape))
    i, j = Var("i"), Var("j")
    value = None
    for src, r, c, sign in terms:
        x = Load(ins[src], (i + r) * in_shapes[src][1] + c + j)
        if value is None:
            value = x if sign > 0 else Const(0.0, "float32") - x
        else:
            value = value + x if sign > 0 else value - x
    store = Store(out, (i + out_at[0]) * out_shape[1] + out_at[1] + j, value)
    inner = For(j, Const(0), Const(w), ForKind.VECTORIZED, store)
    return LoopFunc(name, (*ins, out), For(i, Const(0), Const(h), ForKind.PARALLEL, inner))


class StrassenMatmul:
    """C = A @ B for fixed shapes by Strassen recursion over compiled dense kernels."""

    def __init__(
        self,
        m: int,
        k: int,
        n: int,
        depth: int | None = None,
        cutoff: Cutoff = should_recurse,
        max_depth: int | None = None,
        target: str = "host",
    ) -> None:
        self.m, self.k, self.n, self.target = m, k, n, target
        if depth is None:
            depth = strassen_depth(m, n, k, cutoff, max_depth)
        elif not (m % (1 << depth) == n % (1 << depth) == k % (1 << depth) == 0):
            raise TirError(f"Strassen depth {depth} needs m, n, k divisible by {1 << depth}, got {m, n, k}")
        self.depth = depth
        self._bufs: dict[tuple, np.ndarray] = {}
        self._kernels: dict[tuple, object] = {}
        self._steps: list[tuple] = []
        self._plan: tuple[tuple, list] | None = None  # (operand arrays, bound kernel calls)

    # ---- kernels ------------------------------------------------------------------------
    def _dense(self, m: int, k: int, n: int):
        key = ("dense", m, k, n)
        if key not in self._kernels:
            from tensorir.graph.types import TensorType
            from tensorir.ops.kernel import op_kernel, scratch_arrays

            f = op_kernel(
                "dense", [TensorType((m, k), "float32"), TensorType((n, k), "float32")], {}, self.target
            )
            self._kernels[key] = (self._jit(f), scratch_arrays(f))
        return self._kernels[key]

    def _combine(self, ins: Sequence[np.ndarray], terms: Sequence[Term], out: np.ndarray, at, h, w) -> None:
        shapes = tuple(tuple(a.shape) for a in ins)
        key = ("combine", shapes, tuple(terms), tuple(out.shape), tuple(at), h, w)
        if key not in self._kernels:
            f = combine_func(shapes, terms, tuple(out.shape), tuple(at), h, w)
            self._kernels[key] = self._jit(f)
        self._steps.append((self._kernels[key], (*ins, out)))

    def _jit(self, func):
        """One kernel compiled for this process by the target's backend."""
        from tensorir.backends import get_backend
        from tensorir.target import get_target

        target = get_target(self.target)
        return get_backend(target).jit(func, target)

    def _buf(self, key: tuple, shape: tuple[int, int]) -> np.ndarray:
        b = self._bufs.get(key)
        if b is None:
            b = self._bufs[key] = np.empty(shape, np.float32)
        return b

    # ---- the recursion ------------------------------------------------------------------
    def _product(self, a: np.ndarray, w: np.ndarray, c: np.ndarray, level: int) -> None:
        """c (m, n) = a (m, k) @ w (n, k)^T."""
        m, k = a.shape
        n = w.shape[0]
        if level == self.depth:
            kern, scratch = self._dense(m, k, n)
            self._steps.append((kern, (a, w, c, *scratch)))
            return
        h, kk, hn = m // 2, k // 2, n // 2
        # quadrant offsets of A (m, k), W (n, k), C (m, n); B_ij = W_ji^T
        A = {"11": (0, 0), "12": (0, kk), "21": (h, 0), "22": (h, kk)}
        B = {"11": (0, 0), "12": (hn, 0), "21": (0, kk), "22": (hn, kk)}  # as W quadrants
        C = {"11": (0, 0), "12": (0, hn), "21": (h, 0), "22": (h, hn)}

        def operand(x: np.ndarray, quads: dict, spec: str, slot: str, rows: int, cols: int) -> np.ndarray:
            t = self._buf((level, slot), (rows, cols))
            terms = []
            for part in spec.split():
                sign = -1 if part[0] == "-" else 1
                r, c0 = quads[part.lstrip("+-")]
                terms.append((0, r, c0, sign))
            self._combine([x], terms, t, (0, 0), rows, cols)
            return t

        specs = [  # (A operand, B operand) of P1 .. P7
            ("11 22", "11 22"),
            ("21 22", "11"),
            ("11", "12 -22"),
            ("22", "21 -11"),
            ("11 12", "22"),
            ("21 -11", "11 12"),
            ("12 -22", "21 22"),
        ]
        prods = []
        for p, (sa, sb) in enumerate(specs):
            ta = operand(a, A, sa, "a", h, kk)
            tb = operand(w, B, sb, "b", hn, kk)
            out = self._buf((level, f"p{p + 1}"), (h, hn))
            self._product(ta, tb, out, level + 1)
            prods.append(out)
        P = prods
        combos = {  # C quadrant: [(product index, sign)]
            "11": [(0, 1), (3, 1), (4, -1), (6, 1)],
            "12": [(2, 1), (4, 1)],
            "21": [(1, 1), (3, 1)],
            "22": [(0, 1), (1, -1), (2, 1), (5, 1)],
        }
        for q, parts in combos.items():
            ins = [P[i] for i, _ in parts]
            terms = [(t, 0, 0, s) for t, (_, s) in enumerate(parts)]
            self._combine(ins, terms, c, C[q], h, hn)

    def dense(self, a: np.ndarray, w: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """a (M, K) @ w (N, K)^T."""
        a = np.ascontiguousarray(a, np.float32)
        w = np.ascontiguousarray(w, np.float32)
        if a.shape != (self.m, self.k) or w.shape != (self.n, self.k):
            raise TirError(f"StrassenMatmul{self.m, self.k, self.n}: got a {a.shape}, w {w.shape}")
        c = np.empty((self.m, self.n), np.float32) if out is None else out
        if self._plan is None or any(x is not y for x, y in zip(self._plan[0], (a, w, c), strict=True)):
            self._steps = []
            self._product(a, w, c, 0)  # records the kernel sequence; bind checks arguments once
            self._plan = ((a, w, c), [kern.bind(*args) for kern, args in self._steps])
            self._steps = []
        for run in self._plan[1]:
            run()
        return c

    def __call__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """a (M, K) @ b (K, N); b is transposed once to dense's (N, K) layout."""
        return self.dense(a, np.ascontiguousarray(np.asarray(b, np.float32).T), out)


def strassen_matmul(a: np.ndarray, b: np.ndarray, **knobs) -> np.ndarray:
    """One-shot a @ b (compiles the kernels; keep a StrassenMatmul to reuse them)."""
    return StrassenMatmul(a.shape[0], a.shape[1], b.shape[1], **knobs)(a, b)
