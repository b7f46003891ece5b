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

    def count(op: str, attr: dict, ins: list, out) -> int:
        if op == "fused":  # the sum of its steps, on the types shape inference gives them
            from tensorir.ops.registry import get_op

            body = attr["body"]
            values, total = list(ins), 0
            for step in body.steps:
                xs = [values[a] for a in step.args]
                (y,) = get_op(step.op).infer(xs, dict(step.attrs))
                total += count(step.op, dict(step.attrs), xs, y)
                values.append(y)
            return total
        if op == "conv":  # w: (Cout, Cin/g, k...): one dot product per output element
            return 2 * out.size * _prod(ins[1].shape[1:])
        if op == "conv2d_nchwc":  # w: (M/ob, C/ib, KH, KW, ib, ob); depthwise (.., 1, KH, KW, 1, ob)
            return 2 * out.size * _prod(ins[1].shape[1:5])
        if op == "conv_transpose":  # w: (Cin, Cout/g, k...): every input scatters to a window
            return 2 * ins[0].size * _prod(ins[1].shape[1:])
        if op in ("matmul", "dense"):
            k = ins[0].shape[-1]
            return 2 * out.size * k
        if op == "gemm":
            k = ins[0].shape[0] if attr.get("trans_a") else ins[0].shape[-1]
            return 2 * out.size * k
        if op == "einsum":
            return 2 * max(_prod(t.shape) for t in ins) * max(1, out.size // max(t.size for t in ins))
        if op.startswith(("reduce_", "global_", "arg")) or op in ("max_pool", "avg_pool"):
            window = _prod(attr.get("kernel_shape", ())) if "pool" in op else 1
            return max(ins[0].size, out.size * window)
        if op in ("softmax", "log_softmax", "layer_norm", "batch_norm", "instance_norm"):
            return 5 * out.size
        return out.size

    return count(node.op, node.attr, ins, out)


def graph_flops(g: Graph) -> int:
    return sum(node_flops(g, n) for n in g.op_nodes())
