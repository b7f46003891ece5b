"""Tensor expressions: what to compute, independent of how (the schedule says how).

    A = placeholder((M, K), "float32", "A")
    B = placeholder((K, N), "float32", "B")
    k = reduce_axis(K, "k")
    C = compute((M, N), lambda i, j: sum_(A[i, k] * B[k, j], axis=k), name="C")
    D = compute((M, N), lambda i, j: max_(C[i, j], 0.0), name="D")

`tensor[i, j]` is a multi-dimensional access (`TensorLoad`) that lowering flattens
row-major; `tensor.bcast[n, c, h, w]` indexes numpy-style (indices aligned right, extent-1
dimensions read at 0). A reduction (`sum_`, `prod_`, `max_`, `min_` with `axis=`) may only be
the whole body of a compute; `max_(a, b)` / `min_(a, b)` without `axis` are elementwise.
Axes (`IterVar`) compare by identity; tensors and operations too.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorir.errors import TirError
from tensorir.loop.arith import is_float
from tensorir.loop.ir import INTRINSICS, BinOp, Call, Cast, Cmp, Const, Expr, ExprLike, Select, as_expr
from tensorir.loop.visitor import walk


class TensorExprError(TirError):
    """A malformed tensor expression (wrong index count, misplaced reduction, ...)."""


@dataclass(frozen=True, eq=False)
class IterVar(Expr):
    """A loop axis: `kind` is "data" (an output dimension) or "reduce"."""

    name: str
    extent: int
    kind: str = "data"

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def dtype(self) -> str:
        return "int64"

    def pretty(self, _fmt: Callable[[Expr], str]) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"IterVar({self.name}, {self.extent}, {self.kind})"


@dataclass(frozen=True, eq=False)
class PlaceholderOp:
    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, eq=False)
class ComputeOp:
    """`name[axis...] = body`; a top-level `Reduce` body reduces over `reduce_axis`."""

    name: str
    axis: tuple[IterVar, ...]
    reduce_axis: tuple[IterVar, ...]
    body: Expr
    dtype: str
    shape: tuple[int, ...] = field(default=())

    def input_tensors(self) -> list[Tensor]:
        seen: dict[int, Tensor] = {}
        for n in walk(self.body):
            if isinstance(n, TensorLoad):
                seen.setdefault(id(n.tensor), n.tensor)
        return list(seen.values())


Operation = PlaceholderOp | ComputeOp


@dataclass(frozen=True, eq=False)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    op: Operation

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, index: Any) -> TensorLoad:
        idx = index if isinstance(index, tuple) else (index,)
        if len(idx) != self.ndim:
            raise TensorExprError(f"{self.name} has {self.ndim} dimensions, indexed with {len(idx)}")
        return TensorLoad(self, tuple(_index(i) for i in idx))

    @property
    def bcast(self) -> _BroadcastIndexer:
        """`T.bcast[i0, ..., in]`: numpy broadcasting of T against an n-d iteration space."""
        return _BroadcastIndexer(self)

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {list(self.shape)}, {self.dtype})"


class _BroadcastIndexer:
    def __init__(self, t: Tensor) -> None:
        self.t = t

    def __getitem__(self, index: Any) -> TensorLoad:
        idx = index if isinstance(index, tuple) else (index,)
        if len(idx) < self.t.ndim:
            raise TensorExprError(f"{self.t.name} has more dimensions than the broadcast index")
        tail = idx[len(idx) - self.t.ndim :]
        return self.t[tuple(0 if d == 1 else i for i, d in zip(tail, self.t.shape, strict=True))]


def _index(i: Any) -> Expr:
    if isinstance(i, bool) or not isinstance(i, int | np.integer | Expr):
        raise TensorExprError(f"tensor index must be an integer expression, got {i!r}")
    e = as_expr(int(i) if isinstance(i, np.integer) else i, "int64")
    if e.dtype.startswith("float"):
        raise TensorExprError(f"tensor index must be an integer expression, got {e.dtype}")
    return e


@dataclass(frozen=True)
class TensorLoad(Expr):
    tensor: Tensor
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    def pretty(self, fmt: Callable[[Expr], str]) -> str:
        return f"{self.tensor.name}[{', '.join(fmt(i) for i in self.indices)}]"


REDUCERS = {"sum": "+", "prod": "*", "max": "max", "min": "min"}


@dataclass(frozen=True)
class Reduce(Expr):
    """combiner in REDUCERS; `identity` is the initial value of the accumulator."""

    combiner: str
    source: Expr
    axes: tuple[IterVar, ...]
    identity: Const

    @property
    def dtype(self) -> str:
        return self.source.dtype

    def pretty(self, fmt: Callable[[Expr], str]) -> str:
        return f"{self.combiner}({fmt(self.source)}, axis=[{', '.join(a.name for a in self.axes)}])"


# ---- constructors --------------------------------------------------------------------
def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "placeholder") -> Tensor:
    shape = _shape(shape)
    return Tensor(name, shape, dtype, PlaceholderOp(name, shape, dtype))


def reduce_axis(extent: int, name: str = "k") -> IterVar:
    if not isinstance(extent, int) or extent < 1:
        raise TensorExprError(f"reduce_axis {name}: extent must be a positive int, got {extent!r}")
    return IterVar(name, extent, "reduce")


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
    out = tuple(int(d) for d in shape)
    if any(d < 1 for d in out):
        raise TensorExprError(f"shape {list(out)} has a non-positive dimension")
    return out


def _arg_names(fcompute: Callable[..., Any], ndim: int) -> list[str]:
    params = list(inspect.signature(fcompute).parameters.values())
    if len(params) == ndim and all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params):
        return [p.name for p in params]
    return [f"i{d}" for d in range(ndim)]


_name_prefix: ContextVar[str] = ContextVar("tir_te_name_prefix", default="")


@contextmanager
def name_scope(prefix: str) -> Iterator[None]:
    """Prefix the names of tensors computed inside, so composed computes stay unique."""
    token = _name_prefix.set(_name_prefix.get() + prefix)
    try:
        yield
    finally:
        _name_prefix.reset(token)


def compute(
    shape: Sequence[int], fcompute: Callable[..., ExprLike], name: str = "compute", dtype: str | None = None
) -> Tensor:
    """A tensor whose element at (i, j, ...) is `fcompute(i, j, ...)`."""
    name = _name_prefix.get() + name
    shape = _shape(shape)
    axis = tuple(IterVar(n, d) for n, d in zip(_arg_names(fcompute, len(shape)), shape, strict=True))
    body = as_expr(fcompute(*axis), "float32")
    if dtype is not None and dtype != body.dtype:
        if isinstance(body, Reduce):
            raise TensorExprError(f"{name}: cast the reduction's source, not the reduction")
        body = Cast(dtype, body)
    reduce = body.axes if isinstance(body, Reduce) else ()
    _check_body(name, body, axis + reduce)
    op = ComputeOp(name, axis, reduce, body, body.dtype, shape)
    return Tensor(name, shape, body.dtype, op)


def _check_body(name: str, body: Expr, axes: tuple[IterVar, ...]) -> None:
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise TensorExprError(f"{name}: axis names {names} are not unique")
    inner = body.source if isinstance(body, Reduce) else body
    for n in walk(inner):
        if isinstance(n, Reduce):
            raise TensorExprError(f"{name}: a reduction must be the whole body of a compute")
        if isinstance(n, BinOp | Cmp) and n.a.dtype != n.b.dtype:
            raise TensorExprError(f"{name}: '{n.op}' mixes {n.a.dtype} and {n.b.dtype}; use cast()")
        if isinstance(n, IterVar) and n.kind == "reduce" and n not in axes:
            raise TensorExprError(f"{name}: reduction axis {n.name} is used outside its reduction")


def _identity(combiner: str, dtype: str) -> Const:
    if combiner in ("sum", "prod"):
        one = combiner == "prod"
        return Const(float(one) if is_float(dtype) else int(one), dtype)
    if is_float(dtype):
        return Const(-math.inf if combiner == "max" else math.inf, dtype)
    if dtype == "bool":
        return Const(combiner == "min", "bool")
    info = np.iinfo(np.dtype(dtype))
    return Const(int(info.min) if combiner == "max" else int(info.max), dtype)


def _reduce(combiner: str, source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    if not axes or not all(isinstance(a, IterVar) and a.kind == "reduce" for a in axes):
        raise TensorExprError(f"{combiner}_: axis must be reduce_axis() values, got {axis!r}")
    src = as_expr(source, "float32")
    return Reduce(combiner, src, axes, _identity(combiner, src.dtype))


def sum_(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce("sum", source, axis)


def prod_(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce("prod", source, axis)


def _pair(a: ExprLike, b: ExprLike) -> tuple[Expr, Expr]:
    """Two operands with Python numbers taking the dtype of the expression side."""
    if not isinstance(a, Expr) and isinstance(b, Expr):
        return as_expr(a, b.dtype), b
    ea = as_expr(a, "float32")
    return ea, as_expr(b, ea.dtype)


def _minmax(op: str, a: ExprLike, b: ExprLike | None, axis: Any) -> Expr:
    if axis is not None:
        if b is not None:
            raise TensorExprError(f"{op}_: give either two operands or axis=, not both")
        return _reduce(op, a, axis)
    if b is None:
        raise TensorExprError(f"{op}_ needs a second operand or axis=")
    ea, eb = _pair(a, b)
    return BinOp(op, ea, eb)


def max_(a: ExprLike, b: ExprLike | None = None, axis: IterVar | Sequence[IterVar] | None = None) -> Expr:
    """`max_(x, axis=k)` reduces; `max_(a, b)` is the elementwise maximum."""
    return _minmax("max", a, b, axis)


def min_(a: ExprLike, b: ExprLike | None = None, axis: IterVar | Sequence[IterVar] | None = None) -> Expr:
    """`min_(x, axis=k)` reduces; `min_(a, b)` is the elementwise minimum."""
    return _minmax("min", a, b, axis)


def if_then_else(cond: ExprLike, a: ExprLike, b: ExprLike) -> Expr:
    """`a` where `cond` holds, else `b` (only the chosen side's memory is read)."""
    ea, eb = _pair(a, b)
    return Select(as_expr(cond, "bool"), ea, eb)


select = if_then_else


def all_(*conds: Expr) -> Expr:
    """Logical and of conditions (True for none)."""
    out: Expr = Const(True, "bool")
    for c in conds:
        out = c if out == Const(True, "bool") else BinOp("and", out, c)
    return out


def any_(*conds: Expr) -> Expr:
    out: Expr = Const(False, "bool")
    for c in conds:
        out = c if out == Const(False, "bool") else BinOp("or", out, c)
    return out


def cast(value: ExprLike, dtype: str) -> Expr:
    e = as_expr(value, dtype)
    return e if e.dtype == dtype else Cast(dtype, e)


def call(name: str, *args: ExprLike) -> Expr:
    """A math intrinsic (`exp`, `log`, `sqrt`, `tanh`, `sigmoid`, `fma`, `pow`, ...)."""
    if name not in INTRINSICS:
        raise TensorExprError(f"unknown intrinsic {name!r}; known: {', '.join(INTRINSICS)}")
    exprs = [as_expr(a, "float32") for a in args]
    dtype = exprs[0].dtype if exprs else "float32"
    return Call(name, tuple(as_expr(a, dtype) for a in args), dtype)
