"""The model's C entry points, generated as LLVM IR: create / run / destroy.

    tir_model *tir_create(const char *weights_path);   // NULL: the embedded weights
    int        tir_run(tir_model *m, void *const *inputs, void *const *outputs);
    void       tir_destroy(tir_model *m);
    void      *tir_workspace(tir_model *m);             // for per-kernel profiling
    const void *tir_weights(tir_model *m);
    void       tir_set_num_threads(int32_t n);          // from the parallel runtime

`tir_run` calls every kernel in order; each kernel argument is an input, an output, a
byte offset into the weights, or a byte offset into the one workspace the memory plan
laid out. Graph outputs that are not written by a kernel (a view of an input, ...) are
copied at the end. Only libc is used: malloc, free, fopen, fread, fclose, memcpy.
The plan types (Arg, KernelCall, Copy) are backend-neutral: tensorir/plan.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorir.plan import Arg, Copy, KernelCall

ENTRY_LIBC_SYMBOLS = ("malloc", "free", "fopen", "fread", "fclose", "memcpy")
ALIGN = 64


_HEADER = """
%tir_model = type { ptr, ptr, ptr, ptr }  ; workspace, weights, workspace block, owned weights
declare ptr @malloc(i64)
declare void @free(ptr)
declare ptr @fopen(ptr, ptr)
declare i64 @fread(ptr, i64, i64, ptr)
declare i32 @fclose(ptr)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
@.rb = private constant [3 x i8] c"rb\\00"

define internal ptr @tir_align(ptr %p) {
  %i = ptrtoint ptr %p to i64
  %a = add i64 %i, 63
  %b = and i64 %a, -64
  %q = inttoptr i64 %b to ptr
  ret ptr %q
}

define ptr @tir_workspace(ptr %m) {
  %p = getelementptr %tir_model, ptr %m, i32 0, i32 0
  %w = load ptr, ptr %p
  ret ptr %w
}

define ptr @tir_weights(ptr %m) {
  %p = getelementptr %tir_model, ptr %m, i32 0, i32 1
  %w = load ptr, ptr %p
  ret ptr %w
}

define void @tir_destroy(ptr %m) {
  %isnull = icmp eq ptr %m, null
  br i1 %isnull, label %done, label %free
free:
  %bp = getelementptr %tir_model, ptr %m, i32 0, i32 2
  %b = load ptr, ptr %bp
  call void @free(ptr %b)
  %op = getelementptr %tir_model, ptr %m, i32 0, i32 3
  %o = load ptr, ptr %op
  call void @free(ptr %o)
  call void @free(ptr %m)
  br label %done
done:
  ret void
}
"""

_READ_WEIGHTS = """
define internal ptr @tir_read_weights(ptr %path, i64 %size) {
  %f = call ptr @fopen(ptr %path, ptr @.rb)
  %nofile = icmp eq ptr %f, null
  br i1 %nofile, label %fail, label %read
read:
  %n = add i64 %size, 64
  %block = call ptr @malloc(i64 %n)
  %buf = call ptr @tir_align(ptr %block)
  %got = call i64 @fread(ptr %buf, i64 1, i64 %size, ptr %f)
  %closed = call i32 @fclose(ptr %f)
  %short = icmp ne i64 %got, %size
  br i1 %short, label %bad, label %ok
bad:
  call void @free(ptr %block)
  br label %fail
ok:
  ret ptr %block
fail:
  ret ptr null
}
"""


def _create(workspace: int, weights: int, embedded: bool) -> str:
    if embedded:
        load = (
            "  %wblock = inttoptr i64 0 to ptr\n"
            "  %wptr = getelementptr i8, ptr @_binary_weights_bin_start, i64 0\n"
            "  br label %store"
        )
    else:
        load = (
            f"  %wblock = call ptr @tir_read_weights(ptr %path, i64 {weights})\n"
            "  %wfail = icmp eq ptr %wblock, null\n"
            "  br i1 %wfail, label %fail, label %aligned\n"
            "aligned:\n"
            "  %wptr = call ptr @tir_align(ptr %wblock)\n"
            "  br label %store\n"
            "fail:\n"
            "  ret ptr null"
        )
    return f"""
define ptr @tir_create(ptr %path) {{
{load}
store:
  %m = call ptr @malloc(i64 32)
  %block = call ptr @malloc(i64 {workspace + ALIGN})
  %ws = call ptr @tir_align(ptr %block)
  %p0 = getelementptr %tir_model, ptr %m, i32 0, i32 0
  store ptr %ws, ptr %p0
  %p1 = getelementptr %tir_model, ptr %m, i32 0, i32 1
  store ptr %wptr, ptr %p1
  %p2 = getelementptr %tir_model, ptr %m, i32 0, i32 2
  store ptr %block, ptr %p2
  %p3 = getelementptr %tir_model, ptr %m, i32 0, i32 3
  store ptr %wblock, ptr %p3
  ret ptr %m
}}
"""


class _RunBuilder:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.n = 0
        self.cache: dict[Arg, str] = {}

    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def ptr(self, a: Arg) -> str:
        if a in self.cache:
            return self.cache[a]
        t = self.tmp()
        if a.kind in ("input", "output"):
            slot = self.tmp()
            table = "%inputs" if a.kind == "input" else "%outputs"
            self.lines.append(f"  {slot} = getelementptr ptr, ptr {table}, i64 {a.index}")
            self.lines.append(f"  {t} = load ptr, ptr {slot}")
        else:
            base = "%ws" if a.kind == "workspace" else "%wb"
            self.lines.append(f"  {t} = getelementptr i8, ptr {base}, i64 {a.index}")
        self.cache[a] = t
        return t


def _guarded(b: _RunBuilder, c: KernelCall, k: int) -> None:
    """The call, run only when every guard byte equals its polarity: a branch around it."""
    ok = "true"
    for flag, polarity in c.guard:
        byte, bit, hit = b.tmp(), b.tmp(), b.tmp()
        b.lines.append(f"  {byte} = load i8, ptr {b.ptr(flag)}")
        b.lines.append(f"  {bit} = icmp {'ne' if polarity else 'eq'} i8 {byte}, 0")
        b.lines.append(f"  {hit} = and i1 {ok}, {bit}")
        ok = hit
    args = ", ".join(f"ptr {b.ptr(a)}" for a in c.args)  # before the branch: later calls reuse them
    b.lines.append(f"  br i1 {ok}, label %run{k}, label %skip{k}")
    b.lines.append(f"run{k}:")
    b.lines.append(f"  call void @{c.symbol}({args})")
    b.lines.append(f"  br label %skip{k}")
    b.lines.append(f"skip{k}:")


def _run(calls: Sequence[KernelCall], copies: Sequence[Copy]) -> str:
    b = _RunBuilder()
    for k, c in enumerate(calls):
        if c.guard:
            _guarded(b, c, k)
            continue
        args = ", ".join(f"ptr {b.ptr(a)}" for a in c.args)
        b.lines.append(f"  call void @{c.symbol}({args})")
    for c in copies:
        dst, src = b.ptr(c.dst), b.ptr(c.src)
        b.lines.append(f"  call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {src}, i64 {c.nbytes}, i1 false)")
    body = "\n".join(b.lines)
    return f"""
define i32 @tir_run(ptr %m, ptr %inputs, ptr %outputs) {{
  %ws = call ptr @tir_workspace(ptr %m)
  %wb = call ptr @tir_weights(ptr %m)
{body}
  ret i32 0
}}
"""


def entry_ir(
    triple: str,
    datalayout: str,
    calls: Sequence[KernelCall],
    copies: Sequence[Copy],
    workspace: int,
    weights: int,
    embedded: bool,
) -> str:
    """LLVM IR text of the entry module (kernels are declared, defined in their own object)."""
    decls = sorted({f"declare void @{c.symbol}({', '.join(['ptr'] * len(c.args))})" for c in calls})
    extern = "@_binary_weights_bin_start = external global i8\n" if embedded else ""
    return "\n".join(
        [
            f'target triple = "{triple}"',
            f'target datalayout = "{datalayout}"',
            _HEADER,
            extern,
            _READ_WEIGHTS if not embedded else "",
            *decls,
            _create(workspace, weights, embedded),
            _run(calls, copies),
        ]
    )
