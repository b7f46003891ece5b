"""Concats without a copy: each input's producer writes straight into its slice of the output.

A concat whose output is one contiguous run per input (every axis before the concat axis has
extent 1: NCHW or NCHW[x]c at batch 1 along channels, a flat vector, ...) needs no kernel of its
own when the memory plan lays its inputs out inside its output: input k at byte offset
sum(nbytes of inputs 0..k-1). The producers then write their slices and the concat is gone, as
TVM's and MNN's memory planners do for channel concats (SqueezeNet's fire modules, YOLO's and
DenseNet's joins).

`concat_slices(g)` picks the concats that can go: all of their inputs must be

    - an op's own output (not a graph input, a constant or a view of another tensor),
    - not a graph output (that is the caller's buffer), not read twice by this concat,
    - not already a slice of another concat (a tensor has one place), and
    - at a 64-byte aligned offset (the workspace's alignment, which vector kernels assume);

and the concat itself must not be a graph output nor guarded. The slices nest: a concat that
is itself a slice of a later one is laid out inside that one. A concat whose inputs are the
first inputs of a longer one, in the same order (DenseNet: layer k of a block reads
concat(x0, y1 .. y(k-1)), and the block's last concat holds them all), is the first bytes of
that one's buffer: neither copies, and the block's features are stored once.
passes/memory_plan.py places the slices (one buffer for the whole concat, alive from its first
input's producer to its last reader); compiler.py lowers no kernel for such a concat. CPU
targets only: an OpenCL backend's sub-buffers need a coarser alignment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorir.graph.graph import Graph, Value
from tensorir.passes.memory_plan import ALIAS_OPS, ALIGN, storage_root

NOT_PRODUCERS = frozenset({"input", "constant", "loop"}) | ALIAS_OPS


@dataclass
class ConcatSlices:
    """`slices`: each input value of a copy-free concat -> (the concat's output, byte offset);
    `nodes`: those concats' node ids (no kernel)."""

    slices: dict[Value, tuple[Value, int]] = field(default_factory=dict)
    nodes: set[int] = field(default_factory=set)

    def container(self, v: Value) -> tuple[Value, int]:
        """The value whose buffer holds `v` and `v`'s byte offset in it (`v`, 0 if none)."""
        offset = 0
        while v in self.slices:
            v, d = self.slices[v]
            offset += d
        return v, offset


def concat_slices(g: Graph) -> ConcatSlices:
    """The concats of `g` that need no copy, and where their inputs go (module docstring)."""
    out = ConcatSlices()
    outputs = {storage_root(g, v) for _, v in g.outputs}
    cands = {}
    for nid in g.op_nodes():
        node = g.node(nid)
        if node.op != "concat" or nid in g.guards or Value(nid) in outputs:
            continue
        ins, offsets = g.inputs_of(nid), _offsets(g, nid)
        if offsets is not None and len(set(ins)) == len(ins):
            cands[nid] = (tuple(ins), offsets)
    holders = _prefix_holders(g, cands)
    for nid, (ins, offsets) in cands.items():
        if nid not in holders:
            _claim(g, nid, ins, offsets, outputs, out)
    for nid, holder in holders.items():  # a prefix of an in-place concat: its first bytes
        if holder in out.nodes and Value(nid) not in out.slices:
            out.slices[Value(nid)] = (Value(holder), 0)
            out.nodes.add(nid)
        else:
            _claim(g, nid, *cands[nid], outputs, out)
    return out


def _claim(
    g: Graph, nid: int, ins: tuple[Value, ...], offsets: list[int], outputs: set[Value], out: ConcatSlices
) -> None:
    """Concat `nid` in place where every input can move into its slice."""
    if all(_movable(g, v, off, outputs, out) for v, off in zip(ins, offsets, strict=True)):
        for v, off in zip(ins, offsets, strict=True):
            out.slices[v] = (Value(nid), off)
        out.nodes.add(nid)


def _prefix_holders(g: Graph, cands: dict[int, tuple[tuple[Value, ...], list[int]]]) -> dict[int, int]:
    """{concat: the candidate with the most inputs whose inputs begin with all of its own, on
    the same axis}: DenseNet's layer k reads concat(x0, y1 .. y(k-1)), the first bytes of the
    block's last concat, so it can be a view of them."""
    axis = {nid: g.node(nid).attr["axis"] % g.node(nid).outputs[0].ndim for nid in cands}
    holders = {}
    for nid, (ins, offsets) in cands.items():
        longer = [
            c
            for c, (c_ins, c_offsets) in cands.items()
            if len(c_ins) > len(ins)
            and c_ins[: len(ins)] == ins
            and c_offsets[: len(ins)] == offsets
            and axis[c] == axis[nid]
        ]
        if longer:
            holders[nid] = max(longer, key=lambda c: len(cands[c][0]))
    return holders


def _offsets(g: Graph, nid: int) -> list[int] | None:
    """Each input's byte offset in the concat's output, or None when the inputs are not one
    contiguous run each."""
    t = g.node(nid).outputs[0]
    axis = g.node(nid).attr["axis"] % t.ndim
    if any(d != 1 for d in t.shape[:axis]):
        return None
    offsets, at = [], 0
    for v in g.inputs_of(nid):
        offsets.append(at)
        at += g.type_of(v).nbytes
    return offsets


def _movable(g: Graph, v: Value, offset: int, outputs: set[Value], done: ConcatSlices) -> bool:
    node = g.node(v.node)
    return (
        node.op not in NOT_PRODUCERS
        and v not in outputs
        and v not in done.slices
        and v.node not in g.guards
        and offset % ALIGN == 0
    )
