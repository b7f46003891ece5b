"""ONNX DeformConv (2-D) as a composition of grid_sample and a grouped 1 x 1 conv.

Output position (i, j)'s tap (ki, kj) reads the input bilinearly (zeros outside) at
(i * stride - pad + ki * dilation + offset_y, j * stride - pad + kj * dilation + offset_x), the
offsets per offset group of channels, times the tap's mask. As ONNX's reference does, the
samples come from GridSample: the offset groups fold into the batch ([N * G, C / G, H, W]), the
positions become a grid of normalized coordinates ([N * G, K * oh, ow, 2], align_corners=0 so a
1-pixel axis works; in float64, as the reference, so that a position normalized and back is
within 1e-16 of an integer and zero weights stay about 0), and the samples [N, C, K, oh, ow]
times the mask are the columns of a convolution: [N, C * K, oh, ow] convolved 1 x 1 with the
weights as [oc, C / group * K, 1, 1] in `group` groups (channel-major columns keep each group's
channels together), plus the bias.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.graph.graph import Value
from tensorir.ops.tensor import normalize_slice


def _base(out: int, kernel: int, stride: int, pad: int, dil: int) -> np.ndarray:
    """Tap k of output i's position on one axis before its offset: [kernel, out]."""
    return (np.arange(out) * stride - pad)[None, :] + (np.arange(kernel) * dil)[:, None]


def _normalized(
    ctx: ImportContext, offsets: Value, axis: int, base: np.ndarray, size: int, node: onnx.NodeProto
) -> Value:
    """(2 * (base + offset) + 1) / size - 1 for offsets[..., axis, :, :] (GridSample's
    align_corners=0 coordinate of pixel position base + offset), kept as [..., 1]."""
    shape = ctx.type_of(offsets).shape
    dtype = ctx.type_of(offsets).dtype
    (o,) = ctx.add("slice", [offsets], normalize_slice(shape, [axis], [axis + 1], [3]), node=node)
    (pos,) = ctx.add("add", [o, ctx.const(base.astype(dtype))], node=node)
    (two,) = ctx.add("add", [pos, pos], node=node)
    (two,) = ctx.add("add", [two, ctx.const(np.asarray(1, dtype))], node=node)
    (g,) = ctx.add("div", [two, ctx.const(np.asarray(size, dtype))], node=node)
    (g,) = ctx.add("sub", [g, ctx.const(np.asarray(1, dtype))], node=node)
    return ctx.add("reshape", [g], {"shape": (*shape[:3], *shape[4:], 1)}, node=node)[0]


def _grid(
    ctx: ImportContext, offset: Value, geometry: Sequence[tuple[int, ...]], g: int, node: onnx.NodeProto
) -> Value:
    """[N * G, K * oh, ow, 2] normalized (x, y) sample positions."""
    n, _, oh, ow = ctx.type_of(offset).shape
    (size_h, kh, st_h, pad_h, dil_h), (size_w, kw, st_w, pad_w, dil_w) = geometry
    (off,) = ctx.add("reshape", [offset], {"shape": (n, g, kh * kw, 2, oh, ow)}, node=node)
    bh = np.broadcast_to(_base(oh, kh, st_h, pad_h, dil_h)[:, None, :, None], (kh, kw, oh, ow))
    bw = np.broadcast_to(_base(ow, kw, st_w, pad_w, dil_w)[None, :, None, :], (kh, kw, oh, ow))
    gy = _normalized(ctx, off, 0, bh.reshape(kh * kw, 1, oh, ow), size_h, node)
    gx = _normalized(ctx, off, 1, bw.reshape(kh * kw, 1, oh, ow), size_w, node)
    (grid,) = ctx.add("concat", [gx, gy], {"axis": 5}, node=node)
    return ctx.add("reshape", [grid], {"shape": (n * g, kh * kw * oh, ow, 2)}, node=node)[0]


@converter("DeformConv")
def deform_conv(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x, w, offset = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    wshape = ctx.type_of(w).shape
    if len(wshape) != 4 or ctx.type_of(x).ndim != 4:
        raise ModelError(f"{node_label(node)}: DeformConv is compiled for 2-D inputs only")
    n, c, h, wd = ctx.type_of(x).shape
    attrs = ctx.attrs(node)
    oc, kh, kw = wshape[0], wshape[2], wshape[3]
    strides, dil = list(attrs.get("strides", [1, 1])), list(attrs.get("dilations", [1, 1]))
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    group, g = int(attrs.get("group", 1)), int(attrs.get("offset_group", 1))
    _, offc, oh, ow = ctx.type_of(offset).shape
    if c % g or offc != g * kh * kw * 2 or c != wshape[1] * group:
        raise ModelError(f"{node_label(node)}: offset {offc} channels / weights {list(wshape)} do not fit")
    geometry = [(h, kh, strides[0], pads[0], dil[0]), (wd, kw, strides[1], pads[1], dil[1])]
    dtype = str(ctx.type_of(x).dtype)
    (offset,) = ctx.add("cast", [offset], {"to": "float64"}, node=node)
    grid = _grid(ctx, offset, geometry, g, node)
    (xs,) = ctx.add("reshape", [x], {"shape": (n * g, c // g, h, wd)}, node=node)
    (xs,) = ctx.add("cast", [xs], {"to": "float64"}, node=node)
    sample = {"mode": "linear", "padding_mode": "zeros", "align_corners": 0}
    (cols,) = ctx.add("grid_sample", [xs, grid], sample, node=node)
    (cols,) = ctx.add("cast", [cols], {"to": dtype}, node=node)
    (cols,) = ctx.add("reshape", [cols], {"shape": (n, g, c // g, kh * kw, oh, ow)}, node=node)
    if ctx.has_input(node, 4):
        (m,) = ctx.add("reshape", [ctx.input(node, 4)], {"shape": (n, g, 1, kh * kw, oh, ow)}, node=node)
        (cols,) = ctx.add("mul", [cols, m], node=node)
    (cols,) = ctx.add("reshape", [cols], {"shape": (n, c * kh * kw, oh, ow)}, node=node)
    (wt,) = ctx.add("reshape", [w], {"shape": (oc, wshape[1] * kh * kw, 1, 1)}, node=node)
    conv = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": group}
    ins = [cols, wt] + ([ctx.input(node, 3)] if ctx.has_input(node, 3) else [])
    return ctx.add("conv", ins, conv, node=node)
