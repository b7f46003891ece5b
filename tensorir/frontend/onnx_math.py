"""Converters for ONNX math ops beyond onnx_elementwise.py: the inverse trigonometric and
hyperbolic functions (ops/trig.py), and Shrink, IsNaN, IsInf as compositions of existing
elementwise ops (compare, select, arithmetic: exact, and fused like any elementwise chain).
"""

from __future__ import annotations

import numpy as np
import onnx

from tensorir.frontend.onnx import Converter, ImportContext, converter
from tensorir.graph.graph import Value

_TRIG = {
    "Tan": "tan",
    "Asin": "asin",
    "Acos": "acos",
    "Atan": "atan",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Asinh": "asinh",
    "Acosh": "acosh",
    "Atanh": "atanh",
}


def _unary(op: str) -> Converter:
    def convert(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
        return ctx.add(op, [ctx.input(node, 0)], node=node)

    return convert


for _t, _op in _TRIG.items():
    converter(_t)(_unary(_op))


def _scalar(ctx: ImportContext, x: Value, value: float) -> Value:
    return ctx.const(np.asarray(value).astype(ctx.type_of(x).dtype))


@converter("Shrink")
def shrink(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    """x + bias below -lambd, x - bias above lambd, 0 between."""
    x = ctx.input(node, 0)
    attrs = ctx.attrs(node)
    lambd, bias = float(attrs.get("lambd", 0.5)), float(attrs.get("bias", 0.0))
    (low,) = ctx.add("less", [x, _scalar(ctx, x, -lambd)], node=node)
    (high,) = ctx.add("greater", [x, _scalar(ctx, x, lambd)], node=node)
    (up,) = ctx.add("add", [x, _scalar(ctx, x, bias)], node=node)
    (down,) = ctx.add("sub", [x, _scalar(ctx, x, bias)], node=node)
    (mid,) = ctx.add("where", [high, down, _scalar(ctx, x, 0)], node=node)
    return ctx.add("where", [low, up, mid], node=node)


@converter("IsNaN")
def is_nan(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    (same,) = ctx.add("equal", [x, x], node=node)  # false only for NaN
    return ctx.add("logical_not", [same], node=node)


@converter("IsInf")
def is_inf(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    attrs = ctx.attrs(node)
    signs = [s for s, key in ((1, "detect_positive"), (-1, "detect_negative")) if attrs.get(key, 1)]
    if not signs:
        return [ctx.const(np.zeros(ctx.type_of(x).shape, bool))]
    hits = [ctx.add("equal", [x, _scalar(ctx, x, s * np.inf)], node=node)[0] for s in signs]
    return hits[:1] if len(hits) == 1 else ctx.add("logical_or", hits, node=node)


_BITWISE = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}


def _binary(op: str) -> Converter:
    def convert(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
        return ctx.add(op, [ctx.input(node, 0), ctx.input(node, 1)], node=node)

    return convert


for _t, _op in _BITWISE.items():
    converter(_t)(_binary(_op))
converter("BitwiseNot")(_unary("bitwise_not"))


@converter("BitShift")
def bit_shift(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    direction = ctx.attrs(node)["direction"]
    return ctx.add("bit_shift", [ctx.input(node, 0), ctx.input(node, 1)], {"direction": direction}, node=node)


@converter("BitCast")
def bit_cast(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    to = onnx.helper.tensor_dtype_to_np_dtype(ctx.attrs(node)["to"]).name
    return ctx.add("bitcast", [ctx.input(node, 0)], {"to": to}, node=node)
