"""OpenCL C from loop IR: one `__kernel` per LoopFunc, with its launch geometry.

    from tensorir.codegen.opencl import render_opencl
    k = render_opencl(func, get_profile("mali-g76"))   # a plan.GpuKernel
    print(k.source, k.global_size, k.local_size)

Calling convention (plan.GpuKernel): every buffer parameter P is `__global T *P_base, const
ulong P_off` and the body reads it through `P = P_base + P_off bytes`; a scalar Var parameter
is a plain scalar. bool buffers are `uchar` (one byte, like numpy); float16 buffers are `half`,
computed in `half` when the profile has fp16 and otherwise loaded and stored with
`vload_half`/`vstore_half` and computed in float (rounded to half only when stored).

GPU loops are not loops: a `group.x` loop's var is `start + get_group_id(0)`, `local.y` is
`get_local_id(1)`; their constant extents give the launch (local size = the local.* extent,
global size = group.* extent x local size). Sibling nests bound to the same tags run in
sequence in every work-item; a nest (or a top-level statement) that lacks a tag runs only
where that id is 0. There is no grid-wide barrier: a nest must not read what a sibling nest
wrote in another work-group. A function without GPU loops is one work-item (slow, correct).

Vectors: a Ramp-stride-1 load/store of 2, 3, 4, 8 or 16 lanes is `vloadN`/`vstoreN`; other
vector accesses are gathers `(float4)(P[i0], ...)` and scatters; stores of other lane counts
are expanded lane by lane. Semantics follow the LLVM backend: `//` and `%` floor for signed
ints, float min/max are `a < b ? a : b`, round is round-half-even (`rint`), rsqrt is 1/sqrt.
TIR_DUMP_DIR writes each kernel to `<dir>/opencl/<name>.cl`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensorir import config
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
    geometry,
    id_call,
    lane_expr,
    launch_extents,
    narrow_indices,
    symbol_name,
    vt,
)
from tensorir.codegen.opencl_image import SAMPLER_DECL, ImageReads, image_param
from tensorir.codegen.opencl_launches import join_sources, split_launches
from tensorir.devices import DeviceProfile
from tensorir.errors import TirError
from tensorir.loop import ir
from tensorir.loop.passes import vectorize_loop
from tensorir.loop.simplify import simplify
from tensorir.loop.visitor import walk
from tensorir.plan import GpuKernel, ImageParam, Launch


@dataclass(frozen=True)
class _V:
    """A rendered expression: C text, C element type as computed (a scalar bool is an `int`
    0/1, a bool vector a signed mask of -1/0), lanes, loop-IR dtype."""

    text: str
    ctype: str
    lanes: int
    dtype: str


class _Renderer:
    def __init__(self, func: ir.LoopFunc, profile: DeviceProfile | None) -> None:
        self.func, self.profile = func, profile
        self.fp16 = bool(profile and profile.fp16)
        self.lines: list[str] = []
        self.depth = 1
        self.env: dict[ir.Var, _V] = {}
        self.bufs: dict[ir.Buffer, str] = {}
        self.names: set[str] = set()
        self.helpers: dict[str, str] = {}
        self.shared: list[str] = []
        self.shared_bytes = 0
        self.in_gpu = False
        self.launch = launch_extents(func)
        self.narrow = narrow_indices(func)
        self.nonneg: set[ir.Var] = set()  # loop / id / let variables known to be >= 0
        self.images: list[ImageParam] = []
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

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    # ---- expressions ------------------------------------------------------------------
    def expr(self, e: ir.Expr) -> _V:
        method = getattr(self, f"_e_{type(e).__name__}", None)
        if method is None:
            raise TirError(f"OpenCL codegen cannot render expression {type(e).__name__}")
        return method(e)  # type: ignore[no-any-return]

    def _e_Var(self, e: ir.Var) -> _V:
        if e not in self.env:
            raise TirError(f"variable {e.name!r} ({e.dtype}) is used but never bound")
        return self.env[e]

    def _e_Const(self, e: ir.Const) -> _V:
        dt, ct = e.dtype, self.calc(e.dtype)
        if dt == "bool":
            return _V("1" if e.value else "0", ct, 1, dt)
        if dt.startswith("float"):
            text = c_float_lit(float(e.value), dt)
            return _V(f"((half){text})" if ct == "half" else text, ct, 1, dt)
        return _V(self.int_lit(int(e.value), dt), ct, 1, dt)

    def splat(self, v: _V, n: int) -> _V:
        if v.lanes == n:
            return v
        if v.lanes != 1:
            raise TirError(f"cannot combine a {v.lanes}-lane and a {n}-lane vector")
        text = f"(-({bare(v.text)}))" if v.dtype == "bool" else v.text
        return _V(f"(({v.ctype}{n}){text})", v.ctype, n, v.dtype)

    def mask_to(self, v: _V, ctype: str) -> _V:
        """A bool vector as a mask of element type `ctype`."""
        if v.lanes == 1 or v.ctype == ctype:
            return v
        return _V(f"convert_{ctype}{v.lanes}({bare(v.text)})", ctype, v.lanes, v.dtype)

    def pair(self, a: ir.Expr, b: ir.Expr) -> tuple[_V, _V, int]:
        va, vb = self.expr(a), self.expr(b)
        n = max(va.lanes, vb.lanes)
        va, vb = self.splat(va, n), self.splat(vb, n)
        if va.dtype == "bool" and n > 1:
            vb = self.mask_to(vb, va.ctype)
        return va, vb, n

    def _e_Broadcast(self, e: ir.Broadcast) -> _V:
        return self.splat(self.expr(e.value), e.count)

    def _e_Ramp(self, e: ir.Ramp) -> _V:
        n, ct = e.count, self.calc(e.dtype)
        if n not in VEC:
            raise TirError(f"a {n}-lane ramp has no OpenCL vector type")
        step = self.expr(e.stride).text
        if isinstance(e.stride, ir.Const):
            offs = ", ".join(self.int_lit(k * int(e.stride.value), e.dtype) for k in range(n))
        else:
            offs = ", ".join(f"{k} * {step}" for k in range(n))
        base = self.splat(self.expr(e.base), n)
        return _V(f"({base.text} + ({ct}{n})({offs}))", ct, n, e.dtype)

    def _e_BinOp(self, e: ir.BinOp) -> _V:
        a, b, n = self.pair(e.a, e.b)
        dt, ct = a.dtype, a.ctype
        op = {"and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}.get(e.op, e.op)
        if dt == "bool":
            op = {"min": "&", "max": "|"}.get(op, op)
        isfloat, signed = dt.startswith("float"), dt.startswith("int")
        if op in ("min", "max"):
            if isfloat:
                return _V(f"{self.helper('f' + op, ct, n)}({a.text}, {b.text})", ct, n, dt)
            return _V(f"{op}({a.text}, {b.text})", ct, n, dt)
        if op == "//" and isfloat:
            return _V(f"floor({a.text} / {b.text})", ct, n, dt)
        positive = isinstance(e.b, ir.Const) and e.b.value > 0
        if op in ("//", "%") and signed and positive and self.is_nonneg(e.a):
            return _V(f"({a.text} {op.replace('//', '/')} {b.text})", ct, n, dt)  # C's = floor's here
        if op in ("//", "%") and (signed or isfloat):
            kind = "ffloormod" if isfloat else {"//": "floordiv", "%": "floormod"}[op]
            return _V(f"{self.helper(kind, ct, n)}({bare(a.text)}, {bare(b.text)})", ct, n, dt)
        if op not in ("+", "-", "*", "/", "//", "%", "&", "|", "^"):
            raise TirError(f"binary operator {e.op!r} is not defined for {dt}")
        text = f"({a.text} {op.replace('//', '/')} {b.text})"
        if n == 1 and ct in ("char", "uchar", "short", "ushort"):  # C promotes to int: wrap back
            text = f"(({ct}){text})"
        return _V(text, ct, n, dt)

    def _e_Cmp(self, e: ir.Cmp) -> _V:
        a, b, n = self.pair(e.a, e.b)
        mask = "int" if n == 1 else MASK[BYTES[a.ctype]]
        return _V(f"({a.text} {e.op} {b.text})", mask, n, "bool")

    def _e_Not(self, e: ir.Not) -> _V:
        a = self.to_bool(self.expr(e.a))
        return _V(f"(!{a.text})" if a.lanes == 1 else f"(~{a.text})", a.ctype, a.lanes, "bool")

    def _e_Select(self, e: ir.Select) -> _V:
        c = self.to_bool(self.expr(e.cond))
        a, b, n = self.pair(e.a, e.b)
        if c.lanes == 1:
            return _V(f"({bare(c.text)} ? {a.text} : {b.text})", a.ctype, n, a.dtype)
        c = self.mask_to(self.splat(c, n), MASK[BYTES[a.ctype]])
        return _V(f"select({bare(b.text)}, {bare(a.text)}, {bare(c.text)})", a.ctype, n, a.dtype)

    def to_bool(self, v: _V) -> _V:
        if v.dtype == "bool":
            return v
        if v.lanes == 1:
            return _V(f"({v.text} != 0)", "int", 1, "bool")
        return _V(f"({v.text} != ({v.ctype}{v.lanes})0)", MASK[BYTES[v.ctype]], v.lanes, "bool")

    def _e_Cast(self, e: ir.Cast) -> _V:
        return self.cast(self.expr(e.value), e.dtype)

    def cast(self, v: _V, dtype: str) -> _V:
        if v.dtype == dtype:
            return v
        if dtype == "bool":
            return self.to_bool(v)
        ct, n = self.calc(dtype), v.lanes
        if ct == v.ctype and v.dtype != "bool":
            return _V(v.text, ct, n, dtype)
        src = f"-({bare(v.text)})" if v.dtype == "bool" and n > 1 else bare(v.text)
        text = f"(({ct})({src}))" if n == 1 else f"convert_{ct}{n}({src})"
        return _V(text, ct, n, dtype)

    def _e_Call(self, e: ir.Call) -> _V:
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
            return _V(f"(({ct})abs({texts}))" if n == 1 else f"convert_{ct}{n}(abs({texts}))", ct, n, dt)
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
        return _V(text, ct, n, dt)

    # ---- memory -----------------------------------------------------------------------
    def ptr(self, buf: ir.Buffer) -> str:
        if buf not in self.bufs:
            raise TirError(f"buffer {buf.name!r} is neither a parameter nor allocated here")
        return self.bufs[buf]

    def load1(self, buf: ir.Buffer, index: str) -> str:
        p = self.ptr(buf)
        return f"vload_half({index}, {p})" if self.half_io(buf) else f"{p}[{index}]"

    def _e_Load(self, e: ir.Load) -> _V:
        buf, idx, n = e.buffer, e.index, e.index.lanes
        ct, p = self.mem(buf) if not self.half_io(buf) else "float", self.ptr(buf)
        if isinstance(idx, ir.Broadcast):
            return self.splat(self._e_Load(ir.Load(buf, idx.value)), n)
        if buf.scope == "image":
            return _V(self.image_reads.load(p, buf, idx), self.image_reads.ctype(buf), n, buf.dtype)
        if n == 1:
            raw = _V(self.load1(buf, bare(self.expr(idx).text)), ct, 1, buf.dtype)
        elif contiguous(idx) and n in VEC:
            fn = f"vload_half{n}" if self.half_io(buf) else f"vload{n}"
            raw = _V(f"{fn}(0, {p} + {self.expr(idx.base).text})", ct, n, buf.dtype)  # type: ignore[attr-defined]
        else:
            items = [self.load1(buf, bare(self.expr(lane_expr(idx, k)).text)) for k in range(n)]
            raw = _V(f"(({ct}{n})({', '.join(items)}))", ct, n, buf.dtype)
        if buf.dtype != "bool":
            return raw
        zero = "0" if n == 1 else f"(uchar{n})0"
        return _V(f"({raw.text} != {zero})", "int" if n == 1 else "char", n, "bool")

    def store(self, s: ir.Store) -> None:
        buf, idx, n = s.buffer, s.index, s.index.lanes
        if buf.scope == "image":
            raise TirError(f"{buf.name} is a read-only image: it cannot be stored to")
        value = s.value if s.value.dtype == buf.dtype else ir.Cast(buf.dtype, s.value)
        if n > 1 and n not in VEC:  # no vector type: lane by lane
            for k in range(n):
                self.store(ir.Store(buf, lane_expr(idx, k), lane_expr(value, k)))
            return
        v, p = self.splat(self.expr(value), n), self.ptr(buf)
        if buf.dtype == "bool":
            v = _V(
                f"(uchar)({bare(v.text)})" if n == 1 else f"convert_uchar{n}(-{v.text})", "uchar", n, "bool"
            )
        if n == 1:
            self.store1(buf, bare(self.expr(idx).text), bare(v.text))
        elif contiguous(idx):
            fn = f"vstore_half{n}" if self.half_io(buf) else f"vstore{n}"
            self.emit(f"{fn}({bare(v.text)}, 0, {p} + {self.expr(idx.base).text});")  # type: ignore[attr-defined]
        else:
            tmp = self.name("t")
            self.emit("{")
            self.emit(f"  const {vt(v.ctype, n)} {tmp} = {bare(v.text)};")
            for k in range(n):
                lane = f"{tmp}.s{'0123456789abcdef'[k]}"
                self.emit("  " + self.store1_text(buf, bare(self.expr(lane_expr(idx, k)).text), lane))
            self.emit("}")

    def store1(self, buf: ir.Buffer, index: str, value: str) -> None:
        self.emit(self.store1_text(buf, index, value))

    def store1_text(self, buf: ir.Buffer, index: str, value: str) -> str:
        p = self.ptr(buf)
        return f"vstore_half({value}, {index}, {p});" if self.half_io(buf) else f"{p}[{index}] = {value};"

    # ---- statements -------------------------------------------------------------------
    def stmt(self, s: ir.Stmt) -> None:
        if not self.in_gpu and self.launch and not isinstance(s, ir.Seq | ir.Allocate | ir.LetStmt | ir.If):
            return self.guarded(s)
        method = getattr(self, f"_s_{type(s).__name__}", None)
        if method is None:
            raise TirError(f"OpenCL codegen cannot render statement {type(s).__name__}")
        method(s)
        return None

    def guarded(self, s: ir.Stmt) -> None:
        """`s` at kernel level: runs only in the work-items whose ids it does not use are 0."""
        used = {n.thread for n in walk(s) if isinstance(n, ir.For) and n.thread}
        conds = [id_call(t) + " == 0" for t, ext in self.launch.items() if t not in used and ext > 1]
        self.in_gpu = True
        if conds:
            self.emit(f"if ({' && '.join(conds)}) {{")
            self.depth += 1
        self.stmt(s)
        if conds:
            self.depth -= 1
            self.emit("}")
        self.in_gpu = False

    def _s_Seq(self, s: ir.Seq) -> None:
        for x in s.stmts:
            self.stmt(x)

    def _s_Store(self, s: ir.Store) -> None:
        self.store(s)

    def _s_Barrier(self, s: ir.Barrier) -> None:
        fence = "CLK_LOCAL_MEM_FENCE" if s.scope == "shared" else "CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE"
        self.emit(f"barrier({fence});")

    def _s_LetStmt(self, s: ir.LetStmt) -> None:
        v = self.cast(self.expr(s.value), s.var.dtype)
        name = self.name(s.var.name)
        self.emit(f"const {vt(v.ctype, v.lanes)} {name} = {bare(v.text)};")
        self.bind(s.var, _V(name, v.ctype, v.lanes, v.dtype), s.body, self.is_nonneg(s.value))

    def bind(self, var: ir.Var, v: _V, body: ir.Stmt, nonneg: bool = False) -> None:
        old = self.env.get(var)
        self.env[var] = v
        if nonneg:
            self.nonneg.add(var)
        self.stmt(body)
        self.nonneg.discard(var)
        if old is None:
            del self.env[var]
        else:
            self.env[var] = old

    def _s_If(self, s: ir.If) -> None:
        c = self.to_bool(self.expr(s.cond))
        if c.lanes != 1:
            raise TirError("If needs a scalar condition (use Select for vector conditions)")
        self.emit(f"if ({bare(c.text)}) {{")
        self.block(s.then)
        if s.orelse is not None:
            self.emit("} else {")
            self.block(s.orelse)
        self.emit("}")

    def block(self, s: ir.Stmt) -> None:
        self.depth += 1
        self.stmt(s)
        self.depth -= 1

    def _s_Allocate(self, s: ir.Allocate) -> None:
        b, name = s.buffer, self.name(s.buffer.name)
        decl = f"{self.mem(b)} {name}[{max(b.size, 1)}];"
        if b.scope == "shared":
            self.shared.append("__local " + decl)
            self.shared_bytes += b.size * BYTES[self.mem(b)]
        else:
            self.emit(decl)
        self.bufs[b] = name
        self.stmt(s.body)
        del self.bufs[b]

    def _s_For(self, s: ir.For) -> None:
        if s.thread:
            name, ct = self.name(s.var.name), self.calc(s.var.dtype)
            ids = f"({ct}){id_call(s.thread)}"
            zero = isinstance(s.start, ir.Const) and s.start.value == 0
            self.emit(f"const {ct} {name} = {ids if zero else self.expr(s.start).text + ' + ' + ids};")
            short = int(s.extent.value) < self.launch[s.thread]  # a smaller nest beside a larger one
            if short:
                self.emit(f"if ({id_call(s.thread)} < {int(s.extent.value)}) {{")
                self.depth += 1
            self.bind(s.var, _V(name, ct, 1, s.var.dtype), s.body, self.is_nonneg(s.start))
            if short:
                self.depth -= 1
                self.emit("}")
            return None
        if s.kind is ir.ForKind.VECTORIZED:
            res = vectorize_loop(s)
            if not isinstance(res, ir.For):
                return self.stmt(res)
            s = res
        name, ct = self.name(s.var.name), self.calc(s.var.dtype)
        start = self.cast(self.expr(s.start), s.var.dtype)
        end = self.cast(self.expr(simplify(ir.BinOp("+", s.start, s.extent))), s.var.dtype)
        if s.kind is ir.ForKind.UNROLLED:
            self.emit("#pragma unroll")
        self.emit(f"for ({ct} {name} = {bare(start.text)}; {name} < {bare(end.text)}; ++{name}) {{")
        self.depth += 1
        self.bind(s.var, _V(name, ct, 1, s.var.dtype), s.body, self.is_nonneg(s.start))
        self.depth -= 1
        self.emit("}")
        return None

    # ---- the kernel -------------------------------------------------------------------
    def render(self) -> GpuKernel:
        kname = self.name(self.func.name)
        prologue: list[str] = []
        sig = [self.param(p, k, prologue) for k, p in enumerate(self.func.params)]
        if self.images:
            prologue.insert(0, "  " + SAMPLER_DECL)
        self.stmt(self.func.body)
        local, glob = geometry(self.launch)
        self.check(local)
        head = [f"// OpenCL C for loop function '{self.func.name}' (tensorir)"]
        dtypes = {n.dtype for n in walk(self.func.body) if isinstance(n, ir.Expr)}
        dtypes |= {p.dtype for p in self.func.params}
        if "float64" in dtypes:
            head.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        if "float16" in dtypes and self.fp16:
            head.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
        head += ["", *sorted(self.helpers.values()), ""] if self.helpers else [""]
        reqd = ", ".join(str(x) for x in (*local, 1, 1)[:3])
        head.append(f"__kernel __attribute__((reqd_work_group_size({reqd}))) void {kname}(")
        head.append(",\n".join("    " + x for x in sig) + ") {")
        body = prologue + ["  " + d for d in self.shared] + self.lines + ["}", ""]
        params = tuple((p.name, p.dtype) for p in self.func.params)
        return GpuKernel(kname, "\n".join(head + body), glob, local, params, tuple(self.images))

    def param(self, p: ir.Buffer | ir.Var, index: int, prologue: list[str]) -> str:
        """The declaration of parameter `p` in the signature (and its prologue lines)."""
        name = self.name(p.name)
        if isinstance(p, ir.Var):  # declared in its own width (what the caller passes)
            self.env[p] = _V(name, CTYPE[p.dtype] if p.dtype in CTYPE else self.calc(p.dtype), 1, p.dtype)
            return f"const {self.env[p].ctype} {name}"
        self.bufs[p] = name
        if p.scope == "image":
            self.images.append(image_param(p, index, self.profile))
            return f"__read_only image2d_t {name}"
        t = CTYPE[p.dtype]
        self.names |= {f"{name}_base", f"{name}_off"}
        prologue.append(
            f"  __global {t} *restrict {name} = (__global {t} *)((__global char *){name}_base + {name}_off);"
        )
        return f"__global {t} *{name}_base, const ulong {name}_off"

    def check(self, local: tuple[int, ...]) -> None:
        p = self.profile
        if p is None:
            return
        n = int(np.prod(local))
        if n > p.max_work_group_size or any(
            x > m for x, m in zip(local, p.max_work_item_sizes, strict=False)
        ):
            raise TirError(f"{self.func.name}: work-group {list(local)} exceeds {p.name}'s limits")
        if self.shared_bytes > p.local_mem_bytes:
            raise TirError(
                f"{self.func.name}: {self.shared_bytes} B of local memory, {p.name} has {p.local_mem_bytes}"
            )


def render_opencl(func: ir.LoopFunc, profile: DeviceProfile | None = None) -> GpuKernel:
    """OpenCL C for `func` and its launch geometry; checked against `profile`'s limits. Nests
    that read each other's scratch across work-groups become launches of their own
    (opencl_launches.py, GpuKernel.then)."""
    try:
        parts = [_Renderer(f, profile).render() for f in split_launches(func)]
    except TirError as e:
        raise TirError(f"kernel {func.name}: {e}") from e
    kernel = parts[0]
    if len(parts) > 1:
        source = join_sources([k.source for k in parts])
        then = tuple(Launch(k.name, k.global_size, k.local_size) for k in parts[1:])
        kernel = dataclasses.replace(kernel, source=source, then=then)
    dump_kernel(kernel)
    return kernel


def dump_kernel(kernel: GpuKernel) -> Path | None:
    """Write `kernel` to `$TIR_DUMP_DIR/opencl/<name>.cl` when TIR_DUMP_DIR is set."""
    d = config.dump_dir()
    if d is None:
        return None
    path = d / "opencl" / f"{kernel.name}.cl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(kernel.source)
    return path
