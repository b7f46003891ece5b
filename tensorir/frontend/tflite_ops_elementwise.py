"""TFLite converters for the elementwise activations and arithmetic (RELU, RELU6, LOGISTIC, TANH,
HARD_SWISH, GELU, ..., ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, POW, PRELU; LEAKY_RELU) and for
DEQUANTIZE / QUANTIZE (fp16 weights, and the int8 / uint8 edges of a quantized model).

Each follows its operands' layout: on the channels-first twins when an operand has one
(tflite_ops_common.first_operand, elementwise_operands). tflite_ops_math.py has the rest of the
elementwise math (SQUARE, LOG, RSQRT, the comparisons, SELECT).
"""

from __future__ import annotations

import numpy as np

from tensorir.errors import UnsupportedOpError
from tensorir.frontend.tflite_context import TfliteContext
from tensorir.frontend.tflite_ops_common import (
    activation,
    converter,
    elementwise_operands,
    first_operand,
    set_output,
)
from tensorir.frontend.tflite_reader import TflOp

# ---- activations and arithmetic --------------------------------------------------------------
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


# ---- quantization ---------------------------------------------------------------------------
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


@converter("DENSIFY")
def densify(ctx: TfliteContext, op: TflOp) -> None:
    """A sparse constant, made dense when the file was read (tflite_sparse.py): the identity."""
    x, nchw = first_operand(ctx, op)
    set_output(ctx, op, x, nchw)


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
