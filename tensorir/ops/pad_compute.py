"""Compute definition for pad (reference in pad.py): constant / reflect / edge / wrap.

As in the reference, negative pads crop first and the other modes then pad the
cropped ("kept") region. Per axis, output index o sits at q = o - max(begin, 0) in the
kept region [lo, lo + n):

    constant  x[lo + q] if every axis has 0 <= q < n, else `value`
    edge      x[lo + clamp(q, 0, n - 1)]
    reflect   x[lo + m], m = q mod 2(n - 1) mirrored into [0, n)   (numpy "reflect")
    wrap      x[lo + q mod n]

Axes without padding keep the affine index lo + o, so when the last axis is not padded
the rows vectorize (`schedule_movement`); padding on the last axis stays scalar.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tensorir.ops.pad  # noqa: F401  (the reference registers the op first)
from tensorir.loop.ir import Const, Expr
from tensorir.ops.registry import register_compute
from tensorir.ops.tensor_compute import schedule_movement
from tensorir.schedule.te import Tensor, all_, compute, if_then_else, max_, min_


def _source(o: Expr, mode: str, before: int, lo: int, n: int) -> Expr:
    """Index into the input along one axis for output index `o` (modes other than constant)."""
    q = o - before if before else o
    if mode == "edge":
        m = min_(max_(q, 0), n - 1)
    elif mode == "wrap":
        m = q % n
    elif n == 1:  # reflect of a single element repeats it
        m = Const(0)
    else:
        period = q % (2 * (n - 1))  # mirror; the outer min only helps the bounds verifier
        m = min_(min_(period, 2 * (n - 1) - period), n - 1)
    return m + lo if lo else m


def _value(value: Any, dtype: str) -> Const:
    if dtype == "bool":
        return Const(bool(value), dtype)
    return Const(float(value) if dtype.startswith("float") else int(value), dtype)


@dataclass(frozen=True)
class _Axis:
    extent: int  # output length
    before: int  # padding in front of the kept region
    lo: int  # first kept input index
    n: int  # kept length

    @property
    def padded(self) -> bool:
        return self.extent != self.n

    def offset(self, o: Expr) -> Expr:
        """q: the output index relative to the kept region."""
        return o - self.before if self.before else o

    def plain(self, o: Expr) -> Expr:
        q = self.offset(o)
        return q + self.lo if self.lo else q

    def inside(self, o: Expr) -> list[Expr]:
        """Conditions for `o` to fall in the kept region."""
        q = self.offset(o)
        past_end = self.extent - self.before > self.n
        return ([q >= 0] if self.before else []) + ([q < self.n] if past_end else [])


def _axes(shape: Sequence[int], pads: Sequence[int]) -> list[_Axis]:
    r = len(shape)
    out = []
    for d, b, e in zip(shape, pads[:r], pads[r:], strict=True):
        lo = max(-b, 0)
        out.append(_Axis(d + b + e, max(b, 0), lo, d - lo - max(-e, 0)))
    return out


@register_compute("pad", schedule=schedule_movement)
def pad_compute(x: Tensor, pads: Sequence[int], mode: str = "constant", value: Any = 0) -> Tensor:
    axes = _axes(x.shape, pads)
    if not axes:
        return compute((), lambda: x[()], name="pad")

    def constant(*i: Expr) -> Expr:
        load = x[tuple(a.plain(o) for o, a in zip(i, axes, strict=True))]
        conds = [c for o, a in zip(i, axes, strict=True) for c in a.inside(o)]
        return if_then_else(all_(*conds), load, _value(value, x.dtype)) if conds else load

    def other(*i: Expr) -> Expr:
        return x[
            tuple(
                _source(o, mode, a.before, a.lo, a.n) if a.padded else a.plain(o)
                for o, a in zip(i, axes, strict=True)
            )
        ]

    return compute(tuple(a.extent for a in axes), constant if mode == "constant" else other, name="pad")
