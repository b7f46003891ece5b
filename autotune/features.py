"""Fixed-length feature vectors of lowered kernels (`LoopFunc`), for the cost model.

In the spirit of AutoTVM's itervar / Ansor's loop features, but aggregated per kernel so
every candidate gives one vector of `len(FEATURE_NAMES)` float32 values. One walk over the
loop IR collects the loop tree, the float / int work of every statement (weighted by the
trip count of its enclosing loops: the product of their extents, times vector lanes) and
every buffer access with the affine form of its index over the loop vars. Nothing here
compiles or runs the kernel: a conv kernel takes a few milliseconds.

Conventions: `log(x)` below is log2(1 + x) (all counts, bytes and extents are >= 0);
"weighted" counts are dynamic (multiplied by trip counts and lanes); "static" counts are
of IR nodes. A loop whose extent is not a constant counts with its upper bound when
`int_range` finds one, else `UNKNOWN_EXTENT`. Both arms of an `If` count with the trip
count of the `If` (an upper bound). Byte counts use the buffers' element sizes.

Touched elements of one access, over a set S of varying loops: the index is split into an
affine part sum(c_v * v) (+ a ramp for vector accesses) and non-affine atoms (`//`, `%`,
loads...). Loops of S the index does not mention contribute nothing (reuse). Affine loops
with the same |coefficient| merge (extent e1 + e2 - 1: sliding windows such as
`(oh + kh) * W`); then touched = min(product of extents, span of the addresses) times the
extents of the loops of S in non-affine atoms, capped at the buffer size. Accesses to a
buffer with the same affine signature and different constant offsets (unrolled copies)
merge as one window widened by the offsets. The *footprint* of a loop is the sum over
buffers of these touched bytes with S = that loop and the loops inside it.

Features (index: name -- meaning):

Loop structure
  n_loops            -- log of the number of `For` nodes left in the IR (static).
  n_serial / n_parallel / n_vectorized / n_unrolled
                     -- log of the number of loops of each kind (static; lowering has
                        already turned most vectorized / unrolled loops into vectors / copies).
  max_depth          -- deepest loop nesting.
  mean_depth         -- trip-weighted mean loop depth of the statements (stores).
  inner_extent_max / inner_extent_min / inner_extent_wmean
                     -- log of the extent of innermost loops (no loop inside): largest,
                        smallest, and mean weighted by the float ops they run.
  unrolled_extent_max -- log of the largest extent of an `unrolled` loop left in the IR.
  vectorized_extent_max -- log of the largest extent of a `vectorized` loop left in the IR.
  inner_body_stores  -- log of the most stores in the straight-line body of one innermost
                        loop (the unrolled body size the back end sees).
  n_stmts            -- log of the number of statements (static IR size).
  n_stores           -- log of the number of `Store` nodes (static).
  n_if               -- log of the trip-weighted number of `If` executions.
  n_select           -- log of the weighted number of `Select` evaluations (lanes counted).

Parallelism (2 threads)
  n_parallel_nests   -- log of the number of outermost parallel loops.
  par_tasks_max / par_tasks_min
                     -- log of the task counts (product of the extents of a chain of nested
                        parallel loops) over the parallel nests.
  par_balance        -- work-weighted mean over nests of tasks / (2 * ceil(tasks / 2)):
                        1 when the tasks split evenly over 2 threads; serial work counts 0.5.
  par_enough         -- work fraction in nests with at least 2 tasks.
  par_work_frac      -- fraction of the float ops run inside parallel loops.
  par_work_per_task  -- log of float ops per task of the largest parallel nest.

Vectors
  store_lanes_max / load_lanes_max -- log of the widest store / load.
  store_lanes_wmean / load_lanes_wmean
                     -- log of the trip-weighted mean lanes of stores / loads.
  vec_store_frac / vec_load_frac
                     -- fraction of stored / loaded elements moved by vector accesses.
  vec_flop_frac      -- fraction of float ops done in vector operations.

Arithmetic (weighted by trip count and lanes)
  flops              -- log of the float operations (+ - * / min max, fma = 2, calls = 1).
  float_addsub / float_mul / float_div / float_minmax -- log of each float op kind.
  fma                -- log of float mul feeding an add / sub (and explicit fma calls).
  fma_frac           -- fma * 2 / flops.
  int_ops            -- log of the integer arithmetic (index math, loop-invariant or not).
  int_divmod         -- log of integer `//` and `%`.
  cmp_ops            -- log of comparisons and logical ops.
  math_calls         -- log of intrinsic calls (exp, tanh, sqrt...).
  casts              -- log of casts.
  flops_per_store    -- log of flops / stored elements.

Memory
  n_buffers_read / n_buffers_written -- distinct buffers loaded / stored.
  load_elems / store_elems -- log of the weighted loaded / stored elements.
  accessed_bytes     -- log of all bytes moved by loads and stores (trip-weighted).
  global_accessed_bytes / local_accessed_bytes
                     -- the same split by buffer scope ("global": params and scratch).
  touched_bytes      -- log of the sum over buffers of touched bytes (footprint of the kernel).
  touched_top1 / touched_top2 / touched_top3 -- log of the 3 largest per-buffer footprints.
  reuse_max / reuse_min -- log of accessed / touched bytes over buffers (how often each
                        byte is reused), largest and smallest.
  stride0_frac / stride1_frac / strided_frac / nonaffine_frac
                     -- fractions of accessed bytes whose innermost varying index moves
                        by 0 (invariant in the innermost loop), 1 (contiguous: unit stride
                        or unit-stride ramp), another constant, or non-affinely.
  fp_inner1 / fp_inner2 / fp_inner3
                     -- log of the largest footprint (bytes) of a loop with 0 / 1 / 2
                        levels of loops inside it (the working set of the inner tiles).
  traffic_l1 / traffic_l2
                     -- log of the estimated bytes fetched into a 32 KiB / 1 MiB cache: top
                        down, a loop whose footprint fits is charged footprint * executions;
                        accesses outside any fitting loop are charged every access.
  intensity          -- log of flops / touched bytes (arithmetic intensity of the kernel).
  intensity_l1 / intensity_l2 -- log of flops / traffic_l1 and flops / traffic_l2.
  bytes_per_flop     -- log of 1 + accessed bytes / flops (loads and stores per operation).

Allocation
  n_allocate         -- number of `Allocate` nodes (static).
  alloc_bytes_max    -- log of the largest allocation's bytes.
  alloc_bytes_total  -- log of the allocated bytes, times the executions of each Allocate.
  n_scratch          -- number of scratch parameters (`func.attrs["num_scratch"]`).
  scratch_bytes      -- log of the scratch parameters' bytes.
  param_bytes        -- log of the bytes of all non-scratch parameters (workload size).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tensorir.loop.arith import int_range
from tensorir.loop.ir import (
    Allocate,
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
    Ramp,
    Select,
    Seq,
    Stmt,
    Store,
    Var,
)
from tensorir.loop.visitor import children

UNKNOWN_EXTENT = 16
NUM_THREADS = 2
L1_BYTES = 32 * 1024
L2_BYTES = 1024 * 1024

FEATURE_NAMES: list[str] = [
    # loop structure
    "n_loops",
    "n_serial",
    "n_parallel",
    "n_vectorized",
    "n_unrolled",
    "max_depth",
    "mean_depth",
    "inner_extent_max",
    "inner_extent_min",
    "inner_extent_wmean",
    "unrolled_extent_max",
    "vectorized_extent_max",
    "inner_body_stores",
    "n_stmts",
    "n_stores",
    "n_if",
    "n_select",
    # parallelism
    "n_parallel_nests",
    "par_tasks_max",
    "par_tasks_min",
    "par_balance",
    "par_enough",
    "par_work_frac",
    "par_work_per_task",
    # vectors
    "store_lanes_max",
    "load_lanes_max",
    "store_lanes_wmean",
    "load_lanes_wmean",
    "vec_store_frac",
    "vec_load_frac",
    "vec_flop_frac",
    # arithmetic
    "flops",
    "float_addsub",
    "float_mul",
    "float_div",
    "float_minmax",
    "fma",
    "fma_frac",
    "int_ops",
    "int_divmod",
    "cmp_ops",
    "math_calls",
    "casts",
    "flops_per_store",
    # memory
    "n_buffers_read",
    "n_buffers_written",
    "load_elems",
    "store_elems",
    "accessed_bytes",
    "global_accessed_bytes",
    "local_accessed_bytes",
    "touched_bytes",
    "touched_top1",
    "touched_top2",
    "touched_top3",
    "reuse_max",
    "reuse_min",
    "stride0_frac",
    "stride1_frac",
    "strided_frac",
    "nonaffine_frac",
    "fp_inner1",
    "fp_inner2",
    "fp_inner3",
    "traffic_l1",
    "traffic_l2",
    "intensity",
    "intensity_l1",
    "intensity_l2",
    "bytes_per_flop",
    # allocation
    "n_allocate",
    "alloc_bytes_max",
    "alloc_bytes_total",
    "n_scratch",
    "scratch_bytes",
    "param_bytes",
]
NUM_FEATURES = len(FEATURE_NAMES)
_INDEX = {n: i for i, n in enumerate(FEATURE_NAMES)}

_FLOAT_BIN = {"+": "addsub", "-": "addsub", "*": "mul", "/": "div", "min": "minmax", "max": "minmax"}
_DTYPE_BYTES = {"float64": 8, "int64": 8, "uint64": 8, "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2}


def _bytes(dtype: str) -> int:
    if dtype in _DTYPE_BYTES:
        return _DTYPE_BYTES[dtype]
    if dtype in ("int8", "uint8", "bool"):
        return 1
    return 4


def _log(x: float) -> float:
    return math.log2(1.0 + x) if x > 0 else 0.0


@dataclass(eq=False)
class _Loop:
    kind: ForKind
    extent: int
    depth: int  # 1 for an outermost loop; 0 for the function root
    execs: float  # how many times this loop is entered (product of the outer extents)
    parent: _Loop | None
    children: list[_Loop] = field(default_factory=list)
    accesses: list[_Access] = field(default_factory=list)  # directly in this loop's body
    flops: float = 0.0  # weighted, everything inside
    stores_here: int = 0  # stores directly in the body (not inside a nested loop)
    footprint: float = 0.0
    height: int = 0  # 0 for an innermost loop


@dataclass(eq=False)
class _Access:
    """Accesses of one loop body that differ only in the constant offset of the index
    (e.g. unrolled copies): one buffer, direction, lanes and affine signature."""

    buffer: Buffer
    nbytes: int  # element size
    lanes: int
    weight: float  # executions, summed over the accesses of the group
    chain: tuple[_Loop, ...]  # enclosing loops, outermost first
    terms: dict[_Loop, int]  # affine coefficient per loop
    nonaffine: frozenset[_Loop]
    cmin: int  # smallest / largest constant offset of the index
    cmax: int
    count: int = 1
    ramp_stride: int = 0  # stride of a vector (Ramp) index, 0 for a broadcast / scalar
    is_store: bool = False
    sig: tuple = ()  # (loop, lanes, ramp stride, terms, non-affine loops): the window's shape


class _Lin:
    """Affine decomposition of an integer index: terms over loops, constant, non-affine loops."""

    __slots__ = ("const", "nonaff", "ramp_stride", "terms")

    def __init__(self) -> None:
        self.terms: dict[_Loop, int] = {}
        self.const = 0
        self.nonaff: set[_Loop] = set()
        self.ramp_stride = 0  # a non-constant ramp stride counts as 2 (strided)


class _Extractor:
    def __init__(self) -> None:
        self.c = dict.fromkeys(
            (
                "addsub",
                "mul",
                "div",
                "minmax",
                "fma",
                "int",
                "divmod",
                "cmp",
                "call",
                "cast",
                "select",
                "vflops",
                "if",
            ),
            0.0,
        )
        self.vars: dict[Var, _Loop] = {}
        self.lets: dict[Var, frozenset[_Loop]] = {}
        self.ranges: dict[Expr, tuple[int, int]] = {}
        self.root = _Loop(ForKind.SERIAL, 1, 0, 1.0, None)
        self.chain: tuple[_Loop, ...] = ()
        self.loop = self.root
        self.groups: dict[tuple, _Access] = {}
        self.loops: list[_Loop] = []
        self.accesses: list[_Access] = []
        self.n_stmts = 0
        self.n_stores = 0
        self.n_alloc = 0
        self.alloc_max = 0.0
        self.alloc_total = 0.0
        self.depth_w = 0.0
        self.depth_n = 0.0

    # ---- expressions --------------------------------------------------------------
    def expr(self, e: Expr, w: float) -> int:
        """Count the work of `e` (executed `w` times); returns its lanes."""
        t = type(e)
        if t is Const or t is Var:
            return 1
        c = self.c
        if t is BinOp:
            lanes = max(self.expr(e.a, w), self.expr(e.b, w))
            dt = e.a.dtype
            n = w * lanes
            if dt.startswith(("float", "bfloat")):
                kind = _FLOAT_BIN.get(e.op)
                if kind is not None:
                    c[kind] += n
                    if lanes > 1:
                        c["vflops"] += n
                    if kind == "addsub" and (_is_fmul(e.a) or _is_fmul(e.b)):
                        c["fma"] += n
            elif e.op in ("and", "or", "xor") and dt == "bool":
                c["cmp"] += n
            else:
                c["int"] += n
                if e.op in ("//", "%", "/"):
                    c["divmod"] += n
            return lanes
        if t is Load:
            lanes = self.expr(e.index, w)
            self.access(e.buffer, e.index, lanes, w, False)
            return lanes
        if t is Broadcast:
            self.expr(e.value, w)
            return e.count
        if t is Ramp:
            self.expr(e.base, w)
            return e.count
        if t is Call:
            lanes = max((self.expr(a, w) for a in e.args), default=1)
            n = w * lanes
            if e.name == "fma":
                c["fma"] += n
                c["addsub"] += n
                c["mul"] += n
                if lanes > 1:
                    c["vflops"] += 2 * n
            else:
                c["call"] += n
                if lanes > 1:
                    c["vflops"] += n
            return lanes
        lanes = max((self.expr(ch, w) for ch in children(e)), default=1)
        if t is Cmp or t is Not:
            c["cmp"] += w * lanes
        elif t is Select:
            c["select"] += w * lanes
        elif t is Cast:
            c["cast"] += w * lanes
        return lanes

    def lin(self, e: Expr, scale: int, out: _Lin) -> None:
        t = type(e)
        if t is Const:
            v = e.value
            if isinstance(v, int | np.integer) and not isinstance(v, bool):
                out.const += scale * int(v)
            return
        if t is Var:
            lp = self.vars.get(e)
            if lp is not None:
                out.terms[lp] = out.terms.get(lp, 0) + scale
            else:
                deps = self.lets.get(e)
                if deps:
                    out.nonaff.update(deps)
            return
        if t is BinOp:
            op = e.op
            if op == "+":
                self.lin(e.a, scale, out)
                self.lin(e.b, scale, out)
                return
            if op == "-":
                self.lin(e.a, scale, out)
                self.lin(e.b, -scale, out)
                return
            if op == "*":
                if type(e.b) is Const and isinstance(e.b.value, int):
                    self.lin(e.a, scale * e.b.value, out)
                    return
                if type(e.a) is Const and isinstance(e.a.value, int):
                    self.lin(e.b, scale * e.a.value, out)
                    return
        elif t is Ramp:
            self.lin(e.base, scale, out)
            s = e.stride
            out.ramp_stride = scale * int(s.value) if type(s) is Const else 2
            return
        elif t is Broadcast:
            self.lin(e.value, scale, out)
            return
        self.nonaffine(e, out)

    def nonaffine(self, e: Expr, out: _Lin) -> None:
        stack = [e]
        while stack:
            n = stack.pop()
            if type(n) is Var:
                lp = self.vars.get(n)
                if lp is not None:
                    out.nonaff.add(lp)
                else:
                    deps = self.lets.get(n)
                    if deps:
                        out.nonaff.update(deps)
            else:
                stack.extend(children(n))

    def access(self, buf: Buffer, index: Expr, lanes: int, w: float, store: bool) -> None:
        lin = _Lin()
        self.lin(index, 1, lin)
        nonaff = frozenset(lin.nonaff)
        terms = {lp: k for lp, k in lin.terms.items() if k != 0 and lp not in nonaff}
        loop = self.loop
        sig = (
            id(loop),
            lanes,
            lin.ramp_stride,
            tuple(sorted((id(lp), k) for lp, k in terms.items())),
            tuple(sorted(id(lp) for lp in nonaff)),
        )
        key = (buf.name, store, sig)
        g = self.groups.get(key)
        if g is None:
            g = _Access(buf, _bytes(buf.dtype), lanes, w, self.chain, terms, nonaff, lin.const, lin.const)
            g.is_store = store
            g.ramp_stride = lin.ramp_stride
            g.sig = sig
            self.groups[key] = g
            loop.accesses.append(g)
            self.accesses.append(g)
        else:
            g.weight += w
            g.count += 1
            if lin.const < g.cmin:
                g.cmin = lin.const
            elif lin.const > g.cmax:
                g.cmax = lin.const

    # ---- statements ---------------------------------------------------------------
    def stmt(self, s: Stmt, w: float) -> None:
        self.n_stmts += 1
        t = type(s)
        if t is Store:
            self.n_stores += 1
            self.loop.stores_here += 1
            self.depth_w += w * len(self.chain)
            self.depth_n += w
            c = self.c
            f0 = c["addsub"] + c["mul"] + c["div"] + c["minmax"] + c["call"]
            lanes = max(self.expr(s.index, w), self.expr(s.value, w))
            self.access(s.buffer, s.index, lanes, w, True)
            df = c["addsub"] + c["mul"] + c["div"] + c["minmax"] + c["call"] - f0
            if df:
                for lp in self.chain:
                    lp.flops += df
        elif t is Seq:
            for x in s.stmts:
                self.stmt(x, w)
        elif t is For:
            ext = s.extent
            if type(ext) is Const:
                n = int(ext.value)
            else:
                self.expr(ext, w)
                r = int_range(ext, self.ranges)
                n = r[1] if r is not None else UNKNOWN_EXTENT
            n = max(n, 0)
            chain, loop = self.chain, self.loop
            lp = _Loop(s.kind, n, len(chain) + 1, w, loop)
            loop.children.append(lp)
            self.loops.append(lp)
            old = self.vars.get(s.var)
            self.vars[s.var] = lp
            st = s.start
            lo = int(st.value) if type(st) is Const else 0
            self.ranges[s.var] = (lo, lo + max(n - 1, 0))
            self.chain, self.loop = (*chain, lp), lp
            self.stmt(s.body, w * n)
            self.chain, self.loop = chain, loop
            if old is None:
                del self.vars[s.var]
            else:
                self.vars[s.var] = old
        elif t is If:
            self.c["if"] += w
            self.expr(s.cond, w)
            self.stmt(s.then, w)
            if s.orelse is not None:
                self.stmt(s.orelse, w)
        elif t is Allocate:
            self.n_alloc += 1
            nb = float(s.buffer.size * _bytes(s.buffer.dtype))
            self.alloc_max = max(self.alloc_max, nb)
            self.alloc_total += nb * w
            self.stmt(s.body, w)
        elif t is LetStmt:
            self.expr(s.value, w)
            tmp = _Lin()
            self.nonaffine(s.value, tmp)
            self.lets[s.var] = frozenset(tmp.nonaff)
            self.stmt(s.body, w)
        else:  # unknown statement kinds: walk what they hold
            for ch in children(s):
                if isinstance(ch, Stmt):
                    self.stmt(ch, w)
                else:
                    self.expr(ch, w)


def _is_fmul(e: Expr) -> bool:
    return type(e) is BinOp and e.op == "*" and e.a.dtype.startswith(("float", "bfloat"))


def _touched(a: _Access, inner: set[_Loop] | None) -> float:
    """Distinct elements `a` touches while the loops in `inner` (None: all) vary."""
    groups: dict[int, int] = {}
    for lp, k in a.terms.items():
        if inner is None or lp in inner:
            k = abs(k)
            groups[k] = groups.get(k, 1) + lp.extent - 1
    prod = 1.0
    span = 1.0
    if a.lanes > 1:
        prod = float(a.lanes)
        span = abs(a.ramp_stride) * (a.lanes - 1) + 1.0
        if a.ramp_stride == 0:
            prod = 1.0
    for k, ext in groups.items():
        prod *= ext
        span += k * (ext - 1)
    n = min(prod, span)
    for lp in a.nonaffine:
        if inner is None or lp in inner:
            n *= max(lp.extent, 1)
    return min(n, float(max(a.buffer.size, 1)))


def _footprint(accs: Iterable[_Access], inner: set[_Loop] | None) -> tuple[float, dict[str, float]]:
    """Bytes touched by `accs` while `inner` (None: every loop) varies; also per buffer.
    Loads and stores of one buffer with the same index signature count once."""
    windows: dict[tuple, list] = {}
    for a in accs:
        key = (a.buffer.name, a.sig)
        n = _touched(a, inner)
        wnd = windows.get(key)
        if wnd is None:
            windows[key] = [n, a.cmin, a.cmax, a.count, a.buffer]
        else:
            wnd[0] = max(wnd[0], n)
            wnd[1] = min(wnd[1], a.cmin)
            wnd[2] = max(wnd[2], a.cmax)
            wnd[3] = max(wnd[3], a.count)
    per_buf: dict[str, float] = {}
    bufs: dict[str, Buffer] = {}
    for (name, _), (n, lo, hi, count, buf) in windows.items():
        per_buf[name] = per_buf.get(name, 0.0) + min(n + (hi - lo), n * count)
        bufs[name] = buf
    total = 0.0
    for name, elems in per_buf.items():
        buf = bufs[name]
        per_buf[name] = v = min(elems, float(max(buf.size, 1))) * _bytes(buf.dtype)
        total += v
    return total, per_buf


def _innermost_stride(a: _Access) -> int:
    """How the index moves along the innermost loop (extent > 1) around the access:
    0 invariant (reused), 1 contiguous, 2 strided, 3 non-affine. Vector accesses that move
    are classified by their ramp stride."""
    for lp in reversed(a.chain):
        if lp.extent <= 1:
            continue
        if lp in a.nonaffine:
            return 3
        k = a.terms.get(lp, 0)
        if k == 0:
            return 0
        if a.lanes > 1:
            return 1 if abs(a.ramp_stride) == 1 else 2
        return 1 if abs(k) == 1 else 2
    if a.lanes > 1 and a.ramp_stride != 0:
        return 1 if abs(a.ramp_stride) == 1 else 2
    return 0


def extract_features(func: LoopFunc) -> np.ndarray:
    """The feature vector of `func` (float32, `len(FEATURE_NAMES)`; see the module docstring)."""
    ex = _Extractor()
    ex.stmt(func.body, 1.0)
    f = np.zeros(NUM_FEATURES, dtype=np.float64)

    def put(name: str, value: float) -> None:
        f[_INDEX[name]] = value

    c = ex.c
    loops = ex.loops
    accs = ex.accesses

    # ---- flops per loop (inclusive), heights, footprints ----------------------------
    flops = c["addsub"] + c["mul"] + c["div"] + c["minmax"] + c["call"]
    store_elems = sum(a.weight * a.lanes for a in accs if a.is_store)
    load_elems = sum(a.weight * a.lanes for a in accs if not a.is_store)
    flops_per_elem = flops / store_elems if store_elems > 0 else 0.0

    for lp in reversed(loops):  # children come after parents in `loops`
        if lp.parent is not None and lp.parent is not ex.root:
            lp.parent.height = max(lp.parent.height, lp.height + 1)

    # accesses inside each loop (inclusive), computed bottom-up by concatenation
    inside: dict[int, list[_Access]] = {}
    for lp in reversed(loops):
        lst = list(lp.accesses)
        for ch in lp.children:
            lst.extend(inside[id(ch)])
        inside[id(lp)] = lst
        inner = {lp}
        stack = list(lp.children)
        while stack:
            x = stack.pop()
            inner.add(x)
            stack.extend(x.children)
        lp.footprint = _footprint(lst, inner)[0]

    # ---- loop structure --------------------------------------------------------------
    kinds = {k: 0 for k in ForKind}
    for lp in loops:
        kinds[lp.kind] += 1
    put("n_loops", _log(len(loops)))
    put("n_serial", _log(kinds[ForKind.SERIAL]))
    put("n_parallel", _log(kinds[ForKind.PARALLEL]))
    put("n_vectorized", _log(kinds[ForKind.VECTORIZED]))
    put("n_unrolled", _log(kinds[ForKind.UNROLLED]))
    put("max_depth", max((lp.depth for lp in loops), default=0))
    put("mean_depth", ex.depth_w / ex.depth_n if ex.depth_n > 0 else 0.0)
    innermost = [lp for lp in loops if not lp.children]
    if innermost:
        put("inner_extent_max", _log(max(lp.extent for lp in innermost)))
        put("inner_extent_min", _log(min(lp.extent for lp in innermost)))
        wsum = sum(lp.flops for lp in innermost)
        if wsum > 0:
            put("inner_extent_wmean", sum(lp.flops * _log(lp.extent) for lp in innermost) / wsum)
        else:
            put("inner_extent_wmean", sum(_log(lp.extent) for lp in innermost) / len(innermost))
        put("inner_body_stores", _log(max(lp.stores_here for lp in innermost)))
    else:
        put("inner_body_stores", _log(ex.root.stores_here))
    put(
        "unrolled_extent_max",
        _log(max((lp.extent for lp in loops if lp.kind is ForKind.UNROLLED), default=0)),
    )
    put(
        "vectorized_extent_max",
        _log(max((lp.extent for lp in loops if lp.kind is ForKind.VECTORIZED), default=0)),
    )
    put("n_stmts", _log(ex.n_stmts))
    put("n_stores", _log(ex.n_stores))
    put("n_if", _log(c["if"]))
    put("n_select", _log(c["select"]))

    # ---- parallelism -----------------------------------------------------------------
    nests: list[tuple[float, float]] = []  # (tasks, flops)

    def find_par(lp: _Loop) -> None:
        if lp.kind is ForKind.PARALLEL:
            tasks = float(lp.extent)
            x = lp
            while len(x.children) == 1 and x.children[0].kind is ForKind.PARALLEL and not x.accesses:
                x = x.children[0]
                tasks *= x.extent
            nests.append((tasks * lp.execs, lp.flops))
            return
        for ch in lp.children:
            find_par(ch)

    find_par(ex.root)
    total_work = flops
    put("n_parallel_nests", _log(len(nests)))
    if nests:
        put("par_tasks_max", _log(max(t for t, _ in nests)))
        put("par_tasks_min", _log(min(t for t, _ in nests)))
        big = max(nests, key=lambda n: n[1])
        put("par_work_per_task", _log(big[1] / max(big[0], 1.0)))
    par_work = sum(w for _, w in nests)
    if total_work > 0:
        bal = sum(w * (t / (NUM_THREADS * math.ceil(t / NUM_THREADS)) if t > 0 else 0.0) for t, w in nests)
        bal += (total_work - par_work) * (1.0 / NUM_THREADS)
        put("par_balance", min(bal / total_work, 1.0))
        put("par_enough", min(sum(w for t, w in nests if t >= NUM_THREADS) / total_work, 1.0))
        put("par_work_frac", min(par_work / total_work, 1.0))
    elif nests:
        t = max(t for t, _ in nests)
        put("par_balance", t / (NUM_THREADS * math.ceil(t / NUM_THREADS)) if t > 0 else 0.0)
        put("par_enough", float(t >= NUM_THREADS))
        put("par_work_frac", 1.0)

    # ---- vectors ---------------------------------------------------------------------
    stores = [a for a in accs if a.is_store]
    loads = [a for a in accs if not a.is_store]
    for kind, lst, tot in (("store", stores, store_elems), ("load", loads, load_elems)):
        if not lst:
            continue
        put(f"{kind}_lanes_max", _log(max(a.lanes for a in lst)))
        wsum = sum(a.weight for a in lst)
        if wsum > 0:
            put(f"{kind}_lanes_wmean", _log(sum(a.weight * a.lanes for a in lst) / wsum))
        if tot > 0:
            put(f"vec_{kind}_frac", sum(a.weight * a.lanes for a in lst if a.lanes > 1) / tot)
    put("vec_flop_frac", c["vflops"] / flops if flops > 0 else 0.0)

    # ---- arithmetic ------------------------------------------------------------------
    put("flops", _log(flops))
    put("float_addsub", _log(c["addsub"]))
    put("float_mul", _log(c["mul"]))
    put("float_div", _log(c["div"]))
    put("float_minmax", _log(c["minmax"]))
    put("fma", _log(c["fma"]))
    put("fma_frac", min(2.0 * c["fma"] / flops, 1.0) if flops > 0 else 0.0)
    put("int_ops", _log(c["int"]))
    put("int_divmod", _log(c["divmod"]))
    put("cmp_ops", _log(c["cmp"]))
    put("math_calls", _log(c["call"]))
    put("casts", _log(c["cast"]))
    put("flops_per_store", _log(flops_per_elem))

    # ---- memory ----------------------------------------------------------------------
    put("n_buffers_read", len({a.buffer.name for a in loads}))
    put("n_buffers_written", len({a.buffer.name for a in stores}))
    put("load_elems", _log(load_elems))
    put("store_elems", _log(store_elems))
    accessed: dict[str, float] = {}
    glob = loc = 0.0
    stride_bytes = [0.0, 0.0, 0.0, 0.0]
    for a in accs:
        nb = a.weight * a.lanes * a.nbytes
        accessed[a.buffer.name] = accessed.get(a.buffer.name, 0.0) + nb
        if a.buffer.scope == "global":
            glob += nb
        else:
            loc += nb
        stride_bytes[_innermost_stride(a)] += nb
    acc_total = glob + loc
    put("accessed_bytes", _log(acc_total))
    put("global_accessed_bytes", _log(glob))
    put("local_accessed_bytes", _log(loc))
    touched, per_buf = _footprint(accs, None)
    put("touched_bytes", _log(touched))
    top = [*sorted(per_buf.values(), reverse=True), 0.0, 0.0, 0.0]
    put("touched_top1", _log(top[0]))
    put("touched_top2", _log(top[1]))
    put("touched_top3", _log(top[2]))
    reuse = [accessed[n] / t for n, t in per_buf.items() if t > 0]
    if reuse:
        put("reuse_max", _log(max(reuse)))
        put("reuse_min", _log(min(reuse)))
    if acc_total > 0:
        names = ("stride0_frac", "stride1_frac", "strided_frac", "nonaffine_frac")
        for name, v in zip(names, stride_bytes, strict=True):
            put(name, v / acc_total)
    for h in range(3):
        put(f"fp_inner{h + 1}", _log(max((lp.footprint for lp in loops if lp.height == h), default=0.0)))

    def traffic(lp: _Loop, cap: float) -> float:
        if lp is not ex.root and lp.footprint <= cap:
            return lp.footprint * lp.execs
        out = sum(a.weight * a.lanes * a.nbytes for a in lp.accesses)
        for ch in lp.children:
            out += traffic(ch, cap)
        return out

    t1 = traffic(ex.root, L1_BYTES)
    t2 = traffic(ex.root, L2_BYTES)
    put("traffic_l1", _log(t1))
    put("traffic_l2", _log(t2))
    put("intensity", _log(flops / touched) if touched > 0 else 0.0)
    put("intensity_l1", _log(flops / t1) if t1 > 0 else 0.0)
    put("intensity_l2", _log(flops / t2) if t2 > 0 else 0.0)
    put("bytes_per_flop", _log(acc_total / flops) if flops > 0 else _log(acc_total))

    # ---- allocation ------------------------------------------------------------------
    put("n_allocate", ex.n_alloc)
    put("alloc_bytes_max", _log(ex.alloc_max))
    put("alloc_bytes_total", _log(ex.alloc_total))
    n_scratch = int(func.attrs.get("num_scratch", 0) or 0)
    n_scratch = min(max(n_scratch, 0), len(func.params))
    scratch = func.params[len(func.params) - n_scratch :] if n_scratch else ()
    params = func.params[: len(func.params) - n_scratch]
    put("n_scratch", n_scratch)
    put("scratch_bytes", _log(sum(b.size * _bytes(b.dtype) for b in scratch if isinstance(b, Buffer))))
    put("param_bytes", _log(sum(b.size * _bytes(b.dtype) for b in params if isinstance(b, Buffer))))

    np.nan_to_num(f, copy=False, nan=0.0, posinf=64.0, neginf=0.0)
    return f.astype(np.float32)


def extract_batch(funcs: Sequence[LoopFunc] | Iterable[LoopFunc]) -> np.ndarray:
    """Features of several kernels: shape (len(funcs), len(FEATURE_NAMES)), float32."""
    rows = [extract_features(fn) for fn in funcs]
    if not rows:
        return np.zeros((0, NUM_FEATURES), dtype=np.float32)
    return np.stack(rows)
