"""Loop relations: how a stage's leaf loops derive from its root axes.

`Stage.split` and `Stage.fuse` (schedule.py) append one record each to `stage.relations`,
in order; lowering (nest.py) replays them forward for the leaves' extents and backward for
the root axes' values.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorir.schedule.te import IterVar


@dataclass(frozen=True)
class Split:
    """parent = outer * factor + inner (guarded when the factor does not divide)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None


@dataclass(frozen=True)
class Fuse:
    """fused enumerates `axes` row-major (the last one fastest)."""

    axes: tuple[IterVar, ...]
    fused: IterVar


def split_extents(extent: int, factor: int | None, nparts: int | None) -> tuple[int, int]:
    """(outer, inner) extents of a split."""
    if factor is not None:
        return -(-extent // factor), factor
    assert nparts is not None
    return nparts, -(-extent // nparts)
