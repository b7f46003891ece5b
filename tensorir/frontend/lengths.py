"""Data-dependent lengths, followed through the graph at import.

An op whose output length depends on the data (ops/dynamic.py: nonzero, nms, unique; TopK
with a run-time k) gets its upper bound as static shape and its real length as an int64
scalar tensor, `count`. The importer records that as a `Length` of the output: (axis,
count, origin). Ops that keep the rows along that axis apart (elementwise ops, gathers by
those rows, reshapes and transposes that keep the axis whole, reductions over other axes,
row-wise matmuls) pass the length on to their output, on the axis it moves to; rows past
the count hold values nobody reads. An op that would mix valid rows with padding (a
reduction over the axis, a concat or slice along it, a second length meeting the first) is
refused in one line that names the node and where the length comes from.

A graph output with a length gets a companion output, `<name>__length` (int64 scalar), and
`graph.output_lengths[name] = (axis, companion)`; the runtime trims the output to it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import networkx as nx

from tensorir.errors import ModelError
from tensorir.graph.graph import Graph, Value
from tensorir.ops.registry import op_pattern

LENGTH_SUFFIX = "__length"
PRODUCERS = ("nonzero", "nms", "unique")  # ops that make lengths (on inputs without one)


@dataclass(frozen=True)
class Length:
    """The valid extent of a tensor along `axis` is the run-time int64 scalar `count`."""

    axis: int
    count: Value
    origin: str  # what made it, for errors: "NonZero node 'nz'"


Dyn = Sequence[Length | None]
Rule = Callable[[Graph, int, Dyn], list[int | None]]


class Refused(Exception):
    """An op cannot carry a data-dependent length (the reason is the message)."""


def follow(graph: Graph, lengths: dict[Value, Length], new_nodes: Sequence[int], label: str) -> None:
    """Give the outputs of `new_nodes` (what one source node became) their lengths; a
    ModelError naming `label` where a node cannot carry one."""
    for nid in nx.topological_sort(graph.nx.subgraph(new_nodes)):
        node = graph.node(nid)
        dyn = _relevant(graph, nid, [lengths.get(v) for v in graph.inputs_of(nid)])
        live = [d for d in dyn if d is not None]
        if not live:
            continue
        src = live[0]
        made = any(Value(nid, i) in lengths for i in range(len(node.outputs)))
        if made and all(d.count in graph.inputs_of(nid) for d in live):
            continue  # it reads the length itself (topk_dyn, unique with a length)
        try:
            if node.op in PRODUCERS or made:
                raise Refused("its result would count the padding past the length")
            if any(d.count != src.count for d in live):
                raise Refused("two different data-dependent lengths meet here")
            axes = _rule(node.op)(graph, nid, dyn)
        except Refused as e:
            where = f"its input has a data-dependent length along axis {src.axis} (from {src.origin})"
            raise ModelError(f"{label}: {where}; {node.op} over it is not supported: {e}") from None
        for i, axis in enumerate(axes):
            if axis is not None:
                lengths[Value(nid, i)] = Length(axis, src.count, src.origin)


def add_length_outputs(graph: Graph, lengths: dict[Value, Length]) -> None:
    """A companion output `<name>__length` for every graph output with a length."""
    taken = {name for name, _ in graph.outputs}
    extra = []
    for name, v in graph.outputs:
        if v in lengths:
            companion = name + LENGTH_SUFFIX
            if companion in taken:
                raise ModelError(f"output '{name}': the name {companion!r} of its length output is taken")
            graph.output_lengths[name] = (lengths[v].axis, companion)
            extra.append((companion, lengths[v].count))
    graph.outputs = [*graph.outputs, *extra]


def _relevant(graph: Graph, nid: int, dyn: list[Length | None]) -> list[Length | None]:
    """The lengths that matter to the node: a gather (nd) whose data has a length along the
    axis it picks from reads valid rows only (the indices say which), so that one does not."""
    node = graph.node(nid)
    if node.op == "gather" and dyn[0] is not None and dyn[0].axis == node.attr["axis"]:
        return [None, *dyn[1:]]
    if node.op == "gather_nd" and dyn[0] is not None and dyn[0].axis >= node.attr.get("batch_dims", 0):
        return [None, *dyn[1:]]
    return dyn


# ---- rules: the output axis (None: no length) of each output ------------------------------
def _shape(graph: Graph, v: Value) -> tuple[int, ...]:
    return graph.type_of(v).shape


def _elementwise(graph: Graph, nid: int, dyn: Dyn) -> list[int | None]:
    ins = graph.inputs_of(nid)
    out_rank = len(graph.node(nid).outputs[0].shape)
    axes = {d.axis + out_rank - len(_shape(graph, v)) for v, d in zip(ins, dyn, strict=True) if d}
    if len(axes) != 1:
        raise Refused("its inputs have the length on different axes")
    return [axes.pop()] * len(graph.node(nid).outputs)


def _reshape(graph: Graph, nid: int, dyn: Dyn) -> list[int | None]:
    """The axis survives whole when the elements before it and its extent are unchanged."""
    src, out = _shape(graph, graph.inputs_of(nid)[0]), graph.node(nid).outputs[0].shape
    a = dyn[0].axis if dyn[0] else None
    if a is None:
        raise Refused("the length is on its shape input")
    before = math.prod(src[:a])
    for b in range(len(out)):
        if math.prod(out[:b]) == before and out[b] == src[a]:
            return [b]
    raise Refused(f"the reshape {list(src)} -> {list(out)} splits or merges axis {a}")


def _transpose(graph: Graph, nid: int, dyn: Dyn) -> list[int | None]:
    return [list(graph.node(nid).attr["perm"]).index(dyn[0].axis)]


def _gather(graph: Graph, nid: int, dyn: Dyn) -> list[int | None]:
    axis = graph.node(nid).attr["axis"]
    data_len, idx_len = dyn
    idx_rank = len(_shape(graph, graph.inputs_of(nid)[1]))
    if idx_len is not None:
        if data_len is not None and data_len.axis != axis:
            raise Refused("both its data and its indices have a length")
        return [axis + idx_len.axis]
    return [data_len.axis if data_len.axis < axis else data_len.axis + idx_rank - 1]


def _gather_nd(graph: Graph, nid: int, dyn: Dyn) -> list[int | None]:
    """Rows of the indices (any axis but their last) are rows of the result."""
    idx_rank = len(_shape(graph, graph.inputs_of(nid)[1]))
    if dyn[0] is not None or dyn[1].axis >= idx_rank - 1:
        raise Refused("the length is not on the rows of its indices")
    return [dyn[1].axis]


def _along_other_axis(key: str) -> Rule:
    """concat / split / softmax / topk / cumsum: fine along any axis but the length's."""

    def rule(graph: Graph, nid: int, dyn: Dyn) -> list[int | None]:
        node = graph.node(nid)
        a = next(d.axis for d in dyn if d)
        if node.attr[key] == a:
            raise Refused(f"it works along axis {a}")
        if node.op == "concat" and any(d is None for d in dyn):
            raise Refused("only some of its inputs have the length")
        return [a] * len(node.outputs)

    return rule


def _reduce(graph: Graph, nid: int, dyn: Dyn) -> list[int | None]:
    attr = graph.node(nid).attr
    axes = tuple(attr["axes"]) if "axes" in attr else (attr["axis"],)
    a = dyn[0].axis
    if a in axes or not axes:
        raise Refused(f"it reduces over axis {a}")
    keep = attr.get("keepdims", 1)
    return [a if keep else a - sum(x < a for x in axes)]


def _slice(graph: Graph, nid: int, dyn: Dyn) -> list[int | None]:
    attr = graph.node(nid).attr
    a = dyn[0].axis
    extent = _shape(graph, graph.inputs_of(nid)[0])[a]
    for start, end, axis, step in zip(attr["starts"], attr["ends"], attr["axes"], attr["steps"], strict=True):
        if axis == a and ((start, step) != (0, 1) or end < extent):
            raise Refused(f"it slices axis {a}")
    return [a]


def _rows_of_first(graph: Graph, nid: int, dyn: Dyn) -> list[int | None]:
    """matmul / dense: rows of the first operand map to rows of the result."""
    a_rank = len(_shape(graph, graph.inputs_of(nid)[0]))
    if dyn[0] is None or any(dyn[1:]) or dyn[0].axis >= a_rank - 1:
        raise Refused("the length is not on the rows of its first operand")
    return [dyn[0].axis + len(graph.node(nid).outputs[0].shape) - a_rank]


_RULES: dict[str, Rule] = {
    "reshape": _reshape,
    "identity": _reshape,
    "transpose": _transpose,
    "gather": _gather,
    "gather_nd": _gather_nd,
    "concat": _along_other_axis("axis"),
    "split": _along_other_axis("axis"),
    "softmax": _along_other_axis("axis"),
    "log_softmax": _along_other_axis("axis"),
    "topk": _along_other_axis("axis"),
    "cumsum": _along_other_axis("axis"),
    "slice": _slice,
    "argmax": _reduce,
    "argmin": _reduce,
    "matmul": _rows_of_first,
    "dense": _rows_of_first,
}


def _rule(op: str) -> Rule:
    if op in _RULES:
        return _RULES[op]
    if op.startswith("reduce_"):
        return _reduce
    if op_pattern(op) == "elementwise":
        return _elementwise
    raise Refused("it is not known to keep rows apart")
