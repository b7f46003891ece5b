"""A `loop` node (ops/loop.py) in a whole-model compile: its body compiled as a model of its
own, its kernels called inside a loop of the entry (plan.LoopSpan, codegen/entry.py).

The body's build is placed into the enclosing one:

    body input  iter, cond        -> two scratch slots of the loop node (int64, one byte)
    body input  carried k         -> the loop node's output k: the state, read by the body
    body input  captured j        -> the enclosing value the node reads
    body output cond', carried k' -> scratch slots; the latch copies them into the state
    body workspace / weights      -> a scratch block of the node / a chunk of the weights blob
    body prepared block           -> a chunk of the prepared block; the body's prepare calls
                                     join the enclosing build's (compiler_prepare.py)

Scratch of a loop node, in order: the body's workspace, iter, cond_state, cond', then one
slot per carried value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorir.compiler_prepare import Prepared
from tensorir.errors import TirError
from tensorir.graph.graph import Graph, Value
from tensorir.plan import Arg, Copy, KernelCall, LoopSpan
from tensorir.target import Target


@dataclass
class LoopKernel:
    """A compiled loop node: its body's Build (compiler.Build)."""

    body: Any

    def scratch(self) -> list[int]:
        carried = [self.body.graph.type_of(v).nbytes for _, v in self.body.graph.outputs[1:]]
        return [max(self.body.workspace, 1), 8, 1, 1, *carried]


def compile_loop(g: Graph, nid: int, target: Target, records: Any, prefix: str) -> LoopKernel:
    from tensorir.pipeline import compile_graph

    if target.kind != "llvm":
        raise TirError(
            f"a Loop whose trip count is known only at run time needs a loop in the generated entry, "
            f"which {target.name} builds lack; compile it for a CPU target"
        )
    body = g.node(nid).attr["body"]
    return LoopKernel(compile_graph(body.graph, target, records, symbol_prefix=prefix))


@dataclass
class _Remap:
    """Body storage -> enclosing storage."""

    inputs: list[Arg]
    outputs: list[Arg]
    workspace: int
    weights: int
    prepared: int = 0

    def __call__(self, a: Arg) -> Arg:
        if a.kind == "input":
            return self.inputs[a.index]
        if a.kind == "output":
            return self.outputs[a.index]
        base = {"workspace": self.workspace, "weight": self.weights, "prepared": self.prepared}
        return Arg(a.kind, a.index + base[a.kind])

    def copy(self, c: Copy) -> Copy:
        return Copy(self(c.dst), self(c.src), c.nbytes)


def bind_loop(
    g: Graph,
    nid: int,
    kern: LoopKernel,
    arg: Any,
    weights: Any,
    scratch: list[int],
    first: int,
    prepared: Prepared | None = None,
) -> tuple[list[KernelCall], list[LoopSpan], list[dict]]:
    """The body's calls over the enclosing storage (`arg(value)` -> Arg, `weights` the
    enclosing blob, `scratch` the node's scratch offsets, `first` the index of the body's first
    call in the enclosing plan, `prepared` the enclosing prepared block, which takes the
    body's prepare calls): its calls, its loop spans (this one first, nested ones after),
    and its manifest kernel entries with their arguments rebound."""
    body = kern.body
    ins = g.inputs_of(nid)
    n = len(g.node(nid).outputs)
    state = [arg(Value(nid, k)) for k in range(n)]
    slot = [Arg("workspace", off) for off in scratch]
    wbase = weights.place(("loop", nid), lambda: np.frombuffer(body.weights, np.uint8))
    remap = _Remap(
        inputs=[slot[1], slot[2], *state, *(arg(v) for v in ins[2 + n :])],
        outputs=[slot[3], *slot[4:]],
        workspace=scratch[0],
        weights=wbase,
        prepared=_place_prepared(prepared, nid, body),
    )
    if prepared is not None:
        prep = [_rebind(c, remap) for c in body.prepares]
        prepared.add(prep, [{"op": e["op"], "attrs": e["attrs"]} for e in body.manifest.get("prepare", ())])
    calls = [_rebind(c, remap) for c in body.calls]
    nbytes = [g.type_of(Value(nid, k)).nbytes for k in range(n)]
    latch = [remap.copy(c) for c in body.copies]
    latch += [Copy(state[k], slot[4 + k], nbytes[k]) for k in range(n)]
    latch.append(Copy(slot[2], slot[3], 1))
    enter = [Copy(state[k], arg(ins[2 + k]), nbytes[k]) for k in range(n)]
    enter.append(Copy(slot[2], arg(ins[1]), 1))
    guard = tuple((arg(flag), bool(p)) for flag, p in g.guards.get(nid, ()))
    span = LoopSpan(
        first,
        first + len(calls),
        arg(ins[0]),
        arg(ins[1]),
        slot[1],
        slot[2],
        tuple(enter),
        tuple(latch),
        guard,
    )
    nested = [_shift(s, first, remap) for s in body.loops]
    entries = [
        {**e, "args": [c.to_json() for c in call.args], "loop": body.graph.name}
        for e, call in zip(body.manifest["kernels"], calls, strict=True)
    ]
    return calls, [span, *nested], entries


def _place_prepared(prepared: Prepared | None, nid: int, body: Any) -> int:
    """The offset of the body's prepared block in the enclosing one (0: none to place)."""
    if not body.prepared:
        return 0
    if prepared is None:
        raise TirError("a loop body with prepared weights needs an enclosing build that prepares")
    return prepared.reserve(("loop", nid), body.prepared)


def _rebind(c: KernelCall, remap: _Remap) -> KernelCall:
    guard = tuple((remap(a), p) for a, p in c.guard)
    return KernelCall(c.symbol, tuple(remap(a) for a in c.args), c.device, c.arg_bytes, guard)


def _shift(s: LoopSpan, first: int, remap: _Remap) -> LoopSpan:
    return LoopSpan(
        s.first + first,
        s.end + first,
        remap(s.trip),
        remap(s.cond),
        remap(s.iter),
        remap(s.cond_state),
        tuple(remap.copy(c) for c in s.enter),
        tuple(remap.copy(c) for c in s.latch),
        tuple((remap(a), p) for a, p in s.guard),
    )
