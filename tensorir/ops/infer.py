"""Shape/dtype inference helpers shared by the op families."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType

Types = list[TensorType]


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(
            "shapes " + " and ".join(str(list(s)) for s in shapes) + " do not broadcast"
        ) from None


def same_as(i: int = 0):
    """Output has the type of input i."""

    def infer(ins: Types, attrs: dict[str, Any]) -> Types:
        return [TensorType(ins[i].shape, ins[i].dtype)]

    return infer


def broadcast(dtype: str | None = None):
    """Numpy-broadcast all inputs; dtype of input 0 unless given (e.g. "bool")."""

    def infer(ins: Types, attrs: dict[str, Any]) -> Types:
        shape = broadcast_shapes(*(t.shape for t in ins))
        return [TensorType(shape, dtype or ins[0].dtype)]

    return infer


def normalize_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f"axis {axis} is out of range for rank {ndim}")
    return axis % max(ndim, 1)
