"""Compute definitions and default schedules for conv and conv_transpose (1-D, 2-D, 3-D;
strides, pads, dilations, groups; references in conv.py).

The padded input is a stage `<op>_pad` (zeros outside the image). Three shapes of compute,
chosen from the attributes alone (never the target), each with its schedule:

* `channels` (the general case): the reduction accumulates channels-last,
  acc[n, *out, g, j] = sum_{c, taps} pad[n, g*CG + c, *(out*s + tap*d)] * w[g*MG + j, c, *taps],
  and the output transposes it back, y[n, m, *out] = acc[n, *out, m // MG, m % MG] (+ bias).
  Schedule: output channels are the vector axis. Per (image, NR-channel block, row chunk) —
  the parallel loop — the weights of the block are packed (OIHW -> O/NR,I,H,W,NR: one
  contiguous NR-vector per tap), then for every run of OWB output pixels of a row the
  OWB x NR accumulators stay in registers while (c, taps) run outside: per tap one weight
  vector load, OWB input broadcasts, OWB x NR/lanes FMAs. Then the block is copied out.
* `pointwise` (1x1, stride 1, no pads, one group, pixels a multiple of 16): a batched GEMM
  W (M x C) @ X (C x HW) with the matmul kernel of matmul_compute.py (pixels vectorized).
* `spatial` (depthwise and other groups of fewer than 8 channels): acc[n, m, *out] in
  NCHW, the output's last spatial axis vectorized, a few rows unrolled, per channel.

conv_transpose is a stride-1 `channels` conv over its input upsampled by the strides and
padded (`<op>_up`) with the kernel flipped (`<op>_w`); it multiplies the inserted zeros.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tensorir.ops.conv  # noqa: F401  (the references register the ops first)
from tensorir.dtypes import elem_bytes
from tensorir.loop.ir import Expr
from tensorir.ops.conv import Ints, _convt_attrs, convt_out_spatial, out_spatial, spatial_attrs
from tensorir.ops.matmul_compute import schedule_matmul_block
from tensorir.ops.nn_compute import (
    acc_type,
    chunk_first_axis,
    const,
    fuse_all,
    inline_elementwise,
    load,
    maybe_parallel,
    pad_spatial,
    pick_block,
    pick_rows,
    pick_vector,
    schedule_pad,
    schedule_windowed,
    stage_named,
    work_of,
)
from tensorir.ops.registry import register_compute
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.te import ComputeOp, IterVar, Tensor, all_, compute, if_then_else, reduce_axis, sum_
from tensorir.target import Target

MIN_VECTOR_CHANNELS = 8  # output channels per group below which the spatial schedule is used
POINTWISE_PIXELS = 16  # 1x1 convs whose pixel count this divides vectorize over pixels
NR_VECTORS = 2  # vectors of output channels per register tile (x86: 2 zmm / ymm; NEON: 4 q)
MAX_PIXELS = 8  # output pixels per register tile


# ---- compute ------------------------------------------------------------------------------
def _pointwise(x: Tensor, w: Tensor, bias: Tensor | None, name: str) -> Tensor:
    n, c, *sp = x.shape
    m, p = w.shape[0], math.prod(sp)
    dt = acc_type(x.dtype)

    def bt_body(b: Expr, q: Expr, k: Expr) -> Expr:
        idx, rest = [], q
        for d in reversed(sp):
            idx.insert(0, rest % d if d != 1 else 0)
            rest = rest // d
        return x[(b, k, *idx)]

    bt = compute((n, p, c), bt_body, name=f"{name}_bt")
    k = reduce_axis(c, "k")
    acc = compute(
        (n, m, p),
        lambda b, i, q: sum_(load(w, (i, k, *(0 for _ in sp)), dt) * load(bt, (b, q, k), dt), axis=k),
        name=f"{name}_acc",
    )

    def out(b: Expr, i: Expr, *o: Expr) -> Expr:
        q: Expr | int = 0
        for d, oi in zip(sp, o, strict=True):
            q = q * d + oi
        v = load(acc, (b, i, q), dt)
        return v + load(bias, (i,), dt) if bias is not None else v

    return compute((n, m, *sp), out, name=name, dtype=x.dtype)


def direct_conv(
    xp: Tensor,
    w: Tensor,
    bias: Tensor | None,
    out: Ints,
    strides: Ints,
    dilations: Ints,
    group: int,
    name: str,
) -> Tensor:
    """y = conv(xp, w) over the already padded input `xp`: the `channels` or `spatial` form.
    The weights are read through `<name>_w`, a view the schedule packs or inlines."""
    n = xp.shape[0]
    m, cg, *ks = w.shape
    mg, nsp = m // group, len(out)
    dt = acc_type(xp.dtype)
    wv = w if isinstance(w.op, ComputeOp) else compute(w.shape, lambda *i: w[i], name=f"{name}_w")
    rc = reduce_axis(cg, "rc")
    rk = [reduce_axis(kk, f"r{d}") for d, kk in enumerate(ks)]

    def term(b: Expr, o: Sequence[Expr], chan: Expr, oc: Expr) -> Expr:
        pos = [o[d] * strides[d] + rk[d] * dilations[d] for d in range(nsp)]
        return sum_(load(xp, (b, chan, *pos), dt) * load(wv, (oc, rc, *rk), dt), axis=[rc, *rk])

    if mg < MIN_VECTOR_CHANNELS:

        def spatial(b: Expr, oc: Expr, *o: Expr) -> Expr:
            return term(b, o, (oc // mg) * cg + rc if group > 1 else rc, oc)

        acc = compute((n, m, *out), spatial, name=f"{name}_acc")

        def get(b: Expr, oc: Expr, o: Sequence[Expr]) -> Expr:
            return load(acc, (b, oc, *o), dt)

    else:

        def channels(b: Expr, *rest: Expr) -> Expr:
            *o, g, j = rest
            return term(b, o, g * cg + rc if group > 1 else rc, g * mg + j)

        acc = compute((n, *out, group, mg), channels, name=f"{name}_acc")

        def get(b: Expr, oc: Expr, o: Sequence[Expr]) -> Expr:
            return load(acc, (b, *o, oc // mg, oc % mg), dt)

    def body(b: Expr, oc: Expr, *o: Expr) -> Expr:
        v = get(b, oc, o)
        return v + load(bias, (oc,), dt) if bias is not None else v

    return compute((n, m, *out), body, name=name, dtype=xp.dtype)


def conv_compute(
    x: Tensor,
    w: Tensor,
    b: Tensor | None = None,
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    group: int = 1,
) -> Tensor:
    nsp = x.ndim - 2
    s, p, d = spatial_attrs(nsp, strides, pads, dilations)
    ks = w.shape[2:]
    out = out_spatial(x.shape[2:], ks, s, p, d)
    pointwise = group == 1 and all(k == 1 for k in ks) and all(v == 1 for v in s) and not any(p)
    if pointwise and math.prod(out) % POINTWISE_PIXELS == 0:
        return _pointwise(x, w, b, "conv")
    need = [(out[i] - 1) * s[i] + (ks[i] - 1) * d[i] + 1 for i in range(nsp)]
    xp = pad_spatial(x, p[:nsp], need, const(0, x.dtype), "conv_pad")
    return direct_conv(xp, w, b, out, s, d, group, "conv")


def conv_transpose_compute(
    x: Tensor,
    w: Tensor,
    b: Tensor | None = None,
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    group: int = 1,
    output_padding: Ints | None = None,
) -> Tensor:
    nsp = x.ndim - 2
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "output_padding": output_padding}
    s, p, d, op = _convt_attrs(nsp, attrs)
    sp_in, ks = x.shape[2:], w.shape[2:]
    out = convt_out_spatial(sp_in, ks, s, p, d, op)
    first = [(ks[i] - 1) * d[i] - p[i] for i in range(nsp)]  # position of x[0] in the upsampled input
    zero = const(0, x.dtype)

    def up(bi: Expr, ci: Expr, *q: Expr) -> Expr:
        rel = [q[i] - first[i] for i in range(nsp)]
        src = [r // s[i] if s[i] > 1 else r for i, r in enumerate(rel)]
        conds = [r >= 0 for r in rel] + [sr < sp_in[i] for i, sr in enumerate(src)]
        conds += [(r % s[i]).eq(0) for i, r in enumerate(rel) if s[i] > 1]
        return if_then_else(all_(*conds), x[(bi, ci, *src)], zero)

    xu = compute(
        (*x.shape[:2], *(out[i] + (ks[i] - 1) * d[i] for i in range(nsp))), up, name="conv_transpose_up"
    )
    cg, mg = x.shape[1] // group, w.shape[1]

    def wt(oc: Expr, c: Expr, *t: Expr) -> Expr:
        return w[((oc // mg) * cg + c, oc % mg, *(ks[i] - 1 - t[i] for i in range(nsp)))]

    wf = compute((mg * group, cg, *ks), wt, name="conv_transpose_w")
    return direct_conv(xu, wf, b, out, (1,) * nsp, d, group, "conv_transpose")


# ---- schedules ----------------------------------------------------------------------------
def _copy_out(
    y: Stage, outer_axes: list[IterVar], mi: IterVar, rest: list[IterVar], v: int, lanes: int
) -> None:
    """Order and vectorize the block's copy-out: along the output rows when they give at
    least v lanes (reading the channels-last block with stride NR), else along the channels
    (contiguous block reads, stores strided by the image size)."""
    lv = pick_vector(rest[-1].extent, lanes)
    if lv >= v:
        lo, li = y.split(rest[-1], factor=lv)
        y.reorder(*outer_axes, mi, *rest[:-1], lo, li)
    else:
        mu, li = y.split(mi, factor=v)
        y.reorder(*outer_axes, *rest, mu, li)
    y.vectorize(li)


def schedule_channels(s: Schedule, y: Stage, acc: Stage, wv: Stage, target: Target) -> None:
    """Output channels vectorized, weights packed per block (module docstring)."""
    b, m, *sp = y.op.axis
    mg = acc.tensor.shape[-1]
    lanes = target.vector_lanes(acc.tensor.dtype)
    v, u = pick_block(mg, lanes, max(NR_VECTORS, 16 // lanes))
    nr = v * u
    row_bytes = math.prod(a.extent for a in sp[1:]) * nr * elem_bytes(acc.tensor.dtype)
    ch = chunk_first_axis(sp[0].extent, row_bytes, b.extent * (m.extent // nr))
    mo, mi = y.split(m, factor=nr)
    so, si = y.split(sp[0], factor=ch)
    outer_axes = [b, mo, so]
    _copy_out(y, outer_axes, mi, [si, *sp[1:]], v, lanes)
    outer = fuse_all(y, outer_axes)
    maybe_parallel(y, outer, work_of(acc))
    acc.compute_at(y, outer)
    ab, *asp, ag, aj = acc.op.axis
    jo, ji = acc.split(aj, factor=nr)
    ju, jv = acc.split(ji, factor=v)
    cap = max(1, min(MAX_PIXELS, (target.num_vector_registers - u - 1) // u))
    wo, wi = acc.split(asp[-1], factor=pick_rows(asp[-1].extent, cap))
    acc.reorder(ab, ag, jo, *asp[:-1], wo, *acc.op.reduce_axis, wi, ju, jv)
    acc.unroll(wi)
    acc.unroll(ju)
    acc.vectorize(jv)
    packed = s.pack(wv.tensor, 0, nr)  # (M/NR, CG, *K, NR)
    wv.compute_inline()
    s[packed].compute_at(acc, ab)
    _, pv = s[packed].split(s[packed].op.axis[-1], factor=v)  # gathers W, stores contiguous
    s[packed].vectorize(pv)


def schedule_conv(s: Schedule, outputs: Sequence[Tensor], target: Target) -> None:
    """Default schedule of conv / conv_transpose: the recipe for the compute's form."""
    acc = next(st for st in s.stages if st.name.endswith("_acc") and st.op.reduce_axis)
    base = acc.name.removesuffix("_acc")
    bt, wv = stage_named(s, f"{base}_bt"), stage_named(s, f"{base}_w")
    pads = [st for st in (stage_named(s, f"{base}_pad"), stage_named(s, f"{base}_up")) if st is not None]
    inline_elementwise(s, keep=[st for st in (bt, wv, *pads) if st is not None])
    y = next(st for st in s.stages if st.is_output)
    if bt is not None:  # pointwise: a batched GEMM over the flattened pixels
        b, m, *sp = y.op.axis
        schedule_matmul_block(s, y, ([b], m, fuse_all(y, sp)), acc, bt, target)
        return
    for st in pads:
        schedule_pad(st, target.vector_lanes(st.tensor.dtype))
    assert wv is not None
    if acc.tensor.ndim == y.tensor.ndim:
        wv.compute_inline()
        schedule_windowed(s, y, acc, target)
    else:
        schedule_channels(s, y, acc, wv, target)


register_compute("conv", schedule=schedule_conv)(conv_compute)
register_compute("conv_transpose", schedule=schedule_conv)(conv_transpose_compute)
