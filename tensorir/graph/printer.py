"""Readable text form of a graph.

graph mnist(%x: f32[1,1,28,28]) {
  %w1 = constant f32[8,1,5,5]
  %2 = conv(%x, %w1) group=1 pads=(2,2,2,2) strides=(1,1) : f32[1,8,28,28]
  return %2
}
"""

from __future__ import annotations

import numpy as np

from tensorir.graph.graph import Graph, Value


def _fmt_attr(v: object) -> str:
    if isinstance(v, tuple):
        return "(" + ",".join(_fmt_attr(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    return str(v)


def _names(g: Graph) -> dict[int, str]:
    names = {}
    for nid in g.topo_order():
        node = g.node(nid)
        if node.op == "input":
            names[nid] = f"%{node.name}"
        elif node.op == "constant":
            names[nid] = f"%c{nid}"
        else:
            names[nid] = f"%{nid}"
    return names


def _ref(names: dict[int, str], g: Graph, v: Value) -> str:
    base = names[v.node]
    return base if len(g.node(v.node).outputs) == 1 else f"{base}.{v.index}"


def _ret(names: dict[int, str], g: Graph, name: str, v: Value) -> str:
    ref = _ref(names, g, v)
    text = ref if ref == f"%{name}" else f"{ref} as {name}"
    if name in g.output_lengths:
        axis, companion = g.output_lengths[name]
        text += f" (rows along axis {axis}: {companion})"
    return text


def _body_text(body: object) -> list[str]:
    """A loop body (ops/loop.py LoopBody), printed under its node."""
    return f"{body} = {print_graph(body.graph)}".splitlines()


def print_graph(g: Graph, constants: bool = True) -> str:
    names = _names(g)
    params = ", ".join(f"{names[n]}: {g.node(n).outputs[0]}" for n in g.graph_inputs())
    lines = [f"graph {g.name}({params}) {{"]
    for nid in g.topo_order():
        node = g.node(nid)
        if node.op == "input" or (node.op == "constant" and not constants):
            continue
        if node.op == "constant":
            val = ""
            if node.value is not None and node.value.size <= 8:
                val = " " + np.array2string(node.value.ravel(), separator=",")
            lines.append(f"  {names[nid]} = constant {node.outputs[0]}{val}")
            continue
        args = ", ".join(_ref(names, g, v) for v in g.inputs_of(nid))
        attrs = "".join(f" {k}={_fmt_attr(v)}" for k, v in node.attrs)
        types = ", ".join(str(t) for t in node.outputs)
        when = "".join(f" {'when' if p else 'unless'} {_ref(names, g, f)}" for f, p in g.guards.get(nid, ()))
        lines.append(f"  {names[nid]} = {node.op}({args}){attrs} : {types}{when}")
        lines += [f"    {line}" for _, a in node.attrs if hasattr(a, "graph") for line in _body_text(a)]
    rets = ", ".join(_ret(names, g, n, v) for n, v in g.outputs)
    lines.append(f"  return {rets}")
    lines.append("}")
    return "\n".join(lines)
