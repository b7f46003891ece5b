"""Schedules: how each tensor of a computation is turned into loops.

`s = create_schedule([D])` makes one `Stage` per computed tensor (producers first);
`s[C]` is C's stage, `s[C].op.axis` / `.op.reduce_axis` its original axes. Primitives
change a stage's loop nest and are recorded in `s.trace` (see trace.py); an illegal
request raises `ScheduleError` saying why and records nothing.

Loop structure (split, fuse, reorder, tile; the split / fuse records: relations.py) and
loop kinds (vectorize, unroll, parallel) live on the stage; placement (compute_at,
compute_inline) and new stages (cache_write, pack) are in placement.py. `lower()` turns the
result into a LoopFunc.

    s[C].split(i, factor=4)                 for i_o in range(0, 16):
    for i in range(0, 64):          ->        for i_i in range(0, 4):
      C[i] = A[i]*2.0                           C[i_o*4 + i_i] = A[i_o*4 + i_i]*2.0
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tensorir.errors import TirError
from tensorir.loop.ir import ForKind
from tensorir.schedule.prefetch import PrefetchSpec
from tensorir.schedule.relations import Fuse, Split, split_extents
from tensorir.schedule.te import ComputeOp, IterVar, PlaceholderOp, Tensor
from tensorir.schedule.trace import Trace

MAX_LANES = 64  # widest vector a vectorized loop may become


class ScheduleError(TirError):
    """An illegal schedule request (the message says which and why)."""


F = TypeVar("F", bound=Callable[..., Any])


def traced(fn: F) -> F:
    """Record a successful call of a primitive in the schedule's trace (outermost call only)."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        sched = self if isinstance(self, Schedule) else self.schedule
        sched._depth += 1
        try:
            result = fn(self, *args, **kwargs)
        finally:
            sched._depth -= 1
        if sched._depth == 0:
            stage = None if self is sched else self.name
            sched.trace.record(fn.__name__, stage, args, kwargs, result, sched)
        return result

    wrapper.traced = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def positive_int(what: str, value: Any) -> int:
    """`value` as an int >= 1 (numpy integers accepted), else ScheduleError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ScheduleError(f"{what} must be a positive int, got {value!r}")
    return int(value)


class Stage:
    """The loop nest of one computed tensor."""

    def __init__(self, schedule: Schedule, tensor: Tensor, op: ComputeOp, scope: str = "global") -> None:
        self.schedule = schedule
        self.tensor = tensor
        self.op = op
        self.scope = scope
        self.leaves: list[IterVar] = [*op.axis, *op.reduce_axis]
        self.relations: list[Split | Fuse] = []
        self.kinds: dict[IterVar, ForKind] = {}
        self.threads: dict[IterVar, str] = {}  # GPU-bound leaves -> "group.x" ... "local.z"
        self.attach: tuple[Any, ...] = ("root",)  # ("inline",) | ("at", stage, axis)
        self.prefetches: list[PrefetchSpec] = []
        self.axes: dict[str, IterVar] = {a.name: a for a in self.leaves}

    def __repr__(self) -> str:
        return f"Stage({self.name}: {', '.join(a.name for a in self.leaves)})"

    @property
    def name(self) -> str:
        return self.tensor.name

    @property
    def is_output(self) -> bool:
        return any(t is self.tensor for t in self.schedule.outputs)

    @property
    def inlined(self) -> bool:
        return self.attach[0] == "inline"

    def get_axis(self, name: str) -> IterVar:
        """The axis called `name` (current or split/fused away)."""
        if name not in self.axes:
            raise ScheduleError(f"stage {self.name} has no axis {name!r}")
        return self.axes[name]

    # ---- checks ------------------------------------------------------------------------
    def check_leaf(self, axis: Any, prim: str) -> None:
        """`axis` must be one of this stage's current loops."""
        if not isinstance(axis, IterVar):
            raise ScheduleError(f"{prim}: expected an axis of stage {self.name}, got {axis!r}")
        if self.inlined:
            raise ScheduleError(f"{prim}: stage {self.name} is inlined and has no loops")
        if any(a is axis for a in self.leaves):
            return
        if any(a is axis for a in self.axes.values()):
            raise ScheduleError(
                f"{prim}: axis {axis.name} of stage {self.name} was already split or fused away; "
                "use the axes that replaced it"
            )
        owner = self.schedule.axis_owner(axis, strict=False)
        where = f"stage {owner.name}" if owner else "no stage of this schedule"
        raise ScheduleError(f"{prim}: axis {axis.name} belongs to {where}, not to stage {self.name}")

    def _new_axis(self, name: str, extent: int, kind: str) -> IterVar:
        base, n = name, 1
        while name in self.axes:
            name, n = f"{base}{n}", n + 1
        iv = IterVar(name, extent, kind)
        self.axes[name] = iv
        return iv

    def _replace_leaves(self, old: Sequence[IterVar], new: Sequence[IterVar]) -> None:
        pos = min(i for i, a in enumerate(self.leaves) if any(a is o for o in old))
        keep = [a for a in self.leaves if not any(a is o for o in old)]
        self.leaves = keep[:pos] + list(new) + keep[pos:]

    def _check_unannotated(self, axis: IterVar, prim: str) -> None:
        if axis in self.kinds:
            raise ScheduleError(
                f"{prim}: axis {axis.name} is already {self.kinds[axis].value}; annotate after {prim}"
            )

    # ---- loop structure ----------------------------------------------------------------
    @traced
    def split(
        self, axis: IterVar, factor: int | None = None, nparts: int | None = None
    ) -> tuple[IterVar, IterVar]:
        """axis -> (outer, inner) with axis = outer*factor + inner; a guard skips the tail
        when `factor` does not divide the extent. Give `factor` or `nparts` (outer extent)."""
        self.check_leaf(axis, "split")
        self._check_unannotated(axis, "split")
        if (factor is None) == (nparts is None):
            raise ScheduleError("split: give exactly one of factor= and nparts=")
        if factor is not None:
            factor = positive_int("split factor", factor)
        else:
            nparts = positive_int("split nparts", nparts)
        outer_ext, inner_ext = split_extents(axis.extent, factor, nparts)
        outer = self._new_axis(axis.name + "_o", outer_ext, axis.kind)
        inner = self._new_axis(axis.name + "_i", inner_ext, axis.kind)
        self.relations.append(Split(axis, outer, inner, factor, nparts))
        self._replace_leaves([axis], [outer, inner])
        return outer, inner

    @traced
    def fuse(self, *axes: IterVar) -> IterVar:
        """Adjacent loops (outermost first) -> one loop over their product.

        for i in range(0, 10):                    for i_j_f in range(0, 60):
          for j in range(0, 6):          ->         B[i_j_f] = A[i_j_f]*2.0
            B[i*6 + j] = A[i*6 + j]*2.0
        """
        if len(axes) < 2:
            raise ScheduleError("fuse: give at least two axes")
        for a in axes:
            self.check_leaf(a, "fuse")
            self._check_unannotated(a, "fuse")
        pos = [next(i for i, x in enumerate(self.leaves) if x is a) for a in axes]
        if pos != list(range(pos[0], pos[0] + len(axes))):
            names = [a.name for a in axes]
            raise ScheduleError(f"fuse: axes {names} are not adjacent loops in this order (reorder first)")
        if len({a.kind for a in axes}) > 1:
            raise ScheduleError("fuse: cannot fuse a data axis with a reduction axis")
        extent = 1
        for a in axes:
            extent *= a.extent
        fused = self._new_axis("_".join(a.name for a in axes) + "_f", extent, axes[0].kind)
        self.relations.append(Fuse(tuple(axes), fused))
        self._replace_leaves(list(axes), [fused])
        return fused

    @traced
    def reorder(self, *axes: IterVar) -> None:
        """Put `axes` in this order, in the positions they occupy together.

        for i in range(0, 10):                    for j in range(0, 6):
          for j in range(0, 6):          ->         for i in range(0, 10):
            B[i*6 + j] = ...                          B[i*6 + j] = ...
        """
        for a in axes:
            self.check_leaf(a, "reorder")
        if len({id(a) for a in axes}) != len(axes):
            raise ScheduleError("reorder: an axis is given twice")
        pos = sorted(next(i for i, x in enumerate(self.leaves) if x is a) for a in axes)
        for p, a in zip(pos, axes, strict=True):
            self.leaves[p] = a

    @traced
    def tile(self, x: IterVar, y: IterVar, x_factor: int, y_factor: int) -> tuple[IterVar, ...]:
        """split x and y, then order (x_o, y_o, x_i, y_i); returns those four axes.

        for i in range(0, 8):                     for i_o in range(0, 2):
          for j in range(0, 8):          ->         for j_o in range(0, 4):
            C[i*8 + j] = ...                          for i_i in range(0, 4):
                                                        for j_i in range(0, 2):
                                                          C[i_o*32 + i_i*8 + j_o*2 + j_i] = ...
        """
        xo, xi = self.split(x, factor=x_factor)
        yo, yi = self.split(y, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    # ---- loop kinds --------------------------------------------------------------------
    def _annotate(self, axis: IterVar, kind: ForKind, prim: str) -> None:
        self.check_leaf(axis, prim)
        old = self.kinds.get(axis)
        if old is not None and old is not kind:
            raise ScheduleError(f"{prim}: axis {axis.name} is already {old.value}")
        self.kinds[axis] = kind

    @traced
    def vectorize(self, axis: IterVar) -> None:
        """The innermost data loop of constant extent (<= MAX_LANES) -> vector instructions.

        for j in range(0, 8):            ->       B[ramp(i*8, 1, 8)] = A[ramp(i*8, 1, 8)] + broadcast(b[i], 8)
          B[i*8 + j] = A[i*8 + j] + b[i]
        (a loop that cannot be vectorized, e.g. under a tail guard, stays serial)
        """
        self.check_leaf(axis, "vectorize")
        if axis is not self.leaves[-1]:
            raise ScheduleError(
                f"vectorize: axis {axis.name} is not the innermost loop of stage {self.name} "
                f"(that is {self.leaves[-1].name}); reorder or split first"
            )
        if axis.kind == "reduce":
            raise ScheduleError(f"vectorize: {axis.name} is a reduction axis (lanes would race)")
        if not isinstance(axis.extent, int):
            raise ScheduleError(f"vectorize: axis {axis.name} has no constant extent")
        if axis.extent > MAX_LANES:
            raise ScheduleError(
                f"vectorize: axis {axis.name} has {axis.extent} iterations, over {MAX_LANES} lanes; split it"
            )
        self._annotate(axis, ForKind.VECTORIZED, "vectorize")

    @traced
    def unroll(self, axis: IterVar) -> None:
        """Replicate the loop body per iteration (expanded by lowering up to 64 copies).

        for k in range(0, 2):            ->       C[i] = C[i] + A[i*2]
          C[i] = C[i] + A[i*2 + k]                C[i] = C[i] + A[i*2 + 1]
        """
        self._annotate(axis, ForKind.UNROLLED, "unroll")

    @traced
    def prefetch(
        self,
        tensor: Tensor,
        at: IterVar,
        terms: Sequence[Sequence[Any]],
        offset: int,
        count: int,
        stride: int,
    ) -> None:
        """At the top of each iteration of loop `at`, prefetch `count` elements of input
        `tensor`, `stride` apart, from offset + sum(mul * (coord(axis) // div)) over `terms`
        [(root axis, mul, div)] (prefetch.py)."""
        self.check_leaf(at, "prefetch")
        roots = [*self.op.axis, *self.op.reduce_axis]
        spec_terms = []
        for axis, mul, div in terms:
            if not any(axis is a for a in roots):
                raise ScheduleError(
                    f"prefetch: {getattr(axis, 'name', axis)!r} is no root axis of {self.name}"
                )
            spec_terms.append((axis, int(mul), positive_int("prefetch divisor", div)))
        n, step = positive_int("prefetch count", count), positive_int("prefetch stride", stride)
        self.prefetches.append(PrefetchSpec(tensor, at, tuple(spec_terms), int(offset), n, step))

    @traced
    def parallel(self, axis: IterVar) -> None:
        """Run iterations on several threads (data axes only): `for i in parallel(0, 4):`."""
        self.check_leaf(axis, "parallel")
        if axis.kind == "reduce":
            raise ScheduleError(f"parallel: {axis.name} is a reduction axis (threads would race)")
        self._annotate(axis, ForKind.PARALLEL, "parallel")

    @traced
    def bind(self, axis: IterVar, tag: str) -> None:
        """Map a data loop onto the GPU launch: "group.x|y|z" (work-group ids) or
        "local.x|y|z" (work-item ids in a group); the loop's extent is the launch size there.
        A stage computed at a loop inside GPU loops that binds the same tag shares the
        enclosing work-item id (a cooperative load), guarded when its extent is smaller.

        for i in range(0, 1024):         ->       for i_o in gpu_block(0, 16, "group.x"):
          B[i] = A[i]*2.0                           for i_i in gpu_thread(0, 64, "local.x"):
                                                      B[i_o*64 + i_i] = A[i_o*64 + i_i]*2.0
        (after `i_o, i_i = s[B].split(i, factor=64)`)

        A reduction axis bound to "local.*" is a cross-work-item (tree) reduction: each
        work-item reduces its slice into a private partial, a tree over a shared array
        combines the partials and every work-item gets the result (allreduce.py).
        """
        from tensorir.schedule.bind import bind

        bind(self, axis, tag)

    # ---- placement (placement.py) ------------------------------------------------------
    @traced
    def compute_at(self, stage: Stage, axis: IterVar) -> None:
        """Compute this tensor inside `stage`'s loop `axis`, only the region it needs there
        (before/after: placement.py)."""
        from tensorir.schedule.placement import compute_at

        compute_at(self, stage, axis)

    @traced
    def compute_inline(self) -> None:
        """Substitute this (elementwise) tensor's expression into its consumers.

        B[i] = A[i] + 1.0                ->       C[i] = (A[i] + 1.0)*2.0
        C[i] = B[i]*2.0
        """
        from tensorir.schedule.placement import compute_inline

        compute_inline(self)


class Schedule:
    """Stages of every computed tensor reachable from `outputs`, producers first."""

    def __init__(self, outputs: Sequence[Tensor]) -> None:
        self.outputs: tuple[Tensor, ...] = tuple(outputs)
        self.stages: list[Stage] = []
        self.tensors: dict[str, Tensor] = {}
        self.trace = Trace()
        self.storage: dict[str, str] = {}  # input name -> "image" (set_storage); others are buffers
        self._depth = 0
        for t in _topo_order(self.outputs):
            self._add_tensor(t)
            if isinstance(t.op, ComputeOp):
                self.stages.append(Stage(self, t, t.op))

    def _add_tensor(self, t: Tensor) -> None:
        if t.name in self.tensors and self.tensors[t.name] is not t:
            raise ScheduleError(f"two different tensors are named {t.name!r}; names must be unique")
        self.tensors[t.name] = t

    def __getitem__(self, key: Tensor | str) -> Stage:
        name = key if isinstance(key, str) else key.name
        for st in self.stages:
            if st.name == name and (isinstance(key, str) or st.tensor is key):
                return st
        if name in self.tensors and isinstance(self.tensors[name].op, PlaceholderOp):
            raise ScheduleError(f"{name} is a placeholder (an input); it has no stage")
        raise ScheduleError(f"no stage for {name!r} in this schedule")

    def tensor(self, name: str) -> Tensor:
        if name not in self.tensors:
            raise ScheduleError(f"no tensor {name!r} in this schedule")
        return self.tensors[name]

    def fresh_name(self, base: str) -> str:
        name, n = base, 1
        while name in self.tensors:
            name, n = f"{base}{n}", n + 1
        return name

    def axis_owner(self, axis: IterVar, strict: bool = True) -> Any:
        for st in self.stages:
            if any(a is axis for a in st.axes.values()):
                return st
        if strict:
            raise ScheduleError(f"axis {axis.name} belongs to no stage of this schedule")
        return None

    def consumers(self, t: Tensor) -> list[Stage]:
        """Non-inlined stages that read `t` (directly or through inlined stages)."""
        return [st for st in self.stages if not st.inlined and any(x is t for x in self.reads(st))]

    def reads(self, st: Stage) -> list[Tensor]:
        """Tensors `st` reads once inlined stages are substituted."""
        out: list[Tensor] = []
        for t in st.op.input_tensors():
            src = self.stage_of(t)
            inner = self.reads(src) if src is not None and src.inlined else [t]
            out.extend(x for x in inner if not any(x is y for y in out))
        return out

    def stage_of(self, t: Tensor) -> Stage | None:
        return next((st for st in self.stages if st.tensor is t), None)

    @traced
    def cache_write(self, tensor: Tensor, scope: str = "local") -> Tensor:
        """Compute `tensor` into a new `scope` buffer `<name>_<scope>`, then copy it out;
        with compute_at of the cache this is register blocking.

        C[i*4 + j] = 0.0                          C_local[i*4 + j] = 0.0
        for k in range(0, 3):            ->       for k in range(0, 3):
          C[i*4 + j] = C[i*4 + j] + ...             C_local[i*4 + j] = C_local[i*4 + j] + ...
                                                  ...
                                                  C[i*4 + j] = C_local[i*4 + j]
        """
        from tensorir.schedule.placement import cache_write

        return cache_write(self, tensor, scope)

    @traced
    def cache_read(self, tensor: Tensor, scope: str, readers: Sequence[Stage]) -> Tensor:
        """A copy `<name>_<scope>` of `tensor` that `readers` read instead; compute it at a
        loop of the reader. Scope "shared" (GPU work-group memory) covers what every
        work-item of the group reads there, loaded cooperatively (bind its loops to the
        reader's local.* tags), between barriers; "local" is per work-item.

        for k_o in range(0, 8):                   for k_o in range(0, 8):
          C[i] = C[i] + A[k_o*4 + ...]   ->         barrier("shared")
                                                    A_shared[tx] = A[k_o*4 + tx]
                                                    barrier("shared")
                                                    C[i] = C[i] + A_shared[...]
        """
        from tensorir.schedule.placement import cache_read

        return cache_read(self, tensor, scope, readers)

    @traced
    def set_storage(self, tensor: Tensor, storage: str) -> None:
        """Store input `tensor` as "buffer" (the default) or "image": a read-only OpenCL
        image2d_t whose texel (x, y) holds elements [4*(y*width + x), +4) of the row-major
        tensor, height = shape[0] (codegen/opencl_image.py renders its loads).

        def k(w: f32[2,3,4], ...)     ->     def k(w: f32[2,3,4] "image", ...)
        """
        if not isinstance(tensor.op, PlaceholderOp) or self.tensors.get(tensor.name) is not tensor:
            raise ScheduleError(f"set_storage: {tensor.name} is not an input of this schedule")
        if storage not in ("buffer", "image"):
            raise ScheduleError(f"set_storage: unknown storage {storage!r} (buffer or image)")
        row = functools.reduce(lambda a, b: a * b, tensor.shape[1:], 1)
        if storage == "image" and (len(tensor.shape) < 2 or row % 4):
            raise ScheduleError(f"set_storage: {tensor.name}{list(tensor.shape)}: no rows of 4-lane texels")
        if storage == "image":
            self.storage[tensor.name] = storage
        else:
            self.storage.pop(tensor.name, None)

    @traced
    def pack(self, tensor: Tensor, axis: int, factor: int) -> Tensor:
        """A copy of `tensor` with dimension `axis` split in (axis // factor, ..., axis % factor),
        the inner part moved last (NCHW -> NCHW[x]c, zero-padded when factor does not divide);
        its consumers read the copy. OIHW -> OIHW[x]i[y]o is pack(W, 1, x) then pack(.., 0, y).

        Y[...] = X[c*9 + h*3 + w]*2.0    ->       X_pack[c_o*18 + h*6 + w*2 + c_i] = X[(c_o*2 + c_i)*9 + ...]
                                                  Y[...] = X_pack[c//2*18 + h*6 + w*2 + c%2]*2.0
        """
        from tensorir.schedule.placement import pack

        return pack(self, tensor, axis, factor)


def _topo_order(outputs: Sequence[Tensor]) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        if id(t) in seen:
            return
        seen.add(id(t))
        if isinstance(t.op, ComputeOp):
            for x in t.op.input_tensors():
                visit(x)
        order.append(t)

    for t in outputs:
        if not isinstance(t, Tensor):
            raise ScheduleError(f"create_schedule takes tensors, got {t!r}")
        visit(t)
    return order


def create_schedule(outputs: Tensor | Sequence[Tensor]) -> Schedule:
    """A default schedule (one loop nest per tensor, in order) for computing `outputs`."""
    return Schedule([outputs] if isinstance(outputs, Tensor) else outputs)
