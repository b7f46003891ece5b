"""convt_unshuffle: a transposed conv whose kernel equals its stride as a 1x1 conv and a pixel
shuffle (depth_to_space), the form MNN's and TVM's converters give the upsampling heads of
segmentation and text-detection models.

With kernel k x k, stride k, no pads, dilation 1, no output padding and one group, every input
pixel writes its own k x k block of the output, untouched by its neighbours:

    y[n, m, k*h + i, k*w + j] = b[m] + sum_c x[n, c, h, w] * W[c, m, i, j]

which is a 1x1 conv to k * k * M channels, W'[(i*k + j)*M + m, c] = W[c, m, i, j] (the bias
tiled k * k times), then depth_to_space(blocksize=k, mode="DCR"): in that order each sub-pixel's
M channels are adjacent, so the shuffle stays packed (ops/depth_to_space_packed.py). The conv_transpose kernel
instead upsampled its input with zeros and ran a dense conv over it: 3/4 of its products were
by zero for k = 2 and it ran in plain NCHW. PP-OCRv4's detector head (two 2x2 stride-2
ConvTransposes, 24 -> 24 and 24 -> 1 channels at 80 and 160 pixels a side) took 3.4 of its
12.3 ms that way (benchmarks.layers, Zen 4, 1 thread). The 1x1 conv takes the packed layout
and the conv schedules; the shuffle is one copy.

A constant weight (and bias, when there is one) only; CPU targets (pipeline.optimize).

Before/After:

    %4 = conv_transpose(%x, %w, %b) dilations=(1,1) group=1 output_padding=(0,0) pads=(0,0,0,0)
         strides=(2,2) : f32[1,24,160,160]            (x: f32[1,24,80,80], w: f32[24,24,2,2])
    ->
    %6 = conv(%x, %w', %b') dilations=(1,1) group=1 pads=(0,0,0,0) strides=(1,1) : f32[1,96,80,80]
    %7 = depth_to_space(%6) blocksize=2 mode=DCR : f32[1,24,160,160]
"""

from __future__ import annotations

import numpy as np

from tensorir.graph.graph import Graph
from tensorir.passes import Rule, add_op, const_of, is_float, replace, rewrite


def _unshuffled(g: Graph, nid: int) -> int | None:
    """The blocksize k when node `nid` is a conv_transpose of the form above, else None."""
    node = g.node(nid)
    ins = g.inputs_of(nid)
    at = node.attr
    w = const_of(g, ins[1])
    if w is None or w.ndim != 4 or not is_float(node.outputs[0].dtype):
        return None
    if len(ins) > 2 and const_of(g, ins[2]) is None:
        return None
    k = w.shape[2]
    square = w.shape[3] == k and k > 1
    unpadded = not any(at.get("pads") or ()) and not any(at.get("output_padding") or ())
    plain = int(at.get("group", 1)) == 1 and unpadded
    unit = all(d == 1 for d in at.get("dilations") or (1, 1))
    return k if square and plain and unit and tuple(at.get("strides") or ()) == (k, k) else None


def unshuffle(g: Graph, nid: int) -> bool:
    k = _unshuffled(g, nid)
    if k is None:
        return False
    ins = g.inputs_of(nid)
    w = const_of(g, ins[1])
    c, m = w.shape[:2]
    name = g.node(nid).name
    wp = np.ascontiguousarray(w.transpose(2, 3, 1, 0)).reshape(k * k * m, c, 1, 1)
    args = [ins[0], g.add_const(wp, f"{name}_w1x1")]
    if len(ins) > 2:
        args.append(g.add_const(np.tile(const_of(g, ins[2]), k * k), f"{name}_b1x1"))
    attrs = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}
    y = add_op(g, "conv", args, attrs)
    return replace(g, nid, [add_op(g, "depth_to_space", [y], {"blocksize": k, "mode": "DCR"})])


RULES: list[Rule] = [("conv_transpose", unshuffle)]


def convt_unshuffle(g: Graph) -> bool:
    """Rewrite every transposed conv of the module docstring's form."""
    return rewrite(g, RULES)
