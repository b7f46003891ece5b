"""The graph IR: a networkx.MultiDiGraph of ops whose edges are tensors.

Nodes are integer ids carrying a frozen `Node` payload under the key "node".
An edge u -> v with data {"src": i, "dst": j} says: output i of u is input j of v.
A `Value` names one tensor: (node id, output index).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import networkx as nx
import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import Node, TensorType


class Value(NamedTuple):
    node: int
    index: int = 0


class Graph:
    """A dataflow graph with named inputs and outputs and static tensor types."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.nx = nx.MultiDiGraph()
        self.outputs: list[tuple[str, Value]] = []
        # output name -> (axis, name of the int64 scalar output holding its length along axis):
        # outputs whose length depends on the data (frontend/lengths.py)
        self.output_lengths: dict[str, tuple[int, str]] = {}
        # node id -> the run-time conditions it runs under: ((flag, polarity), ...), each flag a
        # bool scalar; the node runs only when every flag equals its polarity (the branch of an
        # If, the iterations of a Loop past a run-time exit: frontend/onnx_control.py). Its
        # outputs are left as they were when it does not run; a `where` on the same flag picks.
        self.guards: dict[int, tuple[tuple[Value, bool], ...]] = {}
        self.float32_ops: list[str] = []  # under fp16: the ops kept in float32 (passes/precision.py)
        self._ids = itertools.count()

    # ---- construction -------------------------------------------------
    def _add(self, node: Node) -> int:
        nid = next(self._ids)
        self.nx.add_node(nid, node=node)
        return nid

    def add_input(self, name: str, ttype: TensorType) -> Value:
        return Value(self._add(Node("input", outputs=(ttype,), name=name)))

    def add_const(self, array: np.ndarray, name: str = "") -> Value:
        array = np.asarray(array)
        array.flags.writeable = False
        node = Node("constant", outputs=(TensorType.of(array),), name=name, value=array)
        return Value(self._add(node))

    def add_node(
        self,
        op: str,
        inputs: Sequence[Value],
        attrs: dict[str, Any] | None = None,
        name: str = "",
    ) -> list[Value]:
        """Add an op; its output types come from the op's shape inference."""
        from tensorir.ops.registry import get_op

        opdef = get_op(op)
        in_types = [self.type_of(v) for v in inputs]
        frozen = Node.make_attrs(attrs)
        try:
            out_types = opdef.infer(in_types, dict(frozen))
        except ShapeError as e:
            raise ShapeError(f"node '{name or op}' ({op}): {e}") from None
        except (ValueError, IndexError, KeyError, TypeError) as e:
            raise ShapeError(f"node '{name or op}' ({op}): cannot infer output shape: {e}") from e
        nid = self._add(Node(op, frozen, tuple(out_types), name))
        for j, v in enumerate(inputs):
            self.nx.add_edge(v.node, nid, src=v.index, dst=j)
        return [Value(nid, i) for i in range(len(out_types))]

    def set_outputs(self, outputs: Iterable[tuple[str, Value]]) -> None:
        self.outputs = list(outputs)

    # ---- queries ------------------------------------------------------
    def node(self, nid: int) -> Node:
        return self.nx.nodes[nid]["node"]

    def type_of(self, v: Value) -> TensorType:
        return self.node(v.node).outputs[v.index]

    def inputs_of(self, nid: int) -> list[Value]:
        edges = sorted(self.nx.in_edges(nid, data=True), key=lambda e: e[2]["dst"])
        return [Value(u, d["src"]) for u, _, d in edges]

    def consumers(self, v: Value) -> list[tuple[int, int]]:
        """(node id, input slot) of every use of `v`."""
        return [(dst, d["dst"]) for _, dst, d in self.nx.out_edges(v.node, data=True) if d["src"] == v.index]

    def graph_inputs(self) -> list[int]:
        return [n for n in self.topo_order() if self.node(n).op == "input"]

    def input_names(self) -> list[str]:
        return [self.node(n).name for n in self.graph_inputs()]

    def topo_order(self) -> list[int]:
        """Nodes in dependency order (ties by id); a guarded node after its flags' producers."""
        if not self.guards:
            return list(nx.lexicographical_topological_sort(self.nx))
        dag = nx.DiGraph(self.nx)
        dag.add_edges_from((flag.node, nid) for nid, conds in self.guards.items() for flag, _ in conds)
        return list(nx.lexicographical_topological_sort(dag))

    def op_nodes(self) -> list[int]:
        return [n for n in self.topo_order() if self.node(n).op not in ("input", "constant")]

    def __len__(self) -> int:
        return self.nx.number_of_nodes()

    # ---- edits ----------------------------------------------------------
    def replace_node(self, nid: int, node: Node) -> None:
        """Swap the payload of a node (e.g. an input that became a constant)."""
        self.nx.nodes[nid]["node"] = node

    def replace_uses(self, old: Value, new: Value) -> None:
        """Make every consumer of `old` (and graph outputs) read `new` instead."""
        for _, dst, key, d in list(self.nx.out_edges(old.node, keys=True, data=True)):
            if d["src"] == old.index:
                self.nx.remove_edge(old.node, dst, key)
                self.nx.add_edge(new.node, dst, src=new.index, dst=d["dst"])
        self.outputs = [(n, new if v == old else v) for n, v in self.outputs]
        for nid, conds in self.guards.items():
            if any(flag == old for flag, _ in conds):
                self.guards[nid] = tuple((new if f == old else f, p) for f, p in conds)

    def remove_node(self, nid: int) -> None:
        self.nx.remove_node(nid)
        self.guards.pop(nid, None)

    def guard_flags(self) -> set[Value]:
        """Every value some node's guard reads."""
        return {flag for conds in self.guards.values() for flag, _ in conds}

    def __str__(self) -> str:
        from tensorir.graph.printer import print_graph

        return print_graph(self)
