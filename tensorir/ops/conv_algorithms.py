"""Which algorithm computes a packed convolution (or a dense / matmul), and the kernel rewrite
it needs.

A `conv2d_nchwc` (alone or as the anchor of a fused node) has an `algorithm` knob:

    direct      register-blocked direct convolution (layout.py), every conv
    im2col      column matrix + packed GEMM (schedule/algorithms/im2col.py), group 1
    winograd2/4/6  F(m x m, 3 x 3) (schedule/algorithms/winograd_nchwc.py): 3x3, stride 1,
                dilation 1, group 1, and a constant weight (transformed by a kernel of its
                own, winograd_weights.py: at tir_create on CPUs, at compile time on GPUs)
    strassen    one level of Strassen on the conv as a matrix product (ops/conv_strassen.py):
                1x1, stride 1, no padding, group 1, even H, an even number of input and
                output channel blocks, and a constant weight (transformed at compile time)

Without a tuning record the default is analytic: Winograd with MNN's unit choice
(`choose_winograd_m`: multiplications saved against transform cost) when it applies, else
direct; Strassen where dense's measured cut-off (dense_strassen.strassen_default) says so
on the conv's product (pixels x C -> M). im2col is left to tuning: with its default knobs it
lost to direct on ResNet-50's strided 3x3 convs (layer3.0 / layer4.0: 4.0-7.7 / 10.2 ms vs
3.1 / 3.5 ms) and the 7x7 stem (6.9 vs 4.4 ms), 1 thread, `benchmarks/layers.py
--algorithm`; a tuned record picks it where it wins.

On OpenCL targets the choices are winograd_gpu.gpu_algorithm_choices' (direct, winograd2/4,
gemm for 1x1, splitk). A `dense` with a constant weight on a CPU has its own knob: direct or
strassen (ops/dense_strassen.py, one level, default from a cut-off measured there), and so has
a `matmul` of two run-time operands (ops/matmul_strassen.py: B's operands formed in the
kernel; the same op's inputs, so only the op is rewritten).

Winograd and Strassen change the kernel's inputs (U or the seven B operands instead of w), so
`specialize` rewrites the op (its anchor step) and returns the weight transform for the caller
to apply to the constant: the compiler to the weight it embeds, the tuner to its random inputs.
Winograd's is a `KernelTransform` (an op with a kernel): U is alpha^2 / 9 times the size of w,
so a CPU build stores w and computes U at start-up (tensorir/compiler_prepare.py).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from tensorir.graph.types import TensorType
from tensorir.ops import conv_rows, conv_strassen, conv_wide, dense_gemv, dense_packed
from tensorir.ops.dwpw import is_dwpw
from tensorir.ops.fused import FusedBody
from tensorir.ops.layout import conv_nchwc_attrs
from tensorir.ops.nn_compute import acc_type
from tensorir.ops.registry import get_op
from tensorir.schedule.algorithms.winograd import choose_winograd_m
from tensorir.schedule.algorithms.winograd_nchwc import OP as WINOGRAD_OP
from tensorir.schedule.algorithms.winograd_weights import OP as WINOGRAD_WEIGHT_OP
from tensorir.schedule.schedule import ScheduleError
from tensorir.schedule.space import knob

Transform = Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class KernelTransform:
    """A weight transform that is an op of its own (`op` with `attrs`, one input: the weight),
    with a kernel: called, it runs the op's numpy reference (what the tuner feeds a kernel and
    a GPU build embeds); a CPU build stores the weight and runs the op's kernel at start-up
    (tensorir/compiler_prepare.py)."""

    op: str
    attrs: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> Hashable:
        """One transformed copy per (constant, key)."""
        return (self.op, self.attrs)

    def __call__(self, w: np.ndarray) -> np.ndarray:
        return get_op(self.op).run_reference([w], dict(self.attrs))[0]


@dataclasses.dataclass(frozen=True)
class Specialized:
    """The kernel to build for a node under the current knob values."""

    op: str
    in_types: tuple[TensorType, ...]
    attrs: Mapping[str, Any]
    algorithm: str | None = None  # None: the op has no algorithm choice
    transforms: Mapping[int, Transform] = dataclasses.field(default_factory=dict)


def winograd_eligible(w_shape: Sequence[int], attrs: Mapping[str, Any]) -> bool:
    s, _, d = conv_nchwc_attrs(dict(attrs))
    group = int(attrs.get("group", 1))
    return group == 1 and tuple(w_shape[2:4]) == (3, 3) and tuple(s) == (1, 1) and tuple(d) == (1, 1)


def algorithm_choices(
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    attrs: Mapping[str, Any],
    weight_const: bool = True,
    lanes: int = 0,
    full_rate_lanes: int = 0,
) -> tuple[list[str], str]:
    """(choices, default) of the `algorithm` knob for a conv2d_nchwc of these shapes; `lanes`:
    the CPU's vector lanes (0: no `direct_wide`); `full_rate_lanes` (0: `lanes`): those of the
    widest FMA at full rate (conv_wide.wide_by_default)."""
    group = int(attrs.get("group", 1))
    if group != 1:
        return ["direct"], "direct"
    choices = ["direct", "im2col"]
    default = "direct"  # im2col is a tuning choice: measured slower by default (module docstring)
    if weight_const and conv_wide.eligible(w_shape, lanes):
        choices.append("direct_wide")
        if conv_wide.wide_by_default(w_shape, lanes, full_rate_lanes or lanes):
            default = "direct_wide"
    if winograd_eligible(w_shape, attrs):
        choices += ["winograd2", "winograd4", "winograd6"]
        n, _, h, w, _ = x_shape
        c = w_shape[1] * w_shape[4]
        m_out = w_shape[0] * w_shape[5]
        p = conv_nchwc_attrs(dict(attrs))[1]
        oh, ow = h + p[0] + p[2] - 2, w + p[1] + p[3] - 2
        m = choose_winograd_m((n, c, oh, ow, m_out), full_rate_lanes=full_rate_lanes or lanes)
        if m is not None and weight_const:
            default = f"winograd{m}"
    if weight_const and conv_strassen.eligible(x_shape, w_shape, attrs):
        choices.append("strassen")
        default = "strassen" if conv_strassen.is_default(x_shape, w_shape) else default
    return choices, default


def conv_algorithm(
    x: TensorType,
    w: TensorType,
    attrs: Mapping[str, Any],
    weight_const: bool = True,
    lanes: int = 0,
    full_rate_lanes: int = 0,
) -> str:
    """The `algorithm` knob's value for this conv (pinned by `specialize` inside a build)."""
    choices, default = algorithm_choices(x.shape, w.shape, attrs, weight_const, lanes, full_rate_lanes)
    return knob("algorithm", choices, default)


def _conv_step(
    op: str, attrs: Mapping[str, Any], name: str = "conv2d_nchwc"
) -> tuple[int | None, tuple[int, int] | None]:
    """(anchor step index or None for a plain op, (x arg, w arg) as kernel input indices) of
    the op `name` (alone or as the fused node's anchor)."""
    if op == name:
        return None, (0, 1)
    body = attrs.get("body") if op == "fused" else None
    if not isinstance(body, FusedBody) or body.anchor is None:
        return None, None
    step = body.steps[body.anchor]
    if step.op != name or max(step.args[:2]) >= body.n_inputs:
        return None, None
    return body.anchor, (step.args[0], step.args[1])


def _product_step(op: str, attrs: Mapping[str, Any]) -> tuple[str, int | None, tuple[int, int] | None]:
    """("dense" or "matmul", anchor step, (a arg, b arg)) of a product op or fused anchor."""
    for name in ("dense", "matmul"):
        anchor, io = _conv_step(op, attrs, name)
        if io is not None:
            return name, anchor, io
    return "", None, None


def _product(
    op: str,
    in_types: tuple[TensorType, ...],
    attrs: Mapping[str, Any],
    const_args: frozenset[int] | None,
    target: Any,
) -> Specialized:
    """A dense or matmul (alone or as an anchor) on a CPU: "direct" or "strassen": a dense's
    with its weight transformed at compile time (ops/dense_strassen.py), a matmul's with both
    operands at run time (ops/matmul_strassen.py). A direct dense with a constant weight reads
    it packed into column panels at compile time (ops/dense_packed.py), or in its GEMV form
    (one or two rows) interleaved by row blocks (ops/dense_gemv.py)."""
    from tensorir.ops import dense_strassen as st
    from tensorir.ops import matmul_strassen as ms

    name, anchor, io = _product_step(op, attrs)
    if io is None:
        return Specialized(op, in_types, attrs)
    xi, wi = io
    x_shape, w_shape = in_types[xi].shape, in_types[wi].shape
    const = const_args is None or wi in const_args
    if name == "matmul":
        choices, default = ms.algorithm_choices(x_shape, w_shape)
    else:
        choices, default = st.algorithm_choices(x_shape, w_shape, const)
    algo = knob("algorithm", choices, default) if len(choices) > 1 else None
    panels = name == "dense" and const and dense_packed.eligible(x_shape, in_types[wi].dtype)
    if panels and algo != "strassen":
        return _dense_panels(op, in_types, attrs, anchor, (xi, wi), target, algo)
    if name == "dense" and const and algo != "strassen" and dense_gemv.eligible(x_shape, in_types[wi].dtype):
        return _dense_gemv(op, in_types, attrs, anchor, wi, target, algo)
    if algo != "strassen":
        return Specialized(op, in_types, attrs, algo)
    if name == "matmul":  # same inputs: B's operands are formed in the kernel
        new_op, new_attrs = _rewrite(op, attrs, anchor, ms.OP, {})
        return Specialized(new_op, in_types, new_attrs, algo)
    n, k = w_shape
    types = tuple(TensorType((7, n // 2, k // 2), t.dtype) if j == wi else t for j, t in enumerate(in_types))
    new_op, new_attrs = _rewrite(op, attrs, anchor, st.OP, {})
    return Specialized(new_op, types, new_attrs, algo, {wi: st.weight_transform})


def specialize(
    op: str,
    in_types: Sequence[TensorType],
    attrs: Mapping[str, Any],
    target: Any,
    const_args: frozenset[int] | None = None,
) -> Specialized:
    """The kernel for (op, inputs) under the current knobs; `const_args`: the inputs that are
    constants (None: all may be treated as constants, as the tuner does)."""
    in_types = tuple(in_types)
    if op == "fused" and is_dwpw(attrs["body"]):  # depthwise + 1x1 (ops/dwpw.py)
        return _dwpw(in_types, attrs, const_args, target)
    if op == "recurrence" and getattr(target, "kind", "llvm") == "llvm":
        return _recurrence(in_types, attrs, const_args, target)
    anchor, io = _conv_step(op, attrs)
    if io is None:
        if getattr(target, "kind", "llvm") == "llvm":
            return _product(op, in_types, attrs, const_args, target)
        return Specialized(op, in_types, attrs)
    xi, wi = io
    conv_attrs = dict(attrs) if anchor is None else dict(attrs["body"].steps[anchor].attrs)
    const = const_args is None or wi in const_args
    if getattr(target, "kind", "llvm") == "opencl":  # conv_gpu.py, winograd_gpu.py, conv_splitk_gpu.py
        from tensorir.ops.winograd_gpu import gpu_algorithm_choices
        from tensorir.schedule.gpu.common import gpu_profile

        x_shape, w_shape = in_types[xi].shape, in_types[wi].shape
        profile = gpu_profile(target)
        choices, default = gpu_algorithm_choices(x_shape, w_shape, conv_attrs, const, profile)
        algo = knob("algorithm", choices, default)
        if algo == "splitk":
            return _split_k(op, in_types, attrs, anchor, x_shape, w_shape, profile)
    else:
        acc = acc_type(in_types[xi].dtype)
        lanes = target.vector_lanes(acc)  # the accumulator's vector
        full_rate = target.full_rate_lanes(acc)
        algo = conv_algorithm(in_types[xi], in_types[wi], conv_attrs, const, lanes, full_rate)
        if algo == "strassen":
            return _conv_strassen(op, in_types, attrs, anchor, wi)
        if algo == "direct_wide":
            return _conv_wide(op, in_types, attrs, anchor, wi, lanes, target.num_vector_registers)
        if algo == "direct":  # a 1x1's rows merged where tiles would end in tails (conv_rows.py)
            return Specialized(op, conv_rows.merge_rows(in_types, attrs, anchor, xi, wi, target), attrs, algo)
    if not algo.startswith("winograd"):
        return Specialized(op, in_types, attrs, algo)
    if not const:
        raise ScheduleError("winograd needs a constant weight (it is transformed once, before any run)")
    m = int(algo.removeprefix("winograd"))
    _, pads, _ = conv_nchwc_attrs(conv_attrs)
    wino_attrs = {"pads": tuple(pads), "m": m}
    mo, c, _, _, ib, ob = in_types[wi].shape
    u_type = TensorType((m + 2, m + 2, mo, c * ib, ob), in_types[wi].dtype)
    types = tuple(u_type if k == wi else t for k, t in enumerate(in_types))
    new_op, new_attrs = _rewrite(op, attrs, anchor, WINOGRAD_OP, wino_attrs)
    transform = KernelTransform(WINOGRAD_WEIGHT_OP, (("m", m),))
    return Specialized(new_op, types, new_attrs, algo, {wi: transform})


def _recurrence(
    in_types: tuple[TensorType, ...], attrs: Mapping[str, Any], const_args: frozenset[int] | None, target: Any
) -> Specialized:
    """A recurrence whose constant rt is read in gate blocks (rnn.block_rt, rearranged at
    compile time): each parallel iteration of a step streams one contiguous block of R
    instead of H slices a row apart (NSNet2's GRU 400, R 1.9 MB from L3 each step, one
    thread, Zen 4: its two recurrences 4.75 -> 4.25 ms, outputs bit-identical)."""
    from tensorir.ops.rnn import block_rt
    from tensorir.ops.rnn_compute import rt_block_width

    width = rt_block_width(in_types, attrs, target)
    if not width or not (const_args is None or 1 in const_args):
        return Specialized("recurrence", in_types, attrs)
    transform = functools.partial(block_rt, width=width)
    transform.key = f"rt_block{width}"  # type: ignore[attr-defined]
    return Specialized("recurrence", in_types, {**attrs, "rt_block": width}, None, {1: transform})


def _dense_panels(
    op: str,
    in_types: tuple[TensorType, ...],
    attrs: Mapping[str, Any],
    anchor: int | None,
    io: tuple[int, int],
    target: Any,
    algo: str | None,
) -> Specialized:
    """A dense reading its constant weight as NR-column panels packed at compile time."""
    xi, wi = io
    (m, _), (n, k), dtype = in_types[xi].shape, in_types[wi].shape, in_types[wi].dtype
    nr = dense_packed.panel_width(target, dtype, m, n)
    panels = TensorType((-(-n // nr), k, nr), dtype)
    types = tuple(panels if j == wi else t for j, t in enumerate(in_types))
    new_op, new_attrs = _rewrite(op, attrs, anchor, dense_packed.OP, {"n": n})
    return Specialized(new_op, types, new_attrs, algo, {wi: dense_packed.panel_transform(nr)})


def _dense_gemv(
    op: str,
    in_types: tuple[TensorType, ...],
    attrs: Mapping[str, Any],
    anchor: int | None,
    wi: int,
    target: Any,
    algo: str | None,
) -> Specialized:
    """A GEMV reading its constant weight interleaved by row blocks at compile time."""
    from tensorir.ops.dense_compute import GEMV_LANES, gemv_rows

    (n, k), dtype = in_types[wi].shape, in_types[wi].dtype
    rows = gemv_rows(target, n)
    blocks = TensorType((-(-n // rows), k // GEMV_LANES, rows, GEMV_LANES), dtype)
    types = tuple(blocks if j == wi else t for j, t in enumerate(in_types))
    new_op, new_attrs = _rewrite(op, attrs, anchor, dense_gemv.OP, {"n": n})
    return Specialized(new_op, types, new_attrs, algo, {wi: dense_gemv.row_transform(rows, GEMV_LANES)})


def _conv_wide(
    op: str,
    in_types: tuple[TensorType, ...],
    attrs: Mapping[str, Any],
    anchor: int | None,
    wi: int,
    lanes: int,
    registers: int,
    tile: int | None = None,
) -> Specialized:
    """The direct conv accumulating in full vectors (ops/conv_wide.py), its weight widened and
    padded at compile time for `tile` vectors per tile (default: the `oc_blocks` knob)."""
    tile = tile or conv_wide.wide_tile(None, registers)
    w_type, extra = conv_wide.wide_types(in_types[wi], lanes, tile)
    types = tuple(w_type if k == wi else t for k, t in enumerate(in_types))
    conv_attrs = dict(attrs) if anchor is None else dict(attrs["body"].steps[anchor].attrs)
    new_op, new_attrs = _rewrite(op, attrs, anchor, conv_wide.OP, {**conv_attrs, **extra})
    transform = conv_wide.wide_transform(lanes, w_type.shape[0])
    return Specialized(new_op, types, new_attrs, "direct_wide", {wi: transform})


def _dwpw(
    in_types: tuple[TensorType, ...], attrs: Mapping[str, Any], const_args: frozenset[int] | None, target: Any
) -> Specialized:
    """A merged depthwise + 1x1 kernel: direct, its 1x1 accumulating in full vectors
    (conv_wide) where conv_wide.wide_by_default says so and the weight is constant; one register tile
    holds all of the 1x1's output vectors (at most `default_wide_blocks` of them)."""
    body = attrs["body"]
    wi = body.steps[body.anchor].args[1]
    acc = acc_type(in_types[0].dtype)
    lanes = target.vector_lanes(acc)
    const = const_args is None or wi in const_args
    wide = conv_wide.wide_by_default(in_types[wi].shape, lanes, target.full_rate_lanes(acc))
    if not const or not wide or wi >= body.n_inputs:
        return Specialized("fused", in_types, attrs, "direct")
    regs = target.num_vector_registers  # no knob: dwpw's `oc_blocks` counts the output's blocks
    tile = conv_wide.default_wide_blocks(regs)
    return _conv_wide("fused", in_types, attrs, body.anchor, wi, lanes, regs, tile)


def _conv_strassen(
    op: str,
    in_types: tuple[TensorType, ...],
    attrs: Mapping[str, Any],
    anchor: int | None,
    wi: int,
) -> Specialized:
    """A 1x1 conv as one level of Strassen (ops/conv_strassen.py), the weight transformed at
    compile time."""
    mo, c, _, _, ib, ob = in_types[wi].shape
    b7 = TensorType((7, c * ib // 2, mo * ob // 2), in_types[wi].dtype)
    types = tuple(b7 if k == wi else t for k, t in enumerate(in_types))
    new_op, new_attrs = _rewrite(op, attrs, anchor, conv_strassen.OP, {"ob": ob})
    return Specialized(new_op, types, new_attrs, "strassen", {wi: conv_strassen.weight_transform})


def _rewrite(
    op: str, attrs: Mapping[str, Any], anchor: int | None, conv_op: str, conv_attrs: Mapping[str, Any]
) -> tuple[str, Mapping[str, Any]]:
    """(op, attrs) with the conv (the op itself, or the fused body's anchor step) made
    `conv_op` with `conv_attrs`."""
    if anchor is None:
        return conv_op, conv_attrs
    body = attrs["body"]
    step = dataclasses.replace(body.steps[anchor], op=conv_op, attrs=tuple(sorted(conv_attrs.items())))
    steps = tuple(step if k == anchor else s for k, s in enumerate(body.steps))
    return "fused", {**attrs, "body": dataclasses.replace(body, steps=steps)}


def _split_k(
    op: str,
    in_types: tuple[TensorType, ...],
    attrs: Mapping[str, Any],
    anchor: int | None,
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    profile: Any,
) -> Specialized:
    """The "splitk" algorithm: the `split_k` knob, put in the conv's attributes for its compute."""
    from tensorir.ops.conv_splitk_gpu import conv_default_split, split_choices

    conv_attrs = dict(attrs) if anchor is None else dict(attrs["body"].steps[anchor].attrs)
    default = max(2, conv_default_split(x_shape, w_shape, conv_attrs, profile))
    split = knob("split_k", split_choices(x_shape[1]), default)
    new_op, new_attrs = _rewrite(op, attrs, anchor, "conv2d_nchwc", {**conv_attrs, "split_k": split})
    return Specialized(new_op, in_types, new_attrs, "splitk")
