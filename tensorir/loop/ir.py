"""Loop IR: frozen dataclasses for expressions and statements of one kernel.

Expressions carry their dtype; vector expressions have `lanes > 1`. Buffers are flat
(row-major over `shape`); loads and stores take a flat element index, which lowering
builds from the multi-dimensional access. A kernel is a `LoopFunc` whose parameters
are buffers (and scalar vars).

    for i in parallel(0, 64):
      for j in vectorized(0, 16):
        C[i*16 + j] = A[i*16 + j] + B[j]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class memo:  # used like @property
    """A property of an expression node computed once and kept in the node's __dict__ (nodes
    are immutable): `lanes` and `dtype` of a BinOp recurse down the tree, and the simplifier
    asks for them at every node it visits. A non-data descriptor, so the stored value shadows
    it from the second access on."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.name = fn, fn.__name__

    def __get__(self, node: Any, owner: Any = None) -> Any:
        if node is None:
            return self
        value = node.__dict__[self.name] = self.fn(node)
        return value


class ForKind(Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    GPU_BLOCK = "gpu_block"
    GPU_THREAD = "gpu_thread"


# ---- expressions ------------------------------------------------------------------
@dataclass(frozen=True)
class Expr:
    @property
    def dtype(self) -> str:  # element type: "float32", "int64", "bool", ...
        raise NotImplementedError

    @property
    def lanes(self) -> int:
        return 1

    # Operator sugar so computes and tests read like math.
    def __add__(self, o: ExprLike) -> Expr:
        return BinOp("+", self, as_expr(o, self.dtype))

    def __radd__(self, o: ExprLike) -> Expr:
        return BinOp("+", as_expr(o, self.dtype), self)

    def __sub__(self, o: ExprLike) -> Expr:
        return BinOp("-", self, as_expr(o, self.dtype))

    def __rsub__(self, o: ExprLike) -> Expr:
        return BinOp("-", as_expr(o, self.dtype), self)

    def __mul__(self, o: ExprLike) -> Expr:
        return BinOp("*", self, as_expr(o, self.dtype))

    def __rmul__(self, o: ExprLike) -> Expr:
        return BinOp("*", as_expr(o, self.dtype), self)

    def __truediv__(self, o: ExprLike) -> Expr:
        return BinOp("/", self, as_expr(o, self.dtype))

    def __floordiv__(self, o: ExprLike) -> Expr:
        return BinOp("//", self, as_expr(o, self.dtype))

    def __mod__(self, o: ExprLike) -> Expr:
        return BinOp("%", self, as_expr(o, self.dtype))

    def __neg__(self) -> Expr:
        return BinOp("-", Const(0, self.dtype), self)

    def __lt__(self, o: ExprLike) -> Expr:
        return Cmp("<", self, as_expr(o, self.dtype))

    def __le__(self, o: ExprLike) -> Expr:
        return Cmp("<=", self, as_expr(o, self.dtype))

    def __gt__(self, o: ExprLike) -> Expr:
        return Cmp(">", self, as_expr(o, self.dtype))

    def __ge__(self, o: ExprLike) -> Expr:
        return Cmp(">=", self, as_expr(o, self.dtype))

    def eq(self, o: ExprLike) -> Expr:  # __eq__ stays structural equality
        return Cmp("==", self, as_expr(o, self.dtype))

    def ne(self, o: ExprLike) -> Expr:
        return Cmp("!=", self, as_expr(o, self.dtype))

    def __getstate__(self) -> dict:
        """The fields only: a cached hash of strings is valid only in the process that made it."""
        return {k: v for k, v in self.__dict__.items() if k not in _CACHED}


ExprLike = Expr | int | float | bool


def as_expr(v: ExprLike, dtype: str = "int64") -> Expr:
    if isinstance(v, Expr):
        return v
    if isinstance(v, bool):
        return Const(v, "bool")
    if isinstance(v, float) and not dtype.startswith("float"):
        return Const(v, "float32")
    return Const(v, dtype)


@dataclass(frozen=True)
class Var(Expr):
    name: str
    type_: str = "int64"

    @property
    def dtype(self) -> str:
        return self.type_


@dataclass(frozen=True)
class Const(Expr):
    value: int | float | bool
    type_: str = "int64"

    @property
    def dtype(self) -> str:
        return self.type_


# "+", "-", "*", "/" (true division for floats, truncating for ints), "//" (floor div),
# "%" (floor mod), "min", "max", "and", "or", "xor" (bitwise / logical on bool), "shl", "shr"
# (integer shifts, arithmetic right for signed types, logical for unsigned; a count outside
# [0, bits) is undefined: guard it)
BINARY_OPS = ("+", "-", "*", "/", "//", "%", "min", "max", "and", "or", "xor", "shl", "shr")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")


@dataclass(frozen=True)
class BinOp(Expr):
    op: str
    a: Expr
    b: Expr

    @memo
    def dtype(self) -> str:
        return self.a.dtype

    @memo
    def lanes(self) -> int:
        return max(self.a.lanes, self.b.lanes)


@dataclass(frozen=True)
class Cmp(Expr):
    op: str
    a: Expr
    b: Expr

    @memo
    def dtype(self) -> str:
        return "bool"

    @memo
    def lanes(self) -> int:
        return max(self.a.lanes, self.b.lanes)


@dataclass(frozen=True)
class Not(Expr):
    a: Expr

    @memo
    def dtype(self) -> str:
        return "bool"

    @memo
    def lanes(self) -> int:
        return self.a.lanes


@dataclass(frozen=True)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr

    @memo
    def dtype(self) -> str:
        return self.a.dtype

    @memo
    def lanes(self) -> int:
        return max(self.cond.lanes, self.a.lanes, self.b.lanes)


@dataclass(frozen=True)
class Cast(Expr):
    type_: str
    value: Expr

    @memo
    def dtype(self) -> str:
        return self.type_

    @memo
    def lanes(self) -> int:
        return self.value.lanes


# Math intrinsics the code generators implement (vectorized, without libm):
# exp, log, sqrt, rsqrt, tanh, erf, sigmoid, abs, floor, ceil, round, fma(a, b, c), pow(a, b)
INTRINSICS = (
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "erf",
    "sigmoid",
    "abs",
    "floor",
    "ceil",
    "round",
    "fma",
    "pow",
    "sin",
    "cos",
    # ONNX Cast to float8_e8m0fnu: (float32 x, bool saturate) -> float8_e8m0fnu, the
    # exponent rounded up / down / to nearest (tensorir/codegen/llvm_narrow.py)
    "e8m0_up",
    "e8m0_down",
    "e8m0_nearest",
    # the argument's bits as the call's type_ (same width; LLVM bitcast, ONNX BitCast)
    "bitcast",
    # (uint8 a0..a3, int32 w) or (int32 a, int32 w) -> int32: sum_i a_i * (int8 byte i of w),
    # a_i the uint8 byte i of a in the second form; acc + dot4_u8s8 is one
    # AVX-512 VNNI vpdpbusd lane (tensorir/codegen/llvm_dot.py); dot4_s8s8 the same with
    # the a_i signed bytes: ARM's sdot (+dotprod)
    "dot4_u8s8",
    "dot4_s8s8",
)


@dataclass(frozen=True)
class Call(Expr):
    name: str
    args: tuple[Expr, ...]
    type_: str = "float32"

    @memo
    def dtype(self) -> str:
        return self.type_

    @memo
    def lanes(self) -> int:
        return max((a.lanes for a in self.args), default=1)


@dataclass(frozen=True)
class Ramp(Expr):
    """The vector (base, base + stride, ..., base + (lanes-1)*stride)."""

    base: Expr
    stride: Expr
    count: int

    @memo
    def dtype(self) -> str:
        return self.base.dtype

    @memo
    def lanes(self) -> int:
        return self.count


@dataclass(frozen=True)
class Broadcast(Expr):
    value: Expr
    count: int

    @memo
    def dtype(self) -> str:
        return self.value.dtype

    @memo
    def lanes(self) -> int:
        return self.count


@dataclass(frozen=True)
class Buffer:
    """A flat array in memory. scope: "global" (a kernel parameter), "local" (registers /
    stack of one thread), "shared" (a GPU work-group's local memory, OpenCL `__local`) or
    "image" (a read-only kernel parameter stored as an OpenCL image2d_t: shape[0] rows of
    4-element texels, see `Schedule.set_storage` and codegen/opencl_image.py)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    scope: str = "global"

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Load(Expr):
    """buffer[index]; a vector index (Ramp) loads `lanes` elements."""

    buffer: Buffer
    index: Expr

    @memo
    def dtype(self) -> str:
        return self.buffer.dtype

    @memo
    def lanes(self) -> int:
        return self.index.lanes


# ---- statements -------------------------------------------------------------------
@dataclass(frozen=True)
class Stmt:
    pass


@dataclass(frozen=True)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


THREAD_TAGS = ("group.x", "group.y", "group.z", "local.x", "local.y", "local.z")


@dataclass(frozen=True)
class For(Stmt):
    """A loop. GPU loops (kind GPU_BLOCK / GPU_THREAD) carry a `thread` tag from
    THREAD_TAGS: the loop is not run, its variable is the work-group id (group.*) or the
    work-item id within the group (local.*) along that dimension, and its extent is the
    launch size along it."""

    var: Var
    start: Expr
    extent: Expr
    kind: ForKind
    body: Stmt
    thread: str = ""


@dataclass(frozen=True)
class Allocate(Stmt):
    """A local buffer live for the duration of `body` (registers / stack)."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True)
class Barrier(Stmt):
    """Every work-item of the group waits here; "shared" memory writes before it are
    visible after it (OpenCL `barrier(CLK_LOCAL_MEM_FENCE)`). Only inside GPU loops."""

    scope: str = "shared"


@dataclass(frozen=True)
class Prefetch(Stmt):
    """A hint: fetch the cache line holding `buffer[index]` toward the core ahead of its
    loads (LLVM `llvm.prefetch`, read, into L2: x86 `prefetcht1`, AArch64 `prfm pldl2keep`).
    It never faults and changes no value; the interpreter and OpenCL ignore it. `index` is a
    scalar element index inside the buffer."""

    buffer: Buffer
    index: Expr


@dataclass(frozen=True)
class LetStmt(Stmt):
    """Bind `var` to `value` inside `body` (computed once)."""

    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True)
class LoopFunc:
    """A kernel: `params` are buffers it reads/writes, in call order."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    attrs: dict = field(default_factory=dict, compare=False, hash=False)

    def __str__(self) -> str:
        from tensorir.loop.printer import to_text

        return to_text(self)


_CACHED = ("_hash", "dtype", "lanes")  # what an Expr node keeps in its __dict__ beside its fields


def _memo_hash(cls: type) -> None:
    """Give `cls` (a frozen dataclass) a hash computed once per node: the generated one hashes
    the whole subtree at every call, and dict lookups keyed by expressions (the simplifier's
    ranges, substitute's mapping) call it at every node of every walk."""
    generated = cls.__hash__

    def __hash__(self: Any) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = generated(self)
        return h  # type: ignore[no-any-return]

    cls.__hash__ = __hash__  # type: ignore[method-assign]


def _expr_classes(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_expr_classes(sub))]


for _cls in _expr_classes(Expr):
    _memo_hash(_cls)
del _cls
