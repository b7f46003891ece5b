"""If, Loop and Scan: their subgraphs imported into the graph IR, unrolled.

Control flow is resolved at import where it can be:

- If: a condition known at compile time imports the taken branch only; one computed at
  run time imports both branches and selects each output with `where` (both branches
  must give outputs of one shape and dtype: a value's shape cannot depend on run time).
- Loop with a trip count known at compile time (at most MAX_ITERATIONS): the iterations
  are imported one after the other, with the iteration number a constant; a condition
  computed at run time guards the iterations after it and masks their carried values
  (`where`), and is refused when the loop has scan outputs (their length would depend on
  run time). A trip count known only at run time (or none, or above MAX_ITERATIONS) makes
  one `loop` node that the generated entry runs as a loop (frontend/onnx_loop.py).
- Scan (opset 9+): the sequence is sliced along each scan input's axis (static), the
  body imported once per step, the scan outputs stacked along their axes.

A body sees the enclosing graph's values by name, as ONNX scoping says; its own names
are bound for the one iteration and dropped after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, convert_node, converter, node_label
from tensorir.frontend.onnx_loop import runtime_loop
from tensorir.frontend.structured import Opt, Seq
from tensorir.graph.graph import Value

MAX_ITERATIONS = 1024  # unrolled iterations per Loop / Scan node


def run_body(ctx: ImportContext, body: onnx.GraphProto, args: Sequence[Value]) -> list[Value]:
    """Import `body` once with its inputs bound to `args`; its outputs."""
    if len(args) != len(body.input):
        raise ModelError(f"subgraph '{body.name}' takes {len(body.input)} inputs, got {len(args)}")
    outer = ctx.values
    ctx.values = dict(outer)
    try:
        for vi, v in zip(body.input, args, strict=True):
            ctx.values[vi.name] = v
        for t in body.initializer:
            ctx.values[t.name] = ctx.const(onnx.numpy_helper.to_array(t), name=t.name)
        for n in body.node:
            convert_node(ctx, n)
        missing = [o.name for o in body.output if o.name not in ctx.values]
        if missing:
            raise ModelError(f"subgraph '{body.name}': output '{missing[0]}' is produced by no node")
        return [ctx.values[o.name] for o in body.output]
    finally:
        ctx.values = outer


def _select(ctx: ImportContext, node: onnx.NodeProto, cond: Value, a: Any, b: Any) -> Any:
    if isinstance(a, Seq) and isinstance(b, Seq) and len(a) == len(b):
        return Seq(_select(ctx, node, cond, x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Seq | Opt) or isinstance(b, Seq | Opt):
        raise ModelError(
            f"{node_label(node)}: the condition is computed at run time and the branches give "
            "sequences of different lengths, or optionals: their structure cannot depend on run time"
        )
    if a in ctx.lengths or b in ctx.lengths:
        return _select_lengths(ctx, node, cond, a, b)
    ta, tb = ctx.type_of(a), ctx.type_of(b)
    if ta != tb:
        raise ModelError(
            f"{node_label(node)}: the condition is computed at run time and the branches give "
            f"different types ({ta} and {tb}): an output's shape cannot depend on run time"
        )
    return ctx.add("where", [cond, a, b], node=node)[0]


def _select_lengths(ctx: ImportContext, node: onnx.NodeProto, cond: Value, a: Value, b: Value) -> Value:
    """Branch outputs with data-dependent lengths (frontend/lengths.py) along one axis: both
    padded to the larger bound there, selected, and the length selected with them."""
    la, lb = ctx.lengths.get(a), ctx.lengths.get(b)
    axis = (la or lb).axis
    if la and lb and la.axis != lb.axis:
        raise ModelError(f"{node_label(node)}: the branches give data-dependent lengths along different axes")
    ta, tb = ctx.type_of(a), ctx.type_of(b)
    if (
        ta.dtype != tb.dtype
        or ta.ndim != tb.ndim
        or any(x != y for k, (x, y) in enumerate(zip(ta.shape, tb.shape, strict=True)) if k != axis)
    ):
        raise ModelError(
            f"{node_label(node)}: the condition is computed at run time and the branches give "
            f"{ta} and {tb}: only the data-dependent length along axis {axis} may differ"
        )
    bound = max(ta.shape[axis], tb.shape[axis])

    def padded(v: Value) -> Value:
        extra = bound - ctx.type_of(v).shape[axis]
        if not extra:
            return v
        pads = [0] * (2 * ctx.type_of(v).ndim)
        pads[ctx.type_of(v).ndim + axis] = extra
        return ctx.add("pad", [v], {"pads": tuple(pads)}, node=node)[0]

    def count(length: Any, t: Any) -> Value:
        return length.count if length else ctx.const(np.int64(t.shape[axis]))

    (out,) = ctx.add("where", [cond, padded(a), padded(b)], node=node)
    (n,) = ctx.add("where", [cond, count(la, ta), count(lb, tb)], node=node)
    ctx.set_length(out, axis, n, node)
    return out


def _flag(ctx: ImportContext, node: onnx.NodeProto, cond: Value) -> Value:
    """A one-element condition as a bool scalar (what a guard reads)."""
    if ctx.type_of(cond).shape == ():
        return cond
    return ctx.add("reshape", [cond], {"shape": ()}, node=node)[0]


def _truth(ctx: ImportContext, v: Value) -> bool | None:
    """The boolean value of a one-element condition, None when it is known only at run time."""
    value = ctx.const_value(v)
    if value is None:
        return None
    if np.size(value) != 1:
        raise ModelError(f"a condition must hold one element, got shape {np.shape(value)}")
    return bool(np.asarray(value).reshape(()))


@converter("If")
def if_(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = {a.name: a.g for a in node.attribute}
    cond = ctx.input(node, 0)
    taken = _truth(ctx, cond)
    if taken is not None:
        return run_body(ctx, attrs["then_branch" if taken else "else_branch"], [])
    flag = _flag(ctx, node, cond)
    then = guarded(ctx, flag, True, lambda: run_body(ctx, attrs["then_branch"], []))
    other = guarded(ctx, flag, False, lambda: run_body(ctx, attrs["else_branch"], []))
    return [_select(ctx, node, flag, a, b) for a, b in zip(then, other, strict=True)]


def guarded(ctx: ImportContext, flag: Value, polarity: bool, build: Callable[[], Any]) -> Any:
    """`build()`, whose new ops run only when the bool scalar `flag` is `polarity` at run time
    (graph.guards; the LLVM entry branches around their kernels): a branch of an If, an
    iteration of a Loop past a run-time exit. Ops of an enclosing guarded region keep its flags."""
    before = set(ctx.graph.nx.nodes)
    outer = ctx.conditions
    ctx.conditions = (*outer, (flag, polarity))
    try:
        out = build()
    finally:
        ctx.conditions = outer
    for nid in ctx.graph.nx.nodes - before:
        if ctx.graph.node(nid).op not in ("input", "constant"):
            ctx.graph.guards.setdefault(nid, (*outer, (flag, polarity)))
    return out


def _stack(ctx: ImportContext, node: onnx.NodeProto, parts: Sequence[Value], axis: int) -> Value:
    """Concatenate `parts` along a new axis `axis` (negative: counted from the result's end)."""
    shape = ctx.type_of(parts[0]).shape
    axis = axis + len(shape) + 1 if axis < 0 else axis
    new = (*shape[:axis], 1, *shape[axis:])
    rows = [ctx.add("reshape", [p], {"shape": new}, node=node)[0] for p in parts]
    return rows[0] if len(rows) == 1 else ctx.add("concat", rows, {"axis": axis}, node=node)[0]


def _check_count(node: onnx.NodeProto, n: int, what: str) -> None:
    if n > MAX_ITERATIONS:
        raise ModelError(f"{node_label(node)}: {n} {what} (unrolled at import: at most {MAX_ITERATIONS})")


@converter("Loop")
def loop(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    body = _body(node)
    m = ctx.input(node, 0) if ctx.has_input(node, 0) else None
    trips = ctx.const_value(m) if m is not None else None
    carried = [ctx.values[n] for n in node.input[2:]]
    c = ctx.input(node, 1) if ctx.has_input(node, 1) else None
    never = c is not None and _truth(ctx, c) is False
    if not never and (trips is None or int(np.asarray(trips).reshape(())) > MAX_ITERATIONS):
        return runtime_loop(ctx, node, m, c, carried)  # a loop in the generated entry
    trips = 0 if trips is None else int(np.asarray(trips).reshape(()))
    cond = ctx.input(node, 1) if ctx.has_input(node, 1) else ctx.const(np.array(True))
    n_scan = len(body.output) - 1 - len(carried)
    scans: list[list[Value]] = []
    active: Value | None = None  # the run-time condition, once the loop has one
    for i in range(trips):
        if active is None:
            go = _truth(ctx, cond)
            if go is False:
                break
            if go is None:
                active = cond
        args = [ctx.const(np.array(i, np.int64)), cond, *carried]
        if active is None:
            outs = run_body(ctx, body, args)
        else:  # runs only while every earlier condition held
            outs = guarded(ctx, _flag(ctx, node, active), True, lambda args=args: run_body(ctx, body, args))
        new, cond = outs[1 : 1 + len(carried)], outs[0]
        if active is None:
            carried = new
        else:
            carried = [_select(ctx, node, active, n, c) for n, c in zip(new, carried, strict=True)]
            active = ctx.add("logical_and", [active, cond], node=node)[0]
        scans.append(outs[1 + len(carried) :])
        if active is not None and n_scan:
            raise ModelError(
                f"{node_label(node)}: its condition is computed at run time and it has scan outputs, "
                "whose length would depend on run time"
            )
    if n_scan and not scans:
        raise ModelError(f"{node_label(node)}: no iteration runs, so its scan outputs have no shape")
    stacked = [_stack(ctx, node, [s[k] for s in scans], 0) for k in range(n_scan)]
    return [*carried, *stacked]


@converter("Scan")
def scan(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    if ctx.opset < 9:
        return _scan8(ctx, node)
    attrs = ctx.attrs(node)
    n_in = attrs["num_scan_inputs"]
    values = ctx.inputs(node)
    n_out = len(_body(node).output) - (len(values) - n_in)
    axes = (attrs.get("scan_input_axes", [0] * n_in), attrs.get("scan_output_axes", [0] * n_out))
    dirs = (attrs.get("scan_input_directions", [0] * n_in), attrs.get("scan_output_directions", [0] * n_out))
    return _scan(ctx, node, values[: len(values) - n_in], values[len(values) - n_in :], axes, dirs)


def _body(node: onnx.NodeProto) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == "body")


def _scan(
    ctx: ImportContext,
    node: onnx.NodeProto,
    states: Sequence[Value],
    xs: Sequence[Value],
    axes: tuple[Sequence[int], Sequence[int]],
    dirs: tuple[Sequence[int], Sequence[int]],
) -> list[Value]:
    """Scan's final states and scan outputs; `axes` and `dirs`: (of the inputs, of the outputs)."""
    steps = [_slices(ctx, node, x, a, d) for x, a, d in zip(xs, axes[0], dirs[0], strict=True)]
    lengths = {len(s) for s in steps}
    if len(lengths) != 1:
        raise ModelError(f"{node_label(node)}: scan inputs have different sequence lengths {sorted(lengths)}")
    length = lengths.pop()
    _check_count(node, length, "steps")
    ys: list[list[Value]] = []
    for t in range(length):
        outs = run_body(ctx, _body(node), [*states, *(s[t] for s in steps)])
        states, y = outs[: len(states)], outs[len(states) :]
        ys.append(y)
    stacked = []
    for k, (axis, reverse) in enumerate(zip(axes[1], dirs[1], strict=True)):
        parts = [y[k] for y in ys]
        stacked.append(_stack(ctx, node, parts[::-1] if reverse else parts, axis))
    return [*states, *stacked]


def _scan8(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    """Scan-8: every input has a batch axis first (scan inputs: the sequence second), the
    body sees one batch entry; sequence_lens must be absent or the full length."""
    attrs = ctx.attrs(node)
    n_in = attrs["num_scan_inputs"]
    values = [ctx.values[n] for n in node.input[1:]]
    states, xs = values[: len(values) - n_in], values[len(values) - n_in :]
    n_out = len(_body(node).output) - len(states)
    dirs = (attrs.get("directions", [0] * n_in), [0] * n_out)
    lens = ctx.const_input(node, 0, "sequence_lens")
    if lens is not None and np.any(np.asarray(lens) != ctx.type_of(xs[0]).shape[1]):
        raise ModelError(f"{node_label(node)}: sequence_lens shorter than the sequence are not supported")
    per_batch = [_slices(ctx, node, v, 0, 0) for v in values]
    results = []
    for b in range(len(per_batch[0])):
        row = [p[b] for p in per_batch]
        axes = ([0] * n_in, [0] * n_out)
        results.append(_scan(ctx, node, row[: len(states)], row[len(states) :], axes, dirs))
    return [_stack(ctx, node, [r[k] for r in results], 0) for k in range(len(results[0]))]


def _slices(ctx: ImportContext, node: onnx.NodeProto, x: Value, axis: int, reverse: int) -> list[Value]:
    """x cut along `axis` into its steps (axis dropped), in scan order."""
    shape = ctx.type_of(x).shape
    axis = axis + len(shape) if axis < 0 else axis
    n = shape[axis]
    parts = ctx.add("split", [x], {"axis": axis, "sizes": (1,) * n}, node=node) if n > 1 else [x]
    rest = (*shape[:axis], *shape[axis + 1 :])
    steps = [ctx.add("reshape", [p], {"shape": rest}, node=node)[0] for p in parts]
    return steps[::-1] if reverse else steps
