"""ONNX's quantization ops, imported as float arithmetic on the quantized values.

    DequantizeLinear   y = (x - zero_point) * scale
    QuantizeLinear     y = saturate(round(x / scale) + zero_point)  (round half to even)
    MatMulInteger      int32 (A - a_zp) @ (B - b_zp)
    ConvInteger        int32 conv(x - x_zp, w - w_zp)
    QLinearMatMul      quantize((a - a_zp) @ (b - b_zp) * (a_scale * b_scale / y_scale), 1, y_zp)
    QLinearConv        quantize((conv(x - x_zp, w - w_zp) + B) * (x_scale * w_scale / y_scale), 1, y_zp)

Scales and zero points are per tensor, per axis (1-D along `axis`) or blocked (`block_size`
along `axis`). The integer products are formed in float32 on integer values, which is exact
while every accumulator stays below 2^24 (an 8-bit product sum over K < 1040 terms); the
requantization multiplies by one float32 factor, as onnxruntime's kernels do. This gives
QDQ and QOperator models a correct float path; integer kernels come with the int8 work.
DynamicQuantizeLinear imports through its ONNX function body (onnx_functions.py).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx.helper

from tensorir.errors import ModelError
from tensorir.frontend.onnx import CONVERTERS, ImportContext, converter, node_label
from tensorir.graph.graph import Value
from tensorir.ops.tensor import normalize_slice

_F32 = "float32"


def _f32(ctx: ImportContext, v: Value) -> Value:
    return v if ctx.type_of(v).dtype == _F32 else ctx.add("cast", [v], {"to": _F32, "saturate": 1})[0]


def _param(
    ctx: ImportContext, node: onnx.NodeProto, p: Value, rank: int, axis: int, block: int, dim: int
) -> Value:
    """A scale or zero point shaped to broadcast against x (rank `rank`, `dim` along `axis`)."""
    shape = ctx.type_of(p).shape
    if int(np.prod(shape)) == 1 and not block:
        return ctx.add("reshape", [p], {"shape": ()})[0]
    if not block:
        if len(shape) != 1 or shape[0] != dim:
            raise ModelError(
                f"{node_label(node)}: a per-axis parameter must have {dim} values, got {list(shape)}"
            )
        return ctx.add("reshape", [p], {"shape": tuple(dim if i == axis else 1 for i in range(rank))})[0]
    if len(shape) != rank or shape[axis] != -(-dim // block):
        raise ModelError(
            f"{node_label(node)}: blocked parameter of shape {list(shape)} does not fit block_size {block}"
        )
    wide = (*shape[: axis + 1], 1, *shape[axis + 1 :])
    p = ctx.add("reshape", [p], {"shape": wide})[0]
    p = ctx.add("expand", [p], {"shape": (*shape[: axis + 1], block, *shape[axis + 1 :])})[0]
    p = ctx.add("reshape", [p], {"shape": (*shape[:axis], shape[axis] * block, *shape[axis + 1 :])})[0]
    if shape[axis] * block == dim:
        return p
    return ctx.add("slice", [p], normalize_slice(ctx.type_of(p).shape, [0], [dim], [axis]))[0]


def _layout(ctx: ImportContext, node: onnx.NodeProto, x: Value) -> tuple[int, int, int, int]:
    """(rank, axis, block_size, x's size along axis) of a Q/DQ node."""
    shape = ctx.type_of(x).shape
    attrs = ctx.attrs(node)
    rank = len(shape)
    axis = attrs.get("axis", 1)
    axis = axis + rank if axis < 0 else axis
    dim = shape[axis] if 0 <= axis < rank else 1
    return rank, axis, attrs.get("block_size", 0), dim


def dequantize(ctx: ImportContext, node: onnx.NodeProto, x: Value, scale: Value, zp: Value | None) -> Value:
    """(x - zp) * scale in float32, parameters laid out by the node's axis / block_size."""
    rank, axis, block, dim = _layout(ctx, node, x)
    xf = _f32(ctx, x)
    if zp is not None:
        xf = ctx.add("sub", [xf, _param(ctx, node, _f32(ctx, zp), rank, axis, block, dim)])[0]
    return ctx.add("mul", [xf, _param(ctx, node, _f32(ctx, scale), rank, axis, block, dim)])[0]


def quantize(
    ctx: ImportContext, node: onnx.NodeProto, x: Value, scale: Value, zp: Value | None, to: str
) -> Value:
    """saturate(round(x / scale) + zp) as `to`; float8 targets: cast(x / scale) (saturate attr)."""
    rank, axis, block, dim = _layout(ctx, node, x)
    y = ctx.add("div", [_f32(ctx, x), _param(ctx, node, _f32(ctx, scale), rank, axis, block, dim)])[0]
    if not to.startswith(("int", "uint")):
        sat = ctx.attrs(node).get("saturate", 1)
        return ctx.add("cast", [y], {"to": to, "saturate": sat}, node=node)[0]
    y = ctx.add("round", [y])[0]
    if zp is not None:
        y = ctx.add("add", [y, _param(ctx, node, _f32(ctx, zp), rank, axis, block, dim)])[0]
    info = ml_dtypes.iinfo(to)  # int4, uint2, ... as well
    y = ctx.add("clip", [y], {"min": float(info.min), "max": float(info.max)})[0]
    return ctx.add("cast", [y], {"to": to, "saturate": 1}, node=node)[0]


def opt_input(ctx: ImportContext, node: onnx.NodeProto, i: int) -> Value | None:
    return ctx.input(node, i) if ctx.has_input(node, i) else None


@converter("DequantizeLinear")
def dequantize_linear(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x, scale, zp = ctx.input(node, 0), ctx.input(node, 1), opt_input(ctx, node, 2)
    y = dequantize(ctx, node, x, scale, zp)
    to = ctx.attrs(node).get("output_dtype", 0)
    to = onnx.helper.tensor_dtype_to_np_dtype(to).name if to else ctx.type_of(scale).dtype
    return [y if to == _F32 else ctx.add("cast", [y], {"to": to, "saturate": 1}, node=node)[0]]


@converter("QuantizeLinear")
def quantize_linear(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x, scale, zp = ctx.input(node, 0), ctx.input(node, 1), opt_input(ctx, node, 2)
    to = ctx.attrs(node).get("output_dtype", 0)
    if zp is not None:
        to = ctx.type_of(zp).dtype
    else:
        to = onnx.helper.tensor_dtype_to_np_dtype(to).name if to else "uint8"
    return [quantize(ctx, node, x, scale, zp, to)]


def via(ctx: ImportContext, op_type: str, node: onnx.NodeProto, inputs: list[Value], attrs: dict) -> Value:
    """The result of ONNX op `op_type` (its own converter) on values `inputs`."""
    names = [f"{node.name or node.output[0]}/{op_type}/{i}" for i in range(len(inputs))]
    for n, v in zip(names, inputs, strict=True):
        ctx.values[n] = v
    proxy = onnx.helper.make_node(op_type, names, [f"{names[0]}/out"], name=node.name, **attrs)
    return CONVERTERS[op_type](ctx, proxy)[0]


def centered(ctx: ImportContext, node: onnx.NodeProto, x: Value, zp: Value | None, axis: int = -1) -> Value:
    """x - zp in float32 (zp per tensor, or per `axis`)."""
    xf = _f32(ctx, x)
    if zp is None:
        return xf
    shape = ctx.type_of(x).shape
    axis = axis + len(shape) if axis < 0 else axis
    return ctx.add("sub", [xf, _param(ctx, node, _f32(ctx, zp), len(shape), axis, 0, shape[axis])])[0]


def _conv_attrs(ctx: ImportContext, node: onnx.NodeProto) -> dict:
    return {
        k: v
        for k, v in ctx.attrs(node).items()
        if k in ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
    }


@converter("MatMulInteger")
def matmul_integer(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    a = centered(ctx, node, ctx.input(node, 0), opt_input(ctx, node, 2), -2)
    b = centered(ctx, node, ctx.input(node, 1), opt_input(ctx, node, 3), -1)
    return ctx.add("cast", [via(ctx, "MatMul", node, [a, b], {})], {"to": "int32", "saturate": 1}, node=node)


@converter("ConvInteger")
def conv_integer(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = centered(ctx, node, ctx.input(node, 0), opt_input(ctx, node, 2))
    w = centered(ctx, node, ctx.input(node, 1), opt_input(ctx, node, 3), 0)
    y = via(ctx, "Conv", node, [x, w], _conv_attrs(ctx, node))
    return ctx.add("cast", [y], {"to": "int32", "saturate": 1}, node=node)


def requantize(
    ctx: ImportContext, node: onnx.NodeProto, acc: Value, scales: list[Value], axis: int, zp_input: int = 7
) -> Value:
    """quantize(acc * (s_in * s_w / s_out), 1, y_zp) with y_zp the node's input `zp_input`."""
    s_in, s_w, s_out = (_f32(ctx, s) for s in scales)
    m = ctx.add("div", [ctx.add("mul", [s_in, s_w])[0], s_out])[0]
    shape = ctx.type_of(acc).shape
    axis = axis + len(shape) if axis < 0 else axis
    y = ctx.add("mul", [acc, _param(ctx, node, m, len(shape), axis, 0, shape[axis])])[0]
    zp = ctx.input(node, zp_input)
    # the node has no axis / block_size: scale 1 and y_zp are per tensor
    return quantize(ctx, node, y, ctx.const(np.float32(1.0)), zp, ctx.type_of(zp).dtype)


@converter("QLinearMatMul")
def qlinear_matmul(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    a = centered(ctx, node, ctx.input(node, 0), ctx.input(node, 2), -2)
    b = centered(ctx, node, ctx.input(node, 3), ctx.input(node, 5), -1)
    acc = via(ctx, "MatMul", node, [a, b], {})
    scales = [ctx.input(node, 1), ctx.input(node, 4), ctx.input(node, 6)]
    out = requantize(ctx, node, acc, scales, -1)
    dtype = ctx.type_of(out).dtype
    if dtype not in ("int8", "uint8"):
        raise ModelError(f"{node_label(node)}: output zero point must be int8 or uint8, got {dtype}")
    return [out]


@converter("QLinearConv")
def qlinear_conv(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = centered(ctx, node, ctx.input(node, 0), ctx.input(node, 2))
    w = centered(ctx, node, ctx.input(node, 3), ctx.input(node, 5), 0)
    inputs = [x, w] + ([_f32(ctx, ctx.input(node, 8))] if ctx.has_input(node, 8) else [])
    acc = via(ctx, "Conv", node, inputs, _conv_attrs(ctx, node))
    scales = [ctx.input(node, 1), ctx.input(node, 4), ctx.input(node, 6)]
    return [requantize(ctx, node, acc, scales, 1)]
