"""Graph passes, one file per pass, and the small toolkit they share.

The pass API
------------
A graph pass is a function `pass_name(g: Graph) -> bool`. It edits `g` in place and
returns whether it changed anything (the pipeline prints "(unchanged)" at TIR_DEBUG=2
when it did not). Every pass leaves a graph that `graph.verify.verify` accepts, and a
pass never leaves behind nodes that it made dead. `tensorir.pipeline.optimize` copies
the graph first, so callers keep their unoptimized graph.

    from tensorir.passes.simplify import simplify
    changed = simplify(g)

Rules are data
--------------
Most passes are lists of rules `(op, fn)` run by one engine, `rewrite(g, rules)`:
`fn(g, nid)` looks at node `nid` (whose op is `op`) and either rewrites it and returns
True, or returns False and leaves the graph alone. A rule that fires must replace or
remove `nid`; the engine sweeps the graph in topological order until no rule fires.

    RULES: list[Rule] = [
        ("identity", forward_input),     # identity(x) -> x
        ("mul", drop_mul_one),           # x * 1 -> x
    ]

The pass modules (canonicalize, fold_constants, fold_batchnorm, simplify, dead_code,
cse) import from here; this file imports none of them, so there is no import cycle.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import np_dtype

Pass = Callable[[Graph], bool]
RuleFn = Callable[[Graph, int], bool]
Rule = tuple[str, RuleFn]

MAX_SWEEPS = 100


# ---- the rewrite engine ----------------------------------------------------------
def rewrite(g: Graph, rules: Sequence[Rule]) -> bool:
    """Apply `rules` (tried in list order per node) until none fires; True if any did."""
    table: dict[str, list[RuleFn]] = {}
    for op, fn in rules:
        table.setdefault(op, []).append(fn)
    changed = False
    for _ in range(MAX_SWEEPS):
        fired = False
        for nid in g.topo_order():
            if nid in g.nx and any(fn(g, nid) for fn in table.get(g.node(nid).op, ())):
                fired = True
        if not fired:
            return changed
        changed = True
    names = sorted({fn.__name__ for _, fn in rules})
    raise RuntimeError(f"rewrite rules {names} did not reach a fixed point in {MAX_SWEEPS} sweeps")


# ---- queries ---------------------------------------------------------------------
def const_of(g: Graph, v: Value) -> np.ndarray | None:
    """The array of `v` if it is a constant, else None."""
    node = g.node(v.node)
    return node.value if node.op == "constant" else None


def is_output(g: Graph, v: Value) -> bool:
    return any(o == v for _, o in g.outputs)


def single_use(g: Graph, v: Value) -> bool:
    """`v` feeds exactly one op input and is not a graph output."""
    return len(g.consumers(v)) == 1 and not is_output(g, v)


def is_float(dtype: str) -> bool:
    """A numpy float dtype (float16/32/64); the ml_dtypes formats are left out."""
    return np_dtype(dtype).kind == "f"


# ---- edits -----------------------------------------------------------------------
def add_op(g: Graph, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None) -> Value:
    """Add a single-output op and return its value."""
    (out,) = g.add_node(op, inputs, attrs)
    return out


def replace(g: Graph, nid: int, new: Sequence[Value]) -> bool:
    """Make every use of output i of `nid` read `new[i]`, then drop what became dead.

    Returns True, so that a rule can end with `return replace(g, nid, [y])`.
    """
    for i, v in enumerate(new):
        old = Value(nid, i)
        if v != old:
            inherit_name(g, nid, v)
            g.replace_uses(old, v)
    remove_dead(g, nid)
    return True


def inherit_name(g: Graph, nid: int, v: Value) -> None:
    """Give the op that produces `v` the name of `nid`, which it replaces, if it has none: so
    kernels keep the names of the model's nodes they compute (tir diff maps them back)."""
    name, node = g.node(nid).name, g.node(v.node)
    if name and not node.name and node.op not in ("input", "constant"):
        g.replace_node(v.node, dataclasses.replace(node, name=name))
    # a node made to replace a guarded one runs under its guard; an existing value that stands
    # in for it (x * 1 -> x, an identity dropped) may be read outside the branch: no guard
    if nid in g.guards and v.node > nid and node.op not in ("input", "constant"):
        g.guards.setdefault(v.node, g.guards[nid])


def forward(g: Graph, nid: int, v: Value) -> bool:
    """Replace a single-output node by an existing value (x * 1 -> x)."""
    return replace(g, nid, [v])


def is_dead(g: Graph, nid: int) -> bool:
    node = g.node(nid)
    if node.op == "input" or g.nx.out_degree(nid):
        return False
    if any(flag.node == nid for flag in g.guard_flags()):
        return False
    return not any(v.node == nid for _, v in g.outputs)


def remove_dead(g: Graph, nid: int) -> None:
    """Remove `nid` if nothing reads it, then its producers that became dead in turn."""
    stack = [nid]
    while stack:
        n = stack.pop()
        if n in g.nx and is_dead(g, n):
            stack.extend(v.node for v in g.inputs_of(n))
            g.remove_node(n)


def copy_graph(g: Graph) -> Graph:
    """A copy that passes may edit freely (node payloads are frozen and shared)."""
    out = Graph(g.name)
    out.nx = g.nx.copy()
    out.outputs = list(g.outputs)
    out.output_lengths = dict(g.output_lengths)
    out.guards = dict(g.guards)
    out.float32_ops = list(g.float32_ops)
    # NOTE: new ids must not collide with copied ones; Graph has no public hook for it.
    out._ids = itertools.count(max(g.nx.nodes, default=-1) + 1)
    return out
