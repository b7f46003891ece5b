"""ONNX ops defined as functions of other ONNX ops, imported through their definitions.

Many newer ONNX ops (Attention, RMSNormalization, RotaryEmbedding, the losses, Celu, the
window functions, GroupNormalization, ...) carry a function body in their schema, made for
the node and its input types. An op without a converter of its own is replaced by that
body (onnx's inliner, schema functions included), round after round while the bodies
still hold such ops. An op whose body, fully expanded, still needs an op tensorir lacks is
left in place, so the unsupported-op error names the op the user's model has.

Ops with a converter are never expanded: their kernels beat the generic bodies.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
import onnx.defs
import onnx.helper
import onnx.inliner

MAX_ROUNDS = 4  # a body holding an op whose body holds an op ... (SCE -> NLL: 2)

OpId = tuple[str, str]  # (domain, op type)


def _has_function(op: OpId, opset: int) -> bool:
    domain, op_type = op
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def _unsupported(model: onnx.ModelProto, is_supported: Callable[[onnx.NodeProto], bool]) -> set[OpId]:
    return {(n.domain, n.op_type) for n in model.graph.node if not is_supported(n)}


def _with_defaults(model: onnx.ModelProto, ops: set[OpId], opset: int) -> onnx.ModelProto:
    """A copy of `model` whose nodes of `ops` state every attribute the schema has a default
    for: a function body refers to its attributes, and the inliner substitutes only those
    the node states (HammingWindow's `periodic`). Omitted inputs get an untyped entry."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for n in model.graph.node:
        if (n.domain, n.op_type) not in ops:
            continue
        if "" in n.input and not any(vi.name == "" for vi in model.graph.value_info):
            # an omitted optional input before a given one: the inliner asks every input
            # name for a type when it builds a context-dependent body
            model.graph.value_info.append(onnx.helper.make_empty_tensor_value_info(""))
        stated = {a.name for a in n.attribute}
        for name, attr in onnx.defs.get_schema(n.op_type, opset, n.domain).attributes.items():
            if name not in stated and attr.default_value.type != onnx.AttributeProto.UNDEFINED:
                n.attribute.append(attr.default_value)
    return model


def _inline(
    model: onnx.ModelProto, ops: list[OpId], is_supported: Callable[[onnx.NodeProto], bool], opset: int
) -> onnx.ModelProto:
    """`model` with the nodes of `ops` expanded, then their bodies' function ops, ..."""
    for _ in range(MAX_ROUNDS):
        if not ops:
            break
        model = _with_defaults(model, set(ops), opset)
        model = onnx.inliner.inline_selected_functions(model, ops, inline_schema_functions=True)
        ops = [o for o in sorted(_unsupported(model, is_supported)) if _has_function(o, opset)]
    return model


def expand_functions(
    model: onnx.ModelProto, is_supported: Callable[[onnx.NodeProto], bool], opset: int
) -> onnx.ModelProto:
    """`model` with every unsupported op that expands into supported ops expanded (the
    model itself when there is none)."""
    missing = _unsupported(model, is_supported)
    wanted = [o for o in sorted(missing) if _has_function(o, opset)]
    good = []
    for op in wanted:  # one op type at a time: which expand completely
        try:
            trial = _inline(model, [op], is_supported, opset)
        except Exception:  # onnx's inliner refuses this node: keep it
            continue
        if _unsupported(trial, is_supported) <= missing - {op}:
            good.append(op)
    return _inline(model, good, is_supported, opset) if good else model
