"""A reference interpreter for LoopFuncs (numpy-backed; slow, for tests on tiny shapes).

`run(func, [a, b, c])` executes `func` on numpy arrays given in parameter order (buffers
are written in place; they are viewed flat, row-major). Scalars are numpy scalars of the
IR dtype, vectors are numpy arrays of `lanes` elements, so float32 arithmetic rounds
like float32. Semantics are the IR's: `/` truncates on integers, `//` and `%` floor,
`select` evaluates both arms, `round` rounds half to even. Every load and store is
bounds-checked, and `Allocate`d float buffers start as NaN, so reading memory that was
never written shows up in the result.

The tree is compiled once into Python closures, each taking (vars, buffers) dicts.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensorir.loop.arith import is_float
from tensorir.loop.ir import (
    Allocate,
    BinOp,
    Broadcast,
    Buffer,
    Call,
    Cast,
    Cmp,
    Const,
    Expr,
    For,
    If,
    LetStmt,
    Load,
    LoopFunc,
    Not,
    Prefetch,
    Ramp,
    Select,
    Seq,
    Stmt,
    Store,
    Var,
)

Env = dict[str, Any]
ExprFn = Callable[[Env, Env], Any]
StmtFn = Callable[[Env, Env], None]


class InterpError(RuntimeError):
    """Out-of-bounds access or malformed IR met while interpreting."""


def _np_dtype(dtype: str) -> np.dtype:
    return np.dtype(np.bool_ if dtype == "bool" else dtype)


def _tdiv(a: Any, b: Any) -> Any:
    q = np.floor_divide(np.abs(a), np.abs(b))
    return np.where((np.asarray(a) < 0) != (np.asarray(b) < 0), -q, q)


def _bool_or_bits(logical: Callable, bitwise: Callable) -> Callable:
    return lambda a, b: logical(a, b) if np.asarray(a).dtype == np.bool_ else bitwise(a, b)


_BINOPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": np.floor_divide,
    "%": np.mod,
    "min": np.minimum,
    "max": np.maximum,
    "and": _bool_or_bits(np.logical_and, np.bitwise_and),
    "or": _bool_or_bits(np.logical_or, np.bitwise_or),
    "xor": _bool_or_bits(np.logical_xor, np.bitwise_xor),
    "shl": np.left_shift,
    "shr": np.right_shift,
}
_CMPS = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _dot4(*args: Any, act: type = np.uint8) -> Any:
    """(a0, a1, a2, a3, w) or (a, w): sum_i a_i (byte i of a, as `act`) * int8 byte i of w;
    the a_i bytes read as `act` too (dot4_s8s8: int8)."""
    *acts, w = args

    def bytes_of(v: Any, dtype: type) -> np.ndarray:
        return np.asarray(v, np.int32)[..., None].view(dtype).reshape(*np.shape(v), 4).astype(np.int64)

    quads = bytes_of(w, np.int8)
    if len(acts) == 1:
        a = bytes_of(acts[0], act)
        acts = [a[..., i] for i in range(4)]
    else:
        acts = [np.asarray(a, np.int64).astype(act).astype(np.int64) for a in acts]
    return sum(np.asarray(a, np.int64) * quads[..., i] for i, a in enumerate(acts))


_INTRINSICS: dict[str, Callable[..., Any]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh,
    "erf": _erf,
    "sigmoid": lambda x: 1 / (1 + np.exp(-np.asarray(x, np.float64))),
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
    "fma": lambda a, b, c: np.asarray(a, np.float64) * b + c,
    "pow": np.power,
    "sin": np.sin,
    "cos": np.cos,
    "dot4_u8s8": _dot4,
    "dot4_s8s8": lambda *args: _dot4(*args, act=np.int8),
}


def _to(value: Any, dtype: np.dtype) -> Any:
    out = np.asarray(value).astype(dtype)
    return out[()] if out.ndim == 0 else out


def _check(buf: Buffer, arr: np.ndarray, idx: Any) -> None:
    lo, hi = (np.min(idx), np.max(idx)) if np.ndim(idx) else (idx, idx)
    if lo < 0 or hi >= arr.size:
        raise InterpError(f"index {idx} is out of bounds for {buf.name} (size {arr.size})")


# ---- expressions ---------------------------------------------------------------------
def _binop(e: BinOp) -> ExprFn:
    fa, fb, dt = expr_fn(e.a), expr_fn(e.b), _np_dtype(e.dtype)
    fn = (operator.truediv if is_float(e.dtype) else _tdiv) if e.op == "/" else _BINOPS[e.op]
    return lambda v, b: _to(fn(fa(v, b), fb(v, b)), dt)


def _load(e: Load) -> ExprFn:
    buf, fi = e.buffer, expr_fn(e.index)

    def load(v: Env, b: Env) -> Any:
        arr, idx = b[buf.name], fi(v, b)
        _check(buf, arr, idx)
        return arr[idx]

    return load


def _select(e: Select) -> ExprFn:
    fc, fa, fb = expr_fn(e.cond), expr_fn(e.a), expr_fn(e.b)
    return lambda v, b: _to(np.where(fc(v, b), fa(v, b), fb(v, b)), _np_dtype(e.dtype))


def _call(e: Call) -> ExprFn:
    if e.name == "bitcast":
        (fx,), src, dt = [expr_fn(a) for a in e.args], _np_dtype(e.args[0].dtype), _np_dtype(e.dtype)
        return lambda v, b: _to(np.asarray(fx(v, b)).astype(src).view(dt), dt)
    fn, fargs, dt = _INTRINSICS[e.name], [expr_fn(a) for a in e.args], _np_dtype(e.dtype)
    return lambda v, b: _to(fn(*(f(v, b) for f in fargs)), dt)


def _const(e: Const) -> ExprFn:
    value = _to(e.value, _np_dtype(e.dtype))
    return lambda v, b: value


def _var(e: Var) -> ExprFn:
    name = e.name
    return lambda v, b: v[name]


def _cmp(e: Cmp) -> ExprFn:
    fa, fb, fn = expr_fn(e.a), expr_fn(e.b), _CMPS[e.op]
    return lambda v, b: fn(fa(v, b), fb(v, b))


def _not(e: Not) -> ExprFn:
    fa = expr_fn(e.a)
    return lambda v, b: np.logical_not(fa(v, b))


def _cast(e: Cast) -> ExprFn:
    fa, dt = expr_fn(e.value), _np_dtype(e.dtype)
    return lambda v, b: _to(fa(v, b), dt)


def _ramp(e: Ramp) -> ExprFn:
    fb, fs, lanes = expr_fn(e.base), expr_fn(e.stride), np.arange(e.count)
    return lambda v, b: fb(v, b) + fs(v, b) * lanes


def _broadcast(e: Broadcast) -> ExprFn:
    fa, n, dt = expr_fn(e.value), e.count, _np_dtype(e.dtype)
    return lambda v, b: np.full(n, fa(v, b), dt)


_EXPR_BUILDERS: dict[type, Callable[[Any], ExprFn]] = {
    Const: _const,
    Var: _var,
    BinOp: _binop,
    Cmp: _cmp,
    Not: _not,
    Select: _select,
    Cast: _cast,
    Call: _call,
    Ramp: _ramp,
    Broadcast: _broadcast,
    Load: _load,
}


def expr_fn(e: Expr) -> ExprFn:
    builder = _EXPR_BUILDERS.get(type(e))
    if builder is None:
        raise InterpError(f"cannot interpret expression {type(e).__name__}")
    return builder(e)


# ---- statements ----------------------------------------------------------------------
def _store(s: Store) -> StmtFn:
    buf, fi, fv = s.buffer, expr_fn(s.index), expr_fn(s.value)

    def store(v: Env, b: Env) -> None:
        arr, idx = b[buf.name], fi(v, b)
        _check(buf, arr, idx)
        arr[idx] = fv(v, b)

    return store


def _for(s: For) -> StmtFn:
    fs, fx, body, name, dt = expr_fn(s.start), expr_fn(s.extent), stmt_fn(s.body), s.var.name, s.var.dtype
    cast = _np_dtype(dt).type

    def loop(v: Env, b: Env) -> None:
        start = int(fs(v, b))
        for i in range(start, start + int(fx(v, b))):
            v[name] = cast(i)
            body(v, b)
        v.pop(name, None)

    return loop


def _seq(s: Seq) -> StmtFn:
    fns = [stmt_fn(x) for x in s.stmts]

    def seq(v: Env, b: Env) -> None:
        for f in fns:
            f(v, b)

    return seq


def _if(s: If) -> StmtFn:
    fc, ft = expr_fn(s.cond), stmt_fn(s.then)
    fe = stmt_fn(s.orelse) if s.orelse is not None else None

    def branch(v: Env, b: Env) -> None:
        if fc(v, b):
            ft(v, b)
        elif fe is not None:
            fe(v, b)

    return branch


def fresh_buffer(buf: Buffer) -> np.ndarray:
    dt = _np_dtype(buf.dtype)
    fill = np.nan if dt.kind == "f" else (0 if dt.kind == "b" else 0x5A)
    return np.full(buf.size, fill, dt)


def _allocate(s: Allocate) -> StmtFn:
    buf, body = s.buffer, stmt_fn(s.body)

    def alloc(v: Env, b: Env) -> None:
        outer = b.get(buf.name)
        b[buf.name] = fresh_buffer(buf)
        body(v, b)
        if outer is None:
            del b[buf.name]
        else:
            b[buf.name] = outer

    return alloc


def _let(s: LetStmt) -> StmtFn:
    fv, body, name = expr_fn(s.value), stmt_fn(s.body), s.var.name

    def let(v: Env, b: Env) -> None:
        v[name] = fv(v, b)
        body(v, b)
        v.pop(name, None)

    return let


def _prefetch(s: Prefetch) -> StmtFn:
    return lambda v, b: None  # a cache hint: no value changes


_STMT_BUILDERS: dict[type, Callable[[Any], StmtFn]] = {
    Store: _store,
    Prefetch: _prefetch,
    For: _for,
    Seq: _seq,
    If: _if,
    Allocate: _allocate,
    LetStmt: _let,
}


def stmt_fn(s: Stmt) -> StmtFn:
    builder = _STMT_BUILDERS.get(type(s))
    if builder is None:
        raise InterpError(f"cannot interpret statement {type(s).__name__}")
    return builder(s)


def with_scratch(func: LoopFunc, args: Sequence[Any]) -> list[Any]:
    """`args`, plus fresh workspace arrays when the caller left the scratch params out."""
    n = func.attrs.get("num_scratch", 0)
    if not n or len(args) != len(func.params) - n:
        return list(args)
    extra = [np.empty(b.shape, _np_dtype(b.dtype)) for b in func.params[len(args) :]]
    return [*args, *extra]


def compile_func(func: LoopFunc) -> Callable[[Sequence[Any]], None]:
    """`func` as a Python callable taking its arguments in parameter order."""
    body = stmt_fn(func.body)

    def call(args: Sequence[Any]) -> None:
        args = with_scratch(func, args)
        if len(args) != len(func.params):
            raise InterpError(f"{func.name} takes {len(func.params)} arguments, got {len(args)}")
        bufs: Env = {}
        scalars: Env = {}
        for p, a in zip(func.params, args, strict=True):
            if isinstance(p, Buffer):
                bufs[p.name] = _flat_view(p, a)
            else:
                scalars[p.name] = _to(a, _np_dtype(p.dtype))
        with np.errstate(all="ignore"):
            body(scalars, bufs)

    return call


def _flat_view(p: Buffer, a: Any) -> np.ndarray:
    if not isinstance(a, np.ndarray) or a.size != p.size or a.dtype != _np_dtype(p.dtype):
        got = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
        raise InterpError(f"argument {p.name} must be a {p.dtype} array of {p.size} elements, got {got}")
    if not a.flags.c_contiguous:
        raise InterpError(f"argument {p.name} must be C-contiguous")
    return a.reshape(-1)


def run(func: LoopFunc, args: Sequence[Any]) -> None:
    """Execute `func` on `args` (numpy arrays for buffers, numbers for scalar params)."""
    compile_func(func)(args)
