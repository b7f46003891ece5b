"""TFLite converters for the tensor and shape ops: CONCATENATION, RESHAPE, SQUEEZE, EXPAND_DIMS,
TRANSPOSE, PAD / PADV2 / MIRROR_PAD, RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR, STRIDED_SLICE,
SHAPE, PACK and TILE.

Concat, pad, resize, strided slice and tile follow their input's layout (on the channels-first
twin when it has one: axes, pads and repeats are permuted to it); reshape keeps the twin when
batch and channels stay, and transpose composes with it. Shape operands (target shapes, axes,
paddings, sizes, slice bounds) must be constants: they are read at import with `ctx.const_input`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tensorir.errors import ModelError, UnsupportedOpError
from tensorir.frontend.tflite_context import TfliteContext, to_cf, to_cl
from tensorir.frontend.tflite_ops_common import (
    activation,
    converter,
    first_operand,
    follows_nchw,
    operand_nchw,
    set_output,
)
from tensorir.frontend.tflite_reader import TflOp
from tensorir.ops.tensor import normalize_slice, reshape_target


@converter("CONCATENATION")
def concatenation(ctx: TfliteContext, op: TflOp) -> None:
    rank = ctx.rank(op.inputs[0])
    axis = int(op.options.get("Axis", 0)) % rank
    nchw = follows_nchw(ctx, op.inputs)
    if nchw:
        args, axis = [operand_nchw(ctx, i, rank) for i in op.inputs], to_cl(rank)[axis]
    else:
        args = [ctx.nhwc(i) for i in op.inputs]
    set_output(ctx, op, activation(ctx, op, ctx.add("concat", args, {"axis": axis}, op)), nchw)


def _reshape_target(ctx: TfliteContext, op: TflOp) -> list[int]:
    if ctx.has(op, 1):
        target = np.asarray(ctx.const_input(op, 1, "shape")).reshape(-1)
        if target.size or ctx.tensor(op.inputs[1]).shape == (0,):
            return [int(d) for d in target]
    if "NewShape" in op.options and np.size(op.options["NewShape"]):
        return [int(d) for d in np.asarray(op.options["NewShape"]).reshape(-1)]
    return list(ctx.tensor(op.outputs[0]).shape)


@converter("RESHAPE")
def reshape(ctx: TfliteContext, op: TflOp) -> None:
    i = op.inputs[0]
    src = ctx.shape(i)
    shape = tuple(reshape_target(src, _reshape_target(ctx, op), False))
    if ctx.has_twin(i) and len(shape) >= 3 and shape[0] == src[0] and shape[-1] == src[-1]:
        # batch and channels stay: reshaping the axes between them is the same on the twin
        twin = (shape[0], shape[-1], *shape[1:-1])
        return ctx.set_nchw(op, 0, ctx.add("reshape", [ctx.nchw(i)], {"shape": twin}, op))
    ctx.set_nhwc(op, 0, ctx.add("reshape", [ctx.input(op, 0)], {"shape": shape}, op))


@converter("SQUEEZE")
def squeeze(ctx: TfliteContext, op: TflOp) -> None:
    shape = ctx.shape(op.inputs[0])
    dims = [int(d) % len(shape) for d in np.asarray(op.options.get("SqueezeDims", [])).reshape(-1)]
    drop = set(dims) if dims else {a for a, d in enumerate(shape) if d == 1}
    out = tuple(d for a, d in enumerate(shape) if a not in drop)
    ctx.set_nhwc(op, 0, ctx.add("reshape", [ctx.input(op, 0)], {"shape": out}, op))


@converter("EXPAND_DIMS")
def expand_dims(ctx: TfliteContext, op: TflOp) -> None:
    shape = list(ctx.shape(op.inputs[0]))
    axis = int(np.asarray(ctx.const_input(op, 1, "axis")).reshape(-1)[0])
    shape.insert(axis % (len(shape) + 1), 1)
    ctx.set_nhwc(op, 0, ctx.add("reshape", [ctx.input(op, 0)], {"shape": tuple(shape)}, op))


@converter("TRANSPOSE")
def transpose(ctx: TfliteContext, op: TflOp) -> None:
    i = op.inputs[0]
    perm = [int(p) for p in np.asarray(ctx.const_input(op, 1, "perm")).reshape(-1)]
    if ctx.has_twin(i):  # compose with the twin's order
        return ctx.set_nhwc(op, 0, ctx.transpose(ctx.nchw(i), [to_cl(len(perm))[p] for p in perm]))
    ctx.set_nhwc(op, 0, ctx.transpose(ctx.nhwc(i), perm))


def _pad_value(ctx: TfliteContext, op: TflOp) -> float | int:
    if op.code != "PADV2" or not ctx.has(op, 2):
        float_x = ctx.tensor(op.inputs[0]).dtype.startswith("float") or ctx.quant(op.inputs[0]) is not None
        return 0.0 if float_x else 0
    return np.asarray(ctx.const_input(op, 2, "constant_values")).reshape(-1)[0].item()


@converter("PAD", "PADV2", "MIRROR_PAD")
def pad(ctx: TfliteContext, op: TflOp) -> None:
    i = op.inputs[0]
    pads = np.asarray(ctx.const_input(op, 1, "paddings")).reshape(-1, 2).astype(int)
    mode = "constant"
    if op.code == "MIRROR_PAD":
        if int(op.options.get("Mode", 0)) != 0:
            raise UnsupportedOpError(f"{op.label}: SYMMETRIC mirror padding is not supported (REFLECT is)")
        mode = "reflect"
    nchw = follows_nchw(ctx, [i])
    if nchw:
        pads = pads[list(to_cf(len(pads)))]
    x = ctx.nchw(i) if nchw else ctx.nhwc(i)
    attrs = {"pads": (*pads[:, 0].tolist(), *pads[:, 1].tolist()), "mode": mode, "value": _pad_value(ctx, op)}
    set_output(ctx, op, ctx.add("pad", [x], attrs, op), nchw)


def _resize_modes(op: TflOp) -> dict[str, str]:
    align = bool(op.options.get("AlignCorners", False))
    half = bool(op.options.get("HalfPixelCenters", False))
    if align and half:
        raise ModelError(f"{op.label}: align_corners and half_pixel_centers are both set")
    ctm = "align_corners" if align else ("half_pixel" if half else "asymmetric")
    if op.code == "RESIZE_BILINEAR":
        return {"mode": "linear", "coordinate_transformation_mode": ctm}
    # TFLite nearest: floor((out + 0.5 * half) * scale), round() when align_corners
    return {
        "mode": "nearest",
        "coordinate_transformation_mode": ctm,
        "nearest_mode": "floor" if ctm == "asymmetric" else "round_prefer_ceil",
    }


@converter("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
def resize(ctx: TfliteContext, op: TflOp) -> None:
    size = [int(d) for d in np.asarray(ctx.const_input(op, 1, "size")).reshape(-1)]
    x, nchw = first_operand(ctx, op)
    shape = ctx.graph.type_of(x).shape
    hw = (2, 3) if nchw else (1, 2)
    sizes = list(shape)
    sizes[hw[0]], sizes[hw[1]] = size
    scales = tuple(float(o) / n for o, n in zip(sizes, shape, strict=True))
    attrs = {
        "sizes": tuple(sizes),
        "scales": scales,
        "roi": (),
        "nearest_mode": "round_prefer_floor",
        "cubic_coeff_a": -0.75,
        "exclude_outside": 0,
        "extrapolation_value": 0.0,
        "antialias": 0,
        **_resize_modes(op),
    }
    set_output(ctx, op, ctx.add("resize", [x], attrs, op), nchw)


def _slice_bounds(
    ctx: TfliteContext, op: TflOp, shape: Sequence[int]
) -> tuple[list[int], list[int], list[int]]:
    """Per-axis (start, end, step) of STRIDED_SLICE with begin/end masks resolved."""
    big = 2**31 - 1
    begin, end, strides = (
        [int(v) for v in np.asarray(ctx.const_input(op, k, what)).reshape(-1)]
        for k, what in ((1, "begin"), (2, "end"), (3, "strides"))
    )
    bmask, emask = int(op.options.get("BeginMask", 0)), int(op.options.get("EndMask", 0))
    shrink = int(op.options.get("ShrinkAxisMask", 0))
    for a in range(len(begin)):
        if op.options.get("Offset"):
            end[a] += begin[a]
        if bmask >> a & 1:
            begin[a] = 0 if strides[a] > 0 else big
        if emask >> a & 1:
            end[a] = big if strides[a] > 0 else -big
        if shrink >> a & 1:
            start = begin[a] + (shape[a] if begin[a] < 0 else 0)
            begin[a], end[a], strides[a] = start, start + 1, 1
    return begin, end, strides


@converter("STRIDED_SLICE")
def strided_slice(ctx: TfliteContext, op: TflOp) -> None:
    if int(op.options.get("EllipsisMask", 0)) or int(op.options.get("NewAxisMask", 0)):
        raise UnsupportedOpError(f"{op.label}: ellipsis_mask and new_axis_mask are not supported")
    i = op.inputs[0]
    shape = ctx.shape(i)
    begin, end, strides = _slice_bounds(ctx, op, shape)
    axes = list(range(len(begin)))
    shrink = int(op.options.get("ShrinkAxisMask", 0))
    nchw = follows_nchw(ctx, [i]) and not shrink
    x = ctx.nchw(i) if nchw else ctx.nhwc(i)
    if nchw:
        axes = [to_cl(len(axes))[a] for a in axes]
    attrs = normalize_slice(ctx.graph.type_of(x).shape, begin, end, axes, strides)
    y = ctx.add("slice", [x], attrs, op)
    if shrink:
        out = tuple(
            d for a, d in enumerate(ctx.graph.type_of(y).shape) if not (shrink >> a & 1 and a < len(begin))
        )
        y = ctx.add("reshape", [y], {"shape": out}, op)
    set_output(ctx, op, y, nchw)


@converter("SHAPE")
def shape_(ctx: TfliteContext, op: TflOp) -> None:
    dtype = "int64" if int(op.options.get("OutType", 2)) == 4 else "int32"
    ctx.set_nhwc(op, 0, ctx.const(np.array(ctx.shape(op.inputs[0]), dtype=dtype)))


@converter("PACK")
def pack(ctx: TfliteContext, op: TflOp) -> None:
    axis = int(op.options.get("Axis", 0))
    rank = ctx.rank(op.inputs[0]) + 1
    parts = []
    for i in op.inputs:
        shape = list(ctx.shape(i))
        shape.insert(axis % rank, 1)
        parts.append(ctx.add("reshape", [ctx.nhwc(i)], {"shape": tuple(shape)}, op))
    ctx.set_nhwc(op, 0, ctx.add("concat", parts, {"axis": axis % rank}, op))


@converter("TILE")
def tile(ctx: TfliteContext, op: TflOp) -> None:
    i = op.inputs[0]
    repeats = [int(r) for r in np.asarray(ctx.const_input(op, 1, "multiples")).reshape(-1)]
    nchw = follows_nchw(ctx, [i])
    if nchw:
        repeats = [repeats[a] for a in to_cf(len(repeats))]
    x = ctx.nchw(i) if nchw else ctx.nhwc(i)
    set_output(ctx, op, ctx.add("tile", [x], {"repeats": tuple(repeats)}, op), nchw)


@converter("DEPTH_TO_SPACE", "SPACE_TO_DEPTH")
def depth_to_space(ctx: TfliteContext, op: TflOp) -> None:
    """NHWC DEPTH_TO_SPACE moves channel (i*b + j)*C' + c to pixel (h*b + i, w*b + j): ONNX's
    DCR order, here on the channels-first twin (SPACE_TO_DEPTH its inverse)."""
    b = int(op.options.get("BlockSize", 0))
    if b < 1:
        raise ModelError(f"{op.label}: block size {b} must be positive")
    if op.code == "DEPTH_TO_SPACE":
        name, attrs = "depth_to_space", {"blocksize": b, "mode": "DCR"}
    else:
        name, attrs = "space_to_depth", {"blocksize": b}
    ctx.set_nchw(op, 0, ctx.add(name, [ctx.nchw(op.inputs[0])], attrs, op))
