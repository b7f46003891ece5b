"""Readable, deterministic pseudo-Python text for loop IR (tests compare this text).

    def matmul(A: f32[64,32], B: f32[32,16], C: f32[64,16]):
      for i in parallel(0, 64):
        for j in vectorized(0, 16):
          C[i*16 + j] = 0.0

Serial loops print as `range(start, extent)`; the other kinds by name
(`parallel`, `vectorized`, `unrolled`, `gpu_block`, `gpu_thread`); the second argument is
always the extent. `+ -` and comparisons are spaced, `* / // %` are tight; parentheses
appear only where precedence needs them. Constants of the default types (int64, float32)
print bare, others as `int32(3)`; vectors as `ramp(base, stride, lanes)` and
`broadcast(value, lanes)`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorir.loop.ir import (
    Allocate,
    Barrier,
    BinOp,
    Broadcast,
    Buffer,
    Call,
    Cast,
    Cmp,
    Const,
    Expr,
    For,
    ForKind,
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

SHORT_DTYPES = {
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "bfloat16": "bf16",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool": "bool",
}

INDENT = "  "
_ATOM = 100
# precedence of binary operators (higher binds tighter), as in Python
_BIN_PREC = {"+": 10, "-": 10, "*": 11, "/": 11, "//": 11, "%": 11}
_INT_BITOPS = {"shl": ("<<", 9), "shr": (">>", 9), "and": ("&", 7), "xor": ("^", 6), "or": ("|", 5)}
_BOOL_OPS = {"and": ("and", 2), "or": ("or", 1), "xor": ("^", 6)}
_CMP_PREC = 4
_NOT_PREC = 3
_TIGHT = {"*", "/", "//", "%"}


def short_dtype(dtype: str) -> str:
    return SHORT_DTYPES.get(dtype, dtype)


def buffer_type(buf: Buffer) -> str:
    """`f32[64,32]`."""
    return f"{short_dtype(buf.dtype)}[{','.join(str(d) for d in buf.shape)}]"


def format_const(c: Const) -> str:
    v, t = c.value, c.dtype
    if t == "bool":
        return str(bool(v))
    if t.startswith("float") or t == "bfloat16":
        text = str(np.float32(v)) if t == "float32" else repr(float(v))
        return text if t == "float32" else f"{t}({text})"
    text = str(int(v))
    return text if t == "int64" else f"{t}({text})"


def _binop_parts(e: BinOp) -> tuple[str, int] | None:
    if e.op in _BIN_PREC:
        return e.op, _BIN_PREC[e.op]
    table = _BOOL_OPS if e.dtype == "bool" else _INT_BITOPS
    return table.get(e.op)


def _expr(e: Expr) -> tuple[str, int]:
    """Text of `e` and its precedence (for parenthesising by the parent)."""
    if isinstance(e, Var):
        return e.name, _ATOM
    if isinstance(e, Const):
        text = format_const(e)
        return text, (_ATOM if not text.startswith("-") else 12)
    if isinstance(e, BinOp):
        parts = _binop_parts(e)
        if parts is None:  # min / max
            return f"{e.op}({expr_text(e.a)}, {expr_text(e.b)})", _ATOM
        return _infix(parts[0], parts[1], e.a, e.b)
    if isinstance(e, Cmp):
        return _infix(e.op, _CMP_PREC, e.a, e.b)
    if isinstance(e, Not):
        return f"not {_paren(e.a, _NOT_PREC)}", _NOT_PREC
    if isinstance(e, Load):
        return f"{e.buffer.name}[{expr_text(e.index)}]", _ATOM
    return _call_like(e), _ATOM


def _call_like(e: Expr) -> str:
    if isinstance(e, Select):
        return f"select({expr_text(e.cond)}, {expr_text(e.a)}, {expr_text(e.b)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({expr_text(e.value)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(expr_text(a) for a in e.args)})"
    if isinstance(e, Ramp):
        return f"ramp({expr_text(e.base)}, {expr_text(e.stride)}, {e.count})"
    if isinstance(e, Broadcast):
        return f"broadcast({expr_text(e.value)}, {e.count})"
    pretty = getattr(e, "pretty", None)  # tensor-expression nodes print themselves
    if pretty is not None:
        return str(pretty(expr_text))
    return repr(e)


def _paren(e: Expr, min_prec: int) -> str:
    text, prec = _expr(e)
    return f"({text})" if prec < min_prec else text


def _infix(op: str, prec: int, a: Expr, b: Expr) -> tuple[str, int]:
    # left-associative: the right operand needs parentheses at equal precedence
    left, right = _paren(a, prec), _paren(b, prec + 1)
    sep = op if op in _TIGHT else f" {op} "
    return f"{left}{sep}{right}", prec


def expr_text(e: Expr) -> str:
    """One expression as text."""
    return _expr(e)[0]


def _loop_head(s: For) -> str:
    kind = "range" if s.kind is ForKind.SERIAL else s.kind.value
    tag = f', "{s.thread}"' if s.thread else ""
    return f"for {s.var.name} in {kind}({expr_text(s.start)}, {expr_text(s.extent)}{tag}):"


def _stmt_lines(s: Stmt, depth: int, out: list[str]) -> None:
    pad = INDENT * depth
    if isinstance(s, Seq):
        if not s.stmts:
            out.append(pad + "pass")
        for x in s.stmts:
            _stmt_lines(x, depth, out)
    elif isinstance(s, Store):
        out.append(f"{pad}{s.buffer.name}[{expr_text(s.index)}] = {expr_text(s.value)}")
    elif isinstance(s, For):
        out.append(pad + _loop_head(s))
        _stmt_lines(s.body, depth + 1, out)
    elif isinstance(s, If):
        out.append(f"{pad}if {expr_text(s.cond)}:")
        _stmt_lines(s.then, depth + 1, out)
        if s.orelse is not None:
            out.append(pad + "else:")
            _stmt_lines(s.orelse, depth + 1, out)
    elif isinstance(s, Allocate):
        b = s.buffer
        out.append(f'{pad}{b.name} = allocate({buffer_type(b)}, "{b.scope}")')
        _stmt_lines(s.body, depth, out)
    elif isinstance(s, Barrier):
        out.append(f'{pad}barrier("{s.scope}")')
    elif isinstance(s, Prefetch):
        out.append(f"{pad}prefetch({s.buffer.name}[{expr_text(s.index)}])")
    elif isinstance(s, LetStmt):
        out.append(f"{pad}{s.var.name} = {expr_text(s.value)}")
        _stmt_lines(s.body, depth, out)
    else:
        out.append(pad + repr(s))


def _param(p: Any) -> str:
    if isinstance(p, Buffer):
        return f"{p.name}: {buffer_type(p)}" + (f' "{p.scope}"' if p.scope != "global" else "")
    if isinstance(p, Var):
        return f"{p.name}: {p.dtype}"
    return repr(p)


def func_text(f: LoopFunc) -> str:
    lines = [f"def {f.name}({', '.join(_param(p) for p in f.params)}):"]
    _stmt_lines(f.body, 1, lines)
    return "\n".join(lines)


def to_text(node: LoopFunc | Stmt | Expr) -> str:
    """Text of a function, a statement (no trailing newline) or an expression."""
    if isinstance(node, LoopFunc):
        return func_text(node)
    if isinstance(node, Stmt):
        lines: list[str] = []
        _stmt_lines(node, 0, lines)
        return "\n".join(lines)
    return expr_text(node)
