"""Compute definitions and default schedules for gemm, matmul (numpy semantics: batch
broadcast, 1-D operands) and einsum (references in nn.py).

A matrix product is three tensors: `<op>_bt`, B viewed as (..., N, K) (inlined, or packed
into NR-column panels), `<op>_acc`, the reduction over k, and the output (a copy of the
accumulator, or gemm's `alpha * acc + beta * C` epilogue):

    acc[b, i, j] = sum_k A[b, i, k] * bt[b, j, k]          y[b, i, j] = acc[b, i, j]

The default schedule (`schedule_matmul`) is a register-blocked kernel: the output's columns
in NR-wide blocks (NR a multiple of the vector lanes where N allows), its rows in chunks;
for each (batch, column block, row chunk) — the parallel loop — the accumulator block is
computed into a local buffer: for every MR-row tile, the k loop outside, MR rows unrolled
and NR columns vectorized inside, so the MR x NR tile lives in registers (MR x NR / lanes
FMAs per k). B's column panel is packed (K x NR, contiguous) once per block when enough
rows reuse it. Then the epilogue copies the block out, vectorized.

einsum parses its equation into one reduction over the letters missing from the output
(repeated letters read diagonals, `...` broadcasts) with the generic reduction schedule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import tensorir.ops.nn  # noqa: F401  (the references register the ops first)
from tensorir.dtypes import elem_bytes
from tensorir.errors import TirError
from tensorir.loop.ir import Const, Expr
from tensorir.ops.nn import einsum_shape, matmul_shape
from tensorir.ops.nn_compute import (
    PACK_BYTES,
    acc_type,
    chunk_rows,
    const,
    fuse_all,
    inline_elementwise,
    load,
    maybe_parallel,
    register_tile,
    schedule_copy,
    schedule_reduction_generic,
    stage_named,
    tile_rows,
    work_of,
)
from tensorir.ops.registry import register_compute
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.space import knob
from tensorir.schedule.te import IterVar, Tensor, compute, reduce_axis, select, sum_
from tensorir.target import Target


# ---- compute ------------------------------------------------------------------------------
def _bcast_index(batch: Sequence[Expr], shape: Sequence[int]) -> list[Expr | int]:
    """numpy broadcasting of an operand's batch dims `shape` against output batch indices."""
    tail = list(batch[len(batch) - len(shape) :]) if shape else []
    return [0 if d == 1 else i for i, d in zip(tail, shape, strict=True)]


def matmul_parts(
    a: Tensor, b: Tensor, trans_a: bool, trans_b: bool, name: str, out_batch: Sequence[int]
) -> tuple[Tensor, Tensor]:
    """(acc, bt) for a' @ b' (a' = a or a^T, b' = b or b^T in the trailing two dims):
    bt[bb..., j, k] = b'[bb..., k, j], acc[out_batch..., i, j] = sum_k a'[.., i, k] * bt[.., j, k]
    in the accumulation dtype, batch dims broadcast numpy-style. A 1-D a is a (1, K) row, a
    1-D b a (K, 1) column."""
    dt = acc_type(a.dtype)
    a1, b1 = a.ndim == 1, b.ndim == 1
    if a1:
        kdim, rows, ab = a.shape[0], 1, ()
    else:
        rows, kdim = a.shape[-2:][::-1] if trans_a else a.shape[-2:]
        ab = a.shape[:-2]
    bb = () if b1 else b.shape[:-2]
    cols = 1 if b1 else (b.shape[-2] if trans_b else b.shape[-1])

    def bt_body(*i: Expr) -> Expr:
        *bi, j, k = i
        if b1:
            return b[k]
        return b[(*bi, j, k) if trans_b else (*bi, k, j)]

    bt = compute((*bb, cols, kdim), bt_body, name=f"{name}_bt")
    k = reduce_axis(kdim, "k")
    nb = len(out_batch)

    def acc_body(*o: Expr) -> Expr:
        batch, i, j = o[:nb], o[nb], o[nb + 1]
        if a1:
            av = load(a, [k], dt)
        else:
            av = load(a, [*_bcast_index(batch, ab), *((k, i) if trans_a else (i, k))], dt)
        bv = load(bt, [*_bcast_index(batch, bb), j, k], dt)
        return sum_(av * bv, axis=k)

    return compute((*out_batch, rows, cols), acc_body, name=f"{name}_acc"), bt


def matmul_compute(a: Tensor, b: Tensor) -> Tensor:
    out = matmul_shape(a.shape, b.shape)
    nb = len(out) - (a.ndim > 1) - (b.ndim > 1)
    acc, _ = matmul_parts(a, b, False, False, "matmul", out[:nb])

    def body(*o: Expr) -> Expr:
        batch, rest = list(o[:nb]), list(o[nb:])
        i = 0 if a.ndim == 1 else rest.pop(0)
        j = 0 if b.ndim == 1 else rest.pop(0)
        return load(acc, [*batch, i, j], a.dtype)

    return compute(out, body, name="matmul")


def gemm_compute(
    a: Tensor,
    b: Tensor,
    c: Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    trans_a: int = 0,
    trans_b: int = 0,
) -> Tensor:
    acc, _ = matmul_parts(a, b, bool(trans_a), bool(trans_b), "gemm", ())
    dt = acc.dtype

    def body(i: Expr, j: Expr) -> Expr:
        v = load(acc, (i, j), dt)
        if alpha != 1:
            v = v * const(alpha, dt)
        if c is not None:
            cv = load(c, c.bcast[i, j].indices, dt)
            if beta == 0:  # C is ignored (even inf / nan), but stays an input of the kernel
                return v + select(Const(False, "bool"), cv, const(0, dt))
            v = v + (cv * const(beta, dt) if beta != 1 else cv)
        return v

    return compute(acc.shape, body, name="gemm", dtype=a.dtype)


# ---- einsum ---------------------------------------------------------------------------
def einsum_terms(equation: str, shapes: Sequence[tuple[int, ...]]) -> tuple[list[str], str]:
    """The input terms and the output term with `...` spelled out as upper-case letters (one
    per broadcast dim, aligned right) and the implicit output made explicit."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    widths = [len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes, strict=True) if "..." in t]
    nell = max(widths, default=0)
    ell = "".join(chr(ord("A") + d) for d in range(nell))
    if not arrow:
        letters = lhs.replace("...", "").replace(",", "")
        rhs = ("..." if "..." in lhs else "") + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1)
        )

    def expand(t: str, n: int) -> str:
        return t.replace("...", ell[nell - n :]) if "..." in t else t

    ins = [expand(t, len(s) - len(t.replace("...", ""))) for t, s in zip(terms, shapes, strict=True)]
    return ins, expand(rhs, nell)


def einsum_compute(*xs: Tensor, equation: str) -> Tensor:
    shapes = [x.shape for x in xs]
    out_shape = einsum_shape(equation, shapes)
    ins, out = einsum_terms(equation, shapes)
    sizes: dict[str, int] = {}
    for term, shape in zip(ins, shapes, strict=True):
        for ch, d in zip(term, shape, strict=True):
            sizes[ch] = max(sizes.get(ch, 1), d)
    red = {ch: reduce_axis(sizes[ch], f"r_{ch}") for ch in sorted(set("".join(ins)) - set(out))}
    dt = acc_type(xs[0].dtype)

    def body(*o: Expr) -> Expr:
        env: dict[str, Any] = dict(zip(out, o, strict=True)) | red
        terms = [
            load(x, [0 if d == 1 else env[ch] for ch, d in zip(t, x.shape, strict=True)], dt)
            for t, x in zip(ins, xs, strict=True)
        ]
        v = math.prod(terms[1:], start=terms[0])
        return sum_(v, axis=list(red.values())) if red else v

    y = compute(out_shape, body, name="einsum" if dt == xs[0].dtype else "einsum_acc")
    if y.dtype != xs[0].dtype:
        return compute(out_shape, lambda *i: load(y, i, xs[0].dtype), name="einsum")
    return y


# ---- schedules --------------------------------------------------------------------------
def col_vector_choices(cols: int, v: int) -> list[int]:
    """The register tile's widths in v-lane vectors: the divisors of cols / v up to 8."""
    return [d for d in range(1, 9) if (cols // v) % d == 0]


def schedule_matmul_block(
    s: Schedule,
    y: Stage,
    axes: tuple[Sequence[IterVar], IterVar, IterVar],
    acc: Stage,
    bt: Stage,
    target: Target,
    pack_b: bool = True,
    panel: int | None = None,
) -> None:
    """The register-blocked product (module docstring). `y` is the output stage, `axes` its
    (batch axes, row axis, column axis) matching acc's (..., i, j); y reads acc elementwise.
    `pack_b=False`: B is laid out for the kernel already (the int8 products' weights), no
    panel packing and no knob for it. acc's columns may run past y's (padded to whole
    vectors): the tile follows acc's, y's last block is guarded."""
    batch, i, j = axes
    (k,) = acc.op.reduce_axis
    rows, cols = i.extent, max(j.extent, acc.tensor.shape[-1])
    mr, v, u = register_tile(target, acc.tensor.dtype, rows, cols)
    if panel is None:
        u = knob("gemm_col_vectors", col_vector_choices(cols, v), u)
    else:
        v = math.gcd(v if cols % v == 0 else target.vector_lanes(acc.tensor.dtype), panel)
        u = panel // v
        mr = tile_rows(target, rows, u)
    mr = knob("gemm_rows", list(range(1, min(rows, 16) + 1)), mr)
    nr = v * u
    outer_iters = math.prod(a.extent for a in batch) * -(-cols // nr)
    size = elem_bytes(acc.tensor.dtype)
    mc = chunk_rows(rows, mr, nr * size, outer_iters)
    tiles = knob("gemm_row_chunk_tiles", ["auto", 1, 2, 4, 8, 16, 32, 64], "auto")
    mc = mc if tiles == "auto" else min(mr * tiles, -(-rows // mr) * mr)
    jo, ji = y.split(j, factor=nr)
    ic, ii = y.split(i, factor=mc)
    jj, jv = y.split(ji, factor=v)
    y.reorder(*batch, jo, ic, ii, jj, jv)
    outer = fuse_all(y, [*batch, jo, ic])
    y.vectorize(jv)
    maybe_parallel(y, outer, work_of(acc))
    acc.compute_at(y, outer)
    *rb, ri, rj = acc.op.axis
    top, ri = acc.split(ri, nparts=1)
    rio, rii = acc.split(ri, factor=mr)
    rjo, rji = acc.split(rj, factor=nr)
    rju, rjv = acc.split(rji, factor=v)
    acc.reorder(*rb, top, rjo, rio, k, rii, rju, rjv)
    lanes = target.vector_lanes(acc.tensor.dtype)
    neon = target.arch == "aarch64" and acc.tensor.dtype in ("float32", "float16")
    if neon and k.extent % lanes == 0 and k.extent > lanes:
        # NEON: `lanes` steps of k unrolled read each row's A as one vector and feed the
        # FMAs by lane (fmla v.4s, v.4s, v.s[k]; codegen/llvm_expr.py)
        _, ki = acc.split(k, factor=lanes)
        acc.unroll(ki)
    acc.unroll(rii)
    acc.unroll(rju)
    acc.vectorize(rjv)
    fits = k.extent * nr * size <= PACK_BYTES
    if pack_b and knob("gemm_pack_b", [False, True] if fits else [False], fits and min(rows, mc) >= 2 * mr):
        packed = s.pack(bt.tensor, bt.tensor.ndim - 2, nr)  # (..., N/NR, K, NR) panels
        bt.compute_inline()
        s[packed].compute_at(acc, top)
        _, pv = s[packed].split(s[packed].op.axis[-1], factor=v)
        s[packed].vectorize(pv)
    else:
        bt.compute_inline()


def schedule_matmul(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Default schedule of matmul / gemm (any compute built on `matmul_parts`): the blocked
    kernel when the output is acc's (.., rows, cols) with cols > 1, else a plain reduction."""
    acc = next((st for st in s.stages if st.name.endswith("_acc") and st.op.reduce_axis), None)
    bt = None if acc is None else stage_named(s, acc.name.removesuffix("_acc") + "_bt")
    if acc is None or bt is None:
        raise TirError("schedule_matmul: no '<op>_acc' / '<op>_bt' stages to schedule")
    inline_elementwise(s, keep=[bt])
    y = next(st for st in s.stages if st.is_output)
    if y.tensor.shape == acc.tensor.shape and acc.tensor.shape[-1] > 1 and not y.op.reduce_axis:
        *batch, i, j = y.op.axis
        schedule_matmul_block(s, y, (batch, i, j), acc, bt, target)
        return
    bt.compute_inline()
    schedule_reduction_generic(acc, target)
    schedule_copy(y, target)


def schedule_einsum(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """The reduction with the generic schedule; a separate cast stage copied out."""
    inline_elementwise(s)
    for st in s.stages:
        if st.inlined:
            continue
        if st.op.reduce_axis:
            schedule_reduction_generic(st, target)
        else:
            schedule_copy(st, target)


register_compute("matmul", schedule=schedule_matmul)(matmul_compute)
register_compute("gemm", schedule=schedule_matmul)(gemm_compute)
register_compute("einsum", schedule=schedule_einsum)(einsum_compute)
