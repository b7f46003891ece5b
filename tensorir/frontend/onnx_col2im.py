"""ONNX Col2Im as a composition of existing graph ops (static shapes).

Col2Im sums the columns of an im2col back into an image: column element (c, k, l) lands at
padded image position l * stride + k * dilation, per spatial axis. Per kernel position k the
columns' slab [N, C, L1..Ld] is spread out by the stride (zeros between, by a reshape and a pad
of a trailing axis of 1), padded to its offset k * dilation and the padded image's size, and the
slabs are added; the image is the padded sum with the pads sliced off. Only the positions that
line up with the stride receive a value, and every step but the adds is exact data movement.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import onnx

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.graph.graph import Value
from tensorir.ops.tensor import normalize_slice


def _spread(ctx: ImportContext, slab: Value, strides: Sequence[int], node: onnx.NodeProto) -> Value:
    """[N, C, L1..Ld] -> [N, C, L1*s1..Ld*sd] with slab[l] at l * s and zeros between."""
    shape = ctx.type_of(slab).shape
    if all(s == 1 for s in strides):
        return slab
    lengths = shape[2:]
    wide = (*shape[:2], *(d for n in lengths for d in (n, 1)))
    (v,) = ctx.add("reshape", [slab], {"shape": wide}, node=node)
    ends = (0, 0, *(p for s in strides for p in (0, s - 1)))
    (v,) = ctx.add("pad", [v], {"pads": (0,) * len(wide) + ends, "mode": "constant"}, node=node)
    spread = (*shape[:2], *(n * s for n, s in zip(lengths, strides, strict=True)))
    return ctx.add("reshape", [v], {"shape": spread}, node=node)[0]


def _place(
    ctx: ImportContext, v: Value, begins: Sequence[int], size: Sequence[int], node: onnx.NodeProto
) -> Value:
    """Pad v's spatial axes by `begins` in front and cut or pad them to `size`."""
    shape = ctx.type_of(v).shape
    ends = [max(0, n - b - d) for n, b, d in zip(size, begins, shape[2:], strict=True)]
    if any(begins) or any(ends):
        pads = (0, 0, *begins, 0, 0, *ends)
        (v,) = ctx.add("pad", [v], {"pads": pads, "mode": "constant"}, node=node)
    have = ctx.type_of(v).shape[2:]
    if tuple(have) == tuple(size):
        return v
    axes = list(range(2, 2 + len(size)))
    return ctx.add("slice", [v], normalize_slice(ctx.type_of(v).shape, [0] * len(size), size, axes))[0]


@converter("Col2Im")
def col2im(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    image = ctx.const_input(node, 1, "image_shape")
    block = ctx.const_input(node, 2, "block_shape")
    if image is None or block is None:
        raise ModelError(f"{node_label(node)}: image_shape and block_shape must be constants")
    image, block = [int(i) for i in image], [int(b) for b in block]
    d = len(image)
    attrs = ctx.attrs(node)
    strides = [int(s) for s in attrs.get("strides", [1] * d)]
    dilations = [int(s) for s in attrs.get("dilations", [1] * d)]
    pads = [int(p) for p in attrs.get("pads", [0] * 2 * d)]
    if len(block) != d or len(strides) != d or len(dilations) != d or len(pads) != 2 * d:
        raise ModelError(f"{node_label(node)}: block, strides, dilations and pads must fit {d} axes")
    padded = [image[i] + pads[i] + pads[d + i] for i in range(d)]
    lengths = [(padded[i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(d)]
    n, ck, total = ctx.type_of(x).shape
    kernel = math.prod(block)
    if ck % kernel or total != math.prod(lengths) or min(lengths) < 1:
        raise ModelError(
            f"{node_label(node)}: input {[n, ck, total]} does not fit image {image}, block {block}"
        )
    c = ck // kernel
    (cols,) = ctx.add("reshape", [x], {"shape": (n, c, kernel, *lengths)}, node=node)
    out = None
    for k, pos in enumerate(itertools.product(*(range(b) for b in block))):
        sl = normalize_slice(ctx.type_of(cols).shape, [k], [k + 1], [2])
        (slab,) = ctx.add("slice", [cols], sl, node=node)
        (slab,) = ctx.add("reshape", [slab], {"shape": (n, c, *lengths)}, node=node)
        slab = _spread(ctx, slab, strides, node)
        slab = _place(ctx, slab, [p * dl for p, dl in zip(pos, dilations, strict=True)], padded, node)
        out = slab if out is None else ctx.add("add", [out, slab], node=node)[0]
    assert out is not None
    if not any(pads):
        return [out]
    ends = [pads[i] + image[i] for i in range(d)]
    crop = normalize_slice(ctx.type_of(out).shape, pads[:d], ends, list(range(2, 2 + d)))
    return ctx.add("slice", [out], crop, node=node)
