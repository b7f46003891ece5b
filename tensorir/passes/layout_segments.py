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

from networkx.utils import UnionFind

from tensorir.graph.graph import Graph, Value
from tensorir.passes import const_of


def constant_weights(g: Graph, conv: int) -> bool:
    """Whether a conv's weight and bias (if any) are constants: the layout pass packs them."""
    return all(const_of(g, v) is not None for v in g.inputs_of(conv)[1:])


def is_dense_conv(g: Graph, nid: int) -> bool:
    """A conv of one group with constant weights: the layout pass packs it, and it reads any
    input block and writes any output block."""
    node = g.node(nid)
    return node.op == "conv" and int(node.attr.get("group", 1)) == 1 and constant_weights(g, nid)


def _is_activation(g: Graph, v: Value) -> bool:
    t = g.type_of(v)
    return t.ndim == 4 and t.dtype in ("float32", "float16") and const_of(g, v) is None


def layout_segments(g: Graph) -> dict[Value, int]:
    """{4-D float activation: its segment number}, numbered in graph order."""
    union, ops = UnionFind(), g.op_nodes()
    for nid in ops:
        outs = [Value(nid, i) for i in range(len(g.node(nid).outputs))]
        if is_dense_conv(g, nid):
            union.union(*outs)  # the conv's input stays in its own segment
        else:
            union.union(*[v for v in g.inputs_of(nid) if _is_activation(g, v)], *outs)
    order = [Value(n, 0) for n in g.graph_inputs()] + [
        Value(nid, i) for nid in ops for i in range(len(g.node(nid).outputs))
    ]
    numbers: dict[Value, int] = {}
    out: dict[Value, int] = {}
    for v in order:
        if _is_activation(g, v):
            out[v] = numbers.setdefault(union[v], len(numbers))
    return out


def segment_count(g: Graph) -> int:
    return len(set(layout_segments(g).values()))
