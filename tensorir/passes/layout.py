"""Layout transformation for CPUs: NCHW -> NCHW[x]c around chains of convolutions.

    layout = make_layout_pass(target)      # a Pass; x = the target's float32 vector lanes
    changed = layout(g)

Every 2-D float32 or float16 conv (group 1, or depthwise) with constant weights becomes a
`conv2d_nchwc` (tensorir/ops/layout.py) on packed activations, its weights and bias packed
here into constants. The packed layout then spreads forward through the ops that have a
packed form (the op traits `layout` and `pattern`, declared in each op's registration):

- `pattern="elementwise"` ops (tensorir/ops/elementwise.py) whose output is the packed tensor's
  shape; their other inputs are packed too: constants are repacked (per-channel
  (C, 1, 1) -> (C/x, 1, 1, x), scalars stay), other activations get a layout_transform;
- `layout="pool"` (max_pool / avg_pool, 2-D) -> the same pool over (H, W, c) with a unit
  window on c;
- `layout="global_avg"` / `"global_max"` (global_avg_pool / global_max_pool) -> reduce_mean /
  reduce_max over axes (2, 3); reduce_* over axes (2, 3) keeping dims likewise;
- a resize of (H, W) -> the same resize of the packed (H, W);
- a depth_to_space in DCR order -> `depth_to_space_packed` (ops/depth_to_space_packed.py);
- a constant zero pad of channels and space -> `pad_packed` (ops/pad_packed.py) in the
  output channels' block (BlazeFace's residuals pad their channels);
- a concat along channels -> a concat of the channel-block axis when every input has the
  output's block, else `concat_packed` (ops/concat_packed.py), which writes the output's
  block from the inputs' own;
- a split along channels (YOLO's C2f chunk) or a slice (channels in steps of 1, space in any)
  whose channel cuts fall on the input's block boundaries -> the same split / slice of the
  channel-block axis; a part whose own block differs (24 of 48 channels: 8 vs 16) is then
  rewritten in its block by a one-input `concat_packed`.

Packed operands of an elementwise op may broadcast over batch and space (a squeeze-excite
scale (N, C, 1, 1) against (N, C, H, W)).

A `layout_transform` back to NCHW is inserted only where a packed value meets an op
without a packed form (flatten, reshape, dense, ...) or a graph output, once per value (a
reshape, a view, for NCHW1c).

The channel block of a tensor with C channels is the largest power of two <= x that
divides C (16 for 64 channels on AVX-512, 8 for 24, 1 for 3), so no channel is padded and
the layout of a tensor depends on its channel count only: chains never need a transform
between two packed ops (a conv reads blocks of ib and writes blocks of ob). With a cap per
layout segment (passes/layout_segments.py: the values joined by ops other than dense convs)
x is the segment's cap, so the same holds within a segment, and dense convs join segments.

Set TIR_LAYOUT=0 (or pass `layout=False` to pipeline.optimize) to skip the pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir import config, debug
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType
from tensorir.ops.layout import pack_array, pack_weight
from tensorir.ops.registry import is_elementwise, layout_rule
from tensorir.passes import Pass, add_op, const_of, inherit_name, is_output, remove_dead
from tensorir.passes.layout_segments import constant_weights, is_dense_conv, layout_segments
from tensorir.target import Target, get_target

GLOBAL_REDUCTION = {"global_avg": "reduce_mean", "global_max": "reduce_max"}  # by layout rule
SPATIAL_REDUCTIONS = ("reduce_mean", "reduce_max", "reduce_min", "reduce_sum")


def _broadcasts_over_space(t: TensorType, out: TensorType) -> bool:
    """A 4-D operand with the output's channels whose batch and spatial dims are the output's
    or 1 (a squeeze-excite scale (N, C, 1, 1)): packed, it broadcasts against the packed output."""
    if t.ndim != 4 or t.shape[1] != out.shape[1]:
        return False
    return all(d in (1, o) for k, (d, o) in enumerate(zip(t.shape, out.shape, strict=True)) if k != 1)


def layout_enabled() -> bool:
    """TIR_LAYOUT=0 turns the pass off (default on)."""
    return config.layout_enabled()


def channel_block(c: int, lanes: int) -> int:
    """The largest power of two <= lanes dividing c."""
    b = 1
    while b * 2 <= lanes and c % (b * 2) == 0:
        b *= 2
    return b


def tag(block: int) -> str:
    return f"NCHW{block}c"


class _Packer:
    """The rewrite of one graph: `packed` maps an NCHW value to its packed twin. `caps`: the
    block cap of each layout segment (passes/layout_segments.py), else `lanes` everywhere."""

    def __init__(
        self,
        g: Graph,
        lanes: int,
        caps: Sequence[int] | None = None,
        segments: dict[Value, int] | None = None,
    ) -> None:
        self.g, self.lanes, self.caps, self.segments = g, lanes, caps, segments or {}
        self.packed: dict[Value, Value] = {}
        self.replaced: list[int] = []

    # ---- helpers --------------------------------------------------------------------
    def block_of(self, v: Value) -> int:
        """The block of an NCHW value: of its channels, up to its segment's cap."""
        seg = self.segments.get(v)
        cap = self.caps[seg] if self.caps and seg is not None else self.lanes
        return channel_block(self.g.type_of(v).shape[1], cap)

    def to_packed(self, v: Value) -> Value:
        """The packed twin of an NCHW activation (a layout_transform the first time)."""
        if v not in self.packed:
            t = self.g.type_of(v)
            b = self.block_of(v)
            if b == 1:  # NCHW1c is NCHW with a unit axis: a view, no copy kernel
                self.packed[v] = add_op(self.g, "reshape", [v], {"shape": (*t.shape, 1)})
            else:
                self.packed[v] = add_op(self.g, "layout_transform", [v], {"src": "NCHW", "dst": tag(b)})
        return self.packed[v]

    def const(self, array: np.ndarray) -> Value:
        return self.g.add_const(array)

    # ---- rewrites -------------------------------------------------------------------
    def conv(self, nid: int) -> Value | None:
        g, node = self.g, self.g.node(nid)
        ins = g.inputs_of(nid)
        x, out = g.type_of(ins[0]), node.outputs[0]
        if x.ndim != 4 or x.dtype not in ("float32", "float16") or not constant_weights(g, nid):
            return None
        w = const_of(g, ins[1])
        b = const_of(g, ins[2]) if len(ins) > 2 else None
        group, c, m = int(node.attr.get("group", 1)), x.shape[1], out.shape[1]
        depthwise = group == c == m and w.shape[1] == 1 and group > 1
        if group != 1 and not depthwise:
            return None
        ob = self.block_of(Value(nid, 0))
        if ob == 1 and ins[0] not in self.packed:
            return None  # nothing to vectorize over: leave it in NCHW
        px = self.to_packed(ins[0])
        ib = g.type_of(px).shape[4]  # block_of(c), or a concat's parts' block (concat below)
        args = [px, self.const(pack_weight(w, ib, ob, depthwise))]
        if b is not None:
            args.append(self.const(b.reshape(m // ob, ob)))
        attrs = {k: node.attr[k] for k in ("strides", "pads", "dilations") if node.attr.get(k) is not None}
        return add_op(g, "conv2d_nchwc", args, {**attrs, "group": group})

    def operand(self, v: Value, like: TensorType, block: int) -> Value | None:
        """An input of a packed elementwise op, in the packed layout (None: cannot)."""
        if v in self.packed:
            return self.packed[v]
        t = self.g.type_of(v)
        arr = const_of(self.g, v)
        if arr is not None:
            if arr.size == 1:
                return v
            if arr.ndim > 4:
                return None
            full = arr.reshape((1,) * (4 - arr.ndim) + arr.shape)
            c = full.shape[1]
            return self.const(pack_array(full, block) if c != 1 else full[..., None])
        if t.shape == like.shape or _broadcasts_over_space(t, like):
            return self.to_packed(v)
        return None

    def elementwise_op(self, nid: int) -> Value | None:
        g, node = self.g, self.g.node(nid)
        ins = g.inputs_of(nid)
        out = node.outputs[0]
        if len(node.outputs) != 1 or out.ndim != 4 or not any(v in self.packed for v in ins):
            return None
        if any(not _broadcasts_over_space(g.type_of(v), out) for v in ins if v in self.packed):
            return None
        block = self.block_of(Value(nid, 0))
        args = [self.operand(v, out, block) for v in ins]
        if any(a is None for a in args):
            return None
        return add_op(g, node.op, args, dict(node.attr))

    def pool(self, nid: int) -> Value | None:
        g, node = self.g, self.g.node(nid)
        (x,) = g.inputs_of(nid)
        if x not in self.packed or len(g.node(nid).outputs[0].shape) != 4:
            return None
        if len(node.outputs) > 1 and g.consumers(Value(nid, 1)):
            return None  # max_pool indices are read
        a = dict(node.attr)
        attrs: dict[str, Any] = {"kernel_shape": (*a["kernel_shape"], 1)}
        if a.get("strides") is not None:
            attrs["strides"] = (*a["strides"], 1)
        if a.get("dilations") is not None:
            attrs["dilations"] = (*a["dilations"], 1)
        if a.get("pads") is not None:
            p = a["pads"]
            attrs["pads"] = (p[0], p[1], 0, p[2], p[3], 0)
        rest = {k: v for k, v in a.items() if k not in ("kernel_shape", "strides", "dilations", "pads")}
        return g.add_node(node.op, [self.packed[x]], {**rest, **attrs})[0]

    def spatial_reduce(self, nid: int) -> Value | None:
        """reduce_* over (H, W) keeping dims (a squeeze-excite's pooling): the same reduce over
        the packed tensor's (H, W)."""
        g, node = self.g, self.g.node(nid)
        (x,) = g.inputs_of(nid)
        if (
            x not in self.packed
            or tuple(node.attr.get("axes", ())) != (2, 3)
            or not node.attr.get("keepdims", 1)
        ):
            return None
        return add_op(g, node.op, [self.packed[x]], {**node.attr, "axes": (2, 3), "keepdims": 1})

    def concat(self, nid: int) -> Value | None:
        """A concat along channels whose inputs all have the output's channel block: the same
        concat over the packed channel-block axis."""
        g, node = self.g, self.g.node(nid)
        ins, out = g.inputs_of(nid), node.outputs[0]
        if out.ndim != 4 or node.attr["axis"] != 1 or not any(v in self.packed for v in ins):
            return None
        if any(const_of(g, v) is not None for v in ins):
            return None
        block = self.block_of(Value(nid, 0))
        parts = [self.to_packed(v) for v in ins]
        blocks = {g.type_of(p).shape[4] for p in parts}
        if blocks == {block} or (len(blocks) == 1 and self.read_by_convs_only(Value(nid))):
            # a conv takes any input block: where only convs read the concat, it keeps its
            # parts' block (PP-OCR's neck: four 24-channel maps, block 8, into 96 channels),
            # a plain concat that the memory plan can make copy-free, not a relayout
            return add_op(g, "concat", parts, {"axis": 1})
        return add_op(g, "concat_packed", parts, {"block": block})  # blocks differ: relayout inside

    def pad(self, nid: int) -> Value | None:
        """A constant zero pad of channels and space: the same pad of the packed tensor, written
        in the block of the output's channels (ops/pad_packed.py)."""
        g, node = self.g, self.g.node(nid)
        ins, out, a = g.inputs_of(nid), node.outputs[0], node.attr
        if ins[0] not in self.packed or len(ins) != 1 or out.ndim != 4:
            return None
        if a.get("mode", "constant") != "constant" or float(a.get("value") or 0.0) != 0.0:
            return None
        p = tuple(int(v) for v in a["pads"])
        if p[0] or p[4] or min(p) < 0:  # the batch axis, or a crop
            return None
        pads = (p[1], p[2], p[3], p[5], p[6], p[7])
        block = self.block_of(Value(nid, 0))
        return add_op(g, "pad_packed", [self.packed[ins[0]]], {"pads": pads, "block": block})

    def read_by_convs_only(self, v: Value) -> bool:
        """Whether every reader of `v` is a one-group conv with a constant weight that reads it
        as its input (the layout pass packs those, taking the input's block as it is)."""
        g = self.g
        readers = g.consumers(v)
        if not readers or is_output(g, v):
            return False
        return all(slot == 0 and is_dense_conv(g, nid) for nid, slot in readers)

    def in_own_block(self, v: Value, orig: Value) -> Value:
        """A packed part `v` of the NCHW value `orig` in the block of its own channel count (a
        one-input concat_packed rewrites it when a split or slice left it in its source's block)."""
        b = self.g.type_of(v).shape[4]
        want = self.block_of(orig)
        return v if want == b else add_op(self.g, "concat_packed", [v], {"block": want})

    def feeds_packed_op(self, v: Value) -> bool:
        """Whether `v`, through elementwise ops, reaches an op that works on packed tensors
        (a conv, pool, concat, ...): else packing it only trades one unpack for several."""
        g, seen, todo = self.g, set(), [v]
        while todo:
            for nid, _ in g.consumers(todo.pop()):
                op = g.node(nid).op
                if nid in seen:
                    continue
                seen.add(nid)
                if is_elementwise(op):
                    todo.extend(Value(nid, i) for i in range(len(g.node(nid).outputs)))
                elif layout_rule(op) or op in (*SPATIAL_REDUCTIONS, "concat", "resize", "split", "slice"):
                    return True
        return False

    def split(self, nid: int) -> list[Value] | None:
        """A split along channels at multiples of the input's block, one of whose parts goes on
        to a packed op: the same split of the packed channel-block axis."""
        g, node = self.g, self.g.node(nid)
        (x,) = g.inputs_of(nid)
        if x not in self.packed or node.outputs[0].ndim != 4 or node.attr["axis"] != 1:
            return None
        if not any(self.feeds_packed_op(Value(nid, i)) for i in range(len(node.outputs))):
            return None  # a detection head's split before reshapes: one unpack of the input
        b = g.type_of(self.packed[x]).shape[4]
        sizes = tuple(int(s) for s in node.attr["sizes"])
        if any(s % b for s in sizes):
            return None
        parts = g.add_node("split", [self.packed[x]], {"axis": 1, "sizes": tuple(s // b for s in sizes)})
        inherit_name(g, nid, parts[0])
        return [self.in_own_block(p, Value(nid, i)) for i, p in enumerate(parts)]

    def slice(self, nid: int) -> Value | None:
        """A slice whose channel bounds (step 1) fall on the input's block boundaries: the same
        slice of the packed tensor (channel bounds in blocks, (H, W) bounds and steps as they are)."""
        g, node = self.g, self.g.node(nid)
        (x,) = g.inputs_of(nid)
        if x not in self.packed or node.outputs[0].ndim != 4:
            return None
        b = g.type_of(self.packed[x]).shape[4]
        a = node.attr
        starts, ends = list(a["starts"]), list(a["ends"])
        for k, (axis, step) in enumerate(zip(a["axes"], a["steps"], strict=True)):
            if axis == 1:
                if step != 1 or starts[k] % b or ends[k] % b:
                    return None
                starts[k], ends[k] = starts[k] // b, ends[k] // b
        attrs = {**a, "starts": tuple(starts), "ends": tuple(ends)}
        y = g.add_node("slice", [self.packed[x]], attrs)[0]
        inherit_name(g, nid, y)
        return self.in_own_block(y, Value(nid, 0))

    def resize(self, nid: int) -> Value | None:
        """A resize of (H, W) only: the same resize of the packed tensor's (H, W)."""
        g, node = self.g, self.g.node(nid)
        x, a = g.inputs_of(nid)[0], node.attr
        if x not in self.packed or node.outputs[0].ndim != 4 or tuple(a.get("roi", ())):
            return None
        t = g.type_of(x)
        if tuple(a["sizes"][:2]) != t.shape[:2] or tuple(a["scales"][:2]) != (1.0, 1.0):
            return None
        n, cb, _, _, b = g.type_of(self.packed[x]).shape
        sizes, scales = (n, cb, *a["sizes"][2:], b), (1.0, 1.0, *a["scales"][2:], 1.0)
        return add_op(g, "resize", [self.packed[x]], {**a, "sizes": sizes, "scales": scales})

    def depth_to_space(self, nid: int) -> Value | None:
        """A DCR depth_to_space: `depth_to_space_packed` (ops/depth_to_space_packed.py), each
        output block a run of one input block."""
        g, node = self.g, self.g.node(nid)
        (x,) = g.inputs_of(nid)
        if x not in self.packed or node.attr["mode"] != "DCR":
            return None
        ib = g.type_of(self.packed[x]).shape[4]
        ob = self.block_of(Value(nid, 0))
        if node.outputs[0].shape[1] % ob or ib % ob:
            return None
        attrs = {"blocksize": node.attr["blocksize"], "block": ob}
        return add_op(g, "depth_to_space_packed", [self.packed[x]], attrs)

    def global_pool(self, nid: int) -> Value | None:
        (x,) = self.g.inputs_of(nid)
        if x not in self.packed:
            return None
        op = GLOBAL_REDUCTION[layout_rule(self.g.node(nid).op)]
        return add_op(self.g, op, [self.packed[x]], {"axes": (2, 3), "keepdims": 1})

    def visit(self, nid: int) -> None:
        op = self.g.node(nid).op
        rule = layout_rule(op)
        if rule == "conv":
            new = self.conv(nid)
        elif rule == "pool":
            new = self.pool(nid)
        elif rule in GLOBAL_REDUCTION:
            new = self.global_pool(nid)
        elif op in SPATIAL_REDUCTIONS:
            new = self.spatial_reduce(nid)
        elif op == "concat":
            new = self.concat(nid)
        elif op == "resize":
            new = self.resize(nid)
        elif op == "depth_to_space":
            new = self.depth_to_space(nid)
        elif op == "pad":
            new = self.pad(nid)
        elif op == "split":
            new = self.split(nid)
        elif op == "slice":
            new = self.slice(nid)
        elif is_elementwise(op):
            new = self.elementwise_op(nid)
        else:
            return
        if new is not None:
            news = new if isinstance(new, list) else [new]
            if op not in ("split", "slice"):  # those named their own node, not a part's relayout
                inherit_name(self.g, nid, news[0])
            for i, v in enumerate(news):
                self.packed[Value(nid, i)] = v
            self.replaced.append(nid)

    # ---- boundaries -------------------------------------------------------------------
    def finish(self) -> None:
        """Unpack each replaced value for its remaining NCHW readers, drop the old nodes."""
        g = self.g
        unpacks = []
        for nid in self.replaced:
            for i in range(len(g.node(nid).outputs)):
                old = Value(nid, i)
                if old not in self.packed:
                    continue  # max_pool's unread indices
                new = self.packed[old]
                if g.node(new.node).op == "concat_packed" and len(g.inputs_of(new.node)) == 1:
                    unpacks.append(new.node)  # a split part's relayout: unpack its source instead
                    new = g.inputs_of(new.node)[0]
                t = g.type_of(new)
                if t.shape[-1] == 1:  # NCHW1c is NCHW with a unit axis: a view, no copy kernel
                    back = add_op(g, "reshape", [new], {"shape": t.shape[:4]})
                else:
                    back = add_op(g, "layout_transform", [new], {"src": tag(t.shape[-1]), "dst": "NCHW"})
                g.replace_uses(old, back)
                unpacks.append(back.node)
        for nid in reversed(self.replaced):
            remove_dead(g, nid)
        for nid in unpacks:
            remove_dead(g, nid)


def make_layout_pass(target: Target | str = "host", max_block: int | Sequence[int] | None = None) -> Pass:
    """The layout pass for `target`: channel blocks up to its float32 vector lanes, or up to
    `max_block` (a power of two; the model-level `layout_block` tuning knob), or up to a cap
    per layout segment (a list, one power of two per segment: passes/layout_segments.py).
    A list whose length is not the graph's segment count (a record from other code) is
    ignored: the target's lanes then cap every segment."""
    caps = None if max_block is None or isinstance(max_block, int) else [int(c) for c in max_block]
    lanes = (max_block if caps is None else None) or get_target(target).vector_lanes("float32")
    for b in [lanes, *(caps or [])]:
        if b < 1 or b & (b - 1):
            raise ValueError(f"layout block {b} is not a power of two")

    def layout(g: Graph) -> bool:
        segments = layout_segments(g) if caps is not None else {}
        own, count = caps, len(set(segments.values()))
        if own is not None and len(own) != count:
            debug.log(1, f"layout: {len(own)} segment caps for {count} segments: ignored")
            own = None
        packer = _Packer(g, lanes, own, segments)
        for nid in g.op_nodes():
            packer.visit(nid)
        if not packer.replaced:
            return False
        packer.finish()
        return True

    return layout
