"""Compute definitions for reductions, argmax/argmin, cumsum/cumprod and topk (references in reduce.py).

A reduction is one `Reduce` stage over the reduced axes (accumulating float16 in float32,
integers in their own type, as the references do) plus an elementwise epilogue stage when
the op needs one (mean's division, l2's sqrt, log_sum's log). `axes=()` reduces nothing:
each element is its own set; reducing an empty axis gives the identity (0, 1, -inf, ...)
through the epilogue. log_sum_exp is max, exp-sum, then log + max.
argmax/argmin: the max (min), then the first (last) index holding it.
cumsum / cumprod: te has no recurrence, so masked sums (products): over the whole axis when
short, else blocked (per block, their masked prefix, a masked reduction inside the block).
topk: k rounds of "best value not yet picked, lowest index among equals" (k <= MAX_TOPK_K).
A float max/min along the contiguous last axis keeps 16 running results (a vector loop),
then reduces those. NaN inputs to max/min/argmax/topk give unspecified results (numpy
propagates them; the max combiner keeps a NaN only while no later element replaces it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import tensorir.ops.reduce  # noqa: F401  (the references register the ops first)
from tensorir.errors import TirError
from tensorir.loop.arith import is_float
from tensorir.loop.ir import Const, Expr, Not
from tensorir.ops.elementwise_compute import const
from tensorir.ops.reduce import reduced_shape
from tensorir.ops.registry import register_compute
from tensorir.schedule.defaults import schedule_reduction
from tensorir.schedule.te import (
    IterVar,
    Tensor,
    all_,
    any_,
    call,
    cast,
    compute,
    if_then_else,
    max_,
    min_,
    prod_,
    reduce_axis,
    sum_,
)

REDUCE_LANES = 16  # running results of a float max/min along the last axis
MAX_TOPK_K = 32  # stages grow with k (2 per round); larger k would want a sort
Index = tuple[Expr, ...]


def acc_dtype(dtype: str) -> str:
    """Accumulation dtype: float16 sums in float32, everything else in itself."""
    return "float32" if dtype == "float16" else dtype


def full_index(ndim: int, axes: Sequence[int], keepdims: bool, out: Index, red: Index) -> Index:
    """The input index for output index `out` and reduction vars `red` (one per axis)."""
    it, rt = iter(out), iter(red)
    idx = []
    for d in range(ndim):
        if d in axes:
            if keepdims:
                next(it)
            idx.append(next(rt))
        else:
            idx.append(next(it))
    return tuple(idx)


def kept_index(ndim: int, axes: Sequence[int], keepdims: bool, out: Index) -> Index:
    """The keepdims-shaped index (0 on reduced axes) for output index `out`."""
    if keepdims:
        return tuple(Const(0) if d in axes else i for d, i in enumerate(out))
    it = iter(out)
    return tuple(Const(0) if d in axes else next(it) for d in range(len(out) + len(axes)))


_REDUCERS = {"sum": sum_, "prod": prod_, "max": max_, "min": min_}


def reduce_stage(
    name: str,
    x: Tensor,
    axes: Sequence[int],
    keepdims: bool,
    combiner: str,
    src: Callable[[Index], Expr],
) -> Tensor:
    """out = combiner over `axes` of src(input index); src gets the full input index."""
    axes = tuple(axes)
    shape = reduced_shape(x.shape, axes, keepdims)
    if any(x.shape[a] == 0 for a in axes):  # an empty set: the identity, x is never read
        identity = reduce_identity(combiner, src(tuple(Const(0) for _ in x.shape)).dtype)
        return compute(shape, lambda *i: identity, name=name)
    if _lane_split(x, axes, combiner, src):
        return _lane_split_stage(name, x, axes, keepdims, combiner, src)
    red = tuple(reduce_axis(x.shape[a], f"k{a}") for a in axes)

    def body(*i: IterVar) -> Expr:
        idx = full_index(x.ndim, axes, keepdims, i, red)
        if not red:  # each element is its own set
            return src(idx)
        return _REDUCERS[combiner](src(idx), axis=red)

    return compute(shape, body, name=name)


def _lane_split(x: Tensor, axes: tuple[int, ...], combiner: str, src: Callable[[Index], Expr]) -> bool:
    """Whether a float max/min runs along the contiguous last axis, long enough to split."""
    if combiner not in ("max", "min") or not axes or axes[-1] != x.ndim - 1:
        return False
    n = x.shape[-1]
    return n % REDUCE_LANES == 0 and n >= 2 * REDUCE_LANES and is_float(src((Const(0),) * x.ndim).dtype)


def _lane_split_stage(
    name: str, x: Tensor, axes: tuple[int, ...], keepdims: bool, combiner: str, src: Callable[[Index], Expr]
) -> Tensor:
    """max/min as REDUCE_LANES running results over the last axis (x[.., k*L + l] for lane l,
    a vector loop), then over the lanes. A float max/min chain does not vectorize by itself:
    its NaN-respecting compare-and-select is not reassociable."""
    lanes, reducer = REDUCE_LANES, _REDUCERS[combiner]
    shape = reduced_shape(x.shape, axes, keepdims)
    red = tuple(reduce_axis(x.shape[a], f"k{a}") for a in axes[:-1])
    kq = reduce_axis(x.shape[-1] // lanes, "kq")

    def partial(*i: IterVar) -> Expr:
        idx = full_index(x.ndim, axes, keepdims, i[:-1], (*red, kq * lanes + i[-1]))
        return reducer(src(idx), axis=(*red, kq))

    part = compute((*shape, lanes), partial, name=f"{name}_lanes")
    lane = reduce_axis(lanes, "l")
    return compute(shape, lambda *i: reducer(part[(*i, lane)], axis=lane), name=name)


def reduce_identity(combiner: str, dtype: str) -> Const:
    """The value of `combiner` over an empty set (0, 1, -inf / the dtype's min, ...)."""
    if combiner in ("sum", "prod"):
        return const(int(combiner == "prod"), dtype)
    if dtype == "bool":
        return const(combiner == "min", dtype)
    return _worst(dtype, largest=combiner == "max")


def epilogue(name: str, t: Tensor, fn: Callable[[Expr], Expr], dtype: str) -> Tensor:
    return compute(t.shape, lambda *i: fn(t[i]), name=name, dtype=dtype)


# ---- plain reductions ----------------------------------------------------------------
def _wide(dtype: str) -> str:
    """Dtype for the math of l2 / log_sum / mean: integers go through float64."""
    return acc_dtype(dtype) if is_float(dtype) else "float64"


def _simple(op: str, combiner: str, pre: Callable[[Expr], Expr], post: Callable[[Expr, int], Expr] | None):
    """A reduction `post(combiner(pre(x)), n)` registered as the compute of `op`."""

    def fn(x: Tensor, axes: Sequence[int], keepdims: int = 1) -> Tensor:
        n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
        acc = _acc_for(op, x.dtype)
        direct = post is None and acc == x.dtype
        name = op if direct else f"{op}_acc"
        r = reduce_stage(name, x, axes, bool(keepdims), combiner, lambda i: pre(cast(x[i], acc)))
        if direct:
            return r
        return epilogue(op, r, (lambda v: v) if post is None else (lambda v: post(v, n)), x.dtype)

    register_compute(op, schedule=schedule_reduction)(fn)


def _acc_for(op: str, dtype: str) -> str:
    if op in ("reduce_max", "reduce_min"):
        return dtype  # exact in any dtype
    if op in ("reduce_mean", "reduce_log_sum") or (op == "reduce_l2" and not is_float(dtype)):
        return _wide(dtype)
    return acc_dtype(dtype)


def _post_sqrt(v: Expr, n: int) -> Expr:
    return call("sqrt", cast(v, _wide(v.dtype)))


_simple("reduce_sum", "sum", lambda v: v, None)
_simple("reduce_max", "max", lambda v: v, None)
_simple("reduce_min", "min", lambda v: v, None)
_simple("reduce_prod", "prod", lambda v: v, None)
_simple("reduce_l1", "sum", lambda v: call("abs", v), None)
_simple("reduce_sum_square", "sum", lambda v: v * v, None)
_simple("reduce_mean", "sum", lambda v: v, lambda v, n: v / const(n, v.dtype))
_simple("reduce_l2", "sum", lambda v: v * v, _post_sqrt)
_simple("reduce_log_sum", "sum", lambda v: v, lambda v, n: call("log", v))


@register_compute("reduce_log_sum_exp", schedule=schedule_reduction)
def reduce_log_sum_exp_compute(x: Tensor, axes: Sequence[int], keepdims: int = 1) -> Tensor:
    """log(sum(exp(x - m))) + m with m the max (0 where the max is not finite)."""
    axes, wide = tuple(axes), _wide(x.dtype)
    m = reduce_stage("lse_max", x, axes, True, "max", lambda i: cast(x[i], wide))

    def shift(i: Index) -> Expr:
        v = m[tuple(Const(0) if d in axes else e for d, e in enumerate(i))]
        return if_then_else(call("abs", v) < const(np.inf, wide), v, const(0, wide))

    s = reduce_stage("lse_sum", x, axes, True, "sum", lambda i: call("exp", cast(x[i], wide) - shift(i)))
    out_shape = reduced_shape(x.shape, axes, bool(keepdims))

    def body(*i: IterVar) -> Expr:
        k = kept_index(x.ndim, axes, bool(keepdims), i)
        return call("log", s[k]) + shift(k)

    return compute(out_shape, body, name="reduce_log_sum_exp", dtype=x.dtype)


# ---- argmax / argmin ---------------------------------------------------------------------
def _arg(op: str, combiner: str) -> None:
    def fn(x: Tensor, axis: int, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
        best = reduce_stage(f"{op}_best", x, (axis,), True, combiner, lambda i: x[i])
        n = x.shape[axis]

        def pick(i: Index) -> Expr:
            k = i[axis]
            hit = x[i].eq(best[(*i[:axis], Const(0), *i[axis + 1 :])])
            if select_last_index:
                return if_then_else(hit, k, Const(-1))
            return if_then_else(hit, k, Const(n))

        return reduce_stage(op, x, (axis,), bool(keepdims), "max" if select_last_index else "min", pick)

    register_compute(op, schedule=schedule_reduction)(fn)


_arg("argmax", "max")
_arg("argmin", "min")


# ---- cumsum / cumprod ------------------------------------------------------------------
CUMSUM_DIRECT_MAX = 64  # scan lengths up to this use one masked sum per element


def _cumulative(
    op: str, reduce: Callable[..., Expr], combine: Callable[[Expr, Expr], Expr], unit: int
) -> None:
    """Register the compute of cumsum (sum_, +, 0) or cumprod (prod_, *, 1)."""

    def fn(x: Tensor, axis: int, exclusive: int = 0, reverse: int = 0) -> Tensor:
        """out[.., j, ..] = x[.., k, ..] combined over k <= j (k < j exclusive; >=, > reversed).
        Short axes: a masked reduction over the axis (n^2 work). Longer ones are blocked: per
        block, a masked prefix over the blocks, then inside j's block (n*B + (n/B)^2 work)."""
        acc = acc_dtype(x.dtype)
        n = x.shape[axis]
        scan = _Scan(x, axis, acc, bool(exclusive), bool(reverse), unit)
        if n <= CUMSUM_DIRECT_MAX:
            k = reduce_axis(n, "k")

            def direct(*i: IterVar) -> Expr:
                return reduce(scan.masked(i, k, scan.take(i[axis], k)), axis=k)

            out = compute(x.shape, direct, name=op if acc == x.dtype else f"{op}_acc")
            return out if acc == x.dtype else epilogue(op, out, lambda v: v, x.dtype)
        b = max(16, -(-round((2 * n) ** (1 / 3)) // 16) * 16)  # ~ (2n)^(1/3): balances both terms
        nb = -(-n // b)
        blocks = (*x.shape[:axis], nb, *x.shape[axis + 1 :])
        r = reduce_axis(b, "r")
        sums = compute(
            blocks,
            lambda *i: reduce(scan.masked(i, i[axis] * b + r, (i[axis] * b + r) < n), axis=r),
            name=f"{op}_blocks",
        )
        c = reduce_axis(nb, "c")

        def prefix(*i: IterVar) -> Expr:
            before = c > i[axis] if reverse else c < i[axis]
            return reduce(if_then_else(before, sums[scan.at(i, c)], const(unit, acc)), axis=c)

        pre = compute(blocks, prefix, name=f"{op}_prefix")
        r2 = reduce_axis(b, "r")

        def within(*i: IterVar) -> Expr:
            k = i[axis] // b * b + r2
            return reduce(scan.masked(i, k, scan.take(i[axis], k)), axis=r2)

        inside = compute(x.shape, within, name=f"{op}_within")
        return compute(
            x.shape, lambda *i: combine(pre[scan.at(i, i[axis] // b)], inside[i]), name=op, dtype=x.dtype
        )

    register_compute(op, schedule=schedule_reduction)(fn)


_cumulative("cumsum", sum_, lambda a, b: a + b, 0)
_cumulative("cumprod", prod_, lambda a, b: a * b, 1)


class _Scan:
    """Index helpers for cumsum / cumprod along `axis` (`unit`: what a masked position gives)."""

    def __init__(self, x: Tensor, axis: int, acc: str, exclusive: bool, reverse: bool, unit: int) -> None:
        self.x, self.axis, self.acc, self.exclusive, self.reverse = x, axis, acc, exclusive, reverse
        self.unit = unit

    def at(self, i: Index, k: Expr) -> Index:
        return (*i[: self.axis], k, *i[self.axis + 1 :])

    def take(self, j: Expr, k: Expr) -> Expr:
        """Whether position k counts for output position j (and lies inside the axis)."""
        if not self.reverse:
            return k < j if self.exclusive else k <= j
        return all_(k > j if self.exclusive else k >= j, k < self.x.shape[self.axis])

    def masked(self, i: Index, k: Expr, cond: Expr) -> Expr:
        return if_then_else(cond, cast(self.x[self.at(i, k)], self.acc), const(self.unit, self.acc))


# ---- topk --------------------------------------------------------------------------------
@register_compute("topk", schedule=schedule_reduction)
def topk_compute(x: Tensor, k: int, axis: int, largest: int = 1, sorted: int = 1) -> tuple[Tensor, Tensor]:  # noqa: A002
    """Round r picks the best value among the positions not picked in rounds < r, and the
    lowest index holding it (the reference's stable order); outputs are always sorted."""
    if not 1 <= k <= MAX_TOPK_K:
        raise TirError(f"topk compute supports 1 <= k <= {MAX_TOPK_K}, got k={k}")
    worst = _worst(x.dtype, bool(largest))
    vals: list[Tensor] = []
    idxs: list[Tensor] = []
    for r in range(k):
        free = _not_taken(list(idxs), axis)
        v = reduce_stage(
            f"topk_v{r}",
            x,
            (axis,),
            True,
            "max" if largest else "min",
            lambda i, free=free: if_then_else(free(i), x[i], worst),
        )

        def index(i: Index, free: Callable[[Index], Expr] = free, v: Tensor = v) -> Expr:
            hit = all_(free(i), x[i].eq(v[_row(i, axis)]))
            return if_then_else(hit, i[axis], Const(x.shape[axis]))

        idxs.append(reduce_stage(f"topk_i{r}", x, (axis,), True, "min", index))
        vals.append(v)
    return _stack_rounds("topk_values", vals, axis), _stack_rounds("topk_indices", idxs, axis)


def _row(i: Index, axis: int) -> Index:
    return (*i[:axis], Const(0), *i[axis + 1 :])


def _not_taken(done: list[Tensor], axis: int) -> Callable[[Index], Expr]:
    """Whether position i along `axis` was not picked by any of the rounds `done`."""

    def free(i: Index) -> Expr:
        if not done:
            return Const(True, "bool")
        return Not(any_(*(t[_row(i, axis)].eq(i[axis]) for t in done)))

    return free


def _worst(dtype: str, largest: bool) -> Const:
    if is_float(dtype):
        return const(-np.inf if largest else np.inf, dtype)
    info = np.iinfo(np.dtype(dtype))
    return const(info.min if largest else info.max, dtype)


def _stack_rounds(name: str, rounds: list[Tensor], axis: int) -> Tensor:
    """Stack the per-round [.., 1, ..] results along `axis`."""
    shape = list(rounds[0].shape)
    shape[axis] = len(rounds)

    def body(*i: IterVar) -> Expr:
        row = _row(i, axis)
        out: Expr = rounds[-1][row]
        for r in range(len(rounds) - 2, -1, -1):
            out = if_then_else(i[axis].eq(r), rounds[r][row], out)
        return out

    return compute(shape, body, name=name)
