"""Operation counts per graph node (a multiply-add counts as 2 FLOPs)."""

from __future__ import annotations

import math

from tensorir.graph.graph import Graph


def _prod(xs) -> int:
    return math.prod(int(x) for x in xs)


def node_flops(g: Graph, nid: int) -> int:
    node = g.node(nid)
    ins = [g.type_of(v) for v in g.inputs_of(nid)]
    out = node.outputs[0] if node.outputs else None
    if node.op in ("input", "constant") or out is None:
        return 0
    if node.op == "conv":  # w: (Cout, Cin/g, k...): one dot product per output element
        return 2 * out.size * _prod(ins[1].shape[1:])
    if node.op == "conv_transpose":  # w: (Cin, Cout/g, k...): every input scatters to a window
        return 2 * ins[0].size * _prod(ins[1].shape[1:])
    if node.op == "matmul":
        k = ins[0].shape[-1]
        return 2 * out.size * k
    if node.op == "gemm":
        k = ins[0].shape[0] if node.attr.get("trans_a") else ins[0].shape[-1]
        return 2 * out.size * k
    if node.op == "einsum":
        return 2 * max(_prod(t.shape) for t in ins) * max(1, out.size // max(t.size for t in ins))
    if node.op.startswith(("reduce_", "global_", "arg")) or node.op in ("max_pool", "avg_pool"):
        window = _prod(node.attr.get("kernel_shape", ())) if "pool" in node.op else 1
        return max(ins[0].size, out.size * window)
    if node.op in ("softmax", "log_softmax", "layer_norm", "batch_norm", "instance_norm"):
        return 5 * out.size
    return out.size


def graph_flops(g: Graph) -> int:
    return sum(node_flops(g, n) for n in g.op_nodes())
