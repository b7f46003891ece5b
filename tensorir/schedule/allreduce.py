"""Lowering of a cross-work-item reduction: a reduction axis bound to a local.* tag.

`s[S].bind(k_i, "local.x")` on a reduction axis (after `k_o, k_i = s[S].split(k, factor=T)`
and `reorder(..., k_i, k_o)`) makes the work-items of a group share S's reduction. Each
work-item reduces its strided slice into a private partial `S_rf`, the partials go to a
`__local` array `S_red` of the launch width, and a tree combines them (log2 T steps, a
barrier after each); every work-item then stores the result (an all-reduce: a private S
holds it in each work-item, a global S gets T identical stores):

    S[i] = 0.0                                    S_rf = allocate(f32[1], "local")
    for k in range(0, 1000):                      S_rf[0] = 0.0
      S[i] = S[i] + A[i*1000 + k]                 for k_o in range(0, 4):
                                       ->           if k_o*256 + tx < 1000:
                                                      S_rf[0] = S_rf[0] + A[i*1000 + k_o*256 + tx]
                                                  S_red = allocate(f32[256], "shared")
                                                  S_red[tx] = S_rf[0]
                                                  barrier("shared")
                                                  if tx < 128:
                                                    S_red[tx] = S_red[tx] + S_red[tx + 128]
                                                  barrier("shared")
                                                  ... (64, 32, ..., 1)
                                                  S[i] = S_red[0]
                                                  barrier("shared")

The bound axis is the stage's own GPU loop, or shares the id of an enclosing loop bound
to the same tag (the stage computed at that loop); the tree then spans that launch width,
work-items past the axis's extent contributing the identity. A width that is not a power
of two first folds the top down to one. The bound axis must be the outermost reduction
loop with no data loop inside it; guards on the work-item id cover only the partial loop,
so every work-item reaches every barrier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorir.loop.ir import Allocate, Barrier, BinOp, Buffer, Const, Expr, If, Load, Seq, Stmt, Store, Var
from tensorir.schedule.schedule import ScheduleError
from tensorir.schedule.te import Reduce

if TYPE_CHECKING:
    from tensorir.schedule.lower import Conds, Producers, _Lowerer
    from tensorir.schedule.nest import Nest


def bound_reduce_pos(nest: Nest) -> int | None:
    """Position of the nest's reduction leaf bound to a GPU tag (None: a serial reduction)."""
    threads = nest.stage.threads
    return next((p for p, a in enumerate(nest.leaves) if a.kind == "reduce" and a in threads), None)


def tree_steps(red: Buffer, tx: Var, width: int, op: str) -> list[Stmt]:
    """Combine red[0:width] into red[0], a barrier after each step (red[tx] already written
    and fenced). A non-power-of-two width first folds its top part onto the largest power
    of two below it."""

    def step(active: int, offset: int) -> list[Stmt]:
        combined = BinOp(op, Load(red, tx), Load(red, tx + offset))
        return [If(tx < active, Store(red, tx, combined)), Barrier()]

    half = 1 << (width.bit_length() - 1)
    out = step(width - half, half) if half < width else []
    while half > 1:
        half //= 2
        out += step(half, half)
    return out


def assemble_allreduce(
    lw: _Lowerer, nest: Nest, body: Reduce, producers: Producers, conds: Conds, out: Buffer, index: Expr
) -> Stmt:
    """The loops of a reduction stage whose reduction leaf is bound to a local.* tag (module
    docstring); `out[index]` is where the result goes, `conds` the guards per loop level."""
    from tensorir.schedule.bounds import hoist_selects
    from tensorir.schedule.lower import COMBINE, _all

    st = nest.stage
    q = bound_reduce_pos(nest)
    assert q is not None
    leaf = nest.leaves[q]
    tag = st.threads[leaf]
    first = next(p for p, a in enumerate(nest.leaves) if a.kind == "reduce")
    if first != q:
        raise ScheduleError(
            f"lower: {leaf.name} of {st.name} is bound to {tag} but {nest.leaves[first].name} is "
            "an outer reduction loop; the bound reduction axis must be the outermost (reorder it)"
        )
    inside = [a.name for a in nest.leaves[q + 1 :] if a.kind == "data"]
    if inside:
        raise ScheduleError(
            f"lower: data loops {inside} of {st.name} are inside its cross-work-item reduction "
            f"over {leaf.name}; reorder them outside"
        )
    tx = nest.vars[q]
    width = lw.bound[tag][1] if q in nest.merged else nest.extents[q]
    op = COMBINE[body.combiner]
    part = Buffer(f"{st.name}_rf", (1,), st.tensor.dtype, "local")
    red = Buffer(f"{st.name}_red", (width,), st.tensor.dtype, "shared")
    acc = Load(part, Const(0))
    update = hoist_selects(Store(part, Const(0), BinOp(op, acc, lw.to_loads(body.source))), lw.ranges)
    partial = lw.loops(nest, list(range(q + 1, len(nest.leaves))), update, conds, producers)
    own_guards = conds.pop(q, [])  # guards on the work-item id: the partial loop only
    if own_guards:
        partial = If(_all(own_guards), partial)
    steps = [Store(red, tx, acc), Barrier(), *tree_steps(red, tx, width, op)]
    steps += [Store(out, index, Load(red, Const(0))), Barrier()]
    init = Store(part, Const(0), body.identity)
    inner = Allocate(part, Seq((init, partial, Allocate(red, Seq(tuple(steps))))))
    stmt = lw.loops(nest, list(range(q + 1)), inner, conds, producers)
    return lw.wrap(nest, -1, conds, {}, stmt)
