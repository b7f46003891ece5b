"""ONNX sequences and optionals, resolved at import like shapes.

A sequence's length and its tensors' shapes are fixed when the model is compiled, so a
sequence is a tuple of graph values while importing (`Seq`), and an optional is either
empty or holds its value (`Opt`). Neither exists in the compiled model:

- a sequence graph input `x` of n tensors is n tensor inputs `x.0` ... `x.{n-1}` (their
  shapes given as a list of shapes, or by the example values);
- a sequence graph output `y` is the tensor outputs `y.0` ... (`regroup` puts them back);
- an optional input given no value is an empty optional; one given a value is that value.

Positions, lengths and split sizes must be known at compile time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.frontend.structured import Opt, Seq
from tensorir.graph.graph import Value


def _seq(ctx: ImportContext, node: onnx.NodeProto, i: int) -> Seq:
    v = ctx.values[node.input[i]]
    if isinstance(v, Opt):
        v = v.value
    if not isinstance(v, Seq):
        raise ModelError(f"{node_label(node)}: input {i} ('{node.input[i]}') is not a sequence")
    return v


def _position(ctx: ImportContext, node: onnx.NodeProto, i: int, n: int, default: int) -> int:
    """A sequence position input (negative counts from the end), known at compile time."""
    p = ctx.const_input(node, i, "position") if ctx.has_input(node, i) else None
    pos = default if p is None else int(np.asarray(p).reshape(()))
    pos = pos + n if pos < 0 else pos
    return pos


@converter("SequenceConstruct")
def sequence_construct(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    return [Seq(ctx.inputs(node))]


@converter("SequenceEmpty")
def sequence_empty(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    return [Seq()]


@converter("SequenceInsert")
def sequence_insert(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    s = _seq(ctx, node, 0)
    pos = _position(ctx, node, 2, len(s), len(s))
    if not 0 <= pos <= len(s):
        raise ModelError(f"{node_label(node)}: position {pos} is outside a sequence of {len(s)}")
    return [Seq((*s[:pos], ctx.input(node, 1), *s[pos:]))]


@converter("SequenceErase")
def sequence_erase(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    s = _seq(ctx, node, 0)
    pos = _position(ctx, node, 1, len(s), len(s) - 1)
    if not 0 <= pos < len(s):
        raise ModelError(f"{node_label(node)}: position {pos} is outside a sequence of {len(s)}")
    return [Seq((*s[:pos], *s[pos + 1 :]))]


@converter("SequenceAt")
def sequence_at(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    s = _seq(ctx, node, 0)
    pos = _position(ctx, node, 1, len(s), 0)
    if not 0 <= pos < len(s):
        raise ModelError(f"{node_label(node)}: position {pos} is outside a sequence of {len(s)}")
    return [s[pos]]


@converter("SequenceLength")
def sequence_length(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    return [ctx.const(np.int64(len(_seq(ctx, node, 0))))]


@converter("ConcatFromSequence")
def concat_from_sequence(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    s = _seq(ctx, node, 0)
    if not s:
        raise ModelError(f"{node_label(node)}: the sequence is empty")
    attrs = ctx.attrs(node)
    rank = len(ctx.type_of(s[0]).shape)
    axis = attrs["axis"]
    if attrs.get("new_axis", 0):
        axis = axis + rank + 1 if axis < 0 else axis
        shape = ctx.type_of(s[0]).shape
        s = Seq(ctx.add("reshape", [v], {"shape": (*shape[:axis], 1, *shape[axis:])})[0] for v in s)
    else:
        axis = axis + rank if axis < 0 else axis
    return ctx.add("concat", list(s), {"axis": axis}, node=node) if len(s) > 1 else [s[0]]


@converter("SplitToSequence")
def split_to_sequence(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    x = ctx.input(node, 0)
    shape = ctx.type_of(x).shape
    attrs = ctx.attrs(node)
    axis = attrs.get("axis", 0)
    axis = axis + len(shape) if axis < 0 else axis
    split = ctx.const_input(node, 1, "split") if ctx.has_input(node, 1) else None
    keep = attrs.get("keepdims", 1) or split is not None
    if split is None:
        sizes = (1,) * shape[axis]
    elif np.ndim(split) == 0:
        n = int(split)
        sizes = (n,) * (shape[axis] // n) + ((shape[axis] % n,) if shape[axis] % n else ())
    else:
        sizes = tuple(int(v) for v in split)
    parts = ctx.add("split", [x], {"axis": axis, "sizes": sizes}, node=node) if len(sizes) > 1 else [x]
    if not keep:
        rest = (*shape[:axis], *shape[axis + 1 :])
        parts = [ctx.add("reshape", [p], {"shape": rest})[0] for p in parts]
    return [Seq(parts)]


@converter("SequenceMap")
def sequence_map(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    from tensorir.frontend.onnx_control import run_body

    body = next(a.g for a in node.attribute if a.name == "body")
    args = [ctx.values[n] for n in node.input]
    n = len(args[0])
    outs: list[list[Value]] = [[] for _ in body.output]
    for i in range(n):
        step = [a[i] if isinstance(a, Seq) else a for a in args]
        for k, v in enumerate(run_body(ctx, body, step)):
            outs[k].append(v)
    return [Seq(o) for o in outs]


@converter("Optional")
def optional(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    return [Opt(ctx.values[node.input[0]] if ctx.has_input(node, 0) else None)]


@converter("OptionalHasElement")
def optional_has_element(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    v = ctx.values[node.input[0]] if ctx.has_input(node, 0) else Opt()
    has = v.value is not None if isinstance(v, Opt) else True
    return [ctx.const(np.array(has))]


@converter("OptionalGetElement")
def optional_get_element(ctx: ImportContext, node: onnx.NodeProto) -> list[Any]:
    v = ctx.values[node.input[0]]
    if isinstance(v, Opt):
        if v.value is None:
            raise ModelError(f"{node_label(node)}: the optional is empty")
        return [v.value]
    return [v]
