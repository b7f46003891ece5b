"""Converters for ONNX scatters and N-d gathers (ops/scatter.py), and the ops built on them
or on gathers: ScatterElements, Scatter (opset <= 10), ScatterND, GatherND, TensorScatter
(a scatter_elements along the sequence axis, the positions computed from write_indices),
MaxUnpool (a scatter_nd of the values into zeros at their flat indices), ReverseSequence
(a gather_elements along the time axis with the reversed positions computed per batch).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.frontend.onnx_matrix import positions
from tensorir.graph.graph import Value
from tensorir.ops.infer import normalize_axis


def _axis(ctx: ImportContext, node: onnx.NodeProto, default: int, ndim: int) -> int:
    return normalize_axis(int(ctx.attrs(node).get("axis", default)), ndim)


@converter("ScatterElements", "Scatter")
def scatter_elements(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    data = ctx.input(node, 0)
    axis = _axis(ctx, node, 0, ctx.type_of(data).ndim)
    reduction = ctx.attrs(node).get("reduction", "none")
    ins = [data, ctx.input(node, 1), ctx.input(node, 2)]
    return ctx.add("scatter_elements", ins, {"axis": axis, "reduction": reduction}, node=node)


@converter("ScatterND")
def scatter_nd(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    reduction = ctx.attrs(node).get("reduction", "none")
    ins = [ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)]
    return ctx.add("scatter_nd", ins, {"reduction": reduction}, node=node)


@converter("GatherND")
def gather_nd(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    batch_dims = int(ctx.attrs(node).get("batch_dims", 0))
    ins = [ctx.input(node, 0), ctx.input(node, 1)]
    return ctx.add("gather_nd", ins, {"batch_dims": batch_dims}, node=node)


def _along(ctx: ImportContext, node: onnx.NodeProto, v: Value, axis: int, ndim: int) -> Value:
    """A 1-D value `v` reshaped to broadcast along `axis` of a rank-`ndim` tensor (int64)."""
    shape = [1] * ndim
    shape[axis] = ctx.type_of(v).size
    if ctx.type_of(v).dtype != "int64":
        (v,) = ctx.add("cast", [v], {"to": "int64", "saturate": 1}, node=node)
    return ctx.add("reshape", [v], {"shape": tuple(shape)}, node=node)[0]


@converter("TensorScatter")
def tensor_scatter(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    """cache[b, .., w[b] + s, ..] = update[b, .., s, ..] (mod the cache length if circular)."""
    cache, update = ctx.input(node, 0), ctx.input(node, 1)
    ct, ut = ctx.type_of(cache), ctx.type_of(update)
    axis = _axis(ctx, node, -2, ct.ndim)
    if axis == 0:
        raise ModelError(f"{node_label(node)}: axis 0 is the batch axis")
    seq = ctx.const(positions(ut.shape[axis], axis, ct.ndim))
    if ctx.has_input(node, 2):
        start = _along(ctx, node, ctx.input(node, 2), 0, ct.ndim)
        (seq,) = ctx.add("add", [seq, start], node=node)
    if ctx.attrs(node).get("mode", "linear") == "circular":
        (seq,) = ctx.add("mod", [seq, ctx.const(np.int64(ct.shape[axis]))], {"fmod": 0}, node=node)
    (where,) = ctx.add("expand", [seq], {"shape": ut.shape}, node=node)
    return ctx.add("scatter_elements", [cache, where, update], {"axis": axis, "reduction": "none"}, node=node)


@converter("MaxUnpool")
def max_unpool(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    """Values at their flat indices into zeros of the unpooled shape, then padded with zeros
    to output_shape when one is given (as ONNX's reference and onnxruntime do)."""
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    xt = ctx.type_of(x)
    attrs = ctx.attrs(node)
    kernel = list(attrs["kernel_shape"])
    nsp = len(kernel)
    strides = list(attrs.get("strides", [1] * nsp))
    pads = list(attrs.get("pads", [0] * 2 * nsp))
    spatial = [(xt.shape[2 + i] - 1) * strides[i] - pads[i] - pads[nsp + i] + kernel[i] for i in range(nsp)]
    shape = (*xt.shape[:2], *spatial)
    (zeros,) = ctx.add(
        "expand", [ctx.const(np.zeros((), xt.dtype))], {"shape": (math.prod(shape),)}, node=node
    )
    (flat_idx,) = ctx.add("reshape", [idx], {"shape": (xt.size, 1)}, node=node)
    (flat_x,) = ctx.add("reshape", [x], {"shape": (xt.size,)}, node=node)
    (out,) = ctx.add("scatter_nd", [zeros, flat_idx, flat_x], {"reduction": "none"}, node=node)
    (out,) = ctx.add("reshape", [out], {"shape": shape}, node=node)
    want = ctx.const_input(node, 2, "output_shape")
    if want is None or tuple(int(d) for d in want) == shape:
        return [out]
    extra = [int(w) - s for w, s in zip(want, shape, strict=True)]
    if min(extra) < 0:
        raise ModelError(f"{node_label(node)}: output_shape {list(want)} is smaller than {list(shape)}")
    return ctx.add("pad", [out], {"pads": (0,) * len(shape) + tuple(extra), "mode": "constant"}, node=node)


@converter("ReverseSequence")
def reverse_sequence(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    """out[.., t, ..] = x[.., len - 1 - t, ..] for t < len (the batch entry's length), else x."""
    x, lens = ctx.input(node, 0), ctx.input(node, 1)
    xt = ctx.type_of(x)
    attrs = ctx.attrs(node)
    batch = normalize_axis(int(attrs.get("batch_axis", 1)), xt.ndim)
    time = normalize_axis(int(attrs.get("time_axis", 0)), xt.ndim)
    t = ctx.const(positions(xt.shape[time], time, xt.ndim))
    n = _along(ctx, node, lens, batch, xt.ndim)
    (inside,) = ctx.add("less", [t, n], node=node)
    (last,) = ctx.add("sub", [n, ctx.const(np.int64(1))], node=node)
    (back,) = ctx.add("sub", [last, t], node=node)
    (src,) = ctx.add("where", [inside, back, t], node=node)
    (src,) = ctx.add("expand", [src], {"shape": xt.shape}, node=node)
    return ctx.add("gather_elements", [x, src], {"axis": time}, node=node)


@converter("GridSample")
def grid_sample(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    mode = attrs.get("mode", "linear" if ctx.opset >= 20 else "bilinear")
    out = {
        "mode": {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode),
        "padding_mode": attrs.get("padding_mode", "zeros"),
        "align_corners": int(attrs.get("align_corners", 0)),
    }
    return ctx.add("grid_sample", [ctx.input(node, 0), ctx.input(node, 1)], out, node=node)
