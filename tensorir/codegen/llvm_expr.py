"""Loop-IR expressions -> LLVM IR instructions (scalars and vectors).

Float arithmetic carries `contract reassoc nsz`: a*b+c fuses into fma, reductions may
be reordered and vectorized; NaN and infinity are kept (no `nnan`/`ninf`), and divisions
stay exact (no `arcp`). Narrow storage types (bfloat16, float8, int4, ...) are converted to
their compute type (float32, int8 / uint8) for every operation but loads, stores, selects
and copies, and back after (codegen/llvm_narrow.py). Integer "/" truncates, "//" and "%"
are floor division/modulo (Python semantics); unsigned types use unsigned operations.
min/max on floats are `a < b ? a : b` (x86 minps/maxps semantics: a NaN in the second
operand wins).
"""

from __future__ import annotations

from tensorir.codegen import vmath
from tensorir.codegen.llvm_builder import Val
from tensorir.codegen.llvm_dot import emit_dot4, is_dot4
from tensorir.codegen.llvm_narrow import NarrowEmitter
from tensorir.codegen.llvm_types import (
    const,
    dtype_bits,
    elem_bytes,
    is_bool,
    is_float,
    is_narrow,
    is_signed,
    llvm_ty,
    mem_ty,
    scalar_ty,
    vec,
)
from tensorir.errors import TirError
from tensorir.loop import ir

FMF = "contract reassoc nsz"
_FLOAT_OPS = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv"}
_INT_OPS = {"+": "add", "-": "sub", "*": "mul", "and": "and", "or": "or", "xor": "xor", "shl": "shl"}
_FCMP = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}
_ICMP = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


def _ty(v: Val) -> str:
    return llvm_ty(v.dtype, v.lanes)


def _isfx(dtype: str, lanes: int) -> str:
    """Intrinsic type suffix: f32, v16f32, i64, v4i1, f16 (i16 for bfloat16's register)."""
    s = scalar_ty(dtype)
    s = {"half": "f16", "float": "f32", "double": "f64"}.get(s, s)
    return s if lanes == 1 else f"v{lanes}{s}"


MAX_LOAD_STRIDE = 4  # wider strides: the masked load reads more lanes than a gather's
STRIDED_LOAD_DTYPES = ("float32", "float64", "float16", "int32", "int64")


class ExprEmitter(NarrowEmitter):
    """Expression lowering; `env` maps Vars and `bufs` maps Buffers to emitted values."""

    def init_scope(self) -> None:
        self.env: dict[ir.Var, Val] = {}
        self.bufs: dict[ir.Buffer, str] = {}
        self.buf_align: dict[ir.Buffer, int] = {}

    # ---- helpers --------------------------------------------------------------------
    def splat(self, v: Val, lanes: int) -> Val:
        if v.lanes == lanes:
            return v
        if v.lanes != 1:
            raise TirError(f"cannot combine a {v.lanes}-lane and a {lanes}-lane vector")
        sty, vty = llvm_ty(v.dtype), llvm_ty(v.dtype, lanes)
        if not v.ref.startswith("%"):
            return Val(f"splat ({sty} {v.ref})", v.dtype, lanes)
        ins = self.op(f"insertelement {vty} poison, {sty} {v.ref}, i64 0")
        shuf = self.op(f"shufflevector {vty} {ins}, {vty} poison, {vec('i32', lanes)} zeroinitializer")
        return Val(shuf, v.dtype, lanes)

    def intrinsic(self, name: str, ret_dtype: str, args: list[Val]) -> Val:
        lanes = max(a.lanes for a in args)
        args = [self.splat(a, lanes) for a in args]
        rty = llvm_ty(ret_dtype, lanes)
        full = f"llvm.{name}.{_isfx(args[0].dtype, lanes)}"
        self.ctx.intrinsic(full, rty, [_ty(a) for a in args])
        ref = self.op(f"call {rty} @{full}({', '.join(f'{_ty(a)} {a.ref}' for a in args)})")
        return Val(ref, ret_dtype, lanes)

    def cast(self, v: Val, dtype: str) -> Val:
        src, dst = v.dtype, dtype
        if src == dst:
            return v
        if is_narrow(src) or is_narrow(dst):
            return self._narrow_cast(v, dst)
        if {src, dst} == {"float16", "float64"}:  # through float32: no compiler-rt call
            mid = self.f64_to_f32_odd(v) if src == "float64" else self.cast(v, "float32")
            return self.cast(mid, dst)
        sty, dty = _ty(v), llvm_ty(dst, v.lanes)
        if is_bool(dst):
            zero = const(0, src, v.lanes)
            pred = "fcmp une" if is_float(src) else "icmp ne"
            return Val(self.op(f"{pred} {sty} {v.ref}, {zero}"), dst, v.lanes)
        sb, db = dtype_bits(src), dtype_bits(dst)
        if is_float(src) and is_float(dst):
            op = "fpext" if db > sb else "fptrunc"
        elif is_float(src):
            op = "fptosi" if is_signed(dst) else "fptoui"
        elif is_float(dst):
            op = "sitofp" if is_signed(src) else "uitofp"
        else:
            sb = 1 if is_bool(src) else sb
            if sb == db:
                return Val(v.ref, dst, v.lanes)
            op = "trunc" if db < sb else ("sext" if is_signed(src) else "zext")
        return Val(self.op(f"{op} {sty} {v.ref} to {dty}"), dst, v.lanes)

    def _narrow_cast(self, v: Val, dst: str) -> Val:
        if is_narrow(v.dtype):
            v = self.narrow_to_wide(v)
            if not is_narrow(dst):
                return self.cast(v, dst)
        if is_float(dst):
            return self.wide_to_narrow(self.cast(v, "float32"), dst)  # float64 too, as ml_dtypes
        if is_float(v.dtype):
            v = self.cast(v, "int32")  # then wrapped, as numpy / ml_dtypes do
        return self.wrap_small_int(self.cast(v, "int8" if is_signed(dst) else "uint8"), dst)

    def widen(self, v: Val) -> Val:
        return self.narrow_to_wide(v) if is_narrow(v.dtype) else v

    # ---- dispatch -------------------------------------------------------------------
    def expr(self, e: ir.Expr) -> Val:
        method = getattr(self, f"_e_{type(e).__name__}", None)
        if method is None:
            raise TirError(f"LLVM codegen cannot lower expression {type(e).__name__}")
        return method(e)

    def _e_Var(self, e: ir.Var) -> Val:
        if e not in self.env:
            raise TirError(f"variable {e.name!r} ({e.dtype}) is used but never bound")
        return self.env[e]

    def _e_Const(self, e: ir.Const) -> Val:
        return Val(const(e.value, e.dtype), e.dtype)

    def _e_Broadcast(self, e: ir.Broadcast) -> Val:
        lane = self._lane_splat(e)
        return lane if lane is not None else self.splat(self.expr(e.value), e.count)

    def _lane_splat(self, e: ir.Broadcast) -> Val | None:
        """AArch64: a broadcast of buf[q*L + k] (L lanes fill a register, L | buf.size) as
        lane k of the vector load buf[q*L : q*L + L]: the loads of k = 0..L-1 merge into
        one and the splats become fmla by element (`fmla v.4s, v.4s, v.s[k]`; float16: .8h, h[k])."""
        from tensorir.loop.arith import to_linear

        v, n = e.value, e.count
        if self.ctx.target.arch != "aarch64" or not isinstance(v, ir.Load) or v.lanes != 1:
            return None
        buf = v.buffer
        bits = {"float32": 32, "float16": 16}.get(buf.dtype)
        if bits is None or n * bits != self.ctx.target.vector_bits or buf.size % n:
            return None
        terms, c = to_linear(v.index)
        if any(k % n for k in terms.values()):
            return None
        base = ir.BinOp("+", v.index, ir.Const(-(c % n), v.index.dtype)) if c % n else v.index
        vv = self._e_Load(ir.Load(buf, ir.Ramp(base, ir.Const(1, v.index.dtype), n)))
        mask = f"<{n} x i32> <{', '.join([f'i32 {c % n}'] * n)}>"
        ty = _ty(vv)
        return Val(self.op(f"shufflevector {ty} {vv.ref}, {ty} poison, {mask}"), v.dtype, n)

    def _e_Ramp(self, e: ir.Ramp) -> Val:
        base = self.splat(self.expr(e.base), e.count)
        stride = self.expr(e.stride)
        if is_float(e.dtype):
            raise TirError("Ramp must have an integer base")
        lanes = [const(i, e.dtype) for i in range(e.count)]
        offs = "<" + ", ".join(f"{llvm_ty(e.dtype)} {x}" for x in lanes) + ">"
        step = self.binop("*", Val(offs, e.dtype, e.count), self.splat(stride, e.count))
        return self.binop("+", base, step)

    def _e_BinOp(self, e: ir.BinOp) -> Val:
        if e.op == "+" and (is_dot4(e.a) or is_dot4(e.b)):  # acc + dot4: one vpdpbusd (llvm_dot.py)
            acc, dot = (e.b, e.a) if is_dot4(e.a) else (e.a, e.b)
            return emit_dot4(self, dot, self.expr(acc))
        return self.binop(e.op, self.expr(e.a), self.expr(e.b))

    def _e_Cmp(self, e: ir.Cmp) -> Val:
        a, b = self.widen(self.expr(e.a)), self.widen(self.expr(e.b))
        lanes = max(a.lanes, b.lanes)
        a, b = self.splat(a, lanes), self.splat(b, lanes)
        if a.dtype != b.dtype:
            raise TirError(f"comparison of {a.dtype} with {b.dtype}: insert a Cast")
        if is_float(a.dtype):
            pred = f"fcmp {_FCMP[e.op]}"
        else:
            sign = "" if e.op in ("==", "!=") else ("s" if is_signed(a.dtype) else "u")
            pred = f"icmp {sign}{_ICMP[e.op]}"
        return Val(self.op(f"{pred} {_ty(a)} {a.ref}, {b.ref}"), "bool", lanes)

    def _e_Not(self, e: ir.Not) -> Val:
        a = self.cast(self.expr(e.a), "bool")
        return Val(self.op(f"xor {_ty(a)} {a.ref}, {const(True, 'bool', a.lanes)}"), "bool", a.lanes)

    def _e_Select(self, e: ir.Select) -> Val:
        c, a, b = self.cast(self.expr(e.cond), "bool"), self.expr(e.a), self.expr(e.b)
        return self.select(c, a, b)

    def select(self, c: Val, a: Val, b: Val) -> Val:
        lanes = max(c.lanes, a.lanes, b.lanes)
        a, b = self.splat(a, lanes), self.splat(b, lanes)
        if c.lanes != 1:
            c = self.splat(c, lanes)
        return Val(self.op(f"select {_ty(c)} {c.ref}, {_ty(a)} {a.ref}, {_ty(b)} {b.ref}"), a.dtype, lanes)

    def _e_Cast(self, e: ir.Cast) -> Val:
        return self.cast(self.expr(e.value), e.dtype)

    # ---- arithmetic -----------------------------------------------------------------
    def binop(self, op: str, a: Val, b: Val) -> Val:
        lanes = max(a.lanes, b.lanes)
        a, b = self.splat(a, lanes), self.splat(b, lanes)
        if a.dtype != b.dtype:
            raise TirError(f"binary {op!r} of {a.dtype} with {b.dtype}: insert a Cast")
        if is_narrow(a.dtype):
            return self.cast(self.binop(op, self.widen(a), self.widen(b)), a.dtype)
        dt, ty = a.dtype, _ty(a)
        if op in ("min", "max"):
            return self._minmax(op, a, b)
        if is_float(dt):
            if op in _FLOAT_OPS:
                return Val(self.op(f"{_FLOAT_OPS[op]} {FMF} {ty} {a.ref}, {b.ref}"), dt, lanes)
            if op in ("//", "%"):
                q = self.intrinsic("floor", dt, [self.binop("/", a, b)])
                return q if op == "//" else self.binop("-", a, self.binop("*", q, b))
        elif op in _INT_OPS:
            return Val(self.op(f"{_INT_OPS[op]} {ty} {a.ref}, {b.ref}"), dt, lanes)
        elif op == "shr":
            return Val(self.op(f"{'ashr' if is_signed(dt) else 'lshr'} {ty} {a.ref}, {b.ref}"), dt, lanes)
        elif op in ("/", "//", "%"):
            return self._int_div(op, a, b)
        raise TirError(f"binary operator {op!r} is not defined for {dt}")

    def _minmax(self, op: str, a: Val, b: Val) -> Val:
        if not is_float(a.dtype):
            s = "u" if not is_signed(a.dtype) else "s"
            return self.intrinsic(f"{s}{op}", a.dtype, [a, b])
        pred = "olt" if op == "min" else "ogt"
        c = Val(self.op(f"fcmp {FMF} {pred} {_ty(a)} {a.ref}, {b.ref}"), "bool", a.lanes)
        return self.select(c, a, b)

    def _int_div(self, op: str, a: Val, b: Val) -> Val:
        ty, dt, lanes = _ty(a), a.dtype, a.lanes
        if not is_signed(dt):
            name = "udiv" if op in ("/", "//") else "urem"
            return Val(self.op(f"{name} {ty} {a.ref}, {b.ref}"), dt, lanes)
        q = Val(self.op(f"sdiv {ty} {a.ref}, {b.ref}"), dt, lanes)
        r = Val(self.op(f"srem {ty} {a.ref}, {b.ref}"), dt, lanes)
        if op == "/":
            return q
        # floor semantics: adjust when the remainder is nonzero and its sign differs from b
        zero = const(0, dt, lanes)
        nz = self.op(f"icmp ne {ty} {r.ref}, {zero}")
        diff = self.op(f"xor {ty} {r.ref}, {b.ref}")
        neg = self.op(f"icmp slt {ty} {diff}, {zero}")
        fix = Val(self.op(f"and {vec('i1', lanes)} {nz}, {neg}"), "bool", lanes)
        if op == "//":
            return Val(self.op(f"sub {ty} {q.ref}, {self.cast(fix, dt).ref}"), dt, lanes)
        return self.select(fix, self.binop("+", r, b), r)

    # ---- calls ----------------------------------------------------------------------
    def _e_Call(self, e: ir.Call) -> Val:
        if is_dot4(e):
            return emit_dot4(self, e, None)
        if e.name.startswith("e8m0_"):
            flag = e.args[1].value if isinstance(e.args[1], ir.Broadcast) else e.args[1]
            if not isinstance(flag, ir.Const):
                raise TirError(f"{e.name}: the saturate argument must be a constant")
            v = self.cast(self.expr(e.args[0]), "float32")
            return self.to_e8m0(v, e.name.removeprefix("e8m0_"), bool(flag.value))
        if e.name == "bitcast":
            v = self.expr(e.args[0])
            if scalar_ty(v.dtype) == "i1" or scalar_ty(e.dtype) == "i1":
                raise TirError(f"bitcast of {v.dtype} to {e.dtype}: bool has no bits to reinterpret")
            to = llvm_ty(e.dtype, v.lanes)
            return Val(self.op(f"bitcast {_ty(v)} {v.ref} to {to}"), e.dtype, v.lanes)
        args = [self.expr(a) for a in e.args]
        lanes = max(a.lanes for a in args)
        args = [self.splat(a, lanes) for a in args]
        return self.call_math(e.name, args)

    def call_math(self, name: str, args: list[Val]) -> Val:
        dt = args[0].dtype
        if is_narrow(dt):
            return self.cast(self.call_math(name, [self.widen(a) for a in args]), dt)
        if name == "abs":
            if is_float(dt):
                return self.intrinsic("fabs", dt, args)
            if not is_signed(dt):
                return args[0]
            a, full = args[0], f"llvm.abs.{_isfx(dt, args[0].lanes)}"  # i1 false: a scalar immarg
            self.ctx.intrinsic(full, _ty(a), [_ty(a), "i1"])
            return Val(self.op(f"call {_ty(a)} @{full}({_ty(a)} {a.ref}, i1 false)"), dt, a.lanes)
        if not is_float(dt):
            raise TirError(f"math function {name!r} needs float arguments, got {dt}")
        if dt == "float16":  # compute in float32, round once
            r = self.call_math(name, [self.cast(a, "float32") for a in args])
            return self.cast(r, "float16")
        simple = {"sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "round": "roundeven"}
        if name in simple:
            return self.intrinsic(simple[name], dt, args)
        if name == "fma":
            fused = "fma" if self.ctx.target.has_feature("fma") else "fmuladd"
            return self.intrinsic(fused, dt, args)
        if name == "rsqrt":
            one = Val(const(1.0, dt), dt)
            return self.binop("/", one, self.intrinsic("sqrt", dt, args))
        if name in ("exp", "log", "tanh", "erf", "sigmoid", "sin", "cos", "pow"):
            fn = vmath.vmath_function(self.ctx, name, dt, args[0].lanes)
            ty = _ty(args[0])
            ref = self.op(f"call {ty} {fn}({', '.join(f'{ty} {a.ref}' for a in args)})")
            return Val(ref, dt, args[0].lanes)
        raise TirError(f"unknown math function {name!r}; known: {', '.join(ir.INTRINSICS)}")

    # ---- memory ---------------------------------------------------------------------
    def buffer_ptr(self, buf: ir.Buffer) -> str:
        if buf not in self.bufs:
            raise TirError(f"buffer {buf.name!r} is neither a parameter nor allocated here")
        return self.bufs[buf]

    def address(self, buf: ir.Buffer, index: Val) -> str:
        ity = llvm_ty(index.dtype, index.lanes)
        return self.op(
            f"getelementptr inbounds {mem_ty(buf.dtype)}, ptr {self.buffer_ptr(buf)}, {ity} {index.ref}"
        )

    def _contiguous_base(self, index: ir.Expr) -> ir.Expr | None:
        if isinstance(index, ir.Ramp) and isinstance(index.stride, ir.Const) and index.stride.value == 1:
            return index.base
        return None

    def _strided_load(self, buf: ir.Buffer, index: ir.Expr) -> str | None:
        """A ramp of a small constant stride s (2 to MAX_LOAD_STRIDE: a strided slice, YOLO's
        Focus): one masked load of lanes x s elements from the base, every s-th kept by a
        shufflevector (vpermt2ps on AVX-512), instead of a gather (a load per lane). The mask
        ends at the last element the ramp reads, so nothing past it is touched. AVX-512 only:
        elsewhere a masked load is scalarized, one load per element of the wide vector."""
        if not (isinstance(index, ir.Ramp) and isinstance(index.stride, ir.Const) and index.base.lanes == 1):
            return None
        if not self.ctx.target.has_feature("avx512f"):
            return None
        stride, lanes = int(index.stride.value), index.lanes
        if not 2 <= stride <= MAX_LOAD_STRIDE or buf.dtype not in STRIDED_LOAD_DTYPES:
            return None
        n, mty, align = lanes * stride, mem_ty(buf.dtype), elem_bytes(buf.dtype)
        vty, mask_ty = vec(mty, n), vec("i1", n)
        mask = (
            "<" + ", ".join(f"i1 {'true' if k <= (lanes - 1) * stride else 'false'}" for k in range(n)) + ">"
        )
        name = f"llvm.masked.load.{_isfx(buf.dtype, n)}.p0"
        self.ctx.intrinsic(name, vty, ["ptr", "i32", mask_ty, vty])
        p = self.address(buf, self.expr(index.base))
        wide = self.op(f"call {vty} @{name}(ptr {p}, i32 {align}, {mask_ty} {mask}, {vty} poison)")
        pick = "<" + ", ".join(f"i32 {k * stride}" for k in range(lanes)) + ">"
        return self.op(f"shufflevector {vty} {wide}, {vty} poison, {vec('i32', lanes)} {pick}")

    def _e_Load(self, e: ir.Load) -> Val:
        buf, lanes = e.buffer, e.index.lanes
        mty, align = mem_ty(buf.dtype), elem_bytes(buf.dtype)
        base = self._contiguous_base(e.index)
        if lanes == 1 or base is not None:
            p = self.address(buf, self.expr(e.index if lanes == 1 else base))
            raw = Val(self.op(f"load {vec(mty, lanes)}, ptr {p}, align {align}"), buf.dtype, lanes)
        elif isinstance(e.index, ir.Broadcast):
            return self.splat(self._e_Load(ir.Load(buf, e.index.value)), lanes)
        elif (strided := self._strided_load(buf, e.index)) is not None:
            raw = Val(strided, buf.dtype, lanes)
        else:
            raw = Val(self._masked("gather", buf, self.expr(e.index)), buf.dtype, lanes)
        if is_bool(buf.dtype):
            ref = self.op(f"icmp ne {vec('i8', lanes)} {raw.ref}, {const(0, 'int8', lanes)}")
            return Val(ref, "bool", lanes)
        if is_narrow(buf.dtype) and not is_float(buf.dtype):  # a small int: only its low bits
            return self.wrap_small_int(raw, buf.dtype)
        return raw

    def store(self, buf: ir.Buffer, index: ir.Expr, value: ir.Expr) -> None:
        lanes = index.lanes
        folded = self._scalar_minmax_fold(buf, index, value)
        v = self.splat(self.cast(folded if folded is not None else self.expr(value), buf.dtype), lanes)
        if v.lanes != lanes:
            raise TirError(f"store of a {v.lanes}-lane value to {lanes} elements of {buf.name!r}")
        mty, align = mem_ty(buf.dtype), elem_bytes(buf.dtype)
        ref = self.store_bits(v)
        if is_bool(buf.dtype):
            ref = self.op(f"zext {vec('i1', lanes)} {ref} to {vec('i8', lanes)}")
        base = self._contiguous_base(index)
        if lanes == 1 or base is not None:
            p = self.address(buf, self.expr(index if lanes == 1 else base))
            self.emit(f"store {vec(mty, lanes)} {ref}, ptr {p}, align {align}")
            return
        self._masked("scatter", buf, self.expr(index), ref)

    def _scalar_minmax_fold(self, buf: ir.Buffer, index: ir.Expr, value: ir.Expr) -> Val | None:
        """`a[i] = max(a[i], x)` on one float element (a row's max or min, as softmax's):
        llvm.maximum / minimum, which LLVM's loop vectorizer turns into vector lanes and a
        final vector.reduce; the fcmp + select form it leaves a serial scalar chain (it needs
        nnan for that). The intrinsics propagate NaN, as the numpy reference's max does.
        Vector stores keep the select (one vmaxps: pooling, the conv epilogues' clamps)."""
        if index.lanes != 1 or buf.dtype not in ("float32", "float64"):
            return None
        if not (isinstance(value, ir.BinOp) and value.op in ("min", "max")):
            return None
        acc = ir.Load(buf, index)
        other = value.b if value.a == acc else value.a if value.b == acc else None
        if other is None or other.dtype != buf.dtype or other.lanes != 1:
            return None
        name = "maximum" if value.op == "max" else "minimum"
        return self.intrinsic(name, buf.dtype, [self.expr(acc), self.expr(other)])

    def _masked(self, kind: str, buf: ir.Buffer, index: Val, value: str | None = None) -> str:
        """llvm.masked.gather / scatter over all lanes (non-contiguous vector access)."""
        lanes, align = index.lanes, elem_bytes(buf.dtype)
        ptrs = self.address(buf, index)
        vty, pty, mty = vec(mem_ty(buf.dtype), lanes), vec("ptr", lanes), vec("i1", lanes)
        mask = const(True, "bool", lanes)
        name = f"llvm.masked.{kind}.{_isfx('int8' if is_bool(buf.dtype) else buf.dtype, lanes)}.v{lanes}p0"
        if kind == "gather":
            self.ctx.intrinsic(name, vty, [pty, "i32", mty, vty])
            return self.op(f"call {vty} @{name}({pty} {ptrs}, i32 {align}, {mty} {mask}, {vty} poison)")
        self.ctx.intrinsic(name, "void", [vty, pty, "i32", mty])
        self.emit(f"call void @{name}({vty} {value}, {pty} {ptrs}, i32 {align}, {mty} {mask})")
        return ""
