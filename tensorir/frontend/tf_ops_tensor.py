"""TensorFlow converters for data movement and shapes: reshape, squeeze, expand_dims, transpose,
concat, pack/unpack, slices, gather, pad, tile, fill, shape.

Shapes are static in the graph IR, so every shape argument must be a constant at import
(a Shape op folds to one); StridedSlice's masks are resolved here into one `slice` and a
`reshape` for the shrunk and new axes.
"""

from __future__ import annotations

import numpy as np

from tensorir.errors import ModelError, UnsupportedOpError
from tensorir.frontend.tensorflow import TFContext, TFNode, node_label, tf_converter
from tensorir.graph.graph import Value
from tensorir.graph.types import np_dtype
from tensorir.ops.tensor import reshape_target


def _ints(a: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(a).ravel()]


def _reshape(ctx: TFContext, x: Value, shape: tuple[int, ...], node: TFNode | None = None) -> list[Value]:
    return ctx.add("reshape", [x], {"shape": tuple(shape)}, node=node)


@tf_converter("Reshape")
def reshape(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    target = _ints(ctx.const_input(node, 1, "shape"))
    return _reshape(ctx, x, reshape_target(ctx.shape(x), target, allowzero=True), node)


@tf_converter("Squeeze")
def squeeze(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    axes = {a % len(shape) for a in ctx.attr(node, "squeeze_dims", [])} or {
        i for i, d in enumerate(shape) if d == 1
    }
    return _reshape(ctx, x, tuple(d for i, d in enumerate(shape) if i not in axes), node)


@tf_converter("ExpandDims")
def expand_dims(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    shape = list(ctx.shape(x))
    axis = int(np.asarray(ctx.const_input(node, 1, "axis")).item())
    shape.insert(axis % (len(shape) + 1), 1)
    return _reshape(ctx, x, tuple(shape), node)


@tf_converter("Transpose")
def transpose(ctx: TFContext, node: TFNode) -> list[Value]:
    perm = tuple(_ints(ctx.const_input(node, 1, "perm")))
    return ctx.add("transpose", [ctx.input(node, 0)], {"perm": perm}, node=node)


@tf_converter("ConcatV2")
def concat(ctx: TFContext, node: TFNode) -> list[Value]:
    n = ctx.n_inputs(node) - 1
    xs = [ctx.input(node, i) for i in range(n)]
    axis = int(np.asarray(ctx.const_input(node, n, "axis")).item()) % len(ctx.shape(xs[0]))
    if n == 1:
        return ctx.add("identity", xs, node=node)
    return ctx.add("concat", xs, {"axis": axis}, node=node)


@tf_converter("Pack")
def pack(ctx: TFContext, node: TFNode) -> list[Value]:
    xs = [ctx.input(node, i) for i in range(ctx.n_inputs(node))]
    shape = list(ctx.shape(xs[0]))
    axis = int(ctx.attr(node, "axis", 0)) % (len(shape) + 1)
    shape.insert(axis, 1)
    parts = [_reshape(ctx, x, tuple(shape))[0] for x in xs]
    if len(parts) == 1:
        return ctx.add("identity", parts, node=node)
    return ctx.add("concat", parts, {"axis": axis}, node=node)


@tf_converter("Unpack")
def unpack(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    shape = list(ctx.shape(x))
    axis = int(ctx.attr(node, "axis", 0)) % len(shape)
    parts = ctx.add("split", [x], {"axis": axis, "sizes": (1,) * shape[axis]}, node=node)
    rest = tuple(d for i, d in enumerate(shape) if i != axis)
    return [_reshape(ctx, p, rest)[0] for p in parts]


@tf_converter("Slice")
def slice_(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    begin, size = _ints(ctx.const_input(node, 1, "begin")), _ints(ctx.const_input(node, 2, "size"))
    ends = [shape[i] if s == -1 else b + s for i, (b, s) in enumerate(zip(begin, size, strict=True))]
    return _slice(ctx, x, [slice(b, e, 1) for b, e in zip(begin, ends, strict=True)], node)


def _slice(ctx: TFContext, x: Value, index: list[slice], node: TFNode | None) -> list[Value]:
    """x[index] (one Python slice per axis) as one `slice` op over the axes it changes."""
    shape = ctx.shape(x)
    starts, ends, axes, steps = [], [], [], []
    for axis, (sl, dim) in enumerate(zip(index, shape, strict=True)):
        start, stop, step = sl.indices(dim)
        if (start, stop, step) == (0, dim, 1):
            continue
        starts.append(start)
        ends.append(stop)
        axes.append(axis)
        steps.append(step)
    if not axes:
        return ctx.add("identity", [x], node=node)
    attrs = {"starts": tuple(starts), "ends": tuple(ends), "axes": tuple(axes), "steps": tuple(steps)}
    return ctx.add("slice", [x], attrs, node=node)


def _bits(mask: int, i: int) -> bool:
    return bool((mask >> i) & 1)


@tf_converter("StridedSlice")
def strided_slice(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    shape = ctx.shape(x)
    begin, end, strides = (_ints(ctx.const_input(node, i)) for i in (1, 2, 3))
    masks = {
        k: int(ctx.attr(node, f"{k}_mask", 0))
        for k in ("begin", "end", "ellipsis", "new_axis", "shrink_axis")
    }
    index: list[slice] = []
    out_shape: list[int] = []
    axis = 0
    for i in range(len(begin)):
        if _bits(masks["ellipsis"], i):
            rest = sum(1 for j in range(i + 1, len(begin)) if not _bits(masks["new_axis"], j))
            while axis < len(shape) - rest:
                index.append(slice(None))
                out_shape.append(shape[axis])
                axis += 1
        elif _bits(masks["new_axis"], i):
            out_shape.append(1)
        elif _bits(masks["shrink_axis"], i):
            k = begin[i] + shape[axis] if begin[i] < 0 else begin[i]
            if not 0 <= k < shape[axis]:
                raise ModelError(
                    f"{node_label(node)}: index {begin[i]} is out of range for dim {shape[axis]}"
                )
            index.append(slice(k, k + 1, 1))
            axis += 1
        else:
            sl = slice(
                None if _bits(masks["begin"], i) else begin[i],
                None if _bits(masks["end"], i) else end[i],
                strides[i],
            )
            index.append(sl)
            out_shape.append(len(range(*sl.indices(shape[axis]))))
            axis += 1
    while axis < len(shape):
        index.append(slice(None))
        out_shape.append(shape[axis])
        axis += 1
    (y,) = _slice(ctx, x, index, None)
    if tuple(out_shape) == ctx.shape(y):
        return ctx.add("identity", [y], node=node)
    return _reshape(ctx, y, tuple(out_shape), node)


@tf_converter("GatherV2", "Gather")
def gather(ctx: TFContext, node: TFNode) -> list[Value]:
    if int(ctx.attr(node, "batch_dims", 0)) != 0:
        raise UnsupportedOpError(f"{node_label(node)}: batch_dims != 0")
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    axis = int(np.asarray(ctx.const_input(node, 2, "axis")).item()) if node.op == "GatherV2" else 0
    return ctx.add("gather", [x, idx], {"axis": axis % len(ctx.shape(x))}, node=node)


@tf_converter("Pad", "PadV2", "MirrorPad")
def pad(ctx: TFContext, node: TFNode) -> list[Value]:
    x = ctx.input(node, 0)
    pads = np.asarray(ctx.const_input(node, 1, "paddings")).reshape(-1, 2)
    attrs: dict = {"pads": (*_ints(pads[:, 0]), *_ints(pads[:, 1])), "mode": "constant"}
    if node.op == "MirrorPad":
        mode = ctx.attr(node, "mode", "REFLECT")
        if mode != "REFLECT":
            raise UnsupportedOpError(f"{node_label(node)}: MirrorPad mode {mode} (only REFLECT)")
        attrs["mode"] = "reflect"
    elif node.op == "PadV2":
        attrs["value"] = np.asarray(ctx.const_input(node, 2, "constant_values")).item()
    return ctx.add("pad", [x], attrs, node=node)


@tf_converter("Tile")
def tile(ctx: TFContext, node: TFNode) -> list[Value]:
    repeats = tuple(_ints(ctx.const_input(node, 1, "multiples")))
    return ctx.add("tile", [ctx.input(node, 0)], {"repeats": repeats}, node=node)


@tf_converter("Fill")
def fill(ctx: TFContext, node: TFNode) -> list[Value]:
    dims = tuple(_ints(ctx.const_input(node, 0, "dims")))
    value = ctx.input(node, 1)
    known = ctx.const_value(value)
    if known is not None:
        return [ctx.graph.add_const(np.full(dims, known, dtype=known.dtype), node.name)]
    return ctx.add("expand", [value], {"shape": dims}, node=node)


@tf_converter("Shape")
def shape(ctx: TFContext, node: TFNode) -> list[Value]:
    dtype = np_dtype(ctx.attr(node, "out_type", "int32"))
    return [ctx.graph.add_const(np.asarray(ctx.shape(ctx.input(node, 0)), dtype=dtype), node.name)]


@tf_converter("ZerosLike", "OnesLike")
def constant_like(ctx: TFContext, node: TFNode) -> list[Value]:
    t = ctx.type_of(ctx.input(node, 0))
    fill_value = 0 if node.op == "ZerosLike" else 1
    return [ctx.graph.add_const(np.full(t.shape, fill_value, dtype=np_dtype(t.dtype)), node.name)]
