"""Arithmetic simplifier: a table of rewrite rules (pattern -> replacement) over expressions,
plus statement clean-up that uses the ranges of enclosing loop variables.

Rules are data: `(pattern, fn)` pairs grouped by the pattern's root node (Halide's
`Simplify_<Op>`). A pattern is an IR node whose leaves may be wildcards (`X`, `C1`, ...);
`fn(m)` gets the match (`m.x`, `m.c1`, `m.ranges`) and returns the replacement or None
(rule does not apply). Each rewritten node is simplified again until no rule fires.

Statements: loops of extent 1 become their body with the loop var replaced by `start`
(GPU loops stay: they are the launch geometry);
loops of extent <= 0 and empty bodies vanish; `If`s with a provable condition are
replaced by the branch taken; `Seq`s are flattened.

Before/after:

    for i in range(0, 1):                     C[j] = A[j*4 + 3]
      C[(i*8 + j) % 8 + i] = A[(j*4 + 3)*1]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any

from tensorir.loop.arith import (
    CMP_FNS,
    Range,
    fold_binop,
    fold_cast,
    from_linear,
    int_range,
    is_int,
    linear_diff,
    to_linear,
)
from tensorir.loop.ir import (
    Allocate,
    BinOp,
    Broadcast,
    Cast,
    Cmp,
    Const,
    Expr,
    For,
    ForKind,
    If,
    LetStmt,
    Not,
    Select,
    Seq,
    Stmt,
    Var,
)
from tensorir.loop.visitor import Mutator, substitute


# ---- pattern matching ----------------------------------------------------------------
@dataclass(frozen=True)
class Wild(Expr):
    """Pattern wildcard: binds `name`; `const=True` matches only a Const, `pred` its value."""

    name: str
    const: bool = False
    pred: Callable[[Any], bool] | None = None


class Match:
    def __init__(self, binds: dict[str, Any], ranges: Mapping[Expr, Range]) -> None:
        self.__dict__.update(binds)
        self.ranges = ranges


def match(pat: Any, node: Any, binds: dict[str, Any]) -> bool:
    if isinstance(pat, Wild):
        if pat.const and not isinstance(node, Const):
            return False
        if pat.pred is not None and not pat.pred(node.value if pat.const else node):
            return False
        if pat.name in binds:
            return bool(binds[pat.name] == node)
        binds[pat.name] = node
        return True
    names = _field_names(type(pat))
    if names is not None:
        if type(pat) is not type(node):
            return False
        for name in names:  # noqa: SIM110 - a plain loop: this is the hottest path of lowering
            if not match(getattr(pat, name), getattr(node, name), binds):
                return False
        return True
    return bool(pat == node)


_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}


def _field_names(cls: type) -> tuple[str, ...] | None:
    """The dataclass field names of `cls` (None for other types), cached: `match` runs
    hundreds of thousands of times per kernel."""
    try:
        return _FIELD_NAMES[cls]
    except KeyError:
        names = tuple(f.name for f in fields(cls)) if is_dataclass(cls) else None
        _FIELD_NAMES[cls] = names
        return names


X, Y = Wild("x"), Wild("y")
OP = Wild("op")
C1, C2 = Wild("c1", const=True), Wild("c2", const=True)
ZERO = Wild("zero", const=True, pred=lambda v: v == 0 and not isinstance(v, bool))
ONE = Wild("one", const=True, pred=lambda v: v == 1 and not isinstance(v, bool))
POS = Wild("c", const=True, pred=lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0)


# ---- rule helpers --------------------------------------------------------------------
def _int(e: Expr) -> bool:
    return is_int(e.dtype) and e.lanes == 1


def _fold(m: Match) -> Expr | None:
    return fold_binop(m.op, m.c1, m.c2, m.c1.dtype)


def _fold_cmp(m: Match) -> Expr | None:
    return Const(bool(CMP_FNS[m.op](m.c1.value, m.c2.value)), "bool")


def _linear(m: Match) -> Expr | None:
    """Integer + - * trees rebuilt as `a*c1 + b*c2 + c` (folds constants, x+0, x*1, x*0)."""
    e = m.x
    if not _int(e):
        return None
    terms, const = to_linear(e)
    const += _merge_divmod(terms)
    out = from_linear(terms, const, e.dtype)
    return None if out == e else out


def _merge_divmod(terms: dict[Expr, int]) -> int:
    """(x//c)*c*k + (x%c)*k -> x*k, in place on a linear form; returns the constant added."""
    while _merge_digit(terms):
        pass
    added = 0
    for t in list(terms):
        if not (isinstance(t, BinOp) and t.op == "//" and isinstance(t.b, Const)) or t not in terms:
            continue
        c, mod = t.b.value, BinOp("%", t.a, t.b)
        if mod not in terms and _is_mod_multiple(t.a, c):  # (x%(c*n))//c*c + x%c -> x%(c*n)
            mod = BinOp("%", t.a.a, t.b)
        k = terms.get(mod, 0)
        if isinstance(c, int) and c > 0 and k and terms[t] == k * c:
            del terms[t], terms[mod]
            sub, cst = to_linear(t.a)
            for a, coeff in sub.items():
                terms[a] = terms.get(a, 0) + coeff * k
            added += cst * k
    return added


def _merge_digit(terms: dict[Expr, int]) -> bool:
    """(x//c)%m*c*k + (x%c)*k -> x%(c*m)*k in place (the digit of x in base c above the low
    one joins it: a fused NCHW index becomes the flat one); True if it merged a pair."""
    for t, coeff in list(terms.items()):
        if not (isinstance(t, BinOp) and t.op == "%" and isinstance(t.b, Const)):
            continue
        d = t.a
        if not (isinstance(d, BinOp) and d.op == "//" and isinstance(d.b, Const)):
            continue
        c, m = d.b.value, t.b.value
        low = BinOp("%", d.a, d.b)
        k = terms.get(low, 0)
        if isinstance(c, int) and isinstance(m, int) and c > 0 and m > 0 and k and coeff == k * c:
            del terms[t], terms[low]
            wide = BinOp("%", d.a, Const(c * m, d.b.dtype))
            terms[wide] = terms.get(wide, 0) + k
            return True
    return False


def _is_mod_multiple(e: Expr, c: Any) -> bool:
    """e is x % C with C a positive multiple of c (so e % c == x % c)."""
    return (
        isinstance(e, BinOp)
        and e.op == "%"
        and isinstance(e.b, Const)
        and isinstance(c, int)
        and c > 0
        and isinstance(e.b.value, int)
        and e.b.value > 0
        and e.b.value % c == 0
    )


def _divmod(m: Match, is_div: bool) -> Expr | None:
    """(x*c + y) // c -> x + y // c, (x*c + y) % c -> y % c; y // c -> 0 and y % c -> y
    when 0 <= y < c is provable."""
    e, c = m.x, m.c.value
    if not _int(e):
        return None
    terms, const = to_linear(e)
    qt = {t: k // c for t, k in terms.items() if k % c == 0}
    rt = {t: k for t, k in terms.items() if k % c != 0}
    qc, rc = divmod(const, c)
    rest = from_linear(rt, rc, e.dtype)
    rr = int_range(rest, m.ranges)
    fits = rr is not None and rr[0] >= 0 and rr[1] < c
    if not qt and not fits:
        return None  # nothing divides out: moving only the constant is no progress
    cst = Const(c, e.dtype)
    if not is_div:
        return rest if fits else BinOp("%", rest, cst)
    quot = from_linear(qt, qc, e.dtype)
    return quot if fits else BinOp("+", quot, BinOp("//", rest, cst))


def _nested_div(m: Match) -> Expr | None:
    if not _int(m.x) or m.c1.value <= 0 or m.c2.value <= 0:
        return None
    return BinOp("//", m.x, Const(m.c1.value * m.c2.value, m.x.dtype))  # (x//a)//b -> x//(a*b)


def _nested_mod(m: Match) -> Expr | None:
    if not _int(m.x) or m.c2.value <= 0 or m.c1.value % m.c2.value:
        return None
    return BinOp("%", m.x, m.c2)  # (x % (k*b)) % b -> x % b


def _order(a: Expr, b: Expr, ranges: Mapping[Expr, Range]) -> int | None:
    """-1 if a <= b is provable, 1 if a >= b, else None."""
    if not _int(a):
        return 0 if a == b else None
    terms, d = linear_diff(a, b)
    r = (d, d) if not terms else int_range(BinOp("-", a, b), ranges)
    if r is None:
        return None
    return -1 if r[1] <= 0 else (1 if r[0] >= 0 else None)


def _minmax(m: Match, is_min: bool) -> Expr | None:
    o = _order(m.x, m.y, m.ranges)
    if o is None:
        return None
    return m.x if (o <= 0) == is_min else m.y  # min(a, b) -> a when a <= b provable


def _cmp_range(m: Match) -> Expr | None:
    """a < b etc. decided from the range of a - b."""
    a, b = m.x, m.y
    if not _int(a):
        return None  # x == x is False for a float NaN
    terms, d = linear_diff(a, b)
    r = (d, d) if not terms else int_range(BinOp("-", a, b), m.ranges)
    if r is None:
        return None
    lo, hi = r
    verdict = {
        "<": (hi < 0, lo >= 0),
        "<=": (hi <= 0, lo > 0),
        ">": (lo > 0, hi <= 0),
        ">=": (lo >= 0, hi < 0),
        "==": (lo == hi == 0, lo > 0 or hi < 0),
        "!=": (lo > 0 or hi < 0, lo == hi == 0),
    }[m.op]
    if verdict[0]:
        return Const(True, "bool")
    return Const(False, "bool") if verdict[1] else None


def _point(m: Match) -> Expr | None:
    """An integer expression whose range is one value is that constant."""
    r = int_range(m.x, m.ranges) if _int(m.x) else None
    return Const(r[0], m.x.dtype) if r is not None and r[0] == r[1] else None


def _reassoc_mul(m: Match) -> Expr | None:
    if not _int(m.x):
        return None  # float reassociation would change rounding
    folded = fold_binop("*", m.c1, m.c2, m.x.dtype)
    return None if folded is None else BinOp("*", m.x, folded)


_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_true = Wild("t", const=True, pred=lambda v: v is True)
_false = Wild("f", const=True, pred=lambda v: v is False)


# ---- the rule table, grouped by root node ---------------------------------------------
Rule = tuple[Expr, Callable[[Match], Expr | None]]

BINOP_RULES: list[Rule] = [
    (BinOp(OP, C1, C2), _fold),  # c1 op c2 -> c
    (BinOp("+", X, ZERO), lambda m: m.x),  # x + 0 -> x
    (BinOp("+", ZERO, X), lambda m: m.x),  # 0 + x -> x
    (BinOp("-", X, ZERO), lambda m: m.x),  # x - 0 -> x
    (BinOp("*", X, ONE), lambda m: m.x),  # x * 1 -> x
    (BinOp("*", ONE, X), lambda m: m.x),  # 1 * x -> x
    (BinOp("/", X, ONE), lambda m: m.x),  # x / 1 -> x
    (BinOp("*", X, ZERO), lambda m: m.zero if _int(m.x) else None),  # x * 0 -> 0 (ints)
    (BinOp("*", ZERO, X), lambda m: m.zero if _int(m.x) else None),  # 0 * x -> 0 (ints)
    (BinOp("*", BinOp("*", X, C1), C2), _reassoc_mul),  # (x*c1)*c2 -> x*(c1*c2) (ints)
    (BinOp("//", X, ONE), lambda m: m.x if _int(m.x) else None),  # x // 1 -> x
    (BinOp("%", X, ONE), lambda m: Const(0, m.x.dtype) if _int(m.x) else None),  # x % 1 -> 0
    (BinOp("//", BinOp("//", X, C1), C2), _nested_div),  # (x//a)//b -> x//(a*b)
    (BinOp("%", BinOp("%", X, C1), C2), _nested_mod),  # (x%(k*b))%b -> x%b
    (BinOp("//", X, POS), lambda m: _divmod(m, True)),  # (x*c + y)//c -> x (0<=y<c)
    (BinOp("%", X, POS), lambda m: _divmod(m, False)),  # (x*c + y)%c -> y (0<=y<c)
    (BinOp("min", X, X), lambda m: m.x),  # min(x, x) -> x
    (BinOp("max", X, X), lambda m: m.x),  # max(x, x) -> x
    (BinOp("min", X, Y), lambda m: _minmax(m, True)),  # min(a, b) -> a when a <= b
    (BinOp("max", X, Y), lambda m: _minmax(m, False)),  # max(a, b) -> b when a <= b
    (BinOp("and", _true, X), lambda m: m.x),  # True and x -> x
    (BinOp("and", X, _true), lambda m: m.x),  # x and True -> x
    (BinOp("and", _false, X), lambda m: m.f),  # False and x -> False
    (BinOp("and", X, _false), lambda m: m.f),  # x and False -> False
    (BinOp("or", _false, X), lambda m: m.x),  # False or x -> x
    (BinOp("or", X, _false), lambda m: m.x),  # x or False -> x
    (BinOp("or", _true, X), lambda m: m.t),  # True or x -> True
    (BinOp("or", X, _true), lambda m: m.t),  # x or True -> True
    (Wild("x", pred=lambda e: e.op in ("+", "-", "*")), _linear),  # int sums -> i*16 + j + c
    (Wild("x", pred=lambda e: e.op in ("//", "%", "min", "max")), _point),  # range is a point
]


def _uniform_select(e: Expr) -> bool:
    """select(broadcast(True/False, n), a, b): every lane takes the same arm."""
    return isinstance(e.cond, Broadcast) and isinstance(e.cond.value, Const)


CMP_RULES: list[Rule] = [
    (Cmp(OP, C1, C2), _fold_cmp),  # c1 < c2 -> True/False
    (Cmp(OP, X, Y), _cmp_range),  # decided by the range of x - y
]

OTHER_RULES: dict[type, list[Rule]] = {
    Not: [
        (Not(C1), lambda m: Const(not m.c1.value, "bool")),  # not c -> c'
        (Not(Not(X)), lambda m: m.x),  # not not x -> x
        (Not(Cmp(OP, X, Y)), lambda m: Cmp(_NEGATE[m.op], m.x, m.y)),  # not a < b -> a >= b
    ],
    Select: [
        (Select(C1, X, Y), lambda m: m.x if m.c1.value else m.y),  # select(True, a, b) -> a
        (Select(X, Y, Y), lambda m: m.y),  # select(c, a, a) -> a
    ],
    Cast: [
        (Cast(OP, C1), lambda m: fold_cast(m.c1, m.op)),  # float32(3) -> 3.0
        (Cast(OP, X), lambda m: m.x if m.x.dtype == m.op else None),  # int64(x: int64) -> x
    ],
}

RULES: dict[type, list[Rule]] = {BinOp: BINOP_RULES, Cmp: CMP_RULES, **OTHER_RULES}


def rewrite(e: Expr, rules: Mapping[type, list[Rule]], ranges: Mapping[Expr, Range]) -> Expr | None:
    """Apply the first rule of `rules` (for e's node type) that matches `e` and fires."""
    for pat, fn in _candidates(rules, e):
        binds: dict[str, Any] = {}
        if match(pat, e, binds):
            out = fn(Match(binds, ranges))
            if out is not None and out != e:
                return out
    return None


_BY_OP: dict[tuple[int, type, Any], list[Rule]] = {}


def _candidates(rules: Mapping[type, list[Rule]], e: Expr) -> list[Rule]:
    """The rules whose pattern can match `e`: same node type and, when the pattern names an
    operator (BinOp("+", ...)), the same operator — an index so `match` runs less often."""
    op = getattr(e, "op", None)
    key = (id(rules), type(e), op if isinstance(op, str) else None)
    found = _BY_OP.get(key)
    if found is None:
        found = [
            r
            for r in rules.get(type(e), ())
            if not isinstance(getattr(r[0], "op", None), str) or getattr(r[0], "op", None) == key[2]
        ]
        _BY_OP[key] = found
    return found


# ---- the simplifier ------------------------------------------------------------------
_EMPTY = Seq(())
MAX_REWRITES = 64


def _is_empty(s: Stmt) -> bool:
    return isinstance(s, Seq) and not s.stmts


class Simplifier(Mutator):
    """Bottom-up expression rewriting under the ranges of the enclosing loop variables."""

    def __init__(
        self, rules: Mapping[type, list[Rule]] = RULES, ranges: Mapping[Expr, Range] | None = None
    ) -> None:
        self.rules = rules
        self.ranges: dict[Expr, Range] = dict(ranges or {})
        # expression -> its simplified form under the current ranges (cleared when they
        # change): a rewrite's result is walked again, and most of it was simplified already
        self.done: dict[Expr, Expr] = {}

    def visit(self, node: Any) -> Any:
        if not isinstance(node, Expr):
            return super().visit(node)
        hit = self.done.get(node)
        if hit is not None:
            return hit
        e = self._simplify(node)
        self.done[node] = self.done[e] = e
        return e

    def _simplify(self, node: Expr) -> Expr:
        e = self.generic(node)
        for _ in range(MAX_REWRITES):
            if e.lanes != 1:  # vectors: only select(broadcast(True/False), a, b) -> a / b
                if not (isinstance(e, Select) and _uniform_select(e)):
                    return e
                e = self.generic(e.a if e.cond.value.value else e.b)
                continue
            out = rewrite(e, self.rules, self.ranges)
            if out is None:
                return e
            e = self.generic(out)
        return e

    def _set_range(self, var: Expr, r: Range | None) -> None:
        """Set (or with None drop) the known range of `var`; what was simplified is forgotten."""
        self.done.clear()
        if r is None:
            self.ranges.pop(var, None)
        else:
            self.ranges[var] = r

    def visit_For(self, s: For) -> Stmt:
        start, extent = self.visit(s.start), self.visit(s.extent)
        if isinstance(extent, Const) and extent.value <= 0:
            return _EMPTY
        gpu = s.kind in (ForKind.GPU_BLOCK, ForKind.GPU_THREAD)  # launch geometry: always kept
        if isinstance(extent, Const) and extent.value == 1 and not gpu:
            return self.visit(substitute(s.body, {s.var: start}))
        rs, rx = int_range(start, self.ranges), int_range(extent, self.ranges)
        saved = self.ranges.get(s.var)
        if rs is not None and rx is not None:
            self._set_range(s.var, (rs[0], rs[1] + rx[1] - 1))
        body = self.visit(s.body)
        self._set_range(s.var, saved)
        if _is_empty(body):
            return _EMPTY
        return replace(s, start=start, extent=extent, body=body)

    def visit_If(self, s: If) -> Stmt:
        cond = self.visit(s.cond)
        if isinstance(cond, Const):
            taken = s.then if cond.value else s.orelse
            return _EMPTY if taken is None else self.visit(taken)
        then = self.visit(s.then)
        orelse = None if s.orelse is None else self.visit(s.orelse)
        if orelse is not None and _is_empty(orelse):
            orelse = None
        if _is_empty(then):
            return _EMPTY if orelse is None else If(self.visit(Not(cond)), orelse, None)
        return If(cond, then, orelse)

    def visit_Seq(self, s: Seq) -> Stmt:
        out: list[Stmt] = []
        for x in s.stmts:
            y = self.visit(x)
            out.extend(y.stmts if isinstance(y, Seq) else (y,))
        return out[0] if len(out) == 1 else Seq(tuple(out))

    def visit_Allocate(self, s: Allocate) -> Stmt:
        body = self.visit(s.body)
        return _EMPTY if _is_empty(body) else replace(s, body=body)

    def visit_LetStmt(self, s: LetStmt) -> Stmt:
        value = self.visit(s.value)
        if isinstance(value, Const | Var):
            return self.visit(substitute(s.body, {s.var: value}))
        r = int_range(value, self.ranges)
        if r is not None:
            self._set_range(s.var, r)
        body = self.visit(s.body)
        self._set_range(s.var, None)
        return replace(s, value=value, body=body)


def simplify(node: Any, ranges: Mapping[Expr, Range] | None = None) -> Any:
    """Simplify a LoopFunc, statement or expression (`ranges`: known var bounds, inclusive)."""
    return Simplifier(RULES, ranges).visit(node)
