"""Kernels of the scatters and the compute of gather_nd (references in scatter.py).

A scatter is a copy of data into the output (the movement schedule: rows vectorized,
parallel when large) followed by one serial loop nest over the updates, each iteration
reading its index, then storing (or combining into) one output element:

    out[...] = data[...]                                  (the vectorized copy)
    for u0 in range(0, 1):
      for u1 in range(0, 2):
        out[u0*5 + k] = out[u0*5 + k] + in2[u0*2 + u1]    k: in1[u0*2 + u1], wrapped

The loops stay serial: duplicate indices are applied in order (the last write wins without a
reduction, as in the reference). Indices are wrapped (negative from the end) and clamped
into range, so a bad index writes an edge element instead of faulting. gather_nd reads its
indices the same way, one output element per iteration of the movement schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorir.ops.scatter  # noqa: F401  (the references register the ops first)
from tensorir.graph.types import TensorType
from tensorir.loop.ir import Buffer, Const, Expr, For, ForKind, Load, LoopFunc, Seq, Stmt, Store, Var
from tensorir.loop.passes import optimize_loops
from tensorir.ops.kernel import argument
from tensorir.ops.registry import NoScheduleError, register_compute, register_kernel
from tensorir.ops.tensor_compute import schedule_movement, wrap_index
from tensorir.schedule import create_schedule, lower
from tensorir.schedule.lower import flatten
from tensorir.schedule.te import Tensor, compute, max_, min_
from tensorir.target import Target

COMBINE: dict[str, Callable[[Expr, Expr], Expr]] = {
    "none": lambda old, new: new,
    "add": lambda old, new: old + new,
    "mul": lambda old, new: old * new,
    "max": lambda old, new: max_(new, old),  # a NaN update wins only as the second operand
    "min": lambda old, new: min_(new, old),
}
Where = Callable[[list[Var], list[Buffer]], tuple[Expr, Expr]]


def serial_nest(extents: Sequence[int], prefix: str, body: Callable[[list[Var]], Stmt]) -> Stmt:
    """Serial loops over `extents` (outermost first) around body(loop vars)."""
    vars_ = [Var(f"{prefix}{k}") for k in range(len(extents))]
    stmt = body(vars_)
    for v, n in reversed(list(zip(vars_, extents, strict=True))):
        stmt = For(v, Const(0), Const(int(n)), ForKind.SERIAL, stmt)
    return stmt


def scatter_func(
    in_types: Sequence[TensorType],
    target: Target,
    name: str,
    reduction: str,
    loops: Sequence[int],
    where: Where,
    passes: bool = True,
) -> LoopFunc:
    """The loop function (in0 = data, in1 = indices, in2 = updates, out): the copy, then per
    point of `loops` the store at where(vars, params) = (output index, update index).
    `passes=False`: before simplify / vectorize / unroll, as `op_kernel` says."""
    if target.kind != "llvm":
        raise NoScheduleError("scatters have no GPU schedule")
    data = argument(in_types[0], "in0")
    params = [Buffer(f"in{k}", t.shape, t.dtype) for k, t in enumerate(in_types)]
    out = Buffer("out", in_types[0].shape, in_types[0].dtype)
    if in_types[0].size == 0:
        return LoopFunc(name, (*params, out), Seq(()))
    copy = compute(data.shape, lambda *i: data[i], name="out")
    s = create_schedule([copy])
    schedule_movement(s, [copy], target)
    body: list[Stmt] = [lower(s, [data, copy], name=name, passes=passes).body]
    if in_types[1].size and all(loops):

        def store(vars_: list[Var]) -> Stmt:
            at, src = where(vars_, params)
            return Store(out, at, COMBINE[reduction](Load(out, at), Load(params[2], src)))

        body.append(serial_nest(loops, "u", store))
    func = LoopFunc(name, (*params, out), Seq(tuple(body)))
    return optimize_loops(func) if passes else func


def index_at(indices: Buffer, flat: Expr, dim: int) -> Expr:
    """The index stored at indices[flat], wrapped and clamped into [0, dim)."""
    return wrap_index(Load(indices, flat), dim)


@register_kernel("scatter_elements")
def scatter_elements_kernel(
    in_types: list[TensorType], attrs: dict[str, Any], target: Target, name: str, passes: bool = True
) -> LoopFunc:
    shape, axis = in_types[0].shape, attrs["axis"]
    upd_shape = in_types[2].shape

    def where(v: list[Var], p: list[Buffer]) -> tuple[Expr, Expr]:
        src = flatten(v, upd_shape)
        coords: list[Expr] = list(v)
        coords[axis] = index_at(p[1], src, shape[axis])
        return flatten(coords, shape), src

    return scatter_func(in_types, target, name, attrs.get("reduction", "none"), upd_shape, where, passes)


@register_kernel("scatter_nd")
def scatter_nd_kernel(
    in_types: list[TensorType], attrs: dict[str, Any], target: Target, name: str, passes: bool = True
) -> LoopFunc:
    shape, ishape = in_types[0].shape, in_types[1].shape
    k, lead = ishape[-1], ishape[:-1]

    def where(v: list[Var], p: list[Buffer]) -> tuple[Expr, Expr]:
        u, rest = v[: len(lead)], v[len(lead) :]
        row = [index_at(p[1], flatten([*u, Const(j)], ishape), shape[j]) for j in range(k)]
        return flatten([*row, *rest], shape), flatten(v, in_types[2].shape)

    reduction = attrs.get("reduction", "none")
    return scatter_func(in_types, target, name, reduction, in_types[2].shape, where, passes)


@register_compute("gather_nd", schedule=schedule_movement)
def gather_nd_compute(data: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
    b, k = batch_dims, indices.shape[-1]
    lead = indices.ndim - 1

    def body(*i: Expr) -> Expr:
        row = [wrap_index(indices[(*i[:lead], Const(j))], data.shape[b + j]) for j in range(k)]
        return data[(*i[:b], *row, *i[lead:])]

    return compute(indices.shape[:-1] + data.shape[b + k :], body, name="gather_nd")
