"""IR invariants checked between passes (on in tests): `verify(func)` raises `VerifyError`
naming the offending statement.

Checked: every variable is defined before use (parameters, enclosing loops, lets) and no
loop or let re-binds a variable already in scope; loads/stores use a parameter or an
enclosing `Allocate`; operand dtypes and lane counts agree (BinOp, Cmp, Select, Store);
indices and loop bounds are scalar integers; conditions are bool; intrinsics are known;
vectorized loops have a constant extent; and (`check_bounds`) an access outside any `If`
whose index range is known lies inside its buffer.

A VerifyError is a bug in whatever produced the IR, not a user error, so it is not a
`TirError`.
"""

from __future__ import annotations

from tensorir.loop.arith import Range, int_range, is_int
from tensorir.loop.ir import (
    BINARY_OPS,
    COMPARE_OPS,
    INTRINSICS,
    THREAD_TAGS,
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
from tensorir.loop.printer import to_text


class VerifyError(Exception):
    """The loop IR breaks an invariant (message names the statement)."""


def _head(s: Stmt) -> str:
    return to_text(s).splitlines()[0].strip()


class _Verifier:
    def __init__(self, check_bounds: bool) -> None:
        self.check_bounds = check_bounds
        self.vars: dict[str, Var] = {}
        self.buffers: dict[str, Buffer] = {}
        self.ranges: dict[Expr, Range] = {}
        self.guards = 0
        self.threads: set[str] = set()  # GPU tags bound by enclosing loops
        self.where: Stmt | str = ""  # the statement being checked: printed only on failure

    def fail(self, msg: str) -> None:
        where = self.where if isinstance(self.where, str) else _head(self.where)
        raise VerifyError(f"{msg} in `{where}`")

    # ---- expressions -----------------------------------------------------------------
    def expr(self, e: Expr) -> None:
        handler = getattr(self, "e_" + type(e).__name__, None)
        if handler is None:
            self.fail(f"{type(e).__name__} is not a loop IR expression")
        handler(e)

    def scalar_int(self, e: Expr, what: str) -> None:
        self.expr(e)
        if not is_int(e.dtype) or e.lanes != 1:
            self.fail(f"{what} must be a scalar integer, got {e.dtype}x{e.lanes}")

    def same(self, a: Expr, b: Expr, what: str) -> None:
        self.expr(a)
        self.expr(b)
        if a.dtype != b.dtype:
            self.fail(f"{what} operands differ in dtype ({a.dtype} vs {b.dtype})")
        if a.lanes != b.lanes:
            self.fail(f"{what} operands differ in lanes ({a.lanes} vs {b.lanes})")

    def e_Var(self, e: Var) -> None:
        bound = self.vars.get(e.name)
        if bound is None:
            self.fail(f"variable {e.name} used before definition")
        elif bound != e:
            self.fail(f"variable {e.name} used as {e.dtype} but defined as {bound.dtype}")

    def e_Const(self, e: Const) -> None:
        pass

    def e_BinOp(self, e: BinOp) -> None:
        if e.op not in BINARY_OPS:
            self.fail(f"unknown binary operator {e.op!r}")
        self.same(e.a, e.b, f"'{e.op}'")

    def e_Cmp(self, e: Cmp) -> None:
        if e.op not in COMPARE_OPS:
            self.fail(f"unknown comparison {e.op!r}")
        self.same(e.a, e.b, f"'{e.op}'")

    def e_Not(self, e: Not) -> None:
        self.expr(e.a)
        if e.a.dtype != "bool":
            self.fail("`not` needs a bool operand")

    def e_Select(self, e: Select) -> None:
        self.expr(e.cond)
        self.same(e.a, e.b, "select")
        if e.cond.dtype != "bool" or e.cond.lanes not in (1, e.a.lanes):
            self.fail("select condition must be bool with 1 or the operands' lanes")

    def e_Cast(self, e: Cast) -> None:
        self.expr(e.value)

    def e_Call(self, e: Call) -> None:
        if e.name not in INTRINSICS:
            self.fail(f"unknown intrinsic {e.name!r}")
        for a in e.args:
            self.expr(a)
        if len({a.lanes for a in e.args}) > 1:
            self.fail(f"arguments of {e.name} differ in lanes")

    def e_Ramp(self, e: Ramp) -> None:
        self.scalar_int(e.base, "ramp base")
        self.scalar_int(e.stride, "ramp stride")
        if e.count < 2:
            self.fail("ramp needs at least 2 lanes")

    def e_Broadcast(self, e: Broadcast) -> None:
        self.expr(e.value)
        if e.value.lanes != 1 or e.count < 2:
            self.fail("broadcast needs a scalar value and at least 2 lanes")

    def e_Load(self, e: Load) -> None:
        self.access(e.buffer, e.index)

    def access(self, buf: Buffer, index: Expr) -> None:
        known = self.buffers.get(buf.name)
        if known is None:
            self.fail(f"buffer {buf.name} is neither a parameter nor allocated here")
        elif known != buf:
            self.fail(f"buffer {buf.name} does not match its declaration")
        self.expr(index)
        if not is_int(index.dtype):
            self.fail(f"index into {buf.name} must be an integer, got {index.dtype}")
        if self.check_bounds and self.guards == 0:
            self.bounds(buf, index)

    def bounds(self, buf: Buffer, index: Expr) -> None:
        if isinstance(index, Ramp):
            rb, rs = int_range(index.base, self.ranges), int_range(index.stride, self.ranges)
            if rb is None or rs is None:
                return
            span = [rb[0], rb[1], rb[0] + rs[0] * (index.count - 1), rb[1] + rs[1] * (index.count - 1)]
            r: Range | None = (min(span), max(span))
        elif isinstance(index, Broadcast):
            r = int_range(index.value, self.ranges)
        else:
            r = int_range(index, self.ranges)
        if r is not None and (r[0] < 0 or r[1] >= buf.size):
            self.fail(f"index range [{r[0]}, {r[1]}] is outside {buf.name} (size {buf.size})")

    # ---- statements ------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        if not isinstance(s, Seq):
            self.where = s
        handler = getattr(self, "s_" + type(s).__name__, None)
        if handler is None:
            self.fail(f"{type(s).__name__} is not a loop IR statement")
        handler(s)

    def s_Seq(self, s: Seq) -> None:
        for x in s.stmts:
            self.stmt(x)

    def s_Store(self, s: Store) -> None:
        self.access(s.buffer, s.index)
        self.expr(s.value)
        if s.value.dtype != s.buffer.dtype:
            self.fail(f"storing {s.value.dtype} into {s.buffer.dtype} buffer {s.buffer.name}")
        if s.value.lanes != s.index.lanes:
            self.fail(f"store of {s.value.lanes} lanes at an index of {s.index.lanes} lanes")

    def bind(self, v: Var) -> None:
        if v.name in self.vars:
            self.fail(f"variable {v.name} is already defined in an enclosing scope")
        self.vars[v.name] = v

    def s_For(self, s: For) -> None:
        self.scalar_int(s.start, "loop start")
        self.scalar_int(s.extent, "loop extent")
        if s.kind is ForKind.VECTORIZED and not isinstance(s.extent, Const):
            self.fail("a vectorized loop needs a constant extent")
        gpu = s.kind in (ForKind.GPU_BLOCK, ForKind.GPU_THREAD)
        if gpu != bool(s.thread):
            self.fail("GPU loops, and only they, carry a thread tag")
        want = "group." if s.kind is ForKind.GPU_BLOCK else "local."
        if gpu and (s.thread not in THREAD_TAGS or not s.thread.startswith(want)):
            self.fail(f"a {s.kind.value} loop cannot be bound to {s.thread!r}")
        if gpu and s.thread in self.threads:
            self.fail(f"{s.thread} is bound twice in one nest")
        if gpu:
            self.threads.add(s.thread)
        self.bind(s.var)
        rs, rx = int_range(s.start, self.ranges), int_range(s.extent, self.ranges)
        if rs is not None and rx is not None:
            self.ranges[s.var] = (rs[0], rs[1] + rx[1] - 1)
        self.stmt(s.body)
        self.threads.discard(s.thread)
        del self.vars[s.var.name]
        self.ranges.pop(s.var, None)

    def s_Barrier(self, s: Barrier) -> None:
        if not self.threads:
            self.fail("a barrier outside GPU loops")

    def s_Prefetch(self, s: Prefetch) -> None:
        self.access(s.buffer, s.index)
        if s.index.lanes != 1:
            self.fail(f"prefetch of {s.buffer.name} at an index of {s.index.lanes} lanes")

    def s_LetStmt(self, s: LetStmt) -> None:
        self.expr(s.value)
        if s.value.dtype != s.var.dtype:
            self.fail(f"let binds {s.value.dtype} to {s.var.dtype} variable {s.var.name}")
        self.bind(s.var)
        r = int_range(s.value, self.ranges)
        if r is not None:
            self.ranges[s.var] = r
        self.stmt(s.body)
        del self.vars[s.var.name]
        self.ranges.pop(s.var, None)

    def s_Allocate(self, s: Allocate) -> None:
        if s.buffer.name in self.buffers:
            self.fail(f"buffer {s.buffer.name} is already defined")
        self.buffers[s.buffer.name] = s.buffer
        self.stmt(s.body)
        del self.buffers[s.buffer.name]

    def s_If(self, s: If) -> None:
        self.expr(s.cond)
        if s.cond.dtype != "bool" or s.cond.lanes != 1:
            self.fail("if condition must be a scalar bool")
        self.guards += 1
        self.stmt(s.then)
        if s.orelse is not None:
            self.stmt(s.orelse)
        self.guards -= 1


def verify(func: LoopFunc, check_bounds: bool = True) -> None:
    """Raise VerifyError if `func` breaks a loop IR invariant."""
    v = _Verifier(check_bounds)
    v.where = f"def {func.name}"
    for p in func.params:
        if isinstance(p, Buffer):
            if p.name in v.buffers:
                v.fail(f"parameter {p.name} appears twice")
            v.buffers[p.name] = p
        elif isinstance(p, Var):
            v.bind(p)
        else:
            v.fail(f"parameter {p!r} is neither a Buffer nor a Var")
    v.stmt(func.body)
