"""fold_constants: evaluate every node whose inputs are all constants, with its numpy reference.

The node is replaced by constants holding its outputs (one per used output). Refused:

- nodes whose outputs would be much larger than their inputs: more than GROWTH times
  the input bytes *and* more than MAX_BYTES (as TVM keeps expand/tile/broadcast of a
  small constant as an op rather than baking a big array into the model);
- nodes whose reference raises (an out-of-range gather, say): the error then surfaces
  where the graph runs, not at compile time.

Before/After:

    %c0 = constant f32[2,3]
    %1 = transpose(%c0) perm=(1,0) : f32[3,2]
    %2 = matmul(%x, %1) : f32[4,2]
    ->
    %c3 = constant f32[3,2]
    %2 = matmul(%x, %c3) : f32[4,2]
"""

from __future__ import annotations

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.passes import const_of, is_output, replace
from tensorir.runtime.reference import run_node

GROWTH = 4
MAX_BYTES = 1 << 20


def fold_constants(g: Graph) -> bool:
    """Replace every all-constant-input node by its value; True if any was folded."""
    changed = False
    for nid in g.topo_order():
        if nid in g.nx:
            changed |= _fold(g, nid)
    return changed


def _const_inputs(g: Graph, nid: int) -> list[np.ndarray] | None:
    """The input arrays of an op node whose inputs are all constants, else None."""
    if g.node(nid).op in ("input", "constant"):
        return None
    values = []
    for v in g.inputs_of(nid):
        value = const_of(g, v)
        if value is None:
            return None
        values.append(value)
    return values or None


def _too_big(g: Graph, nid: int, args: list[np.ndarray]) -> bool:
    out_bytes = sum(t.nbytes for t in g.node(nid).outputs)
    return out_bytes > GROWTH * sum(a.nbytes for a in args) and out_bytes > MAX_BYTES


def _fold(g: Graph, nid: int) -> bool:
    """Replace `nid` by constants if its inputs are constants and its outputs not too big."""
    args = _const_inputs(g, nid)
    if args is None or _too_big(g, nid, args):
        return False
    try:
        with np.errstate(all="ignore"):
            outs = run_node(g, nid, args)
    except (ArithmeticError, IndexError, ValueError):
        return False
    name = g.node(nid).name
    new = []
    for i, array in enumerate(outs):
        old = Value(nid, i)
        used = g.consumers(old) or is_output(g, old)
        new.append(g.add_const(np.asarray(array, order="C"), name) if used else old)
    return replace(g, nid, new)
