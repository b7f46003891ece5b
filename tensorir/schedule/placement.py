"""Primitives that place stages or make new ones: compute_at, compute_inline, cache_write,
cache_read, pack. Called through the traced methods of `Stage` / `Schedule` (schedule.py).

compute_at(P, C, ax): P's loops go inside C's loop `ax`, over the region of P that C's
iterations under `ax` read (found by interval bounds at lowering), into a buffer of that
size when P is not an argument:

    for i in range(0, 16):                      for i in range(0, 16):
      P[i] = A[i]*2.0                   ->        P = allocate(f32[1], "local")
    for i in range(0, 16):                        P[0] = A[i]*2.0
      C[i] = P[i] + 1.0                           C[i] = P[0] + 1.0

P's readers may also be (or, when C does not read P, must be) stages computed at that
same loop `ax` of C or at a loop of C inside it, attached first: softmax's max and exp
stages, read by the row sum and the output, live in the output's row loop; the merged
depthwise + 1x1 kernel's depthwise rows live in a row chunk's loop and its 1x1 sums, which
read them, in the pixel-tile loop inside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorir.loop.ir import Const, Expr
from tensorir.loop.visitor import map_exprs, substitute
from tensorir.schedule.te import ComputeOp, IterVar, Tensor, TensorLoad, compute, if_then_else

if TYPE_CHECKING:
    from tensorir.schedule.schedule import Schedule, Stage


def _error(msg: str) -> Exception:
    from tensorir.schedule.schedule import ScheduleError

    return ScheduleError(msg)


def compute_at(st: Stage, target: Any, axis: IterVar) -> None:
    from tensorir.schedule.schedule import Stage

    if not isinstance(target, Stage) or target.schedule is not st.schedule:
        raise _error(f"compute_at: {target!r} is not a stage of this schedule")
    if target is st:
        raise _error(f"compute_at: stage {st.name} cannot be computed inside itself")
    if st.inlined:
        raise _error(f"compute_at: stage {st.name} is inlined")
    if target.inlined:
        raise _error(f"compute_at: target stage {target.name} is inlined")
    consumers = st.schedule.consumers(st.tensor)
    inside = [c for c in consumers if c is target or _inside(c, target, axis)]
    if not inside:
        raise _error(f"compute_at: stage {target.name} does not read {st.name}, so it has no loop to hold it")
    others = [c.name for c in consumers if not any(c is i for i in inside)]
    if others:
        raise _error(
            f"compute_at: {st.name} is also read by {', '.join(others)}; it needs a single consumer "
            "(or its other readers computed at the same loop first)"
        )
    if not any(a is axis for a in target.leaves):
        target.check_leaf(axis, "compute_at")  # raises with the reason
    st.attach = ("at", target, axis)


def _inside(c: Stage, target: Stage, axis: IterVar) -> bool:
    """Whether stage c is computed at `axis` of `target` or at a loop of target inside it."""
    if c.attach[0] != "at" or c.attach[1] is not target:
        return False
    leaves = target.leaves
    at = next((k for k, a in enumerate(leaves) if a is c.attach[2]), -1)
    here = next((k for k, a in enumerate(leaves) if a is axis), len(leaves))
    return at >= here


def compute_inline(st: Stage) -> None:
    if st.is_output:
        raise _error(f"compute_inline: {st.name} is an output; it must be stored")
    if st.op.reduce_axis:
        raise _error(f"compute_inline: {st.name} is a reduction; only elementwise stages inline")
    attached = [s.name for s in st.schedule.stages if s.attach[0] == "at" and s.attach[1] is st]
    if attached:
        raise _error(f"compute_inline: stages {attached} are computed at {st.name}'s loops")
    st.attach = ("inline",)


def _untouched(st: Stage, prim: str) -> None:
    if st.relations or st.kinds or st.attach != ("root",) or st.leaves != [*st.op.axis, *st.op.reduce_axis]:
        raise _error(f"{prim}: apply it to {st.name} before other primitives on that stage")
    if any(s.attach[0] == "at" and s.attach[1] is st for s in st.schedule.stages):
        raise _error(f"{prim}: apply it to {st.name} before computing other stages at it")


def _insert_stage(sched: Schedule, stage: Stage, before: Stage | None) -> None:
    pos = len(sched.stages) if before is None else sched.stages.index(before)
    sched.stages.insert(pos, stage)
    sched._add_tensor(stage.tensor)


def cache_write(sched: Schedule, tensor: Tensor, scope: str) -> Tensor:
    from tensorir.schedule.schedule import Stage

    st = sched[tensor]
    _untouched(st, "cache_write")
    if scope not in ("local", "global"):
        raise _error(f"cache_write: unknown scope {scope!r} (local or global)")
    op = st.op
    new_axis = tuple(IterVar(a.name, a.extent, a.kind) for a in op.axis)
    new_red = tuple(IterVar(a.name, a.extent, a.kind) for a in op.reduce_axis)
    mapping: dict[Expr, Expr] = dict(zip(op.axis + op.reduce_axis, new_axis + new_red, strict=True))
    name = sched.fresh_name(f"{st.name}_{scope}")
    cache_op = ComputeOp(name, new_axis, new_red, substitute(op.body, mapping), op.dtype, op.shape)
    cache = Tensor(name, tensor.shape, tensor.dtype, cache_op)
    _insert_stage(sched, Stage(sched, cache, cache_op, scope), before=st)
    st.op = ComputeOp(op.name, op.axis, (), TensorLoad(cache, op.axis), op.dtype, op.shape)
    st.leaves = list(op.axis)
    st.axes = {a.name: a for a in op.axis}
    return cache


def cache_read(sched: Schedule, tensor: Tensor, scope: str, readers: Any) -> Tensor:
    from tensorir.schedule.schedule import Stage

    if not isinstance(tensor, Tensor) or sched.tensors.get(tensor.name) is not tensor:
        raise _error(f"cache_read: {tensor!r} is not a tensor of this schedule")
    if scope not in ("shared", "local"):
        raise _error(f"cache_read: unknown scope {scope!r} (shared or local)")
    readers = list(readers)
    if not readers or not all(isinstance(r, Stage) and r.schedule is sched for r in readers):
        raise _error("cache_read: readers must be a non-empty list of stages of this schedule")
    for r in readers:
        if not any(t is tensor for t in r.op.input_tensors()):
            raise _error(f"cache_read: stage {r.name} does not read {tensor.name} directly")
    name = sched.fresh_name(f"{tensor.name}_{scope}")
    axes = tuple(IterVar(f"ax{d}", e) for d, e in enumerate(tensor.shape))
    op = ComputeOp(name, axes, (), TensorLoad(tensor, axes), tensor.dtype, tensor.shape)
    cache = Tensor(name, tensor.shape, tensor.dtype, op)

    def fn(e: Expr) -> Expr | None:
        if isinstance(e, TensorLoad) and e.tensor is tensor:
            return TensorLoad(cache, e.indices)
        return None

    for r in readers:
        r.op = ComputeOp(
            r.op.name, r.op.axis, r.op.reduce_axis, map_exprs(r.op.body, fn), r.op.dtype, r.op.shape
        )
    first = min(sched.stages.index(r) for r in readers)
    _insert_stage(sched, Stage(sched, cache, op, scope), before=sched.stages[first])
    return cache


def _packed_index(idx: tuple[Expr, ...], axis: int, factor: int) -> tuple[Expr, ...]:
    i = idx[axis]
    f = Const(factor, i.dtype)
    return (*idx[:axis], i // f, *idx[axis + 1 :], i % f)


def pack(sched: Schedule, tensor: Tensor, axis: int, factor: int) -> Tensor:
    from tensorir.schedule.schedule import Stage, positive_int

    if not isinstance(tensor, Tensor) or sched.tensors.get(tensor.name) is not tensor:
        raise _error(f"pack: {tensor!r} is not a tensor of this schedule")
    factor = positive_int("pack factor", factor)
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < tensor.ndim:
        raise _error(f"pack: axis must be a dimension of {tensor.name} (0..{tensor.ndim - 1}), got {axis!r}")
    extent = tensor.shape[axis]
    shape = (*tensor.shape[:axis], -(-extent // factor), *tensor.shape[axis + 1 :], factor)

    def body(*i: Any) -> Expr:
        src = (*i[:axis], i[axis] * factor + i[-1], *i[axis + 1 : -1])
        value = tensor[src]
        if extent % factor == 0:
            return value
        return if_then_else(src[axis] < extent, value, Const(0, tensor.dtype))

    name = sched.fresh_name(f"{tensor.name}_pack")
    packed = compute(shape, lambda *i: body(*i), name=name, dtype=tensor.dtype)
    consumers = [st for st in sched.stages if any(t is tensor for t in st.op.input_tensors())]
    for st in consumers:
        st.op = _reindex(st.op, tensor, packed, axis, factor)
    producer = sched.stage_of(tensor)
    if producer is not None:  # right after the tensor's own stage
        pos = sched.stages.index(producer) + 1
        before = sched.stages[pos] if pos < len(sched.stages) else None
    else:  # a placeholder: just before its first reader
        before = consumers[0] if consumers else None
    _insert_stage(sched, Stage(sched, packed, packed.op), before)
    return packed


def _reindex(op: ComputeOp, old: Tensor, new: Tensor, axis: int, factor: int) -> ComputeOp:
    def fn(e: Expr) -> Expr | None:
        if isinstance(e, TensorLoad) and e.tensor is old:
            return TensorLoad(new, _packed_index(e.indices, axis, factor))
        return None

    return ComputeOp(op.name, op.axis, op.reduce_axis, map_exprs(op.body, fn), op.dtype, op.shape)
