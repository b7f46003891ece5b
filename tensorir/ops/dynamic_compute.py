"""Kernels of the data-dependent ops (ops/dynamic.py), written directly in loop IR.

Each is one serial pass that compacts its results to the front of the upper-bound output,
counts them in a local register, zeroes the rest and stores the count:

    def nonzero(x: f32[2,3], idx: i64[2,6], count: i64[]):
      n = allocate(i64[1], "local")
      n[0] = 0
      for i in range(0, 6):
        if x[i] != 0.0:
          idx[n[0]] = i//3
          idx[6 + n[0]] = i%3
          n[0] = n[0] + 1
      ...

These are selection, sorting and suppression loops with data-dependent trip counts and
stores: no compute definition or schedule fits them, and they run where they are (CPU).
"""

from __future__ import annotations

import math
from typing import Any

from tensorir.graph.types import TensorType
from tensorir.loop.ir import (
    BinOp,
    Buffer,
    Cmp,
    Const,
    Expr,
    If,
    LetStmt,
    Load,
    LoopFunc,
    Stmt,
    Store,
    Var,
)
from tensorir.ops.dynamic import unique_layout, valid_slices
from tensorir.ops.registry import get_op, register_kernel
from tensorir.ops.serial_kernel import (
    ZERO,
    Regs,
    both,
    cpu_only,
    finish,
    get,
    incr,
    kernel_params,
    loop,
    put,
    seq,
    upto,
)
from tensorir.target import Target


# ---- nonzero ------------------------------------------------------------------------------
@register_kernel("nonzero")
def nonzero_kernel(
    in_types: list[TensorType], attrs: dict[str, Any], target: Target, name: str, passes: bool = True
) -> LoopFunc:
    cpu_only("nonzero", target)
    x_t = in_types[0]
    x, idx, count = kernel_params(in_types, get_op("nonzero").infer(in_types, attrs), ("x", "idx", "count"))
    shape = x_t.shape or (1,)
    size = x_t.size
    regs = Regs()
    n = regs.new("n")
    i, j, d = Var("i"), Var("j"), Var("d")
    strides = [math.prod(shape[k + 1 :]) for k in range(len(shape))]
    coords = []
    for k in range(len(shape)):
        c = i // strides[k] if strides[k] > 1 else i
        coords.append(Store(idx, Const(k * size) + get(n) if k else get(n), c % shape[k] if k else c))
    zero = Const(0, x_t.dtype) if x_t.dtype != "bool" else Const(False, "bool")
    body = seq(
        put(n, ZERO),
        loop(i, size, If(Cmp("!=", Load(x, i), zero), seq(*coords, incr(n)))),
        loop(d, len(shape), upto(j, get(n), size, Store(idx, d * size + j, ZERO))),
        Store(count, ZERO, get(n)),
    )
    return finish(name, (x, idx, count), (), regs.wrap(body))


# ---- nms ----------------------------------------------------------------------------------
def _corners(boxes: Buffer, base: Expr, center: int) -> tuple[Expr, Expr, Expr, Expr]:
    """(x0, x1, y0, y1) of the box at element `base` of `boxes`."""
    c = [Load(boxes, base + k) for k in range(4)]
    if center:
        half_w, half_h = c[2] / Const(2.0, "float32"), c[3] / Const(2.0, "float32")
        return c[0] - half_w, c[0] + half_w, c[1] - half_h, c[1] + half_h
    mn, mx = (lambda a, b: BinOp("min", a, b)), (lambda a, b: BinOp("max", a, b))
    return mn(c[1], c[3]), mx(c[1], c[3]), mn(c[0], c[2]), mx(c[0], c[2])


def _suppresses(boxes: Buffer, a: Expr, b: Expr, center: int, threshold: Expr) -> Expr:
    """onnxruntime's SuppressByIOU of the boxes at elements a and b, as one condition."""
    ax0, ax1, ay0, ay1 = _corners(boxes, a, center)
    bx0, bx1, by0, by1 = _corners(boxes, b, center)
    mn, mx = (lambda p, q: BinOp("min", p, q)), (lambda p, q: BinOp("max", p, q))
    ix0, ix1, iy0, iy1 = mx(ax0, bx0), mn(ax1, bx1), mx(ay0, by0), mn(ay1, by1)
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    f0 = Const(0.0, "float32")
    return both(
        ix1 > ix0, iy1 > iy0, inter > f0, area_a > f0, area_b > f0, union > f0, inter / union > threshold
    )


@register_kernel("nms")
def nms_kernel(
    in_types: list[TensorType], attrs: dict[str, Any], target: Target, name: str, passes: bool = True
) -> LoopFunc:
    cpu_only("nms", target)
    names = ("boxes", "scores", "max_out", "iou_threshold", "score_threshold", "selected", "count")
    out_types = get_op("nms").infer(in_types, attrs)
    boxes, scores, max_out, iou, thr, sel, count = kernel_params(in_types, out_types, names)
    batch, classes, n = in_types[1].shape
    rows = out_types[0].shape[0]
    cand_s, cand_i = (
        Buffer("cand_score", (max(n, 1),), "float32"),
        Buffer("cand_index", (max(n, 1),), "int64"),
    )
    regs = Regs()
    total, m, p, kept, start, sup = (regs.new(r) for r in ("total", "m", "p", "kept", "start", "sup"))
    b, c, i, j, t, r, q = (Var(v) for v in ("b", "c", "i", "j", "t", "r", "q"))
    limit, s, idx = Var("limit"), Var("s", "float32"), Var("idx")
    center = int(attrs.get("center_point_box", 0))
    candidate = s > Load(thr, ZERO) if attrs.get("has_score_threshold") else Const(True, "bool")
    # insert box i into the candidates, kept sorted by score (descending; ties: lower index first)
    insert = If(
        candidate,
        seq(
            put(p, ZERO),
            loop(j, get(m), If(Load(cand_s, j) >= s, incr(p))),
            loop(
                t,
                get(m) - get(p),
                seq(
                    Store(cand_s, get(m) - t, Load(cand_s, get(m) - t - 1)),
                    Store(cand_i, get(m) - t, Load(cand_i, get(m) - t - 1)),
                ),
            ),
            Store(cand_s, get(p), s),
            Store(cand_i, get(p), i),
            incr(m),
        ),
    )
    score_at = Load(scores, ((b * classes) + c) * n + i)
    box = lambda k: (b * n + k) * 4  # noqa: E731
    select = If(
        get(kept) < limit,
        LetStmt(
            idx,
            Load(cand_i, r),
            seq(
                put(sup, ZERO),
                loop(
                    q,
                    get(kept),
                    If(
                        _suppresses(
                            boxes, box(idx), box(Load(sel, (get(start) + q) * 3 + 2)), center, Load(iou, ZERO)
                        ),
                        put(sup, Const(1)),
                    ),
                ),
                If(
                    get(sup).eq(ZERO),
                    seq(
                        Store(sel, get(total) * 3, b),
                        Store(sel, get(total) * 3 + 1, c),
                        Store(sel, get(total) * 3 + 2, idx),
                        incr(total),
                        incr(kept),
                    ),
                ),
            ),
        ),
    )
    per_class = seq(
        put(m, ZERO),
        loop(i, n, LetStmt(s, score_at, insert)),
        put(start, get(total)),
        put(kept, ZERO),
        loop(r, get(m), select),
    )
    body = LetStmt(
        limit,
        BinOp("min", BinOp("max", Load(max_out, ZERO), ZERO), Const(attrs["per_class"])),
        seq(
            put(total, ZERO),
            loop(b, batch, loop(c, classes, per_class)),
            upto(r, get(total) * 3, rows * 3, Store(sel, r, ZERO)),
            Store(count, ZERO, get(total)),
        ),
    )
    return finish(name, (boxes, scores, max_out, iou, thr, sel, count), (cand_s, cand_i), regs.wrap(body))


# ---- unique -------------------------------------------------------------------------------
@register_kernel("unique")
def unique_kernel(
    in_types: list[TensorType], attrs: dict[str, Any], target: Target, name: str, passes: bool = True
) -> LoopFunc:
    cpu_only("unique", target)
    has_length = len(in_types) == 2
    names = ("x", *(("length",) if has_length else ()), "y", "indices", "inverse", "counts", "count")
    params = kernel_params(in_types, get_op("unique").infer(in_types, attrs), names)
    x, y, indices, inverse, counts, count = (p for p in params if p.name != "length")
    shape = in_types[0].shape
    outer, n, inner = unique_layout(shape, attrs.get("axis"))
    per_row = valid_slices(shape, attrs.get("axis"), 1) if has_length else 0
    valid = (
        BinOp("min", BinOp("max", Load(params[1], ZERO) * per_row, ZERO), Const(n))
        if has_length
        else Const(n)
    )
    first, cnt, rank = (Buffer(nm, (max(n, 1),), "int64") for nm in ("first", "cnt", "rank"))
    regs = Regs()
    u, found, same, state, rk, nv = (regs.new(r) for r in ("u", "found", "same", "state", "rk", "nv"))
    k, j, o, e, w = (Var(v) for v in ("k", "j", "o", "e", "w"))
    at = lambda buf, row, col: Load(buf, (o * n + row) * inner + col)  # noqa: E731

    def over_slice(stmt: Stmt) -> Stmt:
        return loop(o, outer, loop(e, inner, stmt))

    find = loop(
        j,
        get(u),
        If(
            get(found) < ZERO,
            seq(
                put(same, Const(1)),
                over_slice(If(Cmp("!=", at(x, k, e), at(x, Load(first, j), e)), put(same, ZERO))),
                If(get(same).eq(Const(1)), put(found, j)),
            ),
        ),
    )
    record = If(
        get(found) < ZERO,
        seq(Store(first, get(u), k), Store(cnt, get(u), Const(1)), Store(inverse, k, get(u)), incr(u)),
        seq(Store(cnt, get(found), Load(cnt, get(found)) + 1), Store(inverse, k, get(found))),
    )
    # lexicographic: does the slice at first[w] come before the one at first[j]?
    less = seq(
        put(state, ZERO),
        over_slice(
            If(
                get(state).eq(ZERO),
                seq(
                    If(at(x, Load(first, w), e) < at(x, Load(first, j), e), put(state, Const(1))),
                    If(at(x, Load(first, w), e) > at(x, Load(first, j), e), put(state, Const(2))),
                ),
            )
        ),
        If(get(state).eq(Const(1)), incr(rk)),
    )
    ranked = seq(put(rk, ZERO), loop(w, get(u), less), Store(rank, j, get(rk)))
    place = LetStmt(
        Var("r"),
        Load(rank, j),
        seq(
            Store(indices, Var("r"), Load(first, j)),
            Store(counts, Var("r"), Load(cnt, j)),
            over_slice(Store(y, (o * n + Var("r")) * inner + e, at(x, Load(first, j), e))),
        ),
    )
    zero_y = Const(0, y.dtype) if y.dtype != "bool" else Const(False, "bool")
    body = seq(
        put(u, ZERO),
        put(nv, valid),
        loop(k, get(nv), seq(put(found, Const(-1)), find, record)),
        loop(j, get(u), ranked if attrs.get("sorted", 1) else Store(rank, j, j)),
        loop(j, get(u), place),
        loop(k, get(nv), Store(inverse, k, Load(rank, Load(inverse, k)))),
        upto(k, get(nv), n, Store(inverse, k, ZERO)),
        upto(
            j,
            get(u),
            n,
            seq(
                Store(indices, j, ZERO),
                Store(counts, j, ZERO),
                over_slice(Store(y, (o * n + j) * inner + e, zero_y)),
            ),
        ),
        Store(count, ZERO, get(u)),
    )
    return finish(name, params, (first, cnt, rank), regs.wrap(body))


# ---- topk_dyn -----------------------------------------------------------------------------
@register_kernel("topk_dyn")
def topk_dyn_kernel(
    in_types: list[TensorType], attrs: dict[str, Any], target: Target, name: str, passes: bool = True
) -> LoopFunc:
    """Each line's valid entries insertion-sorted straight into the outputs (an entry goes
    after those at least as good: ties keep the lower index first), the rest zeroed."""
    cpu_only("topk_dyn", target)
    names = ("x", "length", "k", "values", "indices", "count")
    x, length, k_in, values, indices, count = kernel_params(
        in_types, get_op("topk_dyn").infer(in_types, attrs), names
    )
    axis = attrs["axis"]
    shape = in_types[0].shape
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    regs = Regs()
    m, p = regs.new("m"), regs.new("p")
    o, e, j, q, t = (Var(v) for v in ("o", "e", "j", "q", "t"))
    valid, keep, v = Var("valid"), Var("keep"), Var("v", values.dtype)
    at = lambda row: (o * n + row) * inner + e  # noqa: E731
    ahead = (lambda a: a >= v) if attrs.get("largest", 1) else (lambda a: a <= v)
    insert = LetStmt(
        v,
        Load(x, at(j)),
        seq(
            put(p, ZERO),
            loop(q, get(m), If(ahead(Load(values, at(q))), incr(p))),
            loop(
                t,
                get(m) - get(p),
                seq(
                    Store(values, at(get(m) - t), Load(values, at(get(m) - t - 1))),
                    Store(indices, at(get(m) - t), Load(indices, at(get(m) - t - 1))),
                ),
            ),
            Store(values, at(get(p)), v),
            Store(indices, at(get(p)), j),
            incr(m),
        ),
    )
    zero_v = Const(0, values.dtype) if values.dtype != "bool" else Const(False, "bool")
    line = seq(
        put(m, ZERO),
        loop(j, valid, insert),
        upto(j, keep, n, seq(Store(values, at(j), zero_v), Store(indices, at(j), ZERO))),
    )
    clip = lambda a, hi: BinOp("min", BinOp("max", a, ZERO), hi)  # noqa: E731
    body = LetStmt(
        valid,
        clip(Load(length, ZERO), Const(n)),
        LetStmt(
            keep,
            clip(Load(k_in, ZERO), valid),
            seq(
                loop(o, outer, loop(e, inner, line)),
                Store(count, ZERO, keep),
            ),
        ),
    )
    return finish(name, (x, length, k_in, values, indices, count), (), regs.wrap(body))
