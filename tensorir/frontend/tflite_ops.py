"""Converters from TFLite builtin ops to graph ops (see tflite.py for the NHWC/NCHW scheme).

A converter reads its op's inputs from the context (`ctx.nhwc(i)` in TFLite's order,
`ctx.nchw(i)` for the NCHW twin of a 4-D tensor) and sets each output with `ctx.set_nhwc` or
`ctx.set_nchw`. Convolutions and pools always compute in NCHW; layout-neutral ops (elementwise,
concat, pad, mean, softmax, resize, strided slice) follow their input: NCHW when it has a
twin, so no transpose separates two convolutions. Shapes and weights are static: shape
inputs are read at import with `ctx.const_input`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensorir.errors import ModelError, UnsupportedOpError
from tensorir.frontend.tflite import TO_NCHW, TfliteContext, TflOp, to_cf, to_cl
from tensorir.graph.graph import Value
from tensorir.ops.tensor import normalize_slice, reshape_target

Converter = Callable[[TfliteContext, TflOp], None]
CONVERTERS: dict[str, Converter] = {}

# fused_activation_function: ActivationFunctionType -> (graph op, attrs)
_ACTIVATIONS: dict[int, tuple[str, dict[str, Any]] | None] = {
    0: None,
    1: ("relu", {}),
    2: ("clip", {"min": -1.0, "max": 1.0}),
    3: ("clip", {"min": 0.0, "max": 6.0}),
    4: ("tanh", {}),
}


def converter(*codes: str) -> Callable[[Converter], Converter]:
    def deco(fn: Converter) -> Converter:
        for c in codes:
            if c in CONVERTERS:
                raise RuntimeError(f"TFLite op {c} has two converters")
            CONVERTERS[c] = fn
        return fn

    return deco


# ---- helpers ------------------------------------------------------------------------------
def activation(ctx: TfliteContext, op: TflOp, v: Value) -> Value:
    """v with the op's fused activation function applied."""
    code = int(op.options.get("FusedActivationFunction", 0))
    if code not in _ACTIVATIONS:
        raise UnsupportedOpError(f"{op.label}: fused activation function {code} is not supported")
    act = _ACTIVATIONS[code]
    return v if act is None else ctx.add(act[0], [v], act[1], op)


def _out_nchw(ctx: TfliteContext, op: TflOp, v: Value) -> None:
    ctx.set_nchw(op, 0, activation(ctx, op, v))


def set_output(ctx: TfliteContext, op: TflOp, v: Value, nchw: bool) -> None:
    """Output 0 of op: `v`, channels-first (its twin) when `nchw`."""
    (ctx.set_nchw if nchw else ctx.set_nhwc)(op, 0, v)


def same_pads(
    size: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dil: Sequence[int]
) -> tuple:
    """TFLite's SAME padding: output = ceil(in / stride), the odd pad at the end."""
    begins, ends = [], []
    for n, k, s, d in zip(size, kernel, strides, dil, strict=True):
        total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
        begins.append(total // 2)
        ends.append(total - total // 2)
    return (*begins, *ends)


def _window(op: TflOp, hw: Sequence[int], kernel: Sequence[int], dil: Sequence[int]) -> dict[str, Any]:
    strides = (int(op.options["StrideH"]), int(op.options["StrideW"]))
    padding = int(op.options.get("Padding", 0))
    if padding not in (0, 1):
        raise UnsupportedOpError(f"{op.label}: padding type {padding} is not supported")
    pads = same_pads(hw, kernel, strides, dil) if padding == 0 else (0, 0, 0, 0)
    return {"strides": strides, "pads": pads, "dilations": tuple(dil)}


def _weight(ctx: TfliteContext, op: TflOp, k: int, perm: Sequence[int]) -> Value:
    if not ctx.has(op, k):
        raise ModelError(f"{op.label}: required input {k} is missing")
    return ctx.weight(op.inputs[k], perm)


def _bias(ctx: TfliteContext, op: TflOp, k: int) -> list[Value]:
    return [ctx.input(op, k)] if ctx.has(op, k) else []


def _follows_nchw(ctx: TfliteContext, ins: Sequence[int]) -> bool:
    """Whether an op on tensors `ins` runs on NCHW twins: all rank 4 (constants aside) and one has a twin."""
    live = [i for i in ins if ctx.const_of(i) is None]
    if not live or not any(ctx.has_twin(i) for i in live):
        return False
    rank = ctx.rank(live[0])
    return rank >= 3 and all(ctx.rank(i) == rank for i in live)


def _live_rank(ctx: TfliteContext, ins: Sequence[int]) -> int:
    return max(ctx.rank(i) for i in ins if ctx.const_of(i) is None)


def _operand_nchw(ctx: TfliteContext, i: int, rank: int) -> Value:
    """Tensor i as an operand of an NCHW op: constants broadcast to rank 4, then transposed."""
    data = ctx.const_of(i)
    if data is None:
        return ctx.nchw(i)
    if data.size == 1 and data.ndim <= 1:
        return ctx.const_operand(i, (), ())
    return ctx.const_operand(i, (1,) * (rank - data.ndim) + data.shape, to_cf(rank))


# ---- convolutions -------------------------------------------------------------------------
@converter("CONV_2D")
def conv_2d(ctx: TfliteContext, op: TflOp) -> None:
    x = ctx.nchw(op.inputs[0])
    w = _weight(ctx, op, 1, TO_NCHW)  # OHWI -> OIHW
    c, wt = ctx.graph.type_of(x).shape[1], ctx.graph.type_of(w).shape
    dil = (int(op.options.get("DilationHFactor", 1)), int(op.options.get("DilationWFactor", 1)))
    attrs = _window(op, ctx.graph.type_of(x).shape[2:], wt[2:], dil)
    attrs["group"] = c // wt[1] if wt[1] else 1
    _out_nchw(ctx, op, ctx.add("conv", [x, w, *_bias(ctx, op, 2)], attrs, op))


@converter("DEPTHWISE_CONV_2D")
def depthwise_conv_2d(ctx: TfliteContext, op: TflOp) -> None:
    x = ctx.nchw(op.inputs[0])
    w = _weight(ctx, op, 1, (3, 0, 1, 2))  # 1HW(C*M) -> (C*M)1HW
    c, wt = ctx.graph.type_of(x).shape[1], ctx.graph.type_of(w).shape
    dil = (int(op.options.get("DilationHFactor", 1)), int(op.options.get("DilationWFactor", 1)))
    attrs = _window(op, ctx.graph.type_of(x).shape[2:], wt[2:], dil)
    attrs["group"] = c
    _out_nchw(ctx, op, ctx.add("conv", [x, w, *_bias(ctx, op, 2)], attrs, op))


def transpose_conv_pads(size: int, out: int, k: int, s: int, same: bool) -> tuple[int, int, int]:
    """(pad begin, pad end, output_padding) of a transposed conv that TFLite crops to `out`."""
    full = s * (size - 1) + k
    begin = max(0, (size - 1) * s + k - out) // 2 if same else 0
    end = full - begin - out
    return (begin, end, 0) if end >= 0 else (begin, 0, -end)


@converter("TRANSPOSE_CONV")
def transpose_conv(ctx: TfliteContext, op: TflOp) -> None:
    out_shape = [int(d) for d in ctx.const_input(op, 0, "output_shape")]
    x = ctx.nchw(op.inputs[2])
    w = _weight(ctx, op, 1, (3, 0, 1, 2))  # OHWI -> IOHW
    hw, k = ctx.graph.type_of(x).shape[2:], ctx.graph.type_of(w).shape[2:]
    strides = (int(op.options["StrideH"]), int(op.options["StrideW"]))
    same = int(op.options.get("Padding", 0)) == 0
    dims = [transpose_conv_pads(hw[a], out_shape[1 + a], k[a], strides[a], same) for a in range(2)]
    attrs = {
        "strides": strides,
        "pads": (dims[0][0], dims[1][0], dims[0][1], dims[1][1]),
        "output_padding": (dims[0][2], dims[1][2]),
        "dilations": (1, 1),
        "group": 1,
    }
    _out_nchw(ctx, op, ctx.add("conv_transpose", [x, w, *_bias(ctx, op, 3)], attrs, op))


@converter("FULLY_CONNECTED")
def fully_connected(ctx: TfliteContext, op: TflOp) -> None:
    if int(op.options.get("WeightsFormat", 0)) != 0:
        raise UnsupportedOpError(f"{op.label}: shuffled weights are not supported")
    x, w = ctx.input(op, 0), ctx.input(op, 1)
    shape, k = ctx.shape(op.inputs[0]), ctx.graph.type_of(w).shape[1]
    if math.prod(shape) % k:
        raise ModelError(f"{op.label}: input {list(shape)} does not flatten into rows of {k}")
    rows = (math.prod(shape) // k, k)
    flat = x if tuple(shape) == rows else ctx.add("reshape", [x], {"shape": rows}, op)
    y = ctx.add("dense", [flat, w], None, op)
    if ctx.has(op, 2):
        y = ctx.add("add", [y, ctx.input(op, 2)], None, op)
    if op.options.get("KeepNumDims") and len(shape) != 2:
        y = ctx.add("reshape", [y], {"shape": (*shape[:-1], ctx.graph.type_of(w).shape[0])}, op)
    ctx.set_nhwc(op, 0, activation(ctx, op, y))


# ---- pooling / reductions ------------------------------------------------------------------
def _pool(graph_op: str, ctx: TfliteContext, op: TflOp) -> None:
    x = ctx.nchw(op.inputs[0])
    kernel = (int(op.options["FilterHeight"]), int(op.options["FilterWidth"]))
    attrs = {"kernel_shape": kernel, **_window(op, ctx.graph.type_of(x).shape[2:], kernel, (1, 1))}
    attrs.update({"ceil_mode": 0, "storage_order": 0, "indices": 0} if graph_op == "max_pool" else {})
    attrs.update({"ceil_mode": 0, "count_include_pad": 0} if graph_op == "avg_pool" else {})
    _out_nchw(ctx, op, ctx.add(graph_op, [x], attrs, op))


converter("MAX_POOL_2D")(functools.partial(_pool, "max_pool"))
converter("AVERAGE_POOL_2D")(functools.partial(_pool, "avg_pool"))

_REDUCE = {
    "MEAN": "reduce_mean",
    "SUM": "reduce_sum",
    "REDUCE_MAX": "reduce_max",
    "REDUCE_MIN": "reduce_min",
    "REDUCE_PROD": "reduce_prod",
}
_GLOBAL = {"MEAN": "global_avg_pool", "REDUCE_MAX": "global_max_pool"}


def _reduce(ctx: TfliteContext, op: TflOp) -> None:
    i = op.inputs[0]
    rank = ctx.rank(i)
    axes = sorted({int(a) % rank for a in np.asarray(ctx.const_input(op, 1, "axes")).reshape(-1)})
    keep = bool(op.options.get("KeepDims", False))
    if rank == 4 and axes == [1, 2] and op.code in _GLOBAL:  # global pooling over H, W
        y = ctx.add(_GLOBAL[op.code], [ctx.nchw(i)], None, op)
        if keep:
            return ctx.set_nchw(op, 0, y)
        return ctx.set_nhwc(op, 0, ctx.add("reshape", [y], {"shape": ctx.graph.type_of(y).shape[:2]}, op))
    kept = [a for a in range(rank) if a not in axes]
    nchw = _follows_nchw(ctx, [i]) and (
        keep or [to_cl(rank)[a] for a in kept] == sorted(to_cl(rank)[a] for a in kept)
    )
    x = ctx.nchw(i) if nchw else ctx.nhwc(i)
    attrs = {"axes": tuple(sorted(to_cl(rank)[a] for a in axes) if nchw else axes), "keepdims": int(keep)}
    set_output(ctx, op, ctx.add(_REDUCE[op.code], [x], attrs, op), nchw and keep)


for _code in _REDUCE:
    converter(_code)(_reduce)


@converter("SOFTMAX")
def softmax(ctx: TfliteContext, op: TflOp) -> None:
    i = op.inputs[0]
    nchw = _follows_nchw(ctx, [i])
    x = ctx.nchw(i) if nchw else ctx.nhwc(i)
    beta = float(op.options.get("Beta", 1.0))
    if beta != 1.0:
        x = ctx.add("mul", [x, ctx.const(np.float32(beta))], None, op)
    axis = 1 if nchw else ctx.rank(i) - 1
    set_output(ctx, op, ctx.add("softmax", [x], {"axis": axis}, op), nchw)


# ---- elementwise ----------------------------------------------------------------------------
_UNARY = {
    "RELU": ("relu", {}),
    "RELU6": ("clip", {"min": 0.0, "max": 6.0}),
    "RELU_N1_TO_1": ("clip", {"min": -1.0, "max": 1.0}),
    "RELU_0_TO_1": ("clip", {"min": 0.0, "max": 1.0}),
    "LOGISTIC": ("sigmoid", {}),
    "TANH": ("tanh", {}),
    "HARD_SWISH": ("hard_swish", {}),
    "EXP": ("exp", {}),
    "SQRT": ("sqrt", {}),
    "ABS": ("abs", {}),
    "NEG": ("neg", {}),
    "GELU": ("gelu", {}),
}
_BINARY = {
    "ADD": "add",
    "SUB": "sub",
    "MUL": "mul",
    "DIV": "div",
    "MAXIMUM": "maximum",
    "MINIMUM": "minimum",
    "POW": "pow",
    "PRELU": "prelu",
}


def first_operand(ctx: TfliteContext, op: TflOp) -> tuple[Value, bool]:
    """The op's first input in the layout it has (its channels-first twin when it has one), and
    whether that is channels-first."""
    i = op.inputs[0]
    nchw = ctx.has_twin(i)
    return (ctx.nchw(i) if nchw else ctx.nhwc(i)), nchw


def elementwise_operands(ctx: TfliteContext, op: TflOp, count: int = 2) -> tuple[list[Value], bool]:
    """The op's first `count` inputs in one layout (channels-first when they follow a twin:
    _follows_nchw), and whether that is channels-first."""
    ins = op.inputs[:count]
    if _follows_nchw(ctx, ins):
        return [_operand_nchw(ctx, i, _live_rank(ctx, ins)) for i in ins], True
    return [ctx.nhwc(i) for i in ins], False


def _unary(ctx: TfliteContext, op: TflOp) -> None:
    name, attrs = _UNARY[op.code]
    if op.code == "GELU":
        attrs = {"approximate": "tanh" if op.options.get("Approximate") else "none"}
    x, nchw = first_operand(ctx, op)
    set_output(ctx, op, ctx.add(name, [x], attrs, op), nchw)


def _binary(ctx: TfliteContext, op: TflOp) -> None:
    args, nchw = elementwise_operands(ctx, op)
    y = ctx.add(_BINARY[op.code], args, None, op)
    set_output(ctx, op, activation(ctx, op, y), nchw)


for _code in _UNARY:
    converter(_code)(_unary)
for _code in _BINARY:
    converter(_code)(_binary)


@converter("LEAKY_RELU")
def leaky_relu(ctx: TfliteContext, op: TflOp) -> None:
    x, nchw = first_operand(ctx, op)
    alpha = float(op.options.get("Alpha", 0.2))
    set_output(ctx, op, ctx.add("leaky_relu", [x], {"alpha": alpha}, op), nchw)


@converter("DEQUANTIZE")
def dequantize(ctx: TfliteContext, op: TflOp) -> None:
    """fp16 weights -> float32 (folded at import when constant); an int8 / uint8 tensor -> its
    float value (the context reads every quantized tensor dequantized)."""
    t = ctx.tensor(op.inputs[0])
    if ctx.quant(op.inputs[0]) is not None and t.data is None:
        x, nchw = first_operand(ctx, op)
        return set_output(ctx, op, x, nchw)
    if t.dtype != "float16":
        raise UnsupportedOpError(
            f"{op.label}: dequantizing {t.dtype} '{t.name}' "
            "(float16 and quantized int8 / uint8 are supported)"
        )
    data = ctx.const_array(op.inputs[0])
    if data is not None:
        return ctx.set_nhwc(op, 0, ctx.const(data.astype(np.float32)))
    ctx.set_nhwc(op, 0, ctx.add("cast", [ctx.input(op, 0)], {"to": "float32", "saturate": 1}, op))


@converter("QUANTIZE")
def quantize(ctx: TfliteContext, op: TflOp) -> None:
    """float32 -> int8 / uint8, or a requantize (another scale, zero point or type): the input's
    float value, which the context quantizes to the output tensor's type."""
    out = ctx.tensor(op.outputs[0])
    if ctx.quant(op.outputs[0]) is None:
        raise UnsupportedOpError(
            f"{op.label}: quantizing to {out.dtype} '{out.name}' (int8 / uint8 per tensor are supported)"
        )
    x, nchw = first_operand(ctx, op)
    set_output(ctx, op, x, nchw)


# ---- tensor ops -------------------------------------------------------------------------------
@converter("CONCATENATION")
def concatenation(ctx: TfliteContext, op: TflOp) -> None:
    rank = ctx.rank(op.inputs[0])
    axis = int(op.options.get("Axis", 0)) % rank
    nchw = _follows_nchw(ctx, op.inputs)
    if nchw:
        args, axis = [_operand_nchw(ctx, i, rank) for i in op.inputs], to_cl(rank)[axis]
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
    nchw = _follows_nchw(ctx, [i])
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
    nchw = _follows_nchw(ctx, [i]) and not shrink
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
    nchw = _follows_nchw(ctx, [i])
    if nchw:
        repeats = [repeats[a] for a in to_cf(len(repeats))]
    x = ctx.nchw(i) if nchw else ctx.nhwc(i)
    set_output(ctx, op, ctx.add("tile", [x], {"repeats": tuple(repeats)}, op), nchw)


# the converters of the other tflite_ops_* modules register into CONVERTERS when imported
from tensorir.frontend import tflite_ops_math, tflite_ops_matmul  # noqa: E402, F401
