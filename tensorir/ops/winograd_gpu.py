"""GPU template of the Winograd convolution `conv2d_winograd_nchwc` (F(2x2,3x3), F(4x4,3x3)).

One kernel (there is no grid-wide barrier), the three phases fused per work-group: a
work-group owns `wino_row_block` tile rows (TT = rows x TW tiles) x `wino_oc_blocks` output
channel blocks (KV channel vectors) of one image; work-item (local.y, local.x) = (group of
`wino_oc_regs` channel vectors, tile). Per chunk of `wino_tile_c` input channels the group
transforms the input tiles of the chunk into shared memory (V = BT d B, one (tile, channel)
per work-item, the padded input inlined) and stages the chunk of U; each work-item then
accumulates its alpha^2 positions x oc_regs vectors in registers (the batched GEMM over
input channels: per channel alpha^2 broadcasts of V, alpha^2 x oc_regs vector loads of U).
The output transform follows in registers (AT M, then (AT M) A inlined into the packed
store) with bias and the fused epilogue (relu, residual add):

    for g in gpu_block(0, N * M/KK * TH/rows, "group.x"):
      for kq in gpu_thread(0, KV/oc_regs, "local.y"): for t in gpu_thread(0, TT, "local.x"):
        acc = allocate(f32[alpha, alpha, oc_regs * 4], "local")
        for rc_o in range(C / tile_c):
          barrier; V_sh[e, f, t', c] = BT d B (cooperative); U_sh = U[:, :, kb.., chunk, :]; barrier
          for rc_i in range(tile_c): for e, f (unrolled): acc[e, f, ramp] += broadcast(V_sh[..]) * U_sh[ramp]
        Z = AT acc                                   (m x alpha x vectors, registers)
        for r, s (unrolled): y[n, kb, oh, ow, ramp] = epilogue((Z A)[r, s] + b)   (guarded crop)

Knobs: `vector`, `wino_row_block` (divisors of TH), `wino_oc_blocks` (divisors of M/ob),
`wino_oc_regs`, `wino_tile_c`; defaults from the device profile (compute units, work-group
limit, local memory): groups enough to fill the compute units. Past the work-group limit
oc_regs doubles; past the local memory the channel chunk shrinks. The algorithm choice on
OpenCL targets (`gpu_algorithm_choices`, used by conv_algorithms.specialize) is at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorir.ops.registry import NoScheduleError, register_schedule
from tensorir.schedule.algorithms.winograd_nchwc import OP
from tensorir.schedule.gpu.common import fuse_axes, gpu_profile
from tensorir.schedule.gpu.injective import VECTOR
from tensorir.schedule.schedule import Schedule, Stage
from tensorir.schedule.space import knob
from tensorir.schedule.te import IterVar, Tensor

TILE_C = (1, 2, 4, 8, 16)


def _named(s: Schedule, suffix: str) -> Stage:
    return next(st for st in s.stages if st.name.endswith(suffix))


def _divisors(n: int, cap: int) -> list[int]:
    return [d for d in range(1, min(n, cap) + 1) if n % d == 0]


def _coop(st: Stage, axes: list[IterVar], ly: int, lx: int) -> IterVar:
    """Spread the flattened `axes` over the (local.y ly, local.x lx) work-items (the tags are
    bound outside: a cooperative load); the rest is a serial loop. Returns the local.x loop."""
    fo, tx = st.split(fuse_axes(st, axes), factor=lx)
    _, ty = st.split(fo, factor=ly)
    st.bind(ty, "local.y")
    st.bind(tx, "local.x")
    return tx


class _Plan:
    """The knob values (module docstring), made to fit the device."""

    def __init__(self, profile: Any, alpha: int, dims: dict[str, int]) -> None:
        n, mo, ob, th, tw, c = (dims[k] for k in ("n", "mo", "ob", "th", "tw", "c"))
        lanes = VECTOR if ob % VECTOR == 0 else 1
        self.vec = knob("vector", sorted({1, lanes}), lanes)
        limit = min(profile.max_work_group_size, profile.max_work_item_sizes[0])
        rows = [r for r in _divisors(th, th) if r * tw <= limit]
        if not rows:
            raise NoScheduleError(f"{OP}: a row of {tw} tiles exceeds the work-group limit")
        want = 2 * profile.compute_units  # work-groups to fill the device
        self.rows = knob("wino_row_block", rows, max(r for r in rows if r == 1 or r * tw <= 32))
        kbs = _divisors(mo, 16)
        groups = n * th // self.rows
        self.kbb = knob("wino_oc_blocks", kbs, max(d for d in kbs if d == 1 or groups * mo // d >= want))
        self.tt, self.kv = self.rows * tw, self.kbb * ob // self.vec
        self.rk = knob("wino_oc_regs", [1, 2], 1)
        while self.kv % self.rk:
            self.rk //= 2
        while self.tt * self.kv // self.rk > limit:
            self.rk *= 2
        if self.kv % self.rk:
            raise NoScheduleError(f"{OP}: {self.tt} x {self.kv} work-items exceed the device")
        tcs = [t for t in TILE_C if c % t == 0]
        self.tc = knob("wino_tile_c", tcs, max(t for t in tcs if t <= 8))
        room = profile.local_mem_bytes // 4
        while alpha * alpha * (self.tt + self.kv * self.vec) * self.tc > room and self.tc > 1:
            self.tc = max(t for t in tcs if t < self.tc)
        if alpha * alpha * (self.tt + self.kv * self.vec) * self.tc > room:
            raise NoScheduleError(f"{OP}: the block needs more local memory than the device has")


def _schedule_gemm(s: Schedule, z: Stage, at: IterVar, v: Stage, plan: _Plan) -> None:
    """acc (registers: alpha^2 x oc_regs vectors of one tile) at AT M's loop `at` (inside the
    work-item loop);
    per input channel chunk, V (input transform) and the chunk of U staged in shared memory."""
    acc = _named(s, "wino_nchwc_acc")
    acc.compute_at(z, at)
    e, f, an, at_, ak = acc.op.axis
    (rc,) = acc.op.reduce_axis
    rco, rci = acc.split(rc, factor=plan.tc)
    aku, akv = acc.split(ak, factor=plan.vec)
    acc.reorder(an, at_, rco, rci, e, f, aku, akv)
    for axis in (e, f, aku):
        acc.unroll(axis)
    acc.vectorize(akv)
    ly, lx = plan.kv // plan.rk, plan.tt
    u = next(t for t in acc.op.input_tensors() if t is not v.tensor)
    u_sh = s[s.cache_read(u, "shared", [acc])]
    u_sh.compute_at(acc, rco)
    _coop(u_sh, list(u_sh.op.axis), ly, lx)
    v.scope = "shared"
    v.compute_at(acc, rco)
    ve, vf, vn, vt, vc = v.op.axis
    v.reorder(vn, vt, vc, ve, vf)
    vx = _coop(v, [vn, vt, vc], ly, lx)
    v.unroll(ve)
    v.unroll(vf)
    bd = _named(s, "wino_nchwc_Bd")
    bd.compute_at(v, vx)
    for axis in bd.op.axis[:2]:
        bd.unroll(axis)


@register_schedule(OP, "opencl")
def schedule_winograd_gpu(s: Schedule, outputs: Sequence[Tensor], target: Any) -> None:
    """The fused Winograd kernel (module docstring).

    func = op_kernel(OP, [x_type, u_type], {"pads": (1, 1, 1, 1), "m": 2}, opencl_target)
    """
    acc, v = _named(s, "wino_nchwc_acc"), _named(s, "wino_nchwc_V")
    z = _named(s, "wino_nchwc_AM")
    keep = (acc, v, z, _named(s, "wino_nchwc_Bd"))
    for st in s.stages:
        if not st.is_output and all(st is not k for k in keep) and not st.inlined:
            st.compute_inline()
    y = next(st for st in s.stages if st.is_output)
    alpha = acc.op.axis[0].extent
    m = alpha - 2
    n, kb, oh, ow, ki = y.op.axis
    th = -(-oh.extent // m)
    dims = {"n": n.extent, "mo": kb.extent, "ob": ki.extent, "th": th, "tw": acc.op.axis[3].extent // th}
    dims["c"] = v.op.axis[4].extent
    plan = _Plan(gpu_profile(target), alpha, dims)
    kbo, kbi = y.split(kb, factor=plan.kbb)
    oho, ohi = y.split(oh, factor=plan.rows * m)
    toh, r = y.split(ohi, factor=m)
    tow, sc = y.split(ow, factor=m)
    kvo, kvv = y.split(ki, factor=plan.vec)
    y.reorder(n, kbo, oho, kbi, kvo, toh, tow, r, sc, kvv)
    kq, kr = y.split(y.fuse(kbi, kvo), factor=plan.rk)
    tiles = y.fuse(toh, tow)
    y.reorder(kq, tiles, kr, r, sc, kvv)
    y.bind(y.fuse(n, kbo, oho), "group.x")
    y.bind(kq, "local.y")
    y.bind(tiles, "local.x")
    for axis in (kr, r, sc):
        y.unroll(axis)
    y.vectorize(kvv)
    z.compute_at(y, tiles)  # AT M: m x alpha x oc_regs vectors in registers
    zi, zf, zn, zt, zk = z.op.axis
    zku, zkv = z.split(zk, factor=plan.vec)
    z.reorder(zn, zt, zi, zf, zku, zkv)
    for axis in (zi, zf, zku):
        z.unroll(axis)
    z.vectorize(zkv)
    _schedule_gemm(s, z, zt, v, plan)


# ---- algorithm choice on GPU targets (conv_algorithms.specialize) ---------------------------
FORCE_ENV = "TIR_GPU_CONV_ALGORITHM"  # direct | winograd2 | winograd4 | gemm | splitk: forced default


def gpu_algorithm_choices(
    x_shape: Sequence[int], w_shape: Sequence[int], attrs: dict[str, Any], weight_const: bool, profile: Any
) -> tuple[list[str], str]:
    """(choices, default) of the `algorithm` knob of a conv2d_nchwc on an OpenCL target:
    winograd2 / winograd4 (3x3, stride 1, dilation 1, group 1, constant weight) and splitk
    (group 1, ops/conv_splitk_gpu.py) beside direct. Winograd is not the default: on an H100
    through OpenCL this template's Winograd lost to the direct template on every ResNet layer
    measured (3x3 conv + bias + relu, kernel time, `benchmarks/gpu_compare.py` on single-conv
    models): 128ch 28x28 direct 0.09 ms, F(2,3) 0.22, F(4,3) 0.71; 256ch 14x14 0.16 vs F(2,3)
    0.66; 512ch 7x7 0.29 vs F(2,3) 0.71 (and its transformed weights are 16/9 or 4x larger).
    splitk is the default where the direct template's work-items do not fill the device
    (conv_splitk_gpu.default_split > 1). gemm (ops/conv1x1_gpu.py) is a choice for 1x1,
    stride-1, group-1 convs. `TIR_GPU_CONV_ALGORITHM` forces the default where it is a choice."""
    import os

    from tensorir.ops.conv1x1_gpu import gemm_eligible
    from tensorir.ops.conv_algorithms import winograd_eligible
    from tensorir.ops.conv_splitk_gpu import conv_default_split, split_choices

    if int(attrs.get("group", 1)) != 1:
        return ["direct"], "direct"
    choices = ["direct"]
    if gemm_eligible(x_shape, w_shape, attrs):
        choices.append("gemm")
    elif weight_const and winograd_eligible(w_shape, attrs):
        choices += ["winograd2", "winograd4"]
    default = "direct"
    if split_choices(x_shape[1]):
        choices.append("splitk")
        if conv_default_split(x_shape, w_shape, attrs, profile) > 1:
            default = "splitk"
    forced = os.environ.get(FORCE_ENV, "").strip()
    return choices, forced if forced in choices else default
