"""onnxruntime's com.microsoft QLinear* contrib ops, imported as float arithmetic.

onnxruntime's quantize_static(..., quant_format=QuantFormat.QOperator) writes QLinearConv /
QLinearMatMul (ONNX ops: onnx_quant.py) and, for the other quantized ops, these contrib ops.
Each integer input comes with its scale and zero point, the output with its own:

    x_f = (x - x_zp) * x_scale                       dequantize each input
    y   = saturate(round(op(x_f, ...) / y_scale) + y_zp)    quantize the float result

with op one of add, mul, sigmoid, leaky_relu, softmax, avg_pool, global_avg_pool, concat,
where. QGemm keeps the integer product of QLinearMatMul:

    y = saturate(round(((A - a_zp)' (B - b_zp)' + C) * alpha * a_scale * b_scale / y_scale) + y_zp)

(per-column b_scale / b_zero_point; without y_scale the output is float32:
alpha * a_scale * b_scale * (A' B' + C)). onnxruntime computes the elementwise ops through
lookup tables and fixed-point requantization; the float path agrees within one output step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from tensorir.errors import ModelError
from tensorir.frontend.onnx import Converter, ImportContext, converter, node_label
from tensorir.frontend.onnx_quant import centered, dequantize, opt_input, quantize, requantize, via
from tensorir.graph.graph import Value

_MS = "com.microsoft."


def _dequantized(ctx: ImportContext, node: onnx.NodeProto, i: int, zp_required: bool = False) -> Value:
    """Input i dequantized by inputs i + 1 (scale) and i + 2 (zero point, may be absent)."""
    zp = ctx.input(node, i + 2) if zp_required else opt_input(ctx, node, i + 2)
    return dequantize(ctx, node, ctx.input(node, i), ctx.input(node, i + 1), zp)


def _quantized(ctx: ImportContext, node: onnx.NodeProto, y: Value, i: int, like: Value) -> Value:
    """y quantized by inputs i (scale) and i + 1 (zero point, whose type it takes; `like`'s
    type when the zero point is absent)."""
    zp = opt_input(ctx, node, i + 1)
    to = ctx.type_of(zp if zp is not None else like).dtype
    return quantize(ctx, node, y, ctx.input(node, i), zp, to)


def _attrs(ctx: ImportContext, node: onnx.NodeProto, names: Sequence[str]) -> dict:
    return {k: v for k, v in ctx.attrs(node).items() if k in names}


def _nchw(ctx: ImportContext, node: onnx.NodeProto, x: Value, back: bool = False) -> Value:
    """x moved between channels last (NHWC) and channels first (NCHW) when channels_last=1."""
    if not ctx.attrs(node).get("channels_last", 0):
        return x
    r = len(ctx.type_of(x).shape)
    perm = (0, *range(2, r), 1) if back else (0, r - 1, *range(1, r - 1))
    return ctx.add("transpose", [x], {"perm": perm})[0]


def _unary(op_type: str, attr_names: Sequence[str] = ()) -> Converter:
    """Inputs X, X_scale, X_zero_point, Y_scale, Y_zero_point: Y = quantize(op(dequantize(X)))."""

    def convert(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
        x = _nchw(ctx, node, _dequantized(ctx, node, 0))
        y = _nchw(ctx, node, via(ctx, op_type, node, [x], _attrs(ctx, node, attr_names)), back=True)
        return [_quantized(ctx, node, y, 3, ctx.input(node, 0))]

    return convert


def _binary(op_type: str) -> Converter:
    """Inputs A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp: C = quantize(op(A_f, B_f))."""

    def convert(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
        a, b = _dequantized(ctx, node, 0), _dequantized(ctx, node, 3)
        return [_quantized(ctx, node, via(ctx, op_type, node, [a, b], {}), 6, ctx.input(node, 0))]

    return convert


_POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
converter(_MS + "QLinearAdd")(_binary("Add"))
converter(_MS + "QLinearMul")(_binary("Mul"))
converter(_MS + "QLinearSigmoid")(_unary("Sigmoid"))
converter(_MS + "QLinearLeakyRelu")(_unary("LeakyRelu", ("alpha",)))
converter(_MS + "QLinearAveragePool")(_unary("AveragePool", _POOL_ATTRS))
converter(_MS + "QLinearGlobalAveragePool")(_unary("GlobalAveragePool"))


@converter(_MS + "QLinearSoftmax")
def qlinear_softmax(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    """Softmax's axis rule is that of the node's `opset` attribute (the 2-D coercion before 13)."""
    attrs = ctx.attrs(node)
    if "opset" not in attrs:
        raise ModelError(f"{node_label(node)}: required attribute opset is missing")
    model_opset, ctx.opset = ctx.opset, int(attrs["opset"])
    try:
        return _unary("Softmax", ("axis",))(ctx, node)
    finally:
        ctx.opset = model_opset


@converter(_MS + "QLinearConcat")
def qlinear_concat(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    """Inputs Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per concatenated tensor."""
    if len(node.input) < 5 or (len(node.input) - 2) % 3:
        raise ModelError(
            f"{node_label(node)}: expected Y_scale, Y_zero_point and triples (X, scale, zero point)"
        )
    xs = [_dequantized(ctx, node, i, zp_required=True) for i in range(2, len(node.input), 3)]
    y = via(ctx, "Concat", node, xs, _attrs(ctx, node, ("axis",)))
    return [_quantized(ctx, node, y, 0, ctx.input(node, 2))]


@converter(_MS + "QLinearWhere")
def qlinear_where(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    """Inputs condition, (X, x_scale, x_zp), (Y, y_scale, y_zp), z_scale, z_zp."""
    x, y = _dequantized(ctx, node, 1, zp_required=True), _dequantized(ctx, node, 4, zp_required=True)
    z = via(ctx, "Where", node, [ctx.input(node, 0), x, y], {})
    return [_quantized(ctx, node, z, 7, ctx.input(node, 1))]


@converter(_MS + "QGemm")
def qgemm(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    """Inputs A, a_scale, a_zp, B, b_scale, b_zp, C (int32 at scale alpha * a_scale * b_scale),
    y_scale, y_zp; a float32 output without y_scale."""
    attrs = ctx.attrs(node)
    trans_a, trans_b = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    a = centered(ctx, node, ctx.input(node, 0), ctx.input(node, 2))
    b = centered(ctx, node, ctx.input(node, 3), opt_input(ctx, node, 5), 0 if trans_b else 1)
    bias = opt_input(ctx, node, 6)
    inputs = [a, b] + ([centered(ctx, node, bias, None)] if bias is not None else [])  # as float32
    acc = via(ctx, "Gemm", node, inputs, {"transA": trans_a, "transB": trans_b})
    s_a = ctx.input(node, 1)
    alpha = float(attrs.get("alpha", 1.0))
    if alpha != 1.0:
        s_a = ctx.add("mul", [s_a, ctx.const(np.float32(alpha))])[0]
    if not ctx.has_input(node, 7):  # float output: acc * (alpha * a_scale * b_scale) per column
        scale = ctx.add("mul", [s_a, ctx.input(node, 4)])[0]
        return [dequantize(ctx, node, acc, scale, None)]
    return [requantize(ctx, node, acc, [s_a, ctx.input(node, 4), ctx.input(node, 7)], 1, zp_input=8)]
