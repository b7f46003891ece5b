"""Tuning tasks: the distinct kernels of a compiled model, each with its search space.

    tasks = extract_tasks(load_graph("model.onnx"), target)
    for t in tasks: print(t)          # conv2d_nchwc+relu f32[..] x3  236.0 MFLOP  space 27246

A task is one *workload* (op, input shapes/dtypes/layouts, attributes incl. the fused
epilogue: `tensorir.ops.workload.workload_key`) that occurs `count` times in the optimized,
fused graph; its `weight` (count x FLOPs) says how much of the model it is. Only nodes
whose template has knobs become tasks (elementwise kernels have nothing to tune).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorir.graph.flops import node_flops
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType, np_dtype
from tensorir.loop.ir import LoopFunc
from tensorir.ops.conv_algorithms import Specialized
from tensorir.ops.kernel import build_kernel, kernel_space
from tensorir.ops.registry import get_op
from tensorir.ops.workload import op_label, type_str, workload_key
from tensorir.passes.memory_plan import storage_root
from tensorir.schedule.space import Space
from tensorir.target import Target, get_target


@dataclasses.dataclass
class Task:
    key: str
    op: str
    in_types: tuple[TensorType, ...]
    attrs: dict[str, Any]
    flops: int  # of one occurrence
    count: int = 1
    nodes: list[str] = dataclasses.field(default_factory=list)
    const_args: frozenset[int] = frozenset()
    int_inputs: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)  # index arrays etc.
    _space: Space | None = dataclasses.field(default=None, repr=False)

    @property
    def weight(self) -> int:
        return self.flops * self.count

    @property
    def label(self) -> str:
        return op_label(self.op, self.attrs)

    def space(self, target: Target | str = "host") -> Space:
        if self._space is None:
            self._space = kernel_space(self.op, self.in_types, self.attrs, get_target(target))
        return self._space

    def build(
        self,
        config: Mapping[str, Any] | None,
        target: Target | str = "host",
        name: str | None = None,
        passes: bool = True,
    ) -> tuple[LoopFunc, Specialized]:
        """The kernel under `config` (`passes=False`: the unexpanded loop nest, for features)."""
        return build_kernel(self.op, self.in_types, self.attrs, target, config, name, self.const_args, passes)

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Inputs for measuring: uniform(-1, 1) floats; integer inputs (indices) as in the model."""
        rng = np.random.default_rng(seed)
        out = []
        for k, t in enumerate(self.in_types):
            if k in self.int_inputs:
                out.append(self.int_inputs[k])
            elif t.dtype.startswith("float"):
                out.append(rng.uniform(-1, 1, t.shape).astype(np_dtype(t.dtype)))
            else:
                out.append(np.zeros(t.shape, np_dtype(t.dtype)))
        return out

    def reference(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return get_op(self.op).run_reference(list(inputs), dict(self.attrs))

    def __str__(self) -> str:
        types = ",".join(type_str(t) for t in self.in_types)
        return f"{self.label} {types} x{self.count} {self.flops / 1e6:.1f} MFLOP"


def _node_task(g: Graph, nid: int) -> Task:
    node = g.node(nid)
    in_vals = g.inputs_of(nid)
    in_types = tuple(g.type_of(v) for v in in_vals)
    const, ints = set(), {}
    for k, v in enumerate(in_vals):
        root = g.node(storage_root(g, v).node)
        if root.op == "constant":
            const.add(k)
            if not g.type_of(v).dtype.startswith("float"):
                ints[k] = np.asarray(root.value).reshape(g.type_of(v).shape)
    return Task(
        key=workload_key(node.op, in_types, node.attr),
        op=node.op,
        in_types=in_types,
        attrs=dict(node.attr),
        flops=node_flops(g, nid),
        nodes=[node.name or str(nid)],
        const_args=frozenset(const),
        int_inputs=ints,
    )


def extract_tasks(g: Graph, target: Target | str = "host", min_space: int = 2) -> list[Task]:
    """The distinct tunable workloads of an optimized graph, heaviest first."""
    target = get_target(target)
    tasks: dict[str, Task] = {}
    for nid in g.op_nodes():
        if storage_root(g, Value(nid)) != Value(nid):
            continue
        task = _node_task(g, nid)
        if task.key in tasks:
            tasks[task.key].count += 1
            tasks[task.key].nodes += task.nodes
            continue
        if task.space(target).size() < min_space:
            continue
        tasks[task.key] = task
    return sorted(tasks.values(), key=lambda t: -t.weight)


def load_graph(
    model: Any,
    target: Target | str = "host",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    layout_block: int | Sequence[int] | None = None,
    fuse_dwpw: bool | str | None = None,
) -> Graph:
    """A model (path or ModelProto) imported and optimized exactly as `tir compile` does
    (with this NCHW[x]c channel block, default the target's lanes, and depthwise + 1x1
    merge, default TIR_FUSE_DWPW)."""
    from tensorir.frontend import load_graph_any
    from tensorir.pipeline import optimize

    if isinstance(model, str | os.PathLike):
        model = os.fspath(model)
    g = load_graph_any(model, input_shapes)
    return optimize(g, target=get_target(target), layout_block=layout_block, fuse_dwpw=fuse_dwpw)
