"""Tensor types and frozen node payloads of the graph IR."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from tensorir.dtypes import NARROW

# Short names used by the printer; anything else prints under its numpy name.
_SHORT = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint64": "u64",
    "uint32": "u32",
    "uint16": "u16",
    "uint8": "u8",
    "bool": "bool",
}

_EXTRA_DTYPES = {name: np.dtype(getattr(ml_dtypes, name)) for name in NARROW}


def np_dtype(name: str) -> np.dtype:
    """The numpy dtype for a dtype name, including the ml_dtypes extensions."""
    if name in _EXTRA_DTYPES:
        return _EXTRA_DTYPES[name]
    return np.dtype(name)


@dataclass(frozen=True)
class TensorType:
    """Static shape, element type and memory layout of one tensor."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    layout: str = ""  # "" is the plain row-major layout of `shape`

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np_dtype(self.dtype).name)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np_dtype(self.dtype).itemsize

    @classmethod
    def of(cls, array: np.ndarray) -> TensorType:
        return cls(tuple(array.shape), array.dtype.name)

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        lay = f" {self.layout}" if self.layout else ""
        return f"{_SHORT.get(self.dtype, self.dtype)}[{dims}]{lay}"


def freeze(value: Any) -> Any:
    """Make an attribute value hashable: lists become tuples, arrays stay arrays."""
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass(frozen=True, eq=False)
class Node:
    """One graph node: an op with frozen attributes and its output types.

    `op` is a registered op name, or "input" / "constant". A constant holds its
    numpy array in `value`; an input holds its graph-input name in `name`.
    """

    op: str
    attrs: tuple[tuple[str, Any], ...] = ()
    outputs: tuple[TensorType, ...] = ()
    name: str = ""
    value: np.ndarray | None = field(default=None, repr=False)

    @property
    def attr(self) -> dict[str, Any]:
        return dict(self.attrs)

    @staticmethod
    def make_attrs(attrs: dict[str, Any] | None) -> tuple[tuple[str, Any], ...]:
        return tuple(sorted((k, freeze(v)) for k, v in (attrs or {}).items()))
