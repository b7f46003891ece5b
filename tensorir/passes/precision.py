"""fp16: the graph's float32 tensors become float16 (`tir compile --precision fp16`).

Weights are stored as float16 (half the blob) and activations flow as float16 between
kernels; the graph's inputs and outputs keep their float32 type (a cast after each input and
before each output), so the C API does not change. Ops whose accuracy needs a float32 sum
(FLOAT32_OPS: softmax, normalizations, sums and means, recurrences) stay float32, with casts
around them; `to_fp16` returns them, which the manifest and the CLI report. Before/After:

    %2 = conv(%x, %c1) ... : f32[1,8,8,8]          %5 = cast(%x) to=float16 : f16[1,3,8,8]
    %3 = softmax(%2) axis=1 : f32[1,8,8,8]    ->    %2 = conv(%5, %c1) ... : f16[1,8,8,8]
    return %3 as y                                  %6 = cast(%2) to=float32 : f32[1,8,8,8]
                                                    %3 = softmax(%6) axis=1 : f32[1,8,8,8]
                                                    return %3 as y

Whether the kernels then compute in float16 depends on the target (`native_fp16`): ARMv8.2
cores (fullfp16), x86 with AVX512-FP16 and OpenCL devices with cl_khr_fp16 do; elsewhere LLVM
(or the OpenCL C) widens each operation to float32 and rounds its result back to float16.
"""

from __future__ import annotations

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import Node, TensorType
from tensorir.ops.registry import get_op
from tensorir.target import Target

FLOAT32_OPS = frozenset(
    {
        "softmax",
        "log_softmax",
        "layer_norm",
        "instance_norm",
        "batch_norm",
        "batch_norm_training",
        "reduce_sum",
        "reduce_mean",
        "reduce_sum_square",
        "reduce_l1",
        "reduce_l2",
        "reduce_log_sum",
        "reduce_log_sum_exp",
        "reduce_prod",
        "cumsum",
        "recurrence",
        "einsum",
        "loop",  # its body graph stays as imported
    }
)
INT8_OPS = frozenset({"qdense", "qconv1x1", "qdwconv"})  # passes/fold_qdq.py: their float inputs are scales
_F32, _F16 = "float32", "float16"


def native_fp16(target: Target) -> bool:
    """The target computes float16 arithmetic natively (else each operation is widened)."""
    if target.kind == "opencl":
        return bool(target.device_profile().fp16)
    if target.arch == "aarch64":
        return target.has_feature("fullfp16")  # the ARMv8.2 cores' -mcpu implies it
    return target.has_feature("avx512fp16")


def to_fp16(g: Graph) -> list[tuple[int, str]]:
    """Rewrite `g` in place; the (node id, op) of the ops kept in float32."""
    was = [g.type_of(v).dtype for _, v in g.outputs]
    kept = []
    for nid in g.topo_order():
        node = g.node(nid)
        if node.op == "constant":
            if node.outputs[0].dtype == _F32 and not _only_float32_uses(g, nid):
                g.replace_node(nid, _const(node.value.astype(np.float16), node.name))
        elif node.op == "input":
            if node.outputs[0].dtype == _F32:
                _cast_uses(g, Value(nid), _F16)
        elif node.op in FLOAT32_OPS and _reads_f16(g, nid):
            _keep_f32(g, nid)
            kept.append((nid, node.op))
        else:
            _retype(g, nid)
    for k, (name, v) in enumerate(g.outputs):
        if was[k] == _F32 and g.type_of(v).dtype == _F16:
            g.outputs[k] = (name, g.add_node("cast", [v], {"to": _F32, "saturate": 1})[0])
    return kept


def _only_float32_uses(g: Graph, nid: int) -> bool:
    """Every consumer is kept in float32 or reads the constant as a float32 parameter of an int8
    op (a requantize scale): the constant stays float32, unrounded."""
    uses = [g.node(dst).op for dst, _ in g.consumers(Value(nid))]
    return bool(uses) and all(op in FLOAT32_OPS or op in INT8_OPS for op in uses)


def _const(value: np.ndarray, name: str) -> Node:
    value.flags.writeable = False
    return Node("constant", outputs=(TensorType.of(value),), name=name, value=value)


def _retype(g: Graph, nid: int) -> None:
    """Re-infer the node's outputs from its (now float16) inputs; a cast to float32 casts to
    float16 instead."""
    node = g.node(nid)
    attrs = dict(node.attr)
    if node.op == "cast" and attrs.get("to") == _F32:
        attrs["to"] = _F16
    outs = get_op(node.op).infer([g.type_of(v) for v in g.inputs_of(nid)], attrs)
    g.replace_node(nid, Node(node.op, Node.make_attrs(attrs), tuple(outs), node.name))


def _reads_f16(g: Graph, nid: int) -> bool:
    return any(g.type_of(v).dtype == _F16 for v in g.inputs_of(nid))


def _keep_f32(g: Graph, nid: int) -> None:
    """The node's float16 inputs go up to float32 (a constant is stored float32 again); its
    float32 outputs go down to float16 for the ops after it."""
    for slot, v in enumerate(g.inputs_of(nid)):
        src = g.node(v.node)
        if g.type_of(v).dtype != _F16:
            continue
        if src.op == "constant":
            up = g.add_const(src.value.astype(np.float32), src.name)
        else:
            up = g.add_node("cast", [v], {"to": _F32, "saturate": 1})[0]
        _redirect(g, v, nid, slot, up)
    for i, t in enumerate(g.node(nid).outputs):
        if t.dtype == _F32:
            _cast_uses(g, Value(nid, i), _F16)


def _cast_uses(g: Graph, v: Value, dtype: str) -> None:
    """Every op consuming `v` reads cast(v) instead (graph outputs keep reading `v`)."""
    uses = g.consumers(v)
    if uses:
        cast = g.add_node("cast", [v], {"to": dtype, "saturate": 1})[0]
        for dst, slot in uses:
            _redirect(g, v, dst, slot, cast)


def _redirect(g: Graph, v: Value, dst: int, slot: int, new: Value) -> None:
    """Input `slot` of node `dst` reads `new` instead of `v`."""
    for u, w, key, d in list(g.nx.in_edges(dst, keys=True, data=True)):
        if u == v.node and d["src"] == v.index and d["dst"] == slot:
            g.nx.remove_edge(u, w, key)
            g.nx.add_edge(new.node, dst, src=new.index, dst=slot)
