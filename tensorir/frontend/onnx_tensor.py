"""Converters for ONNX tensor-manipulation ops (opset 7 to the newest).

Inputs that fix a static output shape (Reshape's shape, Slice's bounds, Squeeze's
axes, ...) are read at import with `ctx.const_input` and become attributes.
Shape, Size, Constant, ConstantOfShape and Range become constants.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
import onnx
import onnx.numpy_helper

from tensorir.errors import ModelError, ShapeError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.frontend.structured import Opt, Seq
from tensorir.graph.graph import Value
from tensorir.ops.infer import broadcast_shapes, normalize_axis
from tensorir.ops.tensor import normalize_slice, reshape_target


def _ints(a: np.ndarray | list[int] | None) -> list[int] | None:
    return None if a is None else [int(v) for v in np.asarray(a).reshape(-1)]


@contextlib.contextmanager
def _shape_error(node: onnx.NodeProto) -> Iterator[None]:
    """Re-raise a ShapeError from a shape helper with the node's label."""
    try:
        yield
    except ShapeError as e:
        raise ShapeError(f"{node_label(node)}: {e}") from None


def _shape(ctx: ImportContext, v: Value) -> tuple[int, ...]:
    return ctx.type_of(v).shape


def _axis(node: onnx.NodeProto, axis: int, ndim: int) -> int:
    with _shape_error(node):
        return normalize_axis(axis, ndim)


def _reshape(ctx: ImportContext, node: onnx.NodeProto, x: Value, shape: tuple[int, ...]) -> list[Value]:
    return ctx.add("reshape", [x], {"shape": tuple(shape)}, node=node)


def _axes_arg(ctx: ImportContext, node: onnx.NodeProto, since: int) -> list[int] | None:
    """Squeeze/Unsqueeze axes: an attribute before opset `since`, then input 1."""
    if ctx.opset < since:
        return ctx.attrs(node).get("axes")
    return _ints(ctx.const_input(node, 1, "axes"))


# ---- identity / reshape family ---------------------------------------------------
@converter("Identity")
def identity(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    if isinstance(x, Seq | Opt):  # resolved at import: nothing to copy
        return [x]
    return ctx.add("identity", [x], node=node)


@converter("Reshape")
def reshape(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    target = _ints(ctx.const_input(node, 1, "shape"))
    allowzero = bool(ctx.attrs(node).get("allowzero", 0))
    with _shape_error(node):
        shape = reshape_target(_shape(ctx, x), target, allowzero)
    return _reshape(ctx, node, x, shape)


@converter("Flatten")
def flatten(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    shape = _shape(ctx, x)
    axis = ctx.attrs(node).get("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise ModelError(f"{node_label(node)}: axis {axis} is out of range for rank {len(shape)}")
    return _reshape(ctx, node, x, (math.prod(shape[:axis]), math.prod(shape[axis:])))


@converter("Squeeze")
def squeeze(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    shape = _shape(ctx, x)
    axes = _axes_arg(ctx, node, 13)
    if axes is None:
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = {_axis(node, a, len(shape)) for a in axes}
        bad = sorted(a for a in drop if shape[a] != 1)
        if bad:
            raise ModelError(f"{node_label(node)}: cannot squeeze axis {bad[0]} of shape {list(shape)}")
    return _reshape(ctx, node, x, tuple(d for i, d in enumerate(shape) if i not in drop))


@converter("Unsqueeze")
def unsqueeze(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    shape = _shape(ctx, x)
    axes = _axes_arg(ctx, node, 13)
    if axes is None:
        raise ModelError(f"{node_label(node)}: axes are required")
    rank = len(shape) + len(axes)
    new = {_axis(node, a, rank) for a in axes}
    if len(new) != len(axes):
        raise ModelError(f"{node_label(node)}: axes {axes} repeat an axis")
    rest = iter(shape)
    return _reshape(ctx, node, x, tuple(1 if i in new else next(rest) for i in range(rank)))


# ---- transpose / concat / split ---------------------------------------------------
@converter("Transpose")
def transpose(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    ndim = len(_shape(ctx, x))
    perm = ctx.attrs(node).get("perm")
    perm = tuple(reversed(range(ndim))) if perm is None else tuple(perm)
    return ctx.add("transpose", [x], {"perm": perm}, node=node)


@converter("Concat")
def concat(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    xs = ctx.inputs(node)
    attrs = ctx.attrs(node)
    if "axis" not in attrs:
        raise ModelError(f"{node_label(node)}: attribute 'axis' is required")
    axis = _axis(node, attrs["axis"], len(_shape(ctx, xs[0])))
    return ctx.add("concat", xs, {"axis": axis}, node=node)


def _split_sizes(ctx: ImportContext, node: onnx.NodeProto, dim: int) -> list[int]:
    attrs = ctx.attrs(node)
    sizes = attrs.get("split") if ctx.opset < 13 else _ints(ctx.const_input(node, 1, "split"))
    if sizes is not None:
        return list(sizes)
    n = attrs.get("num_outputs", len(node.output)) if ctx.opset >= 18 else len(node.output)
    if ctx.opset >= 18 and "num_outputs" in attrs:
        chunk = -(-dim // n)
        return [min(chunk, max(dim - chunk * i, 0)) for i in range(n)]
    if dim % n:
        raise ModelError(f"{node_label(node)}: dim {dim} does not split into {n} equal parts")
    return [dim // n] * n


@converter("Split")
def split(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    shape = _shape(ctx, x)
    axis = _axis(node, ctx.attrs(node).get("axis", 0), len(shape))
    sizes = _split_sizes(ctx, node, shape[axis])
    return ctx.add("split", [x], {"axis": axis, "sizes": tuple(sizes)}, node=node)


# ---- slice / gather ---------------------------------------------------------------
@converter("Slice")
def slice_(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    if ctx.opset < 10:
        a = ctx.attrs(node)
        args = [a.get("starts"), a.get("ends"), a.get("axes"), None]
    else:
        names = ("starts", "ends", "axes", "steps")
        args = [_ints(ctx.const_input(node, i + 1, n)) for i, n in enumerate(names)]
    if args[0] is None or args[1] is None:
        raise ModelError(f"{node_label(node)}: starts and ends are required")
    with _shape_error(node):
        attrs = normalize_slice(_shape(ctx, x), *args)
    return ctx.add("slice", [x], attrs, node=node)


@converter("Gather")
def gather(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    data, indices = ctx.input(node, 0), ctx.input(node, 1)
    axis = _axis(node, ctx.attrs(node).get("axis", 0), len(_shape(ctx, data)))
    return ctx.add("gather", [data, indices], {"axis": axis}, node=node)


@converter("GatherElements")
def gather_elements(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    data, indices = ctx.input(node, 0), ctx.input(node, 1)
    axis = _axis(node, ctx.attrs(node).get("axis", 0), len(_shape(ctx, data)))
    return ctx.add("gather_elements", [data, indices], {"axis": axis}, node=node)


# ---- expand / tile / depth-space --------------------------------------------------
@converter("Expand")
def expand(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    target = tuple(_ints(ctx.const_input(node, 1, "shape")))
    with _shape_error(node):
        shape = broadcast_shapes(_shape(ctx, x), target)
    return ctx.add("expand", [x], {"shape": shape}, node=node)


@converter("Tile")
def tile(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    repeats = tuple(_ints(ctx.const_input(node, 1, "repeats")))
    return ctx.add("tile", [ctx.input(node, 0)], {"repeats": repeats}, node=node)


@converter("DepthToSpace")
def depth_to_space(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    kept = {"blocksize": attrs["blocksize"], "mode": attrs.get("mode", "DCR")}
    return ctx.add("depth_to_space", [ctx.input(node, 0)], kept, node=node)


@converter("SpaceToDepth")
def space_to_depth(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = {"blocksize": ctx.attrs(node)["blocksize"]}
    return ctx.add("space_to_depth", [ctx.input(node, 0)], attrs, node=node)


# ---- ops that become constants ----------------------------------------------------
@converter("Shape")
def shape_(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    dims = np.array(_shape(ctx, ctx.input(node, 0)), np.int64)
    return [ctx.const(dims[attrs.get("start", 0) : attrs.get("end")])]


@converter("Size")
def size(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    return [ctx.const(np.int64(ctx.type_of(ctx.input(node, 0)).size))]


@converter("ConstantOfShape")
def constant_of_shape(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    shape = _ints(ctx.const_input(node, 0, "shape"))
    value = ctx.attrs(node).get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return [ctx.const(np.full(shape, value[0], dtype=value.dtype))]


@converter("Constant")
def constant(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    if "value" in attrs:
        return [ctx.const(attrs["value"])]
    if "sparse_value" in attrs:
        return [ctx.const(_dense(attrs["sparse_value"]))]
    kinds = {
        "value_float": np.float32,
        "value_floats": np.float32,
        "value_int": np.int64,
        "value_ints": np.int64,
    }
    for key, dtype in kinds.items():
        if key in attrs:
            return [ctx.const(np.asarray(attrs[key], dtype=dtype))]
    if "value_string" in attrs or "value_strings" in attrs:
        raise ModelError(f"{node_label(node)}: string constants are not supported")
    raise ModelError(f"{node_label(node)}: no value attribute")


def _dense(sp: onnx.SparseTensorProto) -> np.ndarray:
    values = onnx.numpy_helper.to_array(sp.values)
    indices = onnx.numpy_helper.to_array(sp.indices)
    out = np.zeros(tuple(sp.dims), values.dtype)
    if indices.ndim == 2:  # [nnz, rank] coordinates
        out[tuple(indices.T)] = values
    else:  # linear indices into the flattened tensor
        out.reshape(-1)[indices] = values
    return out


def _scalar(node: onnx.NodeProto, value: np.ndarray, what: str) -> np.ndarray:
    """A scalar input given as a scalar or a one-element tensor (AffineGrid's body does)."""
    value = np.asarray(value)
    if value.size != 1:
        raise ModelError(f"{node_label(node)}: {what} must be a scalar, got shape {list(value.shape)}")
    return value.reshape(())


@converter("Range")
def range_(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    names = ("start", "limit", "delta")
    start, limit, delta = (_scalar(node, ctx.const_input(node, i, n), n) for i, n in enumerate(names))
    dtype = start.dtype
    if delta.astype(np.float64) == 0:
        raise ModelError(f"{node_label(node)}: delta must not be 0")
    compute = None  # like ONNX's reference: Python scalars, i.e. float64 for floats
    if dtype.name in ("float16", "bfloat16") and ctx.opset >= 27:
        compute = np.float64 if ctx.attrs(node).get("stash_type", 1) == 11 else np.float32
    if dtype.kind in "iu":
        args = [int(v) for v in (start, limit, delta)]
    else:
        args = [float(v.astype(compute or np.float64)) for v in (start, limit, delta)]
    return [ctx.const(np.arange(*args, dtype=compute).astype(dtype))]
