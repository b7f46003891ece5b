"""LoopFunc -> LLVM IR module -> optimized module, object file or assembly.

Calling convention of a generated kernel (C ABI, one exported symbol per LoopFunc):

    void <name>(T0 *p0, T1 *p1, ..., <scalar params by value>)

in `LoopFunc.params` order: a Buffer is a pointer to its first element (`noalias`,
`dereferenceable(size)`, `align` = element size or `attrs["align"]` bytes when the caller
guarantees more); a Var is passed by value (int64_t, int32_t, float, double ...). bool
buffers hold one byte per element. Nothing is returned; nothing is allocated on the heap.

Loops: SERIAL as plain loops, UNROLLED with `llvm.loop.unroll.full`, VECTORIZED with
`llvm.loop.vectorize.enable`, PARALLEL outlined into `<name>_par_body` (the body over a
chunk [lo, hi), its buffers as noalias parameters, inlined into a closure wrapper
`void (ptr closure, i64 lo, i64 hi)`) and launched with `tir_parallel_for` (parallel.py).
A PARALLEL loop inside another one runs serially in its thread.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence

import llvmlite.binding as llvm

from tensorir import config
from tensorir.codegen.llvm_builder import ModuleContext, Val
from tensorir.codegen.llvm_expr import ExprEmitter
from tensorir.codegen.llvm_init import init_llvm
from tensorir.codegen.llvm_types import elem_bytes, is_signed, llvm_ty, mem_ty
from tensorir.codegen.llvm_walk import Usage, usage
from tensorir.errors import TirError
from tensorir.loop import ir
from tensorir.target import Target, get_target

LLVM_LOCK = threading.RLock()  # llvmlite parses into LLVM's global context: one user at a time
MAX_STACK_BYTES = 4 << 20  # local buffers live on the stack (workers get 8 MiB stacks)
_LOOP_HINTS = {
    ir.ForKind.UNROLLED: ['!"llvm.loop.unroll.full"'],
    ir.ForKind.VECTORIZED: ['!"llvm.loop.vectorize.enable", i1 true'],
}


def symbol_name(name: str) -> str:
    """A C identifier for a kernel name."""
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else f"_{s}"


class FuncEmitter(ExprEmitter):
    """Statement lowering for one function."""

    def __init__(self, ctx: ModuleContext, name: str, in_parallel: bool):
        super().__init__(ctx)
        self.init_scope()
        self.name = name
        self.in_parallel = in_parallel
        self.stack_bytes = 0

    def stmt(self, s: ir.Stmt) -> None:
        method = getattr(self, f"_s_{type(s).__name__}", None)
        if method is None:
            raise TirError(f"LLVM codegen cannot lower statement {type(s).__name__}")
        method(s)

    def _s_Seq(self, s: ir.Seq) -> None:
        for x in s.stmts:
            self.stmt(x)

    def _s_Store(self, s: ir.Store) -> None:
        self.store(s.buffer, s.index, s.value)

    def _s_Prefetch(self, s: ir.Prefetch) -> None:
        """llvm.prefetch(ptr, read, locality 2, data): into L2 (x86 prefetcht1, AArch64
        prfm pldl2keep), where a kernel keeps the weights it streams."""
        p = self.address(s.buffer, self.expr(s.index))
        self.ctx.intrinsic("llvm.prefetch.p0", "void", ["ptr", "i32", "i32", "i32"])
        self.emit(f"call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 2, i32 1)")

    def _s_LetStmt(self, s: ir.LetStmt) -> None:
        v = self.cast(self.expr(s.value), s.var.dtype)
        old = self.env.get(s.var)
        self.env[s.var] = v
        self.stmt(s.body)
        self._restore(s.var, old)

    def _restore(self, var: ir.Var, old: Val | None) -> None:
        if old is None:
            del self.env[var]
        else:
            self.env[var] = old

    def _s_If(self, s: ir.If) -> None:
        c = self.cast(self.expr(s.cond), "bool")
        if c.lanes != 1:
            raise TirError("If needs a scalar condition (use Select for vector conditions)")
        then, orelse, done = self.label("then"), self.label("else"), self.label("endif")
        self.cbr(c.ref, then, orelse if s.orelse is not None else done)
        self.start_block(then)
        self.stmt(s.then)
        self.br(done)
        if s.orelse is not None:
            self.start_block(orelse)
            self.stmt(s.orelse)
            self.br(done)
        self.start_block(done)

    def _s_Allocate(self, s: ir.Allocate) -> None:
        nbytes = s.buffer.size * elem_bytes(s.buffer.dtype)
        self.stack_bytes += nbytes
        if self.stack_bytes > MAX_STACK_BYTES:
            raise TirError(
                f"local buffers of {self.name!r} need {self.stack_bytes} bytes of stack (limit "
                f"{MAX_STACK_BYTES}); make {s.buffer.name!r} a workspace parameter instead"
            )
        self.bufs[s.buffer] = self.alloca(f"[{s.buffer.size} x {mem_ty(s.buffer.dtype)}]", 64)
        self.stmt(s.body)
        del self.bufs[s.buffer]

    def _s_For(self, s: ir.For) -> None:
        if s.kind in (ir.ForKind.GPU_BLOCK, ir.ForKind.GPU_THREAD):
            raise TirError(
                f"loop {s.var.name!r} is bound to a GPU axis ({s.kind.value}); CPU targets cannot run it"
            )
        start = self.cast(self.expr(s.start), s.var.dtype)
        end = self.binop("+", start, self.cast(self.expr(s.extent), s.var.dtype))
        if s.kind == ir.ForKind.PARALLEL and not self.in_parallel:
            self._parallel(s, start, end)
            return
        self.loop(s.var, start, end, s.body, _LOOP_HINTS.get(s.kind, []))

    def loop(self, var: ir.Var, start: Val, end: Val, body: ir.Stmt, hints: list[str]) -> None:
        ty = llvm_ty(var.dtype)
        pre = self.block
        hdr, blk, latch, done = (self.label(p) for p in ("loop", "body", "latch", "endloop"))
        iv, nxt = self.tmp(), self.tmp()
        self.br(hdr)
        self.start_block(hdr)
        self.emit(f"{iv} = phi {ty} [{start.ref}, %{pre}], [{nxt}, %{latch}]")
        cmp = "slt" if is_signed(var.dtype) else "ult"
        self.cbr(self.op(f"icmp {cmp} {ty} {iv}, {end.ref}"), blk, done)
        self.start_block(blk)
        old = self.env.get(var)
        self.env[var] = Val(iv, var.dtype)
        self.stmt(body)
        self._restore(var, old)
        self.br(latch)
        self.start_block(latch)
        self.emit(f"{nxt} = add nsw {ty} {iv}, 1")
        md = f", !llvm.loop {self.ctx.loop_md(hints)}" if hints else ""
        self.br(hdr, md)
        self.start_block(done)

    def _parallel(self, s: ir.For, start: Val, end: Val) -> None:
        from tensorir.codegen.parallel import PARALLEL_FOR, declare_parallel_for

        u = usage(s.body)
        scalars = [v for v in u.free_vars if v != s.var]
        bufs = u.buffers
        lo, hi = ir.Var("__lo", "int64"), ir.Var("__hi", "int64")
        lo_c = lo if s.var.dtype == "int64" else ir.Cast(s.var.dtype, lo)
        ext = ir.BinOp("-", hi, lo)
        inner = ir.For(
            s.var,
            lo_c,
            ext if s.var.dtype == "int64" else ir.Cast(s.var.dtype, ext),
            ir.ForKind.SERIAL,
            s.body,
        )
        body_name = self.ctx.unique_symbol(f"{self.name}_par_body")
        emit_function(self.ctx, body_name, [*bufs, *scalars, lo, hi], inner, internal=True, in_parallel=True)
        slots = [("ptr", self.bufs[b]) for b in bufs] + [(llvm_ty(v.dtype), self.env[v].ref) for v in scalars]
        wrapper = _closure_wrapper(self.ctx, body_name, slots)
        n = max(1, len(slots))
        cl = self.alloca(f"[{n} x i64]", 8)
        for k, (ty, ref) in enumerate(slots):
            p = self.op(f"getelementptr inbounds [{n} x i64], ptr {cl}, i64 0, i64 {k}")
            self.emit(f"store {ty} {ref}, ptr {p}, align 8")
        declare_parallel_for(self.ctx)
        b, e = (self.cast(v, "int64").ref for v in (start, end))
        self.emit(f"call void @{PARALLEL_FOR}(ptr @{wrapper}, ptr {cl}, i64 {b}, i64 {e})")


def _closure_wrapper(ctx: ModuleContext, body: str, slots: list[tuple[str, str]]) -> str:
    """`void <body>_closure(ptr cl, i64 lo, i64 hi)`: unpack the closure, call the body."""
    name = ctx.unique_symbol(f"{body}_closure")
    n = max(1, len(slots))
    lines, args = [], []
    for k, (ty, _) in enumerate(slots):
        lines.append(f"  %p{k} = getelementptr inbounds [{n} x i64], ptr %cl, i64 0, i64 {k}")
        lines.append(f"  %v{k} = load {ty}, ptr %p{k}, align 8")
        args.append(f"{ty} %v{k}")
    args += ["i64 %lo", "i64 %hi"]
    lines.append(f"  call void @{body}({', '.join(args)})")
    head = f"define internal void @{name}(ptr %cl, i64 %lo, i64 %hi) {ctx.fn_attrs()} {{"
    ctx.functions.append("\n".join([head, "entry:", *lines, "  ret void", "}", ""]))
    return name


def _param_decl(
    fe: FuncEmitter, p: ir.Buffer | ir.Var, k: int, u: Usage, align: int | None, capture: bool
) -> str:
    pname = f"%arg{k}.{symbol_name(p.name)}"
    if isinstance(p, ir.Var):
        fe.env[p] = Val(pname, p.dtype)
        return f"{llvm_ty(p.dtype)} {pname}"
    fe.bufs[p] = pname
    attrs = ["noalias"]
    if not capture:
        attrs.append("nocapture")
    if p not in u.stored:
        attrs.append("readonly")
    elif p not in u.loaded:
        attrs.append("writeonly")
    attrs.append(f"align {max(align or 1, elem_bytes(p.dtype))}")
    if p.size > 0:
        attrs.append(f"dereferenceable({p.size * elem_bytes(p.dtype)})")
    return f"ptr {' '.join(attrs)} {pname}"


def emit_function(
    ctx: ModuleContext,
    name: str,
    params: Sequence[ir.Buffer | ir.Var],
    body: ir.Stmt,
    *,
    internal: bool = False,
    in_parallel: bool = False,
    align: int | None = None,
) -> None:
    """Append `define void @name(params)` for `body` to the module context."""
    fe = FuncEmitter(ctx, name, in_parallel)
    u = usage(body)
    capture = u.has_parallel and not in_parallel
    decls = [_param_decl(fe, p, k, u, align, capture) for k, p in enumerate(params)]
    fe.stmt(body)
    fe.emit("ret void")
    link = "internal " if internal else ""
    attrs = ctx.fn_attrs() + (" alwaysinline" if internal else "")
    head = f"define {link}void @{name}({', '.join(decls)}) {attrs} {{"
    ctx.functions.append(f"{head}\n{fe.body_text()}\n}}\n")


def build_ir(
    funcs: ir.LoopFunc | Sequence[ir.LoopFunc], target: Target | str, names: Sequence[str] | None = None
) -> tuple[str, list[str]]:
    """LLVM IR text for the kernels (no parallel runtime) and their exported symbol names."""
    init_llvm()
    target = get_target(target)
    funcs = [funcs] if isinstance(funcs, ir.LoopFunc) else list(funcs)
    ctx = ModuleContext(target, name=funcs[0].name if funcs else "tir")
    names = list(names) if names is not None else [symbol_name(f.name) for f in funcs]
    for n in names:
        if n in ctx.symbols:
            raise TirError(f"two kernels are named {n!r}")
        ctx.symbols.add(n)
    for f, n in zip(funcs, names, strict=True):
        emit_function(ctx, n, f.params, f.body, align=f.attrs.get("align"))
    return ctx.text(str(target_machine(target).target_data)), names


def target_machine(target: Target, jit: bool = False) -> llvm.TargetMachine:
    init_llvm()
    reloc = "default" if jit else "pic"
    return llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=target.cpu,
        features=target.features,
        opt=3,
        reloc=reloc,
        codemodel="jitdefault" if jit else "default",
    )


def optimize(mod: llvm.ModuleRef, target: Target) -> llvm.ModuleRef:
    """The new pass manager's O3 pipeline (loop + SLP vectorization) for the target machine."""
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(target_machine(target), pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def parse_ir(text: str, name: str = "tir") -> llvm.ModuleRef:
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        _dump(name, "bad.ll", text)
        raise RuntimeError(f"generated LLVM IR for {name!r} is invalid (a tensorir bug): {e}") from e
    return mod


def _dump(name: str, suffix: str, text: str) -> None:
    d = config.dump_dir()
    if d is not None:
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{name}.{suffix}").write_text(text)


def build_module(
    funcs: ir.LoopFunc | Sequence[ir.LoopFunc],
    target: Target | str,
    *,
    names: Sequence[str] | None = None,
    with_runtime: bool = True,
) -> tuple[llvm.ModuleRef, list[str]]:
    """Parse + verify + optimize; `with_runtime` links the parallel runtime in (for objects)."""
    target = get_target(target)
    t0 = time.perf_counter()
    text, names = build_ir(funcs, target, names)
    mod = module_from_text(text, target, names[0] if names else "tir", with_runtime, t0)
    return mod, names


def module_from_text(
    text: str, target: Target, label: str, with_runtime: bool = True, t0: float | None = None
) -> llvm.ModuleRef:
    """`build_ir`'s text parsed, verified, linked with the parallel runtime when it calls it
    (`with_runtime`) and optimized."""
    from tensorir.codegen.parallel import runtime_ir

    t0 = time.perf_counter() if t0 is None else t0
    _dump(label, "ll", text)
    with LLVM_LOCK:
        mod = parse_ir(text, label)
        if with_runtime and "@tir_parallel_for(" in text:
            mod.link_in(parse_ir(runtime_ir(target), "tir_runtime"))
        optimize(mod, target)
        _dump(label, "opt.ll", str(mod))
    if config.debug_level() >= 1:
        print(f"[tir] llvm {label}: {1e3 * (time.perf_counter() - t0):.1f} ms")
    return mod


def emit_object(funcs: ir.LoopFunc | Sequence[ir.LoopFunc], target: Target | str) -> bytes:
    """A relocatable ELF object holding the kernels (and the parallel runtime if needed)."""
    target = get_target(target)
    text, names = build_ir(funcs, target)
    return object_from_text(text, target, names[0] if names else "tir")


def object_from_text(text: str, target: Target, label: str) -> bytes:
    """`emit_object` for IR text `build_ir` made already."""
    with LLVM_LOCK:
        return target_machine(target).emit_object(module_from_text(text, target, label))


def emit_assembly(funcs: ir.LoopFunc | Sequence[ir.LoopFunc], target: Target | str) -> str:
    target = get_target(target)
    with LLVM_LOCK:
        mod, _ = build_module(funcs, target)
        return target_machine(target).emit_assembly(mod)
