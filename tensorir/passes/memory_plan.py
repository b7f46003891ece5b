"""Static memory plan: every intermediate tensor gets an offset in one workspace.

Tensors whose lifetimes (first write .. last read, in execution order) do not overlap
may share bytes. Each tensor in turn takes the lowest offset that does not collide with an
already placed tensor alive at the same time (first fit), in three orders: largest first,
equal sizes by first write ("size", the order of TFLite's arena planner) or by last read,
latest first; and in execution order ("in order", as TFLite's GPU delegate also offers). The
plan keeps the smallest workspace (ties: the earlier order, so `order` names the first that
reaches it). None wins everywhere. Size reaches the lower bound below on most of the zoo, but
not on these (untuned builds for this host, the kernels' scratch included; size -> the plan kept):
ResNet-18 5,619,712 -> 5,075,968 B (last read first; the lower bound), ResNet-50 9,633,792 ->
8,028,160 B (last read first and in order; 1.07x the lower bound), MobileNetV2-224 2,709,504 ->
2,408,448 B (in order; the lower bound), DenseNet-121 10,436,608 -> 10,151,936 B (both; the
lower bound). In order alone loses on MobileNetV2-96 (1,327,104 B against 1,032,192) and
YOLOv8n; last read first alone on YOLOv8n. Also tried: TFLite's greedy by breadth (the steps
with the most bytes alive first), longest lifetime first, size x lifetime first; none beat the
three. Planning runs first fit three times: 3 ms for ResNet-50's 57 tensors, 20 ms for
DenseNet-121's 247, 0.6 s for 2,000 (synthetic; one order 0.15 s), on a loaded host.

Graph inputs, outputs and constants live outside the workspace (the caller's buffers
and the weights). Ops that only reinterpret their input (reshape, identity) alias it:
they take no bytes of their own and extend the lifetime of the buffer they view. The inputs
of a copy-free concat (passes/concat_in_place.py) are slices of its output's buffer, which
is alive from the first of them written to the last read of any.

The report gives three numbers: the planned workspace, the no-reuse total (every
intermediate in its own buffer) and the lower bound (the largest sum of live tensors at
any step, which no offset assignment can beat).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tensorir.graph.graph import Graph, Value

if TYPE_CHECKING:
    from tensorir.passes.concat_in_place import ConcatSlices

ALIGN = 64
ALIAS_OPS = frozenset({"reshape", "identity"})


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Buffer:
    """One planned allocation: the tensors stored in it and when it is alive."""

    value: Value
    size: int
    start: int  # step that writes it
    end: int  # last step that reads it (inclusive)
    offset: int = -1
    views: list[Value] = field(default_factory=list)
    slices: list[tuple[Value, int]] = field(default_factory=list)  # (value, byte offset) inside

    def overlaps_in_time(self, other: Buffer) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class MemoryPlan:
    buffers: list[Buffer]
    offsets: dict[Value, int]  # every planned value (incl. aliases) -> byte offset
    scratch_offsets: dict[int, list[int]]  # node id -> offsets of its kernel's scratch buffers
    workspace: int
    no_reuse: int
    lower_bound: int
    concats_in_place: int = 0  # concats whose inputs are slices of their output (no copy)
    order: str = "size"  # the greedy order that gave the offsets (ORDERS)

    def summary(self) -> str:
        ratio = self.workspace / self.lower_bound if self.lower_bound else 1.0
        share = self.workspace / self.no_reuse if self.no_reuse else 1.0
        return (
            f"workspace {self.workspace:,} B in {len(self.buffers)} buffers, {self.order} "
            f"({ratio:.3f} x lower bound {self.lower_bound:,} B, "
            f"{share:.3f} x no-reuse {self.no_reuse:,} B)"
            + (f"; {self.concats_in_place} concats in place" if self.concats_in_place else "")
        )


def storage_root(g: Graph, v: Value) -> Value:
    """The value whose bytes `v` views: follow reshape/identity back to an op's output, a
    graph input or a constant (a view of an input reads the caller's array in place)."""
    while g.node(v.node).op in ALIAS_OPS:
        (v,) = g.inputs_of(v.node)
    return v


def _root(g: Graph, v: Value, steps: dict[int, int]) -> Value:
    return storage_root(g, v)


def _lifetimes(g: Graph) -> dict[Value, Buffer]:
    order = g.op_nodes()
    steps = {nid: k for k, nid in enumerate(order)}
    outputs = {v for _, v in g.outputs}
    buffers: dict[Value, Buffer] = {}
    for nid in order:
        for i, t in enumerate(g.node(nid).outputs):
            v = Value(nid, i)
            root = _root(g, v, steps)
            if root != v and root in buffers:
                buffers[root].views.append(v)
                continue
            buffers[v] = Buffer(v, _aligned(t.nbytes), steps[nid], steps[nid])
    for nid in order:
        for v in g.inputs_of(nid):
            if v.node in steps:
                buf = buffers.get(_root(g, v, steps))
                if buf is not None:
                    buf.end = max(buf.end, steps[nid])
    for nid, conds in g.guards.items():  # a guarded kernel reads its flags before it runs
        for flag, _ in conds:
            buf = buffers.get(_root(g, flag, steps)) if nid in steps else None
            if buf is not None:
                buf.end = max(buf.end, steps[nid])
    # a graph output (or a view of one) is the caller's buffer, not the workspace's
    for v in outputs:
        if v.node in steps:
            root = _root(g, v, steps)
            buffers.pop(root, None)
    return buffers


def _lower_bound(buffers: list[Buffer]) -> int:
    last = max((b.end for b in buffers), default=-1)
    return max((sum(b.size for b in buffers if b.start <= s <= b.end) for s in range(last + 1)), default=0)


def _by_size(buffers: list[Buffer]) -> list[Buffer]:
    return sorted(buffers, key=lambda b: (-b.size, b.start))


def _by_size_last_read(buffers: list[Buffer]) -> list[Buffer]:
    return sorted(buffers, key=lambda b: (-b.size, -b.end))


def _in_order(buffers: list[Buffer]) -> list[Buffer]:
    return sorted(buffers, key=lambda b: (b.start, -b.size))


ORDERS = {"size": _by_size, "size, last read first": _by_size_last_read, "in order": _in_order}


def _place(buffers: list[Buffer]) -> int:
    """First fit in the given order: each buffer at the lowest offset clear of the placed
    buffers alive at the same time. Sets the offsets; returns the workspace."""
    placed: list[Buffer] = []
    top = 0
    for buf in buffers:
        busy = sorted((p.offset, p.offset + p.size) for p in placed if p.overlaps_in_time(buf))
        offset = 0
        for lo, hi in busy:
            if offset + buf.size <= lo:
                break
            offset = max(offset, hi)
        buf.offset = offset
        placed.append(buf)
        top = max(top, offset + buf.size)
    return top


def _place_best(buffers: list[Buffer]) -> tuple[int, str]:
    """(workspace, order): the offsets of the ORDERS that needs the least workspace (the
    first of equals), set on `buffers`."""
    best: tuple[int, str, list[int]] | None = None
    for name, order in ORDERS.items():
        top = _place(order(buffers))
        if best is None or top < best[0]:
            best = (top, name, [b.offset for b in buffers])
    assert best is not None
    for b, off in zip(buffers, best[2], strict=True):
        b.offset = off
    return best[0], best[1]


def _merge_slices(buffers: dict[Value, Buffer], slices: ConcatSlices) -> None:
    """Each concat input's buffer (and its views) becomes a slice of the outermost concat
    output that holds it; that buffer lives as long as any of its slices."""
    for v in list(slices.slices):
        part = buffers.pop(v)
        root, offset = slices.container(v)
        buf = buffers[root]
        buf.start, buf.end = min(buf.start, part.start), max(buf.end, part.end)
        buf.slices += [(w, offset) for w in [v, *part.views]]


def plan_memory(
    g: Graph, scratch: dict[int, list[int]] | None = None, slices: ConcatSlices | None = None
) -> MemoryPlan:
    """Assign workspace offsets to the intermediates of `g` (execution order: topological).
    `scratch`: node id -> byte sizes of the kernel's own temporaries, alive during that node.
    `slices`: copy-free concats (passes/concat_in_place.py), their inputs placed inside them."""
    lifetimes = _lifetimes(g)
    if slices is not None:
        _merge_slices(lifetimes, slices)
    buffers = list(lifetimes.values())
    steps = {nid: k for k, nid in enumerate(g.op_nodes())}
    temps: dict[int, list[Buffer]] = {}
    for nid, sizes in (scratch or {}).items():
        temps[nid] = [
            Buffer(Value(nid, -1 - j), _aligned(n), steps[nid], steps[nid]) for j, n in enumerate(sizes)
        ]
        buffers += temps[nid]
    workspace, order = _place_best(buffers)
    offsets = {}
    for b in buffers:
        offsets[b.value] = b.offset
        for v in b.views:
            offsets[v] = b.offset
        for v, d in b.slices:
            offsets[v] = b.offset + d
    return MemoryPlan(
        buffers=buffers,
        offsets=offsets,
        scratch_offsets={nid: [b.offset for b in bs] for nid, bs in temps.items()},
        workspace=workspace,
        no_reuse=sum(b.size for b in buffers),
        lower_bound=_lower_bound(buffers),
        concats_in_place=len(slices.nodes) if slices is not None else 0,
        order=order,
    )
