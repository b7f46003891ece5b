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

Vectors: a Ramp-stride-1 store of 2, 3, 4, 8 or 16 lanes is `vstoreN`; other vector stores
are scatters, and stores of other lane counts are expanded lane by lane. Expressions (C types,
loads, gathers, operator semantics) are rendered by codegen/opencl_expr.py.
TIR_DUMP_DIR writes each kernel to `<dir>/opencl/<name>.cl`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from tensorir import config
from tensorir.codegen.opencl_c import (
    BYTES,
    CTYPE,
    VEC,
    bare,
    contiguous,
    geometry,
    id_call,
    lane_expr,
    launch_extents,
    vt,
)
from tensorir.codegen.opencl_expr import CExpr, ExprRenderer
from tensorir.codegen.opencl_image import SAMPLER_DECL, image_param
from tensorir.codegen.opencl_launches import join_sources, split_launches
from tensorir.devices import DeviceProfile
from tensorir.errors import TirError
from tensorir.loop import ir
from tensorir.loop.passes import vectorize_loop
from tensorir.loop.simplify import simplify
from tensorir.loop.visitor import walk
from tensorir.plan import GpuKernel, ImageParam, Launch


class _Renderer(ExprRenderer):
    """Renders `func` as one `__kernel`: statements (`lines`, indented `depth`), local memory
    (`shared`) and the launch geometry of its GPU loops (`launch`)."""

    def __init__(self, func: ir.LoopFunc, profile: DeviceProfile | None) -> None:
        self.lines: list[str] = []
        self.depth = 1
        self.shared: list[str] = []
        self.shared_bytes = 0
        self.in_gpu = False
        self.launch = launch_extents(func)
        super().__init__(func, profile)
        self.images: list[ImageParam] = []

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    # ---- memory -----------------------------------------------------------------------
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
            v = CExpr(
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

    def _s_Prefetch(self, s: ir.Prefetch) -> None:
        pass  # a CPU cache hint: GPU kernels read through their own caches

    def _s_Barrier(self, s: ir.Barrier) -> None:
        fence = "CLK_LOCAL_MEM_FENCE" if s.scope == "shared" else "CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE"
        self.emit(f"barrier({fence});")

    def _s_LetStmt(self, s: ir.LetStmt) -> None:
        v = self.cast(self.expr(s.value), s.var.dtype)
        name = self.name(s.var.name)
        self.emit(f"const {vt(v.ctype, v.lanes)} {name} = {bare(v.text)};")
        self.bind(s.var, CExpr(name, v.ctype, v.lanes, v.dtype), s.body, self.is_nonneg(s.value))

    def bind(self, var: ir.Var, v: CExpr, body: ir.Stmt, nonneg: bool = False) -> None:
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
            self.bind(s.var, CExpr(name, ct, 1, s.var.dtype), s.body, self.is_nonneg(s.start))
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
        self.bind(s.var, CExpr(name, ct, 1, s.var.dtype), s.body, self.is_nonneg(s.start))
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
            self.env[p] = CExpr(name, CTYPE[p.dtype] if p.dtype in CTYPE else self.calc(p.dtype), 1, p.dtype)
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
