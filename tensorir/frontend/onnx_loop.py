"""An ONNX Loop whose trip count is known only at run time: one `loop` node (ops/loop.py).

Its body is imported once into a graph of its own: the iteration number, the condition and
the carried values become that graph's inputs, and so does every value of the enclosing
graph it reads by name (one known at compile time is copied in as a constant instead). The
generated entry then runs the body's kernels in a loop (codegen/entry.py).

Static shapes set the limits, each refused in one line naming the node: a carried value must
keep its shape and dtype from one iteration to the next, and there can be no scan outputs
(their length would be the run-time iteration count).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, all_nodes, convert_node, node_label
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType
from tensorir.ops.loop import LoopBody

INT64_MAX = np.iinfo(np.int64).max


def runtime_loop(
    ctx: ImportContext, node: onnx.NodeProto, trip: Value | None, cond: Value | None, carried: list[Value]
) -> list[Value]:
    """The `loop` node of Loop `node` (trip count `trip` or none, condition `cond` or none)."""
    body = next(a.g for a in node.attribute if a.name == "body")
    label = node_label(node)
    n_scan = len(body.output) - 1 - len(carried)
    if n_scan:
        raise ModelError(
            f"{label}: its trip count is known only at run time and it has {n_scan} scan output(s), "
            "whose length would depend on run time"
        )
    if trip is None and cond is None:
        raise ModelError(f"{label}: neither a trip count nor a condition: the loop would never end")
    for v in carried:
        if v in ctx.lengths:
            raise ModelError(
                f"{label}: a carried value has a data-dependent length (from {ctx.lengths[v].origin})"
            )
    trip = _scalar(ctx, node, trip, "int64") if trip is not None else ctx.const(np.array(INT64_MAX, np.int64))
    cond = _scalar(ctx, node, cond, "bool") if cond is not None else ctx.const(np.array(True))
    sub = Graph(f"{node.name or node.output[0]}.body")
    bctx = ImportContext(sub, ctx.opset, {})
    names = [vi.name for vi in body.input]
    bctx.values[names[0]] = sub.add_input("iter", TensorType((), "int64"))
    bctx.values[names[1]] = sub.add_input("cond", TensorType((), "bool"))
    for k, (name, v) in enumerate(zip(names[2:], carried, strict=True)):
        bctx.values[name] = sub.add_input(f"carried{k}", ctx.type_of(v))
    captured = _capture(ctx, bctx, body)
    for t in body.initializer:
        bctx.values[t.name] = bctx.const(onnx.numpy_helper.to_array(t), name=t.name)
    for n in body.node:
        convert_node(bctx, n)
    if bctx.lengths:
        v, length = next(iter(bctx.lengths.items()))
        raise ModelError(f"{label}: its body makes a data-dependent length (from {length.origin})")
    sub.set_outputs(_body_outputs(ctx, bctx, node, body, carried))
    attrs = {"body": LoopBody(sub)}
    return ctx.add("loop", [trip, cond, *carried, *captured], attrs, node=node)


def _scalar(ctx: ImportContext, node: onnx.NodeProto, v: Value, dtype: str) -> Value:
    t = ctx.type_of(v)
    if t.dtype != dtype or t.size != 1:
        raise ModelError(f"{node_label(node)}: expected a one-element {dtype} tensor, got {t}")
    return v if t.shape == () else ctx.add("reshape", [v], {"shape": ()}, node=node)[0]


def _capture(ctx: ImportContext, bctx: ImportContext, body: onnx.GraphProto) -> list[Value]:
    """Bind the enclosing graph's values the body reads: constants copied in, the others body
    inputs; the enclosing values of those inputs, in order."""
    defined = {vi.name for vi in body.input} | {t.name for t in body.initializer}
    used: list[str] = []
    for n in all_nodes(body):
        defined |= set(n.output)
        used += [name for name in n.input if name]
    for a in (sub for n in all_nodes(body) for at in n.attribute for sub in [at.g, *at.graphs]):
        defined |= {vi.name for vi in a.input} | {t.name for t in a.initializer}
    used += [o.name for o in body.output]
    captured = []
    for name in dict.fromkeys(used):
        if name in defined or name not in ctx.values:
            continue
        v = ctx.values[name]
        value = ctx.const_value(v)
        if value is not None:
            bctx.values[name] = bctx.const(value, name=name)
            continue
        if v in ctx.lengths:
            raise ModelError(f"Loop body reads '{name}', whose length depends on the data")
        bctx.values[name] = bctx.graph.add_input(f"capture{len(captured)}", ctx.type_of(v))
        captured.append(v)
    return captured


def _body_outputs(
    ctx: ImportContext, bctx: ImportContext, node: onnx.NodeProto, body: onnx.GraphProto, carried: list[Value]
) -> list[tuple[str, Value]]:
    missing = [o.name for o in body.output if o.name not in bctx.values]
    if missing:
        raise ModelError(f"subgraph '{body.name}': output '{missing[0]}' is produced by no node")
    outs = [bctx.values[o.name] for o in body.output]
    cond = _scalar(bctx, node, outs[0], "bool")
    for o, new, old in zip(body.output[1:], outs[1:], carried, strict=True):
        t_new, t_old = bctx.type_of(new), ctx.type_of(old)
        if (t_new.shape, t_new.dtype) != (t_old.shape, t_old.dtype):
            raise ModelError(
                f"{node_label(node)}: carried value '{o.name}' goes from {t_old} to {t_new} in one "
                "iteration; tensorir compiles static shapes"
            )
    return [("cond", cond), *((f"carried{k}", v) for k, v in enumerate(outs[1:]))]
