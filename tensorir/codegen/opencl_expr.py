"""OpenCL C expressions from loop IR: the expression half of the OpenCL renderer
(codegen/opencl.py renders the statements and the kernel around it).

`ExprRenderer.expr(e)` gives a `CExpr`: the C text of `e`, the C element type it is computed
in, its lanes and its loop-IR dtype. Types: a scalar bool is computed as an `int` 0/1 and a
bool vector as a signed mask of -1/0; bool buffers are `uchar`; float16 is computed in `half`
when the profile has fp16 and otherwise in float (global float16 buffers are then read with
`vload_half`); int64 index math is 32-bit when `narrow_indices` allows it.

Vector loads: a Ramp-stride-1 load of 2, 3, 4, 8 or 16 lanes is `vloadN`; other vector loads
are gathers `(float4)(P[i0], ...)`; loads from images go through codegen/opencl_image.py.
Semantics follow the LLVM backend: `//` and `%` floor for signed ints, float min/max are
`a < b ? a : b`, round is round-half-even (`rint`), rsqrt is 1/sqrt.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorir.codegen.opencl_c import (
    BYTES,
    CTYPE,
    HELPERS,
    MASK,
    MATH,
    RESERVED,
    VEC,
    bare,
    c_float_lit,
    c_int_lit,
    contiguous,
    lane_expr,
    narrow_indices,
    symbol_name,
    vt,
)
from tensorir.codegen.opencl_image import ImageReads
from tensorir.devices import DeviceProfile
from tensorir.errors import TirError
from tensorir.loop import ir


@dataclass(frozen=True)
class CExpr:
    """A rendered expression: C text, C element type as computed (a scalar bool is an `int`
    0/1, a bool vector a signed mask of -1/0), lanes, loop-IR dtype."""

    text: str
    ctype: str
    lanes: int
    dtype: str


class ExprRenderer:
    """Renders loop-IR expressions of `func` to OpenCL C. `env` binds variables to their C
    names, `bufs` buffers to their pointers; `names` are the C names taken, `helpers` the
    helper functions the expressions call (name -> definition)."""

    def __init__(self, func: ir.LoopFunc, profile: DeviceProfile | None) -> None:
        self.func, self.profile = func, profile
        self.fp16 = bool(profile and profile.fp16)
        self.env: dict[ir.Var, CExpr] = {}
        self.bufs: dict[ir.Buffer, str] = {}
        self.names: set[str] = set()
        self.helpers: dict[str, str] = {}
        self.narrow = narrow_indices(func)
        self.nonneg: set[ir.Var] = set()  # loop / id / let variables known to be >= 0
        self.image_reads = ImageReads(lambda e: bare(self.expr(e).text), self.helpers.setdefault, self.fp16)

    # ---- names and types --------------------------------------------------------------
    def name(self, base: str) -> str:
        s = symbol_name(base)
        s = s + "_" if s in RESERVED or s.startswith(("get_", "vload", "vstore", "convert_")) else s
        out, k = s, 1
        while out in self.names:
            out, k = f"{s}_{k}", k + 1
        self.names.add(out)
        return out

    def calc(self, dtype: str) -> str:
        """C type a value of `dtype` is computed in."""
        if dtype == "bool":
            return "int"
        if dtype not in CTYPE:
            raise TirError(f"OpenCL codegen does not support dtype {dtype!r}")
        if dtype == "int64" and self.narrow:
            return "int"  # 32-bit index math (GPUs emulate 64-bit multiply and divide)
        return "float" if dtype == "float16" and not self.fp16 else CTYPE[dtype]

    def int_lit(self, value: int, dtype: str) -> str:
        narrow = dtype == "int64" and self.narrow and -(2**31) < value < 2**31
        return c_int_lit(value, "int32" if narrow else dtype)

    def is_nonneg(self, e: ir.Expr) -> bool:
        """`e` is provably >= 0: loop and work-item variables, non-negative constants, and
        + * // % min max of such (what index expressions are made of)."""
        if isinstance(e, ir.Var):
            return e in self.nonneg
        if isinstance(e, ir.Const):
            return not isinstance(e.value, bool) and e.value >= 0
        if isinstance(e, ir.BinOp) and e.op in ("+", "*", "//", "%", "min", "max", "/"):
            return self.is_nonneg(e.a) and self.is_nonneg(e.b)
        return False

    def mem(self, buf: ir.Buffer) -> str:
        """C element type of `buf` in memory."""
        return self.calc(buf.dtype) if buf.scope != "global" and buf.dtype == "float16" else CTYPE[buf.dtype]

    def half_io(self, buf: ir.Buffer) -> bool:
        return buf.dtype == "float16" and not self.fp16 and buf.scope == "global"

    def helper(self, kind: str, ctype: str, lanes: int) -> str:
        t = vt(ctype, lanes)
        name = f"tir_{kind}_{t}"
        if name not in self.helpers:
            body = HELPERS.get(kind + ("_v" if lanes > 1 else ""), HELPERS.get(kind, ""))
            self.helpers[name] = f"static inline {t} {name}({t} a, {t} b) " + body.format(T=t)
        return name

    # ---- expressions ------------------------------------------------------------------
    def expr(self, e: ir.Expr) -> CExpr:
        method = getattr(self, f"_e_{type(e).__name__}", None)
        if method is None:
            raise TirError(f"OpenCL codegen cannot render expression {type(e).__name__}")
        return method(e)  # type: ignore[no-any-return]

    def _e_Var(self, e: ir.Var) -> CExpr:
        if e not in self.env:
            raise TirError(f"variable {e.name!r} ({e.dtype}) is used but never bound")
        return self.env[e]

    def _e_Const(self, e: ir.Const) -> CExpr:
        dt, ct = e.dtype, self.calc(e.dtype)
        if dt == "bool":
            return CExpr("1" if e.value else "0", ct, 1, dt)
        if dt.startswith("float"):
            text = c_float_lit(float(e.value), dt)
            return CExpr(f"((half){text})" if ct == "half" else text, ct, 1, dt)
        return CExpr(self.int_lit(int(e.value), dt), ct, 1, dt)

    def splat(self, v: CExpr, n: int) -> CExpr:
        if v.lanes == n:
            return v
        if v.lanes != 1:
            raise TirError(f"cannot combine a {v.lanes}-lane and a {n}-lane vector")
        text = f"(-({bare(v.text)}))" if v.dtype == "bool" else v.text
        return CExpr(f"(({v.ctype}{n}){text})", v.ctype, n, v.dtype)

    def mask_to(self, v: CExpr, ctype: str) -> CExpr:
        """A bool vector as a mask of element type `ctype`."""
        if v.lanes == 1 or v.ctype == ctype:
            return v
        return CExpr(f"convert_{ctype}{v.lanes}({bare(v.text)})", ctype, v.lanes, v.dtype)

    def pair(self, a: ir.Expr, b: ir.Expr) -> tuple[CExpr, CExpr, int]:
        va, vb = self.expr(a), self.expr(b)
        n = max(va.lanes, vb.lanes)
        va, vb = self.splat(va, n), self.splat(vb, n)
        if va.dtype == "bool" and n > 1:
            vb = self.mask_to(vb, va.ctype)
        return va, vb, n

    def _e_Broadcast(self, e: ir.Broadcast) -> CExpr:
        return self.splat(self.expr(e.value), e.count)

    def _e_Ramp(self, e: ir.Ramp) -> CExpr:
        n, ct = e.count, self.calc(e.dtype)
        if n not in VEC:
            raise TirError(f"a {n}-lane ramp has no OpenCL vector type")
        step = self.expr(e.stride).text
        if isinstance(e.stride, ir.Const):
            offs = ", ".join(self.int_lit(k * int(e.stride.value), e.dtype) for k in range(n))
        else:
            offs = ", ".join(f"{k} * {step}" for k in range(n))
        base = self.splat(self.expr(e.base), n)
        return CExpr(f"({base.text} + ({ct}{n})({offs}))", ct, n, e.dtype)

    def _e_BinOp(self, e: ir.BinOp) -> CExpr:
        a, b, n = self.pair(e.a, e.b)
        dt, ct = a.dtype, a.ctype
        op = {"and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}.get(e.op, e.op)
        if dt == "bool":
            op = {"min": "&", "max": "|"}.get(op, op)
        isfloat, signed = dt.startswith("float"), dt.startswith("int")
        if op in ("min", "max"):
            if isfloat:
                return CExpr(f"{self.helper('f' + op, ct, n)}({a.text}, {b.text})", ct, n, dt)
            return CExpr(f"{op}({a.text}, {b.text})", ct, n, dt)
        if op == "//" and isfloat:
            return CExpr(f"floor({a.text} / {b.text})", ct, n, dt)
        positive = isinstance(e.b, ir.Const) and e.b.value > 0
        if op in ("//", "%") and signed and positive and self.is_nonneg(e.a):
            return CExpr(f"({a.text} {op.replace('//', '/')} {b.text})", ct, n, dt)  # C's = floor's here
        if op in ("//", "%") and (signed or isfloat):
            kind = "ffloormod" if isfloat else {"//": "floordiv", "%": "floormod"}[op]
            return CExpr(f"{self.helper(kind, ct, n)}({bare(a.text)}, {bare(b.text)})", ct, n, dt)
        if op not in ("+", "-", "*", "/", "//", "%", "&", "|", "^"):
            raise TirError(f"binary operator {e.op!r} is not defined for {dt}")
        text = f"({a.text} {op.replace('//', '/')} {b.text})"
        if n == 1 and ct in ("char", "uchar", "short", "ushort"):  # C promotes to int: wrap back
            text = f"(({ct}){text})"
        return CExpr(text, ct, n, dt)

    def _e_Cmp(self, e: ir.Cmp) -> CExpr:
        a, b, n = self.pair(e.a, e.b)
        mask = "int" if n == 1 else MASK[BYTES[a.ctype]]
        return CExpr(f"({a.text} {e.op} {b.text})", mask, n, "bool")

    def _e_Not(self, e: ir.Not) -> CExpr:
        a = self.to_bool(self.expr(e.a))
        return CExpr(f"(!{a.text})" if a.lanes == 1 else f"(~{a.text})", a.ctype, a.lanes, "bool")

    def _e_Select(self, e: ir.Select) -> CExpr:
        c = self.to_bool(self.expr(e.cond))
        a, b, n = self.pair(e.a, e.b)
        if c.lanes == 1:
            return CExpr(f"({bare(c.text)} ? {a.text} : {b.text})", a.ctype, n, a.dtype)
        c = self.mask_to(self.splat(c, n), MASK[BYTES[a.ctype]])
        return CExpr(f"select({bare(b.text)}, {bare(a.text)}, {bare(c.text)})", a.ctype, n, a.dtype)

    def to_bool(self, v: CExpr) -> CExpr:
        if v.dtype == "bool":
            return v
        if v.lanes == 1:
            return CExpr(f"({v.text} != 0)", "int", 1, "bool")
        return CExpr(f"({v.text} != ({v.ctype}{v.lanes})0)", MASK[BYTES[v.ctype]], v.lanes, "bool")

    def _e_Cast(self, e: ir.Cast) -> CExpr:
        return self.cast(self.expr(e.value), e.dtype)

    def cast(self, v: CExpr, dtype: str) -> CExpr:
        if v.dtype == dtype:
            return v
        if dtype == "bool":
            return self.to_bool(v)
        ct, n = self.calc(dtype), v.lanes
        if ct == v.ctype and v.dtype != "bool":
            return CExpr(v.text, ct, n, dtype)
        src = f"-({bare(v.text)})" if v.dtype == "bool" and n > 1 else bare(v.text)
        text = f"(({ct})({src}))" if n == 1 else f"convert_{ct}{n}({src})"
        return CExpr(text, ct, n, dtype)

    def _e_Call(self, e: ir.Call) -> CExpr:
        args = [self.expr(a) for a in e.args]
        n = max(a.lanes for a in args)
        args = [self.splat(a, n) for a in args]
        x, dt, ct = args[0], args[0].dtype, args[0].ctype
        if e.name == "bitcast":
            raise TirError(f"bitcast of {dt} to {e.dtype} is compiled for the host only, not OpenCL")
        texts = ", ".join(bare(a.text) for a in args)
        if e.name == "abs" and not dt.startswith("float"):
            if not dt.startswith("int"):
                return x
            return CExpr(f"(({ct})abs({texts}))" if n == 1 else f"convert_{ct}{n}(abs({texts}))", ct, n, dt)
        if not dt.startswith("float"):
            raise TirError(f"math function {e.name!r} needs float arguments, got {dt}")
        one = self.expr(ir.Const(1.0, dt)).text
        if e.name == "abs":
            text = f"fabs({texts})"
        elif e.name == "sigmoid":
            text = f"({one} / ({one} + exp(-{x.text})))"
        elif e.name == "rsqrt":
            text = f"({one} / sqrt({texts}))"
        elif e.name in MATH:
            text = f"{MATH[e.name]}({texts})"
        else:
            raise TirError(f"unknown math function {e.name!r}; known: {', '.join(ir.INTRINSICS)}")
        return CExpr(text, ct, n, dt)

    # ---- memory -----------------------------------------------------------------------
    def ptr(self, buf: ir.Buffer) -> str:
        if buf not in self.bufs:
            raise TirError(f"buffer {buf.name!r} is neither a parameter nor allocated here")
        return self.bufs[buf]

    def load1(self, buf: ir.Buffer, index: str) -> str:
        p = self.ptr(buf)
        return f"vload_half({index}, {p})" if self.half_io(buf) else f"{p}[{index}]"

    def _e_Load(self, e: ir.Load) -> CExpr:
        buf, idx, n = e.buffer, e.index, e.index.lanes
        ct, p = self.mem(buf) if not self.half_io(buf) else "float", self.ptr(buf)
        if isinstance(idx, ir.Broadcast):
            return self.splat(self._e_Load(ir.Load(buf, idx.value)), n)
        if buf.scope == "image":
            return CExpr(self.image_reads.load(p, buf, idx), self.image_reads.ctype(buf), n, buf.dtype)
        if n == 1:
            raw = CExpr(self.load1(buf, bare(self.expr(idx).text)), ct, 1, buf.dtype)
        elif contiguous(idx) and n in VEC:
            fn = f"vload_half{n}" if self.half_io(buf) else f"vload{n}"
            raw = CExpr(f"{fn}(0, {p} + {self.expr(idx.base).text})", ct, n, buf.dtype)  # type: ignore[attr-defined]
        else:
            items = [self.load1(buf, bare(self.expr(lane_expr(idx, k)).text)) for k in range(n)]
            raw = CExpr(f"(({ct}{n})({', '.join(items)}))", ct, n, buf.dtype)
        if buf.dtype != "bool":
            return raw
        zero = "0" if n == 1 else f"(uchar{n})0"
        return CExpr(f"({raw.text} != {zero})", "int" if n == 1 else "char", n, "bool")
