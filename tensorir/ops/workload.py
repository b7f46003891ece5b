"""Workload keys: what identifies a kernel for tuning.

Two graph nodes share a workload, and so a tuning record, when they build the same kernel:
same op (a fused node: the same steps and attributes), the same input shapes and dtypes
(layouts are part of the shapes: NCHW16c tensors are 5-D) and the same attributes.

    conv2d_nchwc+relu f32[1,4,56,56,16],f32[4,4,3,3,16,16],f32[4,16] #3f9c0e1a5b27d4c8

The readable head is for people (`tir db top`); the hash covers the canonical JSON of
everything, so keys are stable across processes and machines.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorir.graph.types import TensorType

SHORT_DTYPES = {"float32": "f32", "float16": "f16", "float64": "f64", "int64": "i64", "int32": "i32"}


def canonical(value: Any) -> Any:
    """A JSON-able, order-stable form of an attribute value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"__type__": type(value).__name__, **fields}
    if isinstance(value, np.ndarray):
        digest = hashlib.sha1(np.ascontiguousarray(value).tobytes()).hexdigest()[:16]
        return {"__array__": [list(value.shape), str(value.dtype), digest]}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, tuple | list):
        return [canonical(v) for v in value]
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return str(value)
    return value


def type_str(t: TensorType) -> str:
    return f"{SHORT_DTYPES.get(t.dtype, t.dtype)}[{','.join(str(d) for d in t.shape)}]"


def op_label(op: str, attrs: Mapping[str, Any]) -> str:
    """'conv2d_nchwc+add+relu' for a fused node, else the op."""
    body = attrs.get("body") if op == "fused" else None
    return str(body) if body is not None else op


def workload_key(op: str, in_types: Sequence[TensorType], attrs: Mapping[str, Any]) -> str:
    payload = json.dumps(
        [op, [[list(t.shape), t.dtype] for t in in_types], canonical(dict(attrs))],
        sort_keys=True,
        separators=(",", ":"),
    )
    digest = hashlib.sha1(payload.encode()).hexdigest()[:16]
    return f"{op_label(op, attrs)} {','.join(type_str(t) for t in in_types)} #{digest}"
