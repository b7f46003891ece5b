"""Import-time values for ONNX sequences and optionals (see onnx_sequence.py): a sequence is a
tuple of graph values, an optional empty or holding one; graph inputs and outputs of those
types are flattened into tensors (`x.0`, `x.1`, ...) and grouped back after a run."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.helper

from tensorir.errors import ModelError
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType


class Seq(tuple):
    """A sequence of values, resolved at import."""


@dataclasses.dataclass(frozen=True)
class Opt:
    """An optional: `value` is None when it is empty."""

    value: Any = None


def element_name(name: str, i: int) -> str:
    """The flattened tensor name of a sequence's i-th element."""
    return f"{name}.{i}"


def flat_outputs(name: str, v: Any) -> list[tuple[str, Value]]:
    """(name, value) pairs of one graph output: a tensor, or a sequence's elements."""
    if isinstance(v, Opt):
        if v.value is None:
            raise ModelError(f"graph output '{name}' is an empty optional: it has no tensor to return")
        v = v.value
    if isinstance(v, Seq):
        return [(element_name(name, i), e) for i, e in enumerate(v)]
    return [(name, v)]


def regroup(
    model_outputs: Sequence[onnx.ValueInfoProto], names: Sequence[str], arrays: Sequence[Any]
) -> list[Any]:
    """The compiled model's flat outputs grouped back into the ONNX outputs (lists for sequences)."""
    by_name = dict(zip(names, arrays, strict=True))
    out = []
    for vi in model_outputs:
        if vi.name in by_name:
            out.append(by_name[vi.name])
            continue
        items, i = [], 0
        while element_name(vi.name, i) in by_name:
            items.append(by_name[element_name(vi.name, i)])
            i += 1
        out.append(items)
    return out


def structured_input(graph: Graph, vi: onnx.ValueInfoProto, given: Any) -> Seq | Opt | Value:
    """Graph inputs for a sequence or optional input `vi`; `given`: its value (a list of
    arrays, an array or None) or its shapes (a list of shapes, a shape or None)."""
    kind = vi.type.WhichOneof("value")
    if kind == "optional_type":
        inner = onnx.ValueInfoProto(name=vi.name, type=vi.type.optional_type.elem_type)
        return Opt(None if given is None else structured_input(graph, inner, given))
    if kind == "tensor_type":
        return graph.add_input(vi.name, _tensor_type(vi.type, vi.name, given))
    if kind != "sequence_type":
        what = kind or "untyped value"
        raise ModelError(f"input '{vi.name}' is a {what}; tensorir takes tensors, sequences and optionals")
    if given is None:
        raise ModelError(f"input '{vi.name}' is a sequence: give its tensors' shapes (a list of shapes)")
    elem = vi.type.sequence_type.elem_type
    return Seq(
        graph.add_input(element_name(vi.name, i), _tensor_type(elem, vi.name, g)) for i, g in enumerate(given)
    )


def _tensor_type(t: onnx.TypeProto, name: str, given: Any) -> TensorType:
    if t.WhichOneof("value") != "tensor_type":
        raise ModelError(f"input '{name}' nests a {t.WhichOneof('value')}: only tensors may be nested")
    dtype = onnx.helper.tensor_dtype_to_np_dtype(t.tensor_type.elem_type).name
    shape = np.shape(given) if isinstance(given, np.ndarray) else tuple(given)
    return TensorType(tuple(int(d) for d in shape), dtype)


def flat_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Example values with every list (a sequence) spread into its elements' names."""
    out = {}
    for k, v in values.items():
        if isinstance(v, list):
            out.update({element_name(k, i): e for i, e in enumerate(v)})
        elif v is not None:
            out[k] = v
    return out
