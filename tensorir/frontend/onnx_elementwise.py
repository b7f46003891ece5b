"""Converters for elementwise ONNX ops: arithmetic, math, activations, logic, Cast."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnx.helper

from tensorir.frontend.onnx import ImportContext, converter
from tensorir.graph.graph import Value

_BINARY = {
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "div",
    "Pow": "pow",
    "Mod": "mod",
    "Equal": "equal",
    "Less": "less",
    "LessOrEqual": "less_equal",
    "Greater": "greater",
    "GreaterOrEqual": "greater_equal",
    "And": "logical_and",
    "Or": "logical_or",
    "Xor": "logical_xor",
    "PRelu": "prelu",
}
_UNARY = {
    "Sqrt": "sqrt",
    "Exp": "exp",
    "Log": "log",
    "Abs": "abs",
    "Neg": "neg",
    "Reciprocal": "reciprocal",
    "Floor": "floor",
    "Ceil": "ceil",
    "Erf": "erf",
    "Tanh": "tanh",
    "Sign": "sign",
    "Sin": "sin",
    "Cos": "cos",
    "Round": "round",
    "Not": "logical_not",
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "HardSwish": "hard_swish",
    "Softplus": "softplus",
    "Softsign": "softsign",
    "Mish": "mish",
}
# activations with attributes: ONNX attribute name -> graph attribute name
_ACTIVATIONS = {
    "LeakyRelu": ("leaky_relu", ("alpha",)),
    "Elu": ("elu", ("alpha",)),
    "Selu": ("selu", ("alpha", "gamma")),
    "HardSigmoid": ("hard_sigmoid", ("alpha", "beta")),
    "Gelu": ("gelu", ("approximate",)),
}


def _binary(op: str, ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    attrs = ctx.attrs(node)
    if ctx.opset < 7 and attrs.get("broadcast"):
        raise NotImplementedError("legacy broadcast attribute (opset < 7)")
    extra = {"fmod": attrs.get("fmod", 0)} if op == "mod" else {}
    return ctx.add(op, [a, b], extra, node=node)


def _unary(op: str, ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    return ctx.add(op, [ctx.input(node, 0)], node=node)


def _activation(op: str, names: tuple[str, ...], ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    kept = {k: attrs[k] for k in names if k in attrs}
    return ctx.add(op, [ctx.input(node, 0)], kept, node=node)


for _t, _op in _BINARY.items():
    converter(_t)(functools.partial(_binary, _op))
for _t, _op in _UNARY.items():
    converter(_t)(functools.partial(_unary, _op))
for _t, (_op, _names) in _ACTIVATIONS.items():
    converter(_t)(functools.partial(_activation, _op, _names))


@converter("Clip")
def clip(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    if ctx.opset < 11:
        attrs = ctx.attrs(node)
        lo, hi = attrs.get("min"), attrs.get("max")
    else:
        lo, hi = ctx.const_input(node, 1, "min"), ctx.const_input(node, 2, "max")
    attrs = {}
    if lo is not None:
        attrs["min"] = float(lo) if np.asarray(lo).dtype.kind == "f" else int(lo)
    if hi is not None:
        attrs["max"] = float(hi) if np.asarray(hi).dtype.kind == "f" else int(hi)
    return ctx.add("clip", [ctx.input(node, 0)], attrs, node=node)


def _variadic(op: str, ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    ins = ctx.inputs(node)
    acc = ins[0]
    for v in ins[1:]:
        (acc,) = ctx.add(op, [acc, v], node=node)
    if len(ins) == 1:
        (acc,) = ctx.add("identity", [acc], node=node)
    return [acc]


converter("Max")(functools.partial(_variadic, "maximum"))
converter("Min")(functools.partial(_variadic, "minimum"))
converter("Sum")(functools.partial(_variadic, "add"))


@converter("Mean")
def mean(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    (acc,) = _variadic("add", ctx, node)
    n = ctx.const(len(node.input), dtype=ctx.type_of(acc).dtype)
    return ctx.add("div", [acc, n], node=node)


@converter("Where")
def where(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    return ctx.add("where", ctx.inputs(node), node=node)


@converter("Cast")
def cast(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    to = onnx.helper.tensor_dtype_to_np_dtype(attrs["to"]).name
    return ctx.add("cast", [ctx.input(node, 0)], _cast_attrs(to, attrs), node=node)


@converter("CastLike")
def cast_like(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    to = ctx.type_of(ctx.input(node, 1)).dtype
    return ctx.add("cast", [ctx.input(node, 0)], _cast_attrs(to, ctx.attrs(node)), node=node)


def _cast_attrs(to: str, attrs: dict) -> dict:
    out = {"to": to, "saturate": attrs.get("saturate", 1)}
    if to == "float8_e8m0fnu":
        out["round_mode"] = attrs.get("round_mode", "up")
    return out
