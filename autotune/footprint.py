"""Touched bytes of the accesses a loop walk collected (autotune/loop_walk.py): footprints of
loops and of the whole kernel, and how an index moves along its innermost loop.

Touched elements of one access, over a set S of varying loops: the index is split into an
affine part sum(c_v * v) (+ a ramp for vector accesses) and non-affine atoms (`//`, `%`,
loads...). Loops of S the index does not mention contribute nothing (reuse). Affine loops
with the same |coefficient| merge (extent e1 + e2 - 1: sliding windows such as
`(oh + kh) * W`); then touched = min(product of extents, span of the addresses) times the
extents of the loops of S in non-affine atoms, capped at the buffer size. Accesses to a
buffer with the same affine signature and different constant offsets (unrolled copies)
merge as one window widened by the offsets. The *footprint* of a loop is the sum over
buffers of these touched bytes with S = that loop and the loops inside it.
"""

from __future__ import annotations

from collections.abc import Iterable

from autotune.loop_walk import Access, Loop, dtype_bytes
from tensorir.loop.ir import Buffer


def _touched(a: Access, inner: set[Loop] | None) -> float:
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


def footprint(accs: Iterable[Access], inner: set[Loop] | None) -> tuple[float, dict[str, float]]:
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
        per_buf[name] = v = min(elems, float(max(buf.size, 1))) * dtype_bytes(buf.dtype)
        total += v
    return total, per_buf


def innermost_stride(a: Access) -> int:
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
