"""Fixed-length feature vectors of lowered kernels (`LoopFunc`), for the cost model.

In the spirit of AutoTVM's itervar / Ansor's loop features, but aggregated per kernel so
every candidate gives one vector of `len(FEATURE_NAMES)` float32 values. One walk over the
loop IR (autotune/loop_walk.py) collects the loop tree, the float / int work of every
statement (weighted by the trip count of its enclosing loops: the product of their extents,
times vector lanes) and every buffer access with the affine form of its index over the loop
vars; autotune/footprint.py measures the bytes those accesses touch. Nothing here compiles
or runs the kernel: a conv kernel takes a few milliseconds.

Conventions: `log(x)` below is log2(1 + x) (all counts, bytes and extents are >= 0);
"weighted" counts are dynamic (multiplied by trip counts and lanes); "static" counts are
of IR nodes. Loops of unknown extent, `If` arms and byte counts count as loop_walk.py says.
"Touched" bytes and the *footprint* of a loop are those of footprint.py: the distinct bytes
the accesses reach while that loop and the loops inside it vary.

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

import numpy as np

from autotune.footprint import footprint, innermost_stride
from autotune.loop_walk import Access, Loop, LoopWalk, dtype_bytes
from tensorir.loop.ir import Buffer, ForKind, LoopFunc

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


def _log(x: float) -> float:
    return math.log2(1.0 + x) if x > 0 else 0.0


def extract_features(func: LoopFunc) -> np.ndarray:
    """The feature vector of `func` (float32, `len(FEATURE_NAMES)`; see the module docstring)."""
    ex = LoopWalk()
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
    inside: dict[int, list[Access]] = {}
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
        lp.footprint = footprint(lst, inner)[0]

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

    def find_par(lp: Loop) -> None:
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
        stride_bytes[innermost_stride(a)] += nb
    acc_total = glob + loc
    put("accessed_bytes", _log(acc_total))
    put("global_accessed_bytes", _log(glob))
    put("local_accessed_bytes", _log(loc))
    touched, per_buf = footprint(accs, None)
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

    def traffic(lp: Loop, cap: float) -> float:
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
    put("scratch_bytes", _log(sum(b.size * dtype_bytes(b.dtype) for b in scratch if isinstance(b, Buffer))))
    put("param_bytes", _log(sum(b.size * dtype_bytes(b.dtype) for b in params if isinstance(b, Buffer))))

    np.nan_to_num(f, copy=False, nan=0.0, posinf=64.0, neginf=0.0)
    return f.astype(np.float32)


def extract_batch(funcs: Sequence[LoopFunc] | Iterable[LoopFunc]) -> np.ndarray:
    """Features of several kernels: shape (len(funcs), len(FEATURE_NAMES)), float32."""
    rows = [extract_features(fn) for fn in funcs]
    if not rows:
        return np.zeros((0, NUM_FEATURES), dtype=np.float32)
    return np.stack(rows)
