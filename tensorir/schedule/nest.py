"""A stage's loop nest as lowering builds it (lower.py): one variable per leaf loop
(outermost first), the leaves' extents, and each root axis's tensor coordinate in terms of
those variables.

    make_nest(s[B], None, set(), {})    # B: 64 elements, s[B].split(i, factor=4)
    -> vars i_o, i_i; extents 16, 4; coords {i: i_o*4 + i_i}

The extents come forward from the root axes' through the stage's splits and fuses
(relations.py); the root values come back from the leaf variables. A stage computed at
another's loop covers a `Region` of its tensor (per dimension: first index, extent), so its
coordinates are offset by the region's start. Guards (`Nest.conds`): a split whose factor
does not divide its extent, a region that can run past the tensor's edge. GPU: a leaf bound
to a tag an enclosing loop already binds has no loop of its own; it shares that loop's
variable (a cooperative load), guarded when narrower.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tensorir.loop.ir import Const, Expr, Var
from tensorir.loop.visitor import walk
from tensorir.schedule.relations import Fuse, Split, split_extents
from tensorir.schedule.schedule import ScheduleError, Stage
from tensorir.schedule.te import IterVar

Region = tuple[tuple[Expr, int], ...]  # per dimension: (first index, extent)


@dataclass
class Nest:
    """The loops of one stage: leaves (outermost first) and the root axes' coordinates."""

    stage: Stage
    leaves: list[IterVar]
    vars: list[Var]
    extents: list[int]
    coords: dict[IterVar, Expr]  # root axis -> tensor coordinate, in terms of `vars`
    conds: list[Expr]
    merged: set[int]  # positions bound to a GPU tag an enclosing loop binds: no loop of their own

    def level(self, e: Expr) -> int:
        """Position of the innermost of this nest's loops that `e` uses (-1: none)."""
        used = {n for n in walk(e) if isinstance(n, Var)}
        return max((p for p, v in enumerate(self.vars) if v in used), default=-1)


def _unique(name: str, taken: set[str]) -> str:
    out, n = name, 1
    while out in taken:
        out, n = f"{name}_{n}", n + 1
    taken.add(out)
    return out


def _leaf_extents(st: Stage, root_ext: dict[IterVar, int]) -> dict[IterVar, int]:
    ext = dict(root_ext)
    for rel in st.relations:
        if isinstance(rel, Split):
            ext[rel.outer], ext[rel.inner] = split_extents(ext[rel.parent], rel.factor, rel.nparts)
        else:
            n = 1
            for a in rel.axes:
                n *= ext[a]
            ext[rel.fused] = n
    return ext


def _root_values(st: Stage, ext: dict[IterVar, int], vals: dict[IterVar, Expr]) -> list[Expr]:
    """Fill `vals` (leaf values given) back to the roots; returns the split guards."""
    guards = []
    for rel in reversed(st.relations):
        if isinstance(rel, Split):
            vals[rel.parent] = vals[rel.outer] * ext[rel.inner] + vals[rel.inner]
            if ext[rel.outer] * ext[rel.inner] != ext[rel.parent]:
                guards.append(vals[rel.parent] < ext[rel.parent])
        elif isinstance(rel, Fuse):
            rest = vals[rel.fused]
            for a in reversed(rel.axes[1:]):
                vals[a] = rest % ext[a]
                rest = rest // ext[a]
            vals[rel.axes[0]] = rest
    return guards


def make_nest(
    st: Stage, region: Region | None, taken: set[str], bound: Mapping[str, tuple[Var, int]]
) -> Nest:
    """The nest of `st` over `region` (None: the whole tensor); loop names avoid `taken`
    (the enclosing loops'), `bound` holds the GPU tags of the enclosing loops: (var, extent)."""
    shape = st.tensor.shape
    region = region or tuple((Const(0), d) for d in shape)
    root_ext = {a: e for a, (_, e) in zip(st.op.axis, region, strict=True)}
    root_ext.update({a: a.extent for a in st.op.reduce_axis})
    ext = _leaf_extents(st, root_ext)
    used = set(taken)
    vars_, merged, guards = _leaf_vars(st, ext, used, bound)
    vals: dict[IterVar, Expr] = dict(zip(st.leaves, vars_, strict=True))
    conds = guards + _root_values(st, ext, vals)
    coords = {a: vals[a] for a in st.op.reduce_axis}
    for a, (base, e), full in zip(st.op.axis, region, shape, strict=True):
        coords[a] = base + vals[a] if e < full or base != Const(0) else vals[a]
        if e < full:  # a compute_at region may run past the tensor's edge
            conds += [coords[a] < full, coords[a] >= 0]
    return Nest(st, list(st.leaves), vars_, [ext[a] for a in st.leaves], coords, conds, merged)


def _leaf_vars(
    st: Stage, ext: dict[IterVar, int], used: set[str], bound: Mapping[str, tuple[Var, int]]
) -> tuple[list[Var], set[int], list[Expr]]:
    """A variable per leaf: a fresh one, or the enclosing GPU loop's for a leaf bound to a
    tag already bound outside (guarded when the leaf is narrower than that launch)."""
    vars_: list[Var] = []
    merged: set[int] = set()
    guards: list[Expr] = []
    for p, a in enumerate(st.leaves):
        tag = st.threads.get(a)
        if tag not in bound:
            vars_.append(Var(_unique(a.name, used)))
            continue
        var, n = bound[tag]
        if ext[a] > n:
            raise ScheduleError(
                f"lower: axis {a.name} of {st.name} has {ext[a]} iterations bound to {tag}, "
                f"which the enclosing loop launches {n} wide; split it by {n} first"
            )
        vars_.append(var)
        merged.add(p)
        if ext[a] < n:
            guards.append(var < ext[a])
    return vars_, merged, guards
