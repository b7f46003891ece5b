"""Lowering: a Schedule -> one LoopFunc.

    lower(s, [A, B, C], name="matmul")

Parameters are flat buffers in the order given. Each root stage becomes a loop nest (in
stage order; its loop variables, extents and guards: nest.py); a stage attached with
compute_at is built inside its consumer's loop over the region that loop reads (interval
bounds over the inner loops' ranges: bounds.py), into a local buffer of that size unless it
is an argument. A reduction is an init nest (over the data loops that follow the first
reduction loop) then an update nest:

    for i in range(0, 64):
      for j in range(0, 16):
        C[i*16 + j] = 0.0
        for k in range(0, 32):
          C[i*16 + j] = C[i*16 + j] + A[i*32 + k]*B[k*16 + j]

Intermediates not in the arguments become extra *scratch* parameters after them (scope
"global": the caller passes workspace memory, `func.attrs["num_scratch"]` says how many);
"local" buffers (cache_write, compute_at) are allocated inside the kernel.

GPU: a leaf bound with `bind` is a `gpu_block` / `gpu_thread` loop carrying its tag; a stage
computed inside GPU loops that binds a tag bound outside shares that loop's variable
(nest.py). A "shared" stage (cache_read) covers the region the whole work-group reads there
and sits between barriers. A reduction axis bound to local.* is a tree over the work-items
(allreduce.py). A nest's guards (non-dividing splits, regions that can run past a tensor's
edge: nest.py) become `If`s just inside the innermost loop they use. An `if_then_else`
whose arms may read out of bounds (or divide an integer by a variable) becomes an `If`
around the store (a `Select` evaluates both arms). Then: simplify, vectorize, unroll
(<= 64 iterations expanded), simplify, verify.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tensorir.loop.arith import Range
from tensorir.loop.ir import (
    Allocate,
    Barrier,
    BinOp,
    Buffer,
    Cast,
    Const,
    Expr,
    For,
    ForKind,
    If,
    Load,
    LoopFunc,
    Seq,
    Stmt,
    Store,
    Var,
    as_expr,
)
from tensorir.loop.passes import loop_passes
from tensorir.loop.simplify import simplify
from tensorir.loop.verify import verify
from tensorir.loop.visitor import map_exprs, substitute, walk
from tensorir.schedule.allreduce import assemble_allreduce, bound_reduce_pos
from tensorir.schedule.bounds import hoist_selects, sym_bound, window
from tensorir.schedule.nest import Nest, Region, make_nest
from tensorir.schedule.prefetch import PrefetchSpec, prefetch_stmt
from tensorir.schedule.schedule import MAX_LANES, Schedule, ScheduleError, Stage
from tensorir.schedule.te import IterVar, PlaceholderOp, Reduce, Tensor, TensorLoad

COMBINE = {"sum": "+", "prod": "*", "max": "max", "min": "min"}
Producers = dict[int, list[tuple[Buffer | None, Stmt]]]  # loop position -> (buffer to allocate, stmt)
Conds = dict[int, list[Expr]]  # loop position -> guards (position -1: around the whole nest)


@dataclass
class _Realized:
    buffer: Buffer
    bases: tuple[Expr, ...]  # tensor coordinates of the buffer's element 0
    place: Callable[..., Sequence[Expr]] | None = None  # tensor coordinates -> the buffer's (scan.py)


def flatten(index: Sequence[Expr], shape: Sequence[int]) -> Expr:
    """Row-major flat index of `index` into `shape`."""
    if not index:
        return Const(0)
    acc = index[0]
    for i, d in zip(index[1:], shape[1:], strict=True):
        acc = acc * d + i
    return acc


def _offset(i: Expr, base: Expr) -> Expr:
    return i if base == Const(0) else i - base


def _all(conds: Sequence[Expr]) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = BinOp("and", out, c)
    return out


def _loads_of(e: Expr, t: Tensor) -> list[TensorLoad]:
    return [n for n in walk(e) if isinstance(n, TensorLoad) and n.tensor is t]


def _empty_input(t: object) -> bool:
    return isinstance(t, Tensor) and isinstance(t.op, PlaceholderOp) and 0 in t.shape


# ---- the lowerer ---------------------------------------------------------------------
class _Lowerer:
    def __init__(self, sched: Schedule, args: Sequence[Tensor]) -> None:
        self.sched = sched
        self.args = list(args)
        self.realized: dict[int, _Realized] = {}
        self.ranges: dict[Expr, Range] = {}
        self.bodies: dict[int, Expr] = {}
        storage = sched.storage  # "image" for inputs read as OpenCL images (set_storage)
        self.params = [Buffer(t.name, t.shape, t.dtype, storage.get(t.name, "global")) for t in self.args]
        self.scratch: list[Buffer] = []  # root intermediates: workspace the caller passes
        self.temps: list[Buffer] = []
        self.bound: dict[str, tuple[Var, int]] = {}  # GPU tags of the enclosing loops: (var, extent)
        self._check_args()

    def _is_arg(self, t: Tensor) -> bool:
        return any(a is t for a in self.args)

    def _unread_ok(self, t: object) -> bool:
        """Whether argument `t` may be absent from the schedule (no stage reads it)."""
        return _empty_input(t)

    def _check_args(self) -> None:
        names = [getattr(t, "name", None) for t in self.args]
        for t in self.args:
            if self._unread_ok(t) and t.name not in self.sched.tensors:
                continue  # an input without elements is never read, so no stage mentions it
            if not isinstance(t, Tensor) or self.sched.tensors.get(t.name) is not t:
                raise ScheduleError(f"lower: argument {t!r} is not a tensor of this schedule")
            st = self.sched.stage_of(t)
            if st is not None and st.inlined:
                raise ScheduleError(f"lower: {t.name} is inlined, so it cannot be an argument")
        if len(set(names)) != len(names):
            raise ScheduleError(f"lower: arguments {names} repeat a name")
        for t in self.sched.outputs:
            if not self._is_arg(t):
                raise ScheduleError(f"lower: output {t.name} is not among the arguments")
        for st in self.sched.stages:
            for t in [] if st.inlined else self.sched.reads(st):
                if isinstance(t.op, PlaceholderOp) and not self._is_arg(t):
                    raise ScheduleError(
                        f"lower: input {t.name} (read by {st.name}) is not among the arguments"
                    )

    # ---- bodies ------------------------------------------------------------------------
    def body_of(self, st: Stage) -> Expr:
        """The stage's expression with inlined stages substituted."""
        key = id(st)
        if key not in self.bodies:

            def inline(e: Expr) -> Expr | None:
                if isinstance(e, TensorLoad):
                    src = self.sched.stage_of(e.tensor)
                    if src is not None and src.inlined:
                        return substitute(self.body_of(src), dict(zip(src.op.axis, e.indices, strict=True)))
                return None

            self.bodies[key] = map_exprs(st.op.body, inline)
        return self.bodies[key]

    def to_loads(self, e: Expr) -> Expr:
        def conv(n: Expr) -> Expr | None:
            if isinstance(n, TensorLoad):
                r = self.realized[id(n.tensor)]
                return Load(r.buffer, self.flat_index(r, n.indices))
            if isinstance(n, IterVar | Reduce):
                raise ScheduleError(f"lower: {n!r} left in an expression (a reduction not at the top?)")
            return None

        return map_exprs(e, conv)

    def flat_index(self, r: _Realized, coords: Sequence[Expr]) -> Expr:
        """The flat index into `r.buffer` of the tensor element at `coords`."""
        if r.place is not None:
            placed = [as_expr(c) for c in r.place(*coords)]
            placed = [c if c.dtype == "int64" else Cast("int64", c) for c in placed]
            return self.to_loads(flatten(placed, r.buffer.shape))
        return flatten([_offset(c, b) for c, b in zip(coords, r.bases, strict=True)], r.buffer.shape)

    # ---- whole function ----------------------------------------------------------------
    def run(self) -> Stmt:
        for t, buf in zip(self.args, self.params, strict=True):
            self.realized[id(t)] = _Realized(buf, tuple(Const(0) for _ in t.shape))
        for st in self.sched.stages:
            if st.attach[0] == "at" and st.attach[1].inlined:
                raise ScheduleError(f"lower: {st.name} is computed at {st.attach[1].name}, which is inlined")
            if st.attach == ("root",) and st.scope == "shared":
                raise ScheduleError(
                    f"lower: {st.name} is in shared memory; compute it at a loop inside GPU loops"
                )
            if st.attach == ("root",) and not self._is_arg(st.tensor):
                buf = Buffer(st.name, st.tensor.shape, st.tensor.dtype, st.scope)
                self.realized[id(st.tensor)] = _Realized(buf, tuple(Const(0) for _ in st.tensor.shape))
                if buf.scope == "global":
                    self.scratch.append(buf)
                else:
                    self.temps.append(buf)
        body: Stmt = Seq(
            tuple(self.stage_stmt(st, None, set()) for st in self.sched.stages if st.attach == ("root",))
        )
        for buf in reversed(self.temps):
            body = Allocate(buf, body)
        return body

    # ---- one stage ---------------------------------------------------------------------
    def stage_stmt(self, st: Stage, region: Region | None, taken: set[str]) -> Stmt:
        nest = make_nest(st, region, taken, self.bound)
        saved = dict(self.ranges)
        self.ranges.update({v: (0, e - 1) for v, e in zip(nest.vars, nest.extents, strict=True)})
        body = substitute(self.body_of(st), nest.coords)
        producers = self.producers(nest, body, taken)
        self._check_kinds(nest, producers)
        stmt = self.assemble(nest, body, producers)
        self.ranges = saved
        return stmt

    def _check_kinds(self, nest: Nest, producers: Producers) -> None:
        for p, leaf in enumerate(nest.leaves):
            if nest.stage.kinds.get(leaf) is not ForKind.VECTORIZED:
                continue
            where = f"vectorized axis {leaf.name} of {nest.stage.name}"
            if p != len(nest.leaves) - 1:
                raise ScheduleError(f"lower: {where} is no longer the innermost loop")
            if p in producers:
                raise ScheduleError(f"lower: {where} holds a compute_at stage, so it is not innermost")
            if nest.extents[p] > MAX_LANES:
                raise ScheduleError(f"lower: {where} has {nest.extents[p]} lanes (max {MAX_LANES})")

    def producers(self, nest: Nest, body: Expr, taken: set[str]) -> Producers:
        """Build the stages computed at this nest's loops: {position: [(buffer to allocate, stmt)]}.
        Regions are inferred consumers first, so a stage read by siblings computed at the same
        loop (softmax's exp, read by the sum and the output) covers what they read too."""
        attached = [p for p in self.sched.stages if p.attach[0] == "at" and p.attach[1] is nest.stage]
        pos_of = {id(p): self._attach_pos(p, nest) for p in attached}
        regions: dict[int, Region] = {}
        for p_st in reversed(attached):
            pos = pos_of[id(p_st)]
            # readers at this loop or deeper in the nest (their regions, relaxed over the loops
            # between, say what p_st must hold)
            siblings = [q for q in attached if q is not p_st and pos_of[id(q)] >= pos]
            self._check_consumers(p_st, nest.stage, siblings)
            readers = [(q, regions[id(q)]) for q in siblings if id(q) in regions and self._reads(q, p_st)]
            relax = self._group_vars(nest, pos) if p_st.scope == "shared" else {}
            regions[id(p_st)] = self.infer_region(p_st, nest, pos, body, readers, relax)
        out: Producers = {}
        for p_st in attached:
            pos, region = pos_of[id(p_st)], regions[id(p_st)]
            t, alloc = p_st.tensor, None
            if not self._is_arg(t):
                scope = "shared" if p_st.scope == "shared" else "local"
                alloc = Buffer(t.name, tuple(e for _, e in region), t.dtype, scope)
                self.realized[id(t)] = _Realized(alloc, tuple(b for b, _ in region))
            enclosing = taken | {v.name for v in nest.vars[: pos + 1]}  # names unique along a nest
            saved, self.bound = self.bound, self._bound_at(nest, pos)
            stmt = self.stage_stmt(p_st, region, enclosing)
            self.bound = saved
            if p_st.scope == "shared":
                stmt = self._with_barriers(nest, pos, stmt)
            out.setdefault(pos, []).append((alloc, stmt))
        return out

    def _bound_at(self, nest: Nest, pos: int) -> dict[str, tuple[Var, int]]:
        """GPU tags bound around loop `pos` of `nest`: (loop var, launch extent)."""
        bound = dict(self.bound)
        for q in range(pos + 1):
            tag = nest.stage.threads.get(nest.leaves[q])
            if tag is not None and q not in nest.merged:
                bound[tag] = (nest.vars[q], nest.extents[q])
        return bound

    def _group_vars(self, nest: Nest, pos: int) -> dict[Expr, Range]:
        """The work-item ids around loop `pos`, swept: a shared buffer holds what the
        whole work-group reads."""
        return {
            v: (0, n - 1) for tag, (v, n) in self._bound_at(nest, pos).items() if tag.startswith("local.")
        }

    def _with_barriers(self, nest: Nest, pos: int, stmt: Stmt) -> Stmt:
        """A cooperative load into shared memory: a barrier after it (its writes visible to
        the group) and, when a serial loop around repeats it, one before (nobody still reads
        the previous contents)."""
        gpu = (ForKind.GPU_BLOCK, ForKind.GPU_THREAD)
        repeated = any(
            nest.stage.kinds.get(nest.leaves[q]) not in gpu and nest.extents[q] > 1 for q in range(pos + 1)
        )
        return Seq((Barrier(), stmt, Barrier())) if repeated else Seq((stmt, Barrier()))

    def _attach_pos(self, p_st: Stage, nest: Nest) -> int:
        pos = next((i for i, a in enumerate(nest.leaves) if a is p_st.attach[2]), None)
        if pos is None:
            where = f"{nest.stage.name}'s axis {p_st.attach[2].name}"
            raise ScheduleError(f"lower: {p_st.name} is computed at {where}, which was split or fused away")
        return pos

    def _reads(self, q: Stage, p_st: Stage) -> bool:
        return any(t is p_st.tensor for t in self.sched.reads(q))

    def _check_consumers(self, p_st: Stage, target: Stage, siblings: list[Stage]) -> None:
        """Every reader of p_st must be the stage it is computed at or a sibling at that loop."""
        ok = [target, *siblings]
        others = [c.name for c in self.sched.consumers(p_st.tensor) if not any(c is o for o in ok)]
        if others:
            raise ScheduleError(
                f"lower: {p_st.name} is computed at a loop of {target.name} but also read by "
                f"{', '.join(others)} outside that loop"
            )

    def infer_region(
        self,
        p_st: Stage,
        nest: Nest,
        pos: int,
        body: Expr,
        readers: Sequence[tuple[Stage, Region]] = (),
        relax: dict[Expr, Range] | None = None,
    ) -> Region:
        """The region of p_st read under loop `pos` of `nest`: by the nest's body over its inner
        loops (and the `relax` vars over their ranges), and by each sibling stage in `readers`
        over its own region."""
        ranged: dict[Expr, Range] = {
            v: (0, e - 1) for v, e in zip(nest.vars[pos + 1 :], nest.extents[pos + 1 :], strict=True)
        }
        ranged.update(relax or {})
        items = [(a.indices, ranged) for a in _loads_of(body, p_st.tensor)]
        for q, q_region in readers:
            q_body, q_ranged = self._region_view(q, q_region)
            items += [(a.indices, {**ranged, **q_ranged}) for a in _loads_of(q_body, p_st.tensor)]
        region = []
        for d, full in enumerate(p_st.tensor.shape):
            bounds = [sym_bound(simplify(ix[d], {**self.ranges, **rng}), rng) for ix, rng in items]
            region.append(window([b for b in bounds if b is not None], len(bounds), full, self.ranges))
        return tuple(region)

    def _region_view(self, q: Stage, region: Region) -> tuple[Expr, dict[Expr, Range]]:
        """q's body with its axes as fresh variables sweeping `region` (reductions: full extent)."""
        mapping: dict[Expr, Expr] = {}
        ranged: dict[Expr, Range] = {}
        for a, (base, ext) in zip(q.op.axis, region, strict=True):
            v = Var(f"{q.name}.{a.name}")
            mapping[a], ranged[v] = (v if base == Const(0) else base + v), (0, ext - 1)
        for a in q.op.reduce_axis:
            v = Var(f"{q.name}.{a.name}")
            mapping[a], ranged[v] = v, (0, a.extent - 1)
        return substitute(self.body_of(q), mapping), ranged

    # ---- assembling loops ----------------------------------------------------------------
    def assemble(self, nest: Nest, body: Expr, producers: Producers) -> Stmt:
        st = nest.stage
        own = self.realized[id(st.tensor)]
        index = self.flat_index(own, [nest.coords[a] for a in st.op.axis])
        conds: Conds = {}
        for c in nest.conds:
            conds.setdefault(nest.level(c), []).append(c)
        positions = list(range(len(nest.leaves)))
        if isinstance(body, Reduce) and bound_reduce_pos(nest) is not None:  # a tree over work-items
            return assemble_allreduce(self, nest, body, producers, conds, own.buffer, index)
        if not isinstance(body, Reduce):
            inner: Stmt = hoist_selects(Store(own.buffer, index, self.to_loads(body)), self.ranges)
            return self.wrap(nest, -1, conds, {}, self.loops(nest, positions, inner, conds, producers))
        acc = Load(own.buffer, index)
        update = BinOp(COMBINE[body.combiner], acc, self.to_loads(body.source))
        first_red = next(p for p, a in enumerate(nest.leaves) if a.kind == "reduce")
        suffix = positions[first_red:]
        init_pos = [p for p in suffix if nest.leaves[p].kind == "data"]
        init = self.loops(nest, init_pos, Store(own.buffer, index, body.identity), conds, {})
        upd = self.loops(
            nest, suffix, hoist_selects(Store(own.buffer, index, update), self.ranges), conds, producers
        )
        stmt = self.loops(nest, positions[:first_red], Seq((init, upd)), conds, producers)
        return self.wrap(nest, -1, conds, {}, stmt)

    def loops(
        self, nest: Nest, positions: list[int], inner: Stmt, conds: Conds, producers: Producers
    ) -> Stmt:
        body = inner
        for p in reversed(positions):
            body = self.wrap(nest, p, conds, producers, body)
            if p in nest.merged:  # the enclosing GPU loop of that tag runs it
                continue
            leaf = nest.leaves[p]
            kind = nest.stage.kinds.get(leaf, ForKind.SERIAL)
            tag = nest.stage.threads.get(leaf, "")
            body = For(nest.vars[p], Const(0), Const(nest.extents[p]), kind, body, tag)
        return body

    def _prefetch(self, nest: Nest, p: int, spec: PrefetchSpec) -> Stmt:
        r = self.realized.get(id(spec.tensor))
        if r is None or not self._is_arg(spec.tensor):
            raise ScheduleError(f"lower: {nest.stage.name} prefetches {spec.tensor.name}, not an input")
        inner = _zero_inner(nest, p)
        coords = {a: simplify(substitute(c, inner)) for a, c in nest.coords.items()}
        return prefetch_stmt(spec, coords, r.buffer)

    def wrap(self, nest: Nest, p: int, conds: Conds, producers: Producers, body: Stmt) -> Stmt:
        """Producers computed at loop position p, then the guards of that level, around body;
        the prefetches asked for at that loop (prefetch.py) first."""
        for spec in nest.stage.prefetches if p >= 0 else ():
            if spec.at is nest.leaves[p]:
                body = Seq((self._prefetch(nest, p, spec), body))
        for buf, stmt in reversed(producers.get(p, [])):
            body = Seq((stmt, body))
            if buf is not None:
                body = Allocate(buf, body)
        if conds.get(p):
            body = If(_all(conds[p]), body)
        return body


def _zero_inner(nest: Nest, p: int) -> dict[Var, Expr]:
    return {v: Const(0, v.dtype) for v in nest.vars[p + 1 :]}


def check_barriers(s: Stmt, local: frozenset[Var] = frozenset(), guarded: bool = False) -> None:
    """Every work-item of a group must reach each barrier: none may sit under an `If` that
    depends on a work-item id (a guard of a non-dividing split bound to local.*)."""
    if isinstance(s, Barrier) and guarded:
        raise ScheduleError(
            "lower: a barrier is under a condition on the work-item id (a split bound to local.* "
            "that does not divide its extent?); work-items would diverge"
        )
    if isinstance(s, For):
        inner = local | {s.var} if s.kind is ForKind.GPU_THREAD else local
        check_barriers(s.body, inner, guarded)
    elif isinstance(s, If):
        dep = guarded or any(isinstance(n, Var) and n in local for n in walk(s.cond))
        for branch in (s.then, s.orelse):
            if branch is not None:
                check_barriers(branch, local, dep)
    elif isinstance(s, Seq):
        for x in s.stmts:
            check_barriers(x, local, guarded)
    elif isinstance(s, Allocate):
        check_barriers(s.body, local, guarded)


def lower(sched: Schedule, args: Sequence[Tensor], name: str = "main", *, passes: bool = True) -> LoopFunc:
    """The loop function computing `sched`; `args` (inputs and outputs) become its parameters.
    `passes=False` returns the IR before simplify / vectorize / unroll."""
    lw = _Lowerer(sched, args)
    return finish(lw, lw.run(), name, passes)


def finish(lw: _Lowerer, body: Stmt, name: str, passes: bool) -> LoopFunc:
    """The loop function of a lowered body: `lw`'s parameters and scratch, then (`passes`)
    the loop passes (loop/passes.py: loop_passes); barriers checked, verified."""
    func = LoopFunc(name, (*lw.params, *lw.scratch), body, {"num_scratch": len(lw.scratch)})
    if passes:
        func = loop_passes(func)
    barriers = any(isinstance(n, Barrier) for n in walk(func.body))
    # unsimplified, a compute_at region's edge guard (always true) may wrap a barrier
    check_barriers((simplify(func) if barriers and not passes else func).body)
    verify(func, check_bounds=passes)
    return func
