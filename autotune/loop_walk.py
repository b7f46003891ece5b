"""One walk over a lowered kernel (`LoopFunc`): the loop tree, the work of every statement
and every buffer access, for the cost-model features (autotune/features.py).

`LoopWalk.stmt(func.body, 1.0)` builds a tree of `Loop`s under `LoopWalk.root` (the function
itself), counts the float / int work of every statement, weighted by the trip count of its
enclosing loops (the product of their extents, times vector lanes), and groups every buffer
access into an `Access` with the affine form of its index over the loop vars. A loop whose
extent is not a constant counts with its upper bound when `int_range` finds one, else
`UNKNOWN_EXTENT`. Both arms of an `If` count with the trip count of the `If` (an upper
bound). Byte counts use the buffers' element sizes (`dtype_bytes`).

Accesses of one loop body to one buffer, in one direction, with the same lanes and affine
signature (coefficient per loop, ramp stride, loops in non-affine atoms) and different
constant offsets (e.g. unrolled copies) are one `Access` whose offsets span cmin..cmax.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tensorir.loop.arith import int_range
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
    ForKind,
    If,
    LetStmt,
    Load,
    Not,
    Ramp,
    Select,
    Seq,
    Stmt,
    Store,
    Var,
)
from tensorir.loop.visitor import children

UNKNOWN_EXTENT = 16

_FLOAT_BIN = {"+": "addsub", "-": "addsub", "*": "mul", "/": "div", "min": "minmax", "max": "minmax"}
_DTYPE_BYTES = {"float64": 8, "int64": 8, "uint64": 8, "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2}


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of `dtype`."""
    if dtype in _DTYPE_BYTES:
        return _DTYPE_BYTES[dtype]
    if dtype in ("int8", "uint8", "bool"):
        return 1
    return 4


@dataclass(eq=False)
class Loop:
    """One `For` of the kernel (or the function root) in the walk's loop tree."""

    kind: ForKind
    extent: int
    depth: int  # 1 for an outermost loop; 0 for the function root
    execs: float  # how many times this loop is entered (product of the outer extents)
    parent: Loop | None
    children: list[Loop] = field(default_factory=list)
    accesses: list[Access] = field(default_factory=list)  # directly in this loop's body
    flops: float = 0.0  # weighted, everything inside
    stores_here: int = 0  # stores directly in the body (not inside a nested loop)
    footprint: float = 0.0
    height: int = 0  # 0 for an innermost loop


@dataclass(eq=False)
class Access:
    """Accesses of one loop body that differ only in the constant offset of the index
    (e.g. unrolled copies): one buffer, direction, lanes and affine signature."""

    buffer: Buffer
    nbytes: int  # element size
    lanes: int
    weight: float  # executions, summed over the accesses of the group
    chain: tuple[Loop, ...]  # enclosing loops, outermost first
    terms: dict[Loop, int]  # affine coefficient per loop
    nonaffine: frozenset[Loop]
    cmin: int  # smallest / largest constant offset of the index
    cmax: int
    count: int = 1
    ramp_stride: int = 0  # stride of a vector (Ramp) index, 0 for a broadcast / scalar
    is_store: bool = False
    sig: tuple = ()  # (loop, lanes, ramp stride, terms, non-affine loops): the window's shape


class _Lin:
    """Affine decomposition of an integer index: terms over loops, constant, non-affine loops."""

    __slots__ = ("const", "nonaff", "ramp_stride", "terms")

    def __init__(self) -> None:
        self.terms: dict[Loop, int] = {}
        self.const = 0
        self.nonaff: set[Loop] = set()
        self.ramp_stride = 0  # a non-constant ramp stride counts as 2 (strided)


class LoopWalk:
    """Walks statements (`stmt`) and expressions (`expr`), filling the counters `c`, the loop
    tree under `root` (`loops`: parents before children) and the access groups (`accesses`)."""

    def __init__(self) -> None:
        self.c = dict.fromkeys(
            (
                "addsub",
                "mul",
                "div",
                "minmax",
                "fma",
                "int",
                "divmod",
                "cmp",
                "call",
                "cast",
                "select",
                "vflops",
                "if",
            ),
            0.0,
        )
        self.vars: dict[Var, Loop] = {}
        self.lets: dict[Var, frozenset[Loop]] = {}
        self.ranges: dict[Expr, tuple[int, int]] = {}
        self.root = Loop(ForKind.SERIAL, 1, 0, 1.0, None)
        self.chain: tuple[Loop, ...] = ()
        self.loop = self.root
        self.groups: dict[tuple, Access] = {}
        self.loops: list[Loop] = []
        self.accesses: list[Access] = []
        self.n_stmts = 0
        self.n_stores = 0
        self.n_alloc = 0
        self.alloc_max = 0.0
        self.alloc_total = 0.0
        self.depth_w = 0.0
        self.depth_n = 0.0

    # ---- expressions --------------------------------------------------------------
    def expr(self, e: Expr, w: float) -> int:
        """Count the work of `e` (executed `w` times); returns its lanes."""
        t = type(e)
        if t is Const or t is Var:
            return 1
        c = self.c
        if t is BinOp:
            lanes = max(self.expr(e.a, w), self.expr(e.b, w))
            dt = e.a.dtype
            n = w * lanes
            if dt.startswith(("float", "bfloat")):
                kind = _FLOAT_BIN.get(e.op)
                if kind is not None:
                    c[kind] += n
                    if lanes > 1:
                        c["vflops"] += n
                    if kind == "addsub" and (_is_fmul(e.a) or _is_fmul(e.b)):
                        c["fma"] += n
            elif e.op in ("and", "or", "xor") and dt == "bool":
                c["cmp"] += n
            else:
                c["int"] += n
                if e.op in ("//", "%", "/"):
                    c["divmod"] += n
            return lanes
        if t is Load:
            lanes = self.expr(e.index, w)
            self.access(e.buffer, e.index, lanes, w, False)
            return lanes
        if t is Broadcast:
            self.expr(e.value, w)
            return e.count
        if t is Ramp:
            self.expr(e.base, w)
            return e.count
        if t is Call:
            lanes = max((self.expr(a, w) for a in e.args), default=1)
            n = w * lanes
            if e.name == "fma":
                c["fma"] += n
                c["addsub"] += n
                c["mul"] += n
                if lanes > 1:
                    c["vflops"] += 2 * n
            else:
                c["call"] += n
                if lanes > 1:
                    c["vflops"] += n
            return lanes
        lanes = max((self.expr(ch, w) for ch in children(e)), default=1)
        if t is Cmp or t is Not:
            c["cmp"] += w * lanes
        elif t is Select:
            c["select"] += w * lanes
        elif t is Cast:
            c["cast"] += w * lanes
        return lanes

    def lin(self, e: Expr, scale: int, out: _Lin) -> None:
        t = type(e)
        if t is Const:
            v = e.value
            if isinstance(v, int | np.integer) and not isinstance(v, bool):
                out.const += scale * int(v)
            return
        if t is Var:
            lp = self.vars.get(e)
            if lp is not None:
                out.terms[lp] = out.terms.get(lp, 0) + scale
            else:
                deps = self.lets.get(e)
                if deps:
                    out.nonaff.update(deps)
            return
        if t is BinOp:
            op = e.op
            if op == "+":
                self.lin(e.a, scale, out)
                self.lin(e.b, scale, out)
                return
            if op == "-":
                self.lin(e.a, scale, out)
                self.lin(e.b, -scale, out)
                return
            if op == "*":
                if type(e.b) is Const and isinstance(e.b.value, int):
                    self.lin(e.a, scale * e.b.value, out)
                    return
                if type(e.a) is Const and isinstance(e.a.value, int):
                    self.lin(e.b, scale * e.a.value, out)
                    return
        elif t is Ramp:
            self.lin(e.base, scale, out)
            s = e.stride
            out.ramp_stride = scale * int(s.value) if type(s) is Const else 2
            return
        elif t is Broadcast:
            self.lin(e.value, scale, out)
            return
        self.nonaffine(e, out)

    def nonaffine(self, e: Expr, out: _Lin) -> None:
        stack = [e]
        while stack:
            n = stack.pop()
            if type(n) is Var:
                lp = self.vars.get(n)
                if lp is not None:
                    out.nonaff.add(lp)
                else:
                    deps = self.lets.get(n)
                    if deps:
                        out.nonaff.update(deps)
            else:
                stack.extend(children(n))

    def access(self, buf: Buffer, index: Expr, lanes: int, w: float, store: bool) -> None:
        lin = _Lin()
        self.lin(index, 1, lin)
        nonaff = frozenset(lin.nonaff)
        terms = {lp: k for lp, k in lin.terms.items() if k != 0 and lp not in nonaff}
        loop = self.loop
        sig = (
            id(loop),
            lanes,
            lin.ramp_stride,
            tuple(sorted((id(lp), k) for lp, k in terms.items())),
            tuple(sorted(id(lp) for lp in nonaff)),
        )
        key = (buf.name, store, sig)
        g = self.groups.get(key)
        if g is None:
            g = Access(buf, dtype_bytes(buf.dtype), lanes, w, self.chain, terms, nonaff, lin.const, lin.const)
            g.is_store = store
            g.ramp_stride = lin.ramp_stride
            g.sig = sig
            self.groups[key] = g
            loop.accesses.append(g)
            self.accesses.append(g)
        else:
            g.weight += w
            g.count += 1
            if lin.const < g.cmin:
                g.cmin = lin.const
            elif lin.const > g.cmax:
                g.cmax = lin.const

    # ---- statements ---------------------------------------------------------------
    def stmt(self, s: Stmt, w: float) -> None:
        self.n_stmts += 1
        t = type(s)
        if t is Store:
            self.n_stores += 1
            self.loop.stores_here += 1
            self.depth_w += w * len(self.chain)
            self.depth_n += w
            c = self.c
            f0 = c["addsub"] + c["mul"] + c["div"] + c["minmax"] + c["call"]
            lanes = max(self.expr(s.index, w), self.expr(s.value, w))
            self.access(s.buffer, s.index, lanes, w, True)
            df = c["addsub"] + c["mul"] + c["div"] + c["minmax"] + c["call"] - f0
            if df:
                for lp in self.chain:
                    lp.flops += df
        elif t is Seq:
            for x in s.stmts:
                self.stmt(x, w)
        elif t is For:
            ext = s.extent
            if type(ext) is Const:
                n = int(ext.value)
            else:
                self.expr(ext, w)
                r = int_range(ext, self.ranges)
                n = r[1] if r is not None else UNKNOWN_EXTENT
            n = max(n, 0)
            chain, loop = self.chain, self.loop
            lp = Loop(s.kind, n, len(chain) + 1, w, loop)
            loop.children.append(lp)
            self.loops.append(lp)
            old = self.vars.get(s.var)
            self.vars[s.var] = lp
            st = s.start
            lo = int(st.value) if type(st) is Const else 0
            self.ranges[s.var] = (lo, lo + max(n - 1, 0))
            self.chain, self.loop = (*chain, lp), lp
            self.stmt(s.body, w * n)
            self.chain, self.loop = chain, loop
            if old is None:
                del self.vars[s.var]
            else:
                self.vars[s.var] = old
        elif t is If:
            self.c["if"] += w
            self.expr(s.cond, w)
            self.stmt(s.then, w)
            if s.orelse is not None:
                self.stmt(s.orelse, w)
        elif t is Allocate:
            self.n_alloc += 1
            nb = float(s.buffer.size * dtype_bytes(s.buffer.dtype))
            self.alloc_max = max(self.alloc_max, nb)
            self.alloc_total += nb * w
            self.stmt(s.body, w)
        elif t is LetStmt:
            self.expr(s.value, w)
            tmp = _Lin()
            self.nonaffine(s.value, tmp)
            self.lets[s.var] = frozenset(tmp.nonaff)
            self.stmt(s.body, w)
        else:  # unknown statement kinds: walk what they hold
            for ch in children(s):
                if isinstance(ch, Stmt):
                    self.stmt(ch, w)
                else:
                    self.expr(ch, w)


def _is_fmul(e: Expr) -> bool:
    return type(e) is BinOp and e.op == "*" and e.a.dtype.startswith(("float", "bfloat"))
