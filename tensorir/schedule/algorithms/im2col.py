"""im2col + packed GEMM for dense packed convolutions (`conv2d_nchwc`, group 1).

The convolution y[n, m, oh, ow] = sum_{c, kh, kw} x[n, c, oh*s + kh*d - p, ...] * w[m, c, kh, kw]
becomes a matrix product: rows = the output pixels p = oh * OW + ow of one image, columns of
the left operand K = C * KH * KW, in the packed weight's order (co, kh, kw, ci), so

    col[n, p, co, kh, kw, ci] = x[n, co, h(p, kh), w(p, kw), ci]     (0 in the padding)
    acc[n, p, mo, j]          = sum_{co, kh, kw, ci} col[n, p, co, kh, kw, ci] * w[mo, co, kh, kw, ci, j]
    y[n, mo, oh, ow, j]       = acc[n, oh * OW + ow, mo, j] (+ b[mo, j])

The packed weight OIHW[ib]i[ob]o already is the GEMM's right operand in panels: for a fixed
output block mo, w[mo] is a K x ob matrix whose rows (ob contiguous output channels) are
read in k order — no packing at run time. A row of `col` is contiguous in k, so the
micro-kernel reads MR streams of broadcasts and nr contiguous weight vectors per k step
(as MNN's and ONNX Runtime's im2col convolutions do, with the weight packed offline).

Stages: `im2col_col` (the column matrix of one pixel block, computed inside the parallel
loop so it stays in cache), `im2col_acc` (the GEMM, register-blocked: MR pixels x nr
vectors of v lanes over k) and `conv_nchwc` (bias, cast, copy out to the packed layout).

Knobs (`schedule_im2col_nchwc`):
    im2col_pixel_block   output pixels per cache block (= column stage block): divisors of
                         OW (part of a row) or whole rows (r * OW, r dividing OH)
    im2col_oc_block      output-channel blocks per parallel chunk (divisors of M/ob); the
                         column block is recomputed per chunk, so the default takes all
    im2col_mr            pixels per register tile
    im2col_nr_vectors    output-channel vectors (v lanes) per register tile
    im2col_k_block       input-channel blocks per k chunk (the weight panel of a chunk
                         stays in cache while the pixel tiles sweep the block)
    im2col_pad_first     (compute) pad the input in a stage first, so the column copy has
                         no bounds tests (default for input blocks narrower than 8)

When it wins (1 thread, AVX-512 Xeon, shared machine so +-20% noise; GFLOP/s im2col /
direct over 3-4 runs): 3x3 s2 64->128@56 70-119 / 55-113 (im2col ahead in every run: the
direct kernel's stride-2 pixel loads are strided, the column copy makes them contiguous);
7x7 s2 3->64@224 (ib = 1) 49-60 / 37-66 (a tie); 3x3 s1 64@56 75-103 / 87-108,
1x1 256->64@56 76-94 / 81-112, 1x1 1024->256@14 72-88 / 72-107 (direct ahead: for stride 1 the
column copy costs KH*KW times the input for no better access, and a 1x1 s1 col is a plain
copy). With default knobs it still lost to direct on ResNet-50's strided convs, so it is a
tuning choice, not a default (tensorir/ops/conv_algorithms.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorir.ops.conv import Ints, out_spatial
from tensorir.schedule.space import knob

PANEL_BYTES = 512 << 10  # default k chunks keep the weight panel (K_c x nr vectors) under this (L2)
COL_BYTES = 256 << 10  # default column block size (per thread, L2 resident)
MAX_COL_BYTES = 1 << 20  # largest column block a knob may choose (it lives on the stack)


# ---- compute ----------------------------------------------------------------------------
def im2col_conv_nchwc_compute(
    x: Any,
    w: Any,
    b: Any = None,
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    group: int = 1,
) -> Any:
    """conv2d_nchwc (group 1) as im2col + GEMM; the same result as `conv2d_nchwc_compute`."""
    from tensorir.errors import ShapeError
    from tensorir.ops.layout import conv_nchwc_attrs
    from tensorir.ops.nn_compute import acc_type, const, load, pad_spatial
    from tensorir.schedule.te import all_, cast, compute, if_then_else, reduce_axis, sum_

    if group != 1:
        raise ShapeError("im2col conv2d_nchwc handles dense convolutions (group = 1) only")
    s, p, d = conv_nchwc_attrs({"strides": strides, "pads": pads, "dilations": dilations})
    n, co, h, wd, ib = x.shape
    mo, _, kh, kw, _, ob = w.shape
    oh, ow = out_spatial((h, wd), (kh, kw), s, p, d)
    dt = acc_type(x.dtype)
    zero = const(0, x.dtype)
    # narrow input blocks (scalar column copies): pad first, so the copy has no bounds tests
    if knob("im2col_pad_first", [False, True], ib < 8) and any(p):
        need = ((oh - 1) * s[0] + (kh - 1) * d[0] + 1, (ow - 1) * s[1] + (kw - 1) * d[1] + 1, ib)
        x = pad_spatial(x, (p[0], p[1], 0), need, zero, "im2col_pad")
        p = (0, 0, 0, 0)
        h, wd = need[0], need[1]

    def col_body(i: Any, q: Any, c: Any, y: Any, z: Any, e: Any) -> Any:
        qh, qw = (q // ow, q % ow) if ow > 1 else (q, 0)
        yy = qh * s[0] + y * d[0] - p[0]
        zz = qw * s[1] + z * d[1] - p[1]
        conds = []
        if p[0] > 0:
            conds.append(yy >= 0)
        if (oh - 1) * s[0] + (kh - 1) * d[0] - p[0] >= h:
            conds.append(yy < h)
        if p[1] > 0:
            conds.append(zz >= 0)
        if (ow - 1) * s[1] + (kw - 1) * d[1] - p[1] >= wd:
            conds.append(zz < wd)
        value = x[i, c, yy, zz, e]
        return if_then_else(all_(*conds), value, zero) if conds else value

    col = compute((n, oh * ow, co, kh, kw, ib), col_body, name="im2col_col")
    rco, rkh, rkw, rci = (
        reduce_axis(e, nm) for e, nm in ((co, "rco"), (kh, "rkh"), (kw, "rkw"), (ib, "rci"))
    )

    def acc_body(i: Any, q: Any, m: Any, j: Any) -> Any:
        xv = load(col, (i, q, rco, rkh, rkw, rci), dt)
        return sum_(xv * load(w, (m, rco, rkh, rkw, rci, j), dt), axis=[rco, rkh, rkw, rci])

    acc = compute((n, oh * ow, mo, ob), acc_body, name="im2col_acc")

    def out(i: Any, m: Any, y: Any, z: Any, j: Any) -> Any:
        v = acc[i, y * ow + z, m, j]
        return cast(v + load(b, (m, j), dt) if b is not None else v, x.dtype)

    return compute((n, mo, oh, ow, ob), out, name="conv_nchwc", dtype=x.dtype)


# ---- knobs ------------------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def pixel_block_choices(oh: int, ow: int, row_col_bytes: int) -> list[int]:
    """Legal pixel blocks: parts of a row (divisors of OW) or whole rows (r * OW, r | OH),
    with the column block under MAX_COL_BYTES (at least the smallest)."""
    opts = [q for q in _divisors(ow) if q < ow] + [r * ow for r in _divisors(oh)]
    per_pixel = max(1, row_col_bytes // ow)
    fit = [q for q in opts if q * per_pixel <= MAX_COL_BYTES]
    return fit or opts[:1]


def default_pixel_block(choices: Sequence[int], per_pixel_bytes: int, mr: int, images: int) -> int:
    """The largest block whose column matrix fits COL_BYTES (at least 4 register tiles
    when possible), shrunk while the parallel loop has under 8 iterations."""
    fit = [q for q in choices if q * per_pixel_bytes <= COL_BYTES] or [min(choices)]
    best = max(fit)
    total = max(choices)
    while images * (total // best) < 8:
        smaller = [q for q in fit if q < best and q >= 4 * mr]
        if not smaller:
            break
        best = max(smaller)
    return best


# ---- schedule ---------------------------------------------------------------------------
def schedule_im2col_nchwc(s: Any, outputs: Sequence[Any], target: Any) -> None:
    """Per (image, pixel block, channel chunk) — the parallel loop — the column block of the
    pixel block, then the GEMM's accumulators of the chunk: for each k chunk, each nr-vector
    column tile and each MR-pixel row tile, the k loop outside and MR x nr vector FMAs
    inside (the tile in registers); then the epilogue copies the chunk out, vectorized."""
    from tensorir.dtypes import elem_bytes
    from tensorir.ops.nn_compute import (
        fuse_all,
        inline_elementwise,
        maybe_parallel,
        pick_rows,
        pick_vector,
        schedule_pad,
        stage_named,
        work_of,
    )

    acc = stage_named(s, "im2col_acc")
    col = stage_named(s, "im2col_col")
    if acc is None or col is None:
        from tensorir.errors import TirError

        raise TirError("schedule_im2col_nchwc: no 'im2col_acc' / 'im2col_col' stages to schedule")
    pad = stage_named(s, "im2col_pad")
    inline_elementwise(s, keep=[col] if pad is None else [col, pad])
    if pad is not None:
        schedule_pad(pad, target.vector_lanes(pad.tensor.dtype))
    y = next(st for st in s.stages if st.is_output)
    bn, m, oh, ow, j = y.op.axis
    _, _, kco, kkh, kkw, kib = col.tensor.shape
    dtype = acc.tensor.dtype
    size = elem_bytes(col.tensor.dtype)
    lanes = target.vector_lanes(dtype)
    regs = target.num_vector_registers
    ob, mo_ext = j.extent, m.extent
    v = pick_vector(ob, lanes)
    per_block = ob // v  # vectors per output-channel block
    k_per_co = kkh * kkw * kib

    # register tile: nr vectors across channels (a divisor of a block's vectors, or whole
    # blocks dividing M/ob), MR pixels, MR * nr + nr + 1 <= registers by default
    nr_opts = [q for q in _divisors(per_block) if q < per_block]
    nr_opts += [per_block * t for t in _divisors(mo_ext) if per_block * t <= regs - 2]
    nr_want = max(q for q in nr_opts if q <= max(1, min(4, (regs - 2) // 7)))
    nr = knob("im2col_nr_vectors", nr_opts, nr_want)
    pixels = oh.extent * ow.extent
    mr_cap = max(1, min(14, (regs - nr - 1) // nr))
    per_pixel = kco * k_per_co * size
    pb_opts = pixel_block_choices(oh.extent, ow.extent, per_pixel * ow.extent)
    pb = knob("im2col_pixel_block", pb_opts, default_pixel_block(pb_opts, per_pixel, mr_cap, bn.extent))
    mr_opts = list(range(1, min(16, pixels) + 1))
    mr = knob("im2col_mr", mr_opts, pick_rows(min(pb, max(mr_opts)), mr_cap))
    tile_blocks = max(1, nr // per_block)
    # choices independent of the other knobs (a sampled config is always legal); a chunk
    # narrower than the register tile's blocks widens to the next multiple dividing M/ob
    ocb = knob("im2col_oc_block", _divisors(mo_ext), mo_ext)
    ocb = min(q for q in _divisors(mo_ext) if q % tile_blocks == 0 and q >= ocb)
    # k chunk: whole input-channel blocks, the weight panel (k_c x nr vectors) under L2;
    # a chunk boundary stores the accumulators, so the default rarely splits
    kb_opts = _divisors(kco)
    panel = k_per_co * nr * v * size
    kb_want = max([q for q in kb_opts if q * panel <= PANEL_BYTES] or [1])
    kb = knob("im2col_k_block", kb_opts, kb_want)

    # ---- output: parallel over (image, pixel block, channel chunk) ----
    if pb < ow.extent:
        owo, owi = y.split(ow, factor=pb)
        outer_pix, inner_pix = [oh, owo], [owi]
    else:
        oho, ohi = y.split(oh, factor=pb // ow.extent)
        outer_pix, inner_pix = [oho], [ohi, ow]
    mco, mci = y.split(m, factor=ocb)
    jo, jv = y.split(j, factor=v)
    y.reorder(bn, *outer_pix, mco, mci, *inner_pix, jo, jv)
    y.vectorize(jv)
    outer = fuse_all(y, [bn, *outer_pix, mco])
    maybe_parallel(y, outer, work_of(acc))
    acc.compute_at(y, outer)
    col.compute_at(y, outer)

    # ---- column block: (pixel, co, kh, kw) loops, the ib channels vectorized ----
    ci = col.op.axis[-1]
    cv = pick_vector(kib, lanes)
    if cv > 1:
        _, civ = col.split(ci, factor=cv)
        col.vectorize(civ)

    # ---- GEMM micro-kernel ----
    an, ap, am, aj = acc.op.axis
    rco, rkh, rkw, rci = acc.op.reduce_axis
    top, ap = acc.split(ap, nparts=1)
    ko, ki = acc.split(rco, factor=kb) if kb < kco else (None, rco)
    if nr >= per_block:
        amo, ami = acc.split(am, factor=nr // per_block)
        aju, ajv = acc.split(aj, factor=v)
        chan_outer, chan_inner = [amo], [ami, aju]
    else:
        ajo, aji = acc.split(aj, factor=nr * v)
        aju, ajv = acc.split(aji, factor=v)
        chan_outer, chan_inner = [am, ajo], [aju]
    apo, api = acc.split(ap, factor=mr)
    kouter = [ko] if ko is not None else []
    acc.reorder(an, top, *kouter, *chan_outer, apo, ki, rkh, rkw, rci, api, *chan_inner, ajv)
    acc.unroll(api)
    for a in chan_inner:
        acc.unroll(a)
    acc.vectorize(ajv)
