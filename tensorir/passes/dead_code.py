"""dead_code: remove every node that no graph output depends on.

Graph inputs stay even when unused (they are the model's signature). A multi-output
node stays whole when any one of its outputs is used. Before/After:

    %2 = relu(%x) : f32[4]
    %3 = exp(%x) : f32[4]
    return %2 as y
    ->
    %2 = relu(%x) : f32[4]
    return %2 as y
"""

from __future__ import annotations

import networkx as nx

from tensorir.graph.graph import Graph


def dead_code(g: Graph) -> bool:
    """Drop the nodes outside the outputs' ancestry; True if any was dropped."""
    live: set[int] = set()
    for _, v in g.outputs:
        if v.node not in live:
            live.add(v.node)
            live |= nx.ancestors(g.nx, v.node)
    for nid in [n for n in g.guards if n in live]:  # a live node's guard reads its flags
        for flag, _ in g.guards[nid]:
            live |= {flag.node} | nx.ancestors(g.nx, flag.node)
    dead = [n for n in g.nx.nodes if n not in live and g.node(n).op != "input"]
    g.nx.remove_nodes_from(dead)
    for n in dead:
        g.guards.pop(n, None)
    return bool(dead)
