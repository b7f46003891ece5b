"""The model's C entry points, generated as LLVM IR: create / run / destroy.

    tir_model *tir_create(const char *weights_path);   // NULL: the embedded weights
    int        tir_run(tir_model *m, void *const *inputs, void *const *outputs);
    void       tir_destroy(tir_model *m);
    void      *tir_workspace(tir_model *m);             // for per-kernel profiling
    const void *tir_weights(tir_model *m);
    const void *tir_prepared(tir_model *m);             // NULL when the plan prepares nothing
    void       tir_set_num_threads(int32_t n);          // from the parallel runtime

`tir_create` allocates the workspace and, when the plan has prepare calls, the prepared-weights
block, and runs those calls once, in order (weights the blob's, results in the block:
compiler_prepare.py). Either block, when it holds HUGE bytes or more, is aligned to HUGE and
advised MADV_HUGEPAGE. Where transparent huge pages are on "madvise" (a common default) the
prepared block's first touch then costs a fault per 2 MiB, not per 4 KiB (ResNet-18, 72 MB:
tir_create + first run 92 instead of 134 ms, medians of 11 fresh processes, 1 thread, this
busy 2-core Zen 3 VM), and the kernels walk the workspace's activations with one TLB entry per
2 MiB instead of 512.

After the prepare calls, the weights only they read (laid out last: compiler_prepare.py) go
back to the system, their whole 64 KiB pages advised MADV_DONTNEED.

`tir_run` calls every kernel in order (a loop's calls again and again: plan.LoopSpan, a
`for` around them with the latch copies at its end); each kernel argument is an input, an
output, a byte offset into the weights or the prepared weights, or a byte offset into the one
workspace the memory plan laid out. Graph outputs that are not written by a kernel (a view of
an input, ...) are copied at the end. Only libc is used: malloc, free, fopen, fread, fclose,
memcpy, madvise.
The plan types (Arg, KernelCall, Copy) are backend-neutral: tensorir/plan.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tensorir.config import huge_workspace_enabled
from tensorir.plan import Arg, Copy, KernelCall, LoopSpan

ENTRY_LIBC_SYMBOLS = ("malloc", "free", "fopen", "fread", "fclose", "memcpy", "madvise")
ALIGN = 64
HUGE = 2 << 20  # a transparent huge page (x86-64; aarch64 with 4 KiB pages)
MADV_HUGEPAGE = 14  # Linux, every architecture
MADV_DONTNEED = 4  # Linux, every architecture
RELEASE_PAGE = 64 << 10  # released in whole 64 KiB: a page on every Linux page size in use


_HEADER = """
; workspace, weights, workspace block, owned weights, prepared weights, prepared block
%tir_model = type { ptr, ptr, ptr, ptr, ptr, ptr }
declare ptr @malloc(i64)
declare void @free(ptr)
declare ptr @fopen(ptr, ptr)
declare i64 @fread(ptr, i64, i64, ptr)
declare i32 @fclose(ptr)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
declare i32 @madvise(ptr, i64, i32)
@.rb = private constant [3 x i8] c"rb\\00"

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

define ptr @tir_prepared(ptr %m) {
  %p = getelementptr %tir_model, ptr %m, i32 0, i32 4
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
  %pp = getelementptr %tir_model, ptr %m, i32 0, i32 5
  %p = load ptr, ptr %pp
  call void @free(ptr %p)
  call void @free(ptr %m)
  br label %done
done:
  ret void
}
"""


def _align_fn(name: str, boundary: int) -> str:
    """LLVM IR of `ptr name(ptr p)`: p rounded up to a multiple of `boundary` (a power of 2)."""
    return f"""
define internal ptr @{name}(ptr %p) {{
  %i = ptrtoint ptr %p to i64
  %a = add i64 %i, {boundary - 1}
  %b = and i64 %a, {-boundary}
  %q = inttoptr i64 %b to ptr
  ret ptr %q
}}
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


def _allocate(block: str, aligned: str, size: int, huge_pages: bool = True) -> list[str]:
    """Lines that malloc `size` bytes into `block` and align them into `aligned`: 64-byte
    aligned, or from HUGE bytes on (with `huge_pages`) huge-page aligned and advised
    MADV_HUGEPAGE (advice only: without transparent huge pages the block stays as it is)."""
    huge = huge_pages and size >= HUGE
    lines = [
        f"  {block} = call ptr @malloc(i64 {size + (HUGE if huge else ALIGN)})",
        f"  {aligned} = call ptr @tir_align{'_huge' if huge else ''}(ptr {block})",
    ]
    if huge:
        advise = f"call i32 @madvise(ptr {aligned}, i64 {size}, i32 {MADV_HUGEPAGE})"
        lines.append(f"  {aligned}.advised = {advise}")
    return lines


def _prepare(prepares: Sequence[KernelCall], prepared: int, released: tuple[int, int] = (0, 0)) -> str:
    """tir_create's lines after %m is stored: the prepared block (64-byte aligned; from HUGE
    bytes on, huge-page aligned and advised; null when nothing is prepared) in the model,
    then every prepare call, in order, then the release of the weights only they read."""
    if not prepared:
        return "\n".join(f"  store ptr null, ptr %p{k}" for k in (4, 5))
    lines = _allocate("%pblock", "%pb", prepared)
    lines += ["  store ptr %pb, ptr %p4", "  store ptr %pblock, ptr %p5"]
    b = _RunBuilder({"weight": "%wptr", "prepared": "%pb"})
    for k, c in enumerate(prepares):
        _call(b, c, k)
    return "\n".join(lines + b.lines + _release(*released))


def _release(lo: int, hi: int) -> list[str]:
    """madvise(MADV_DONTNEED) over the whole RELEASE_PAGE pages inside weights [lo, hi): no
    kernel reads them after the prepare calls, so their memory goes back to the system (the
    read weights.bin's heap pages, or the library's pages of the embedded blob, which the
    kernel would read again from the file if anyone touched them)."""
    if hi - lo < 2 * RELEASE_PAGE:
        return []
    return [
        f"  %rel.lo = getelementptr i8, ptr %wptr, i64 {lo + RELEASE_PAGE - 1}",
        f"  %rel.hi = getelementptr i8, ptr %wptr, i64 {hi}",
        "  %rel.lo.i = ptrtoint ptr %rel.lo to i64",
        "  %rel.hi.i = ptrtoint ptr %rel.hi to i64",
        f"  %rel.a = and i64 %rel.lo.i, {-RELEASE_PAGE}",
        f"  %rel.b = and i64 %rel.hi.i, {-RELEASE_PAGE}",
        "  %rel.n = sub i64 %rel.b, %rel.a",
        "  %rel.p = inttoptr i64 %rel.a to ptr",
        f"  %rel.done = call i32 @madvise(ptr %rel.p, i64 %rel.n, i32 {MADV_DONTNEED})",
    ]


def _create(
    workspace: int,
    weights: int,
    embedded: bool,
    prepares: Sequence[KernelCall] = (),
    prepared: int = 0,
    released: tuple[int, int] = (0, 0),
) -> str:
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
  %m = call ptr @malloc(i64 48)
{chr(10).join(_allocate("%block", "%ws", workspace, huge_workspace_enabled()))}
  %p0 = getelementptr %tir_model, ptr %m, i32 0, i32 0
  store ptr %ws, ptr %p0
  %p1 = getelementptr %tir_model, ptr %m, i32 0, i32 1
  store ptr %wptr, ptr %p1
  %p2 = getelementptr %tir_model, ptr %m, i32 0, i32 2
  store ptr %block, ptr %p2
  %p3 = getelementptr %tir_model, ptr %m, i32 0, i32 3
  store ptr %wblock, ptr %p3
  %p4 = getelementptr %tir_model, ptr %m, i32 0, i32 4
  %p5 = getelementptr %tir_model, ptr %m, i32 0, i32 5
{_prepare(prepares, prepared, released)}
  ret ptr %m
}}
"""


_BASES = {"workspace": "%ws", "weight": "%wb", "prepared": "%pb"}  # tir_run's base pointers


class _RunBuilder:
    """Lines of calls and the pointers of their arguments (`bases`: the register holding each
    storage kind's base pointer)."""

    def __init__(self, bases: Mapping[str, str] = _BASES) -> None:
        self.lines: list[str] = []
        self.n = 0
        self.loops = 0
        self.cache: dict[Arg, str] = {}
        self.bases = bases

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
            self.lines.append(f"  {t} = getelementptr i8, ptr {self.bases[a.kind]}, i64 {a.index}")
        self.cache[a] = t
        return t


def _guard_bit(b: _RunBuilder, guard: Sequence[tuple[Arg, bool]]) -> str:
    """An i1 that holds when every guard byte equals its polarity."""
    ok = "true"
    for flag, polarity in guard:
        byte, bit, hit = b.tmp(), b.tmp(), b.tmp()
        b.lines.append(f"  {byte} = load i8, ptr {b.ptr(flag)}")
        b.lines.append(f"  {bit} = icmp {'ne' if polarity else 'eq'} i8 {byte}, 0")
        b.lines.append(f"  {hit} = and i1 {ok}, {bit}")
        ok = hit
    return ok


def _guarded(b: _RunBuilder, c: KernelCall, k: int) -> None:
    """The call, run only when every guard byte equals its polarity: a branch around it."""
    ok = _guard_bit(b, c.guard)
    args = ", ".join(f"ptr {b.ptr(a)}" for a in c.args)
    b.lines.append(f"  br i1 {ok}, label %run{k}, label %skip{k}")
    b.lines.append(f"run{k}:")
    b.lines.append(f"  call void @{c.symbol}({args})")
    b.lines.append(f"  br label %skip{k}")
    b.lines.append(f"skip{k}:")


def _call(b: _RunBuilder, c: KernelCall, k: int) -> None:
    if c.guard:
        _guarded(b, c, k)
        return
    args = ", ".join(f"ptr {b.ptr(a)}" for a in c.args)
    b.lines.append(f"  call void @{c.symbol}({args})")


def _copy(b: _RunBuilder, c: Copy) -> None:
    dst, src = b.ptr(c.dst), b.ptr(c.src)
    b.lines.append(f"  call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {src}, i64 {c.nbytes}, i1 false)")


def _every_arg(calls: Sequence[KernelCall], copies: Sequence[Copy], loops: Sequence[LoopSpan]) -> list[Arg]:
    args = [a for c in calls for a in (*c.args, *(f for f, _ in c.guard))]
    for s in loops:
        args += [s.trip, s.cond, s.iter, s.cond_state, *(f for f, _ in s.guard)]
        copies = [*copies, *s.enter, *s.latch]
    return args + [a for c in copies for a in (c.dst, c.src)]


def _nest(loops: Sequence[LoopSpan]) -> dict[LoopSpan | None, list[LoopSpan]]:
    """Each loop's loops directly inside it (None: the top level); `loops` lists a loop
    before the loops inside it."""
    children: dict[LoopSpan | None, list[LoopSpan]] = {None: []}
    stack: list[LoopSpan] = []
    for s in loops:
        while stack and not (stack[-1].first <= s.first and s.end <= stack[-1].end):
            stack.pop()
        children[stack[-1] if stack else None].append(s)
        children[s] = []
        stack.append(s)
    return children


def _emit(
    b: _RunBuilder, calls: Sequence[KernelCall], lo: int, hi: int, inner: list[LoopSpan], nest: dict
) -> None:
    """Calls [lo, hi), the loops in `inner` (sorted by start) run as loops."""
    k = lo
    for s in sorted(inner, key=lambda s: s.first):
        for j in range(k, s.first):
            _call(b, calls[j], j)
        _loop(b, calls, s, nest)
        k = s.end
    for j in range(k, hi):
        _call(b, calls[j], j)


def _loop(b: _RunBuilder, calls: Sequence[KernelCall], s: LoopSpan, nest: dict) -> None:
    """for (iter = 0; iter < trip && cond_state; iter++) { calls; latch copies }"""
    tag = f"L{b.loops}"
    b.loops += 1
    if s.guard:
        b.lines.append(f"  br i1 {_guard_bit(b, s.guard)}, label %{tag}e, label %{tag}x")
        b.lines.append(f"{tag}e:")
    for c in s.enter:
        _copy(b, c)
    b.lines.append(f"  store i64 0, ptr {b.ptr(s.iter)}")
    b.lines.append(f"  br label %{tag}h")
    i, trip, cond, more, live, go = (b.tmp() for _ in range(6))
    b.lines.append(f"{tag}h:")
    b.lines.append(f"  {i} = load i64, ptr {b.ptr(s.iter)}")
    b.lines.append(f"  {trip} = load i64, ptr {b.ptr(s.trip)}")
    b.lines.append(f"  {cond} = load i8, ptr {b.ptr(s.cond_state)}")
    b.lines.append(f"  {more} = icmp slt i64 {i}, {trip}")
    b.lines.append(f"  {live} = icmp ne i8 {cond}, 0")
    b.lines.append(f"  {go} = and i1 {more}, {live}")
    b.lines.append(f"  br i1 {go}, label %{tag}b, label %{tag}x")
    b.lines.append(f"{tag}b:")
    _emit(b, calls, s.first, s.end, nest[s], nest)
    for c in s.latch:
        _copy(b, c)
    now, nxt = b.tmp(), b.tmp()
    b.lines.append(f"  {now} = load i64, ptr {b.ptr(s.iter)}")
    b.lines.append(f"  {nxt} = add i64 {now}, 1")
    b.lines.append(f"  store i64 {nxt}, ptr {b.ptr(s.iter)}")
    b.lines.append(f"  br label %{tag}h")
    b.lines.append(f"{tag}x:")


def _run(calls: Sequence[KernelCall], copies: Sequence[Copy], loops: Sequence[LoopSpan] = ()) -> str:
    b = _RunBuilder()
    for a in _every_arg(calls, copies, loops):  # every pointer in the entry block: loops jump back
        b.ptr(a)
    nest = _nest(loops)
    _emit(b, calls, 0, len(calls), nest[None], nest)
    for c in copies:
        _copy(b, c)
    body = "\n".join(b.lines)
    return f"""
define i32 @tir_run(ptr %m, ptr %inputs, ptr %outputs) {{
  %ws = call ptr @tir_workspace(ptr %m)
  %wb = call ptr @tir_weights(ptr %m)
  %pb = call ptr @tir_prepared(ptr %m)
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
    loops: Sequence[LoopSpan] = (),
    prepares: Sequence[KernelCall] = (),
    prepared: int = 0,
    released: tuple[int, int] = (0, 0),
) -> str:
    """LLVM IR text of the entry module (kernels are declared, defined in their own object);
    `loops`: spans of `calls` run as loops; `prepares`: the calls tir_create runs once to fill
    the prepared block of `prepared` bytes; `released`: the weights' byte range only they read,
    handed back to the system after them."""
    every = [*calls, *prepares]
    decls = sorted({f"declare void @{c.symbol}({', '.join(['ptr'] * len(c.args))})" for c in every})
    extern = "@_binary_weights_bin_start = external global i8\n" if embedded else ""
    return "\n".join(
        [
            f'target triple = "{triple}"',
            f'target datalayout = "{datalayout}"',
            _HEADER,
            _align_fn("tir_align", ALIGN),
            _align_fn("tir_align_huge", HUGE),
            extern,
            _READ_WEIGHTS if not embedded else "",
            *decls,
            _create(workspace, weights, embedded, prepares, prepared, released),
            _run(calls, copies, loops),
        ]
    )
