"""Layout segments: the parts of a graph that must share one channel-block cap.

    segments = layout_segments(g)     # {Value: segment number}, on the graph before layout
    caps = [16, 16, 32, ...]          # one cap per segment: the layout pass's `max_block`

The layout pass (passes/layout.py) gives a tensor of C channels the block
channel_block(C, cap). A dense conv reads any input block and writes any output block, so
the cap may change across one; every other op that the pass packs (elementwise ops, pools,
concats, splits, pads, resizes, a depthwise conv, whose input and output blocks are one)
needs its packed operands in the blocks their channel counts give under one cap. A segment
is a set of values joined by such ops: the union of each op's activation inputs and outputs,
for every op but a dense conv (group 1, constant weights). Joining through ops the pass does
not pack (a reshape, a matmul) only makes segments larger, never wrong.

Segments are numbered in graph order (graph inputs, then each op's outputs), so a list of caps
recorded for a model applies to the same graph in a later compile. TVM's graph tuner picks a
layout per conv in the same spirit; here the choice is per segment, with no transform between
segments since the convs at their borders read and write any block.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorir.graph.graph import Graph, Value
from tensorir.passes import const_of


class _Union:
    def __init__(self) -> None:
        self.parent: dict[Value, Value] = {}

    def find(self, v: Value) -> Value:
        root = v
        while self.parent.setdefault(root, root) != root:
            root = self.parent[root]
        while v != root:  # path compression
            self.parent[v], v = root, self.parent[v]
        return root

    def join(self, values: Sequence[Value]) -> None:
        roots = [self.find(v) for v in values]
        for r in roots[1:]:
            self.parent[r] = roots[0]


def is_dense_conv(g: Graph, nid: int) -> bool:
    """A conv of one group with constant weights: the layout pass packs it, and it reads any
    input block and writes any output block."""
    node = g.node(nid)
    if node.op != "conv" or int(node.attr.get("group", 1)) != 1:
        return False
    return all(const_of(g, v) is not None for v in g.inputs_of(nid)[1:])


def _is_activation(g: Graph, v: Value) -> bool:
    t = g.type_of(v)
    return t.ndim == 4 and t.dtype in ("float32", "float16") and const_of(g, v) is None


def layout_segments(g: Graph) -> dict[Value, int]:
    """{4-D float activation: its segment number}, numbered in graph order."""
    union = _Union()
    for nid in g.op_nodes():
        outs = [Value(nid, i) for i in range(len(g.node(nid).outputs))]
        if is_dense_conv(g, nid):
            union.join(outs)  # the conv's input stays in its own segment
        else:
            union.join([v for v in g.inputs_of(nid) if _is_activation(g, v)] + outs)
    order = [Value(n, 0) for n in g.graph_inputs()] + [
        Value(nid, i) for nid in g.op_nodes() for i in range(len(g.node(nid).outputs))
    ]
    numbers: dict[Value, int] = {}
    out: dict[Value, int] = {}
    for v in order:
        if _is_activation(g, v):
            out[v] = numbers.setdefault(union.find(v), len(numbers))
    return out


def segment_count(g: Graph) -> int:
    segments = layout_segments(g)
    return max(segments.values()) + 1 if segments else 0
