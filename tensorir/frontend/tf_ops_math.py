"""TensorFlow converters for elementwise math, activations, casts and reductions.

TF broadcasting is numpy's, as the graph IR's elementwise ops. Ops without a graph op of
their own are spelled with the ones there are: Rsqrt = reciprocal(sqrt), Relu6 = clip(0, 6),
SquaredDifference = (a - b)^2, Erfc = 1 - erf,
DivNoNan = where(y == 0, 0, x / y).
"""

from __future__ import annotations

import numpy as np

from tensorir.frontend.tensorflow import TFContext, TFNode, tf_converter
from tensorir.graph.graph import Value
from tensorir.graph.types import np_dtype

BINARY = {
    "Add": "add",
    "AddV2": "add",
    "Sub": "sub",
    "Mul": "mul",
    "RealDiv": "div",
    "Div": "div",
    "Maximum": "maximum",
    "Minimum": "minimum",
    "Pow": "pow",
    "Greater": "greater",
    "GreaterEqual": "greater_equal",
    "Less": "less",
    "LessEqual": "less_equal",
    "Equal": "equal",
    "LogicalAnd": "logical_and",
    "LogicalOr": "logical_or",
}
UNARY = {
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Elu": "elu",
    "Selu": "selu",
    "Softplus": "softplus",
    "Softsign": "softsign",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Neg": "neg",
    "Abs": "abs",
    "Erf": "erf",
    "Reciprocal": "reciprocal",
    "Inv": "reciprocal",
    "Floor": "floor",
    "Ceil": "ceil",
    "Sign": "sign",
    "Sin": "sin",
    "Cos": "cos",
    "Round": "round",
    "LogicalNot": "logical_not",
}
REDUCE = {
    "Mean": "reduce_mean",
    "Sum": "reduce_sum",
    "Max": "reduce_max",
    "Min": "reduce_min",
    "Prod": "reduce_prod",
}


def _scalar(ctx: TFContext, like: Value, value: float) -> Value:
    return ctx.const(np.asarray(value, dtype=np_dtype(ctx.type_of(like).dtype)))


@tf_converter(*BINARY)
def binary(ctx: TFContext, node: TFNode) -> list[Value]:
    return ctx.add(BINARY[node.op], [ctx.input(node, 0), ctx.input(node, 1)], node=node)


@tf_converter("BiasAdd", "BiasAddV1")
def bias_add(ctx: TFContext, node: TFNode) -> list[Value]:
    x, b = ctx.input(node, 0), ctx.input(node, 1)
    rank = len(ctx.shape(x))
    if ctx.attr(node, "data_format", "NHWC") == "NCHW" and rank > 2:
        b = ctx.add1("reshape", [b], {"shape": (ctx.shape(b)[0], *(1,) * (rank - 2))})
    return ctx.add("add", [x, b], node=node)


@tf_converter("SquaredDifference")
def squared_difference(ctx: TFContext, node: TFNode) -> list[Value]:
    d = ctx.add1("sub", [ctx.input(node, 0), ctx.input(node, 1)])
    return ctx.add("mul", [d, d], node=node)


@tf_converter(*UNARY)
def unary(ctx: TFContext, node: TFNode) -> list[Value]:
    return ctx.add(UNARY[node.op], [ctx.input(node, 0)], node=node)


@tf_converter("Square")
def square(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    return ctx.add("mul", [x, x], node=node)


@tf_converter("Rsqrt")
def rsqrt(ctx: TFContext, node: TFNode) -> list[Value]:
    return ctx.add("reciprocal", [ctx.add1("sqrt", [ctx.input(node, 0)])], node=node)


@tf_converter("Erfc")
def erfc(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    return ctx.add("sub", [_scalar(ctx, x, 1.0), ctx.add1("erf", [x])], node=node)


@tf_converter("Relu6")
def relu6(ctx: TFContext, node: TFNode) -> list[Value]:
    return ctx.add("clip", [ctx.input(node, 0)], {"min": 0.0, "max": 6.0}, node=node)


@tf_converter("LeakyRelu")
def leaky_relu(ctx: TFContext, node: TFNode) -> list[Value]:
    alpha = float(ctx.attr(node, "alpha", 0.2))
    return ctx.add("leaky_relu", [ctx.input(node, 0)], {"alpha": alpha}, node=node)


@tf_converter("Gelu")
def gelu(ctx: TFContext, node: TFNode) -> list[Value]:
    approximate = "tanh" if ctx.attr(node, "approximate", False) else "none"
    return ctx.add("gelu", [ctx.input(node, 0)], {"approximate": approximate}, node=node)


@tf_converter("Cast")
def cast(ctx: TFContext, node: TFNode) -> list[Value]:
    return ctx.add("cast", [ctx.input(node, 0)], {"to": ctx.attr(node, "DstT")}, node=node)


@tf_converter("ClipByValue")
def clip_by_value(ctx: TFContext, node: TFNode) -> list[Value]:
    lo, hi = (float(np.asarray(ctx.const_input(node, i)).item()) for i in (1, 2))
    return ctx.add("clip", [ctx.input(node, 0)], {"min": lo, "max": hi}, node=node)


@tf_converter("SelectV2", "Select")
def select(ctx: TFContext, node: TFNode) -> list[Value]:
    return ctx.add("where", [ctx.input(node, i) for i in range(3)], node=node)


@tf_converter("DivNoNan")
def div_no_nan(ctx: TFContext, node: TFNode) -> list[Value]:
    x, y = ctx.input(node, 0), ctx.input(node, 1)
    zero = _scalar(ctx, y, 0.0)
    quotient = ctx.add1("div", [x, y])
    return ctx.add("where", [ctx.add1("equal", [y, zero]), zero, quotient], node=node)


@tf_converter(*REDUCE)
def reduce(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    rank = len(ctx.shape(x))
    axes = sorted({int(a) % rank for a in np.asarray(ctx.const_input(node, 1, "axes")).ravel()})
    if not axes:  # TF reduces over no axis: the input
        return ctx.add("identity", [x], node=node)
    keep = int(bool(ctx.attr(node, "keep_dims", False)))
    return ctx.add(REDUCE[node.op], [x], {"axes": tuple(axes), "keepdims": keep}, node=node)


@tf_converter("ArgMax", "ArgMin")
def arg_reduce(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    axis = int(np.asarray(ctx.const_input(node, 1, "axis")).item()) % len(ctx.shape(x))
    op = "argmax" if node.op == "ArgMax" else "argmin"
    (y,) = ctx.add(op, [x], {"axis": axis, "keepdims": 0})
    out = ctx.attr(node, "output_type", "int64")
    return ctx.add("cast", [y], {"to": out}, node=node) if out != "int64" else [y]
