"""TFLite's int8 / uint8 quantized tensors, imported as float arithmetic on the integer values
(the form frontend/onnx_quant.py gives ONNX's QDQ models, which passes/fold_qdq.py matches):

    dequantize   mul(sub(cast(q, float32), zp), scale)       (mul(cast(q), scale) when zp is 0)
    quantize     cast(clip(add(round(div(y, scale)), zp), lo, hi), int8 | uint8)

A quantized tensor's parameters (`QuantParams`) are per tensor, or per channel along its
quantized dimension (weights, int32 biases). Every TFLite op runs as its float op on the
dequantized inputs; its quantized output is quantized, then dequantized for its readers
(tflite.py's TfliteContext does this). Weights stay int8 constants under their dequantize.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tensorir.graph.graph import Graph, Value

_F32 = "float32"
ACTIVATION_DTYPES = ("int8", "uint8")  # quantized activations tensorir imports
CONSTANT_DTYPES = ("int8", "uint8", "int32")  # quantized constants: weights and biases


@dataclass(frozen=True)
class QuantParams:
    """A quantized tensor's scale and zero point (1 value, or one per channel along `axis`)."""

    scale: np.ndarray  # float32, 1-D
    zero_point: np.ndarray  # int64, 1-D, the size of scale
    axis: int = 0

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1

    def permuted(self, perm: Sequence[int]) -> QuantParams:
        """The parameters of the tensor transposed by `perm` (the quantized axis moves)."""
        return QuantParams(self.scale, self.zero_point, list(perm).index(self.axis))

    def dequantize_array(self, q: np.ndarray) -> np.ndarray:
        """q's real values, computed at import (for constants the importer reads as values)."""
        shape = _param_shape(self, q.ndim, q.shape)
        zp, scale = self.zero_point.reshape(shape), self.scale.reshape(shape)
        return ((q.astype(np.float32) - zp.astype(np.float32)) * scale).astype(np.float32)


def _param_shape(p: QuantParams, rank: int, shape: Sequence[int]) -> tuple[int, ...]:
    if not p.per_channel:
        return ()
    if not 0 <= p.axis < rank or shape[p.axis] != p.scale.size:
        raise ValueError(
            f"{p.scale.size} per-channel scales along axis {p.axis} do not fit shape {list(shape)}"
        )
    return tuple(p.scale.size if a == p.axis else 1 for a in range(rank))


def _param(g: Graph, values: np.ndarray, p: QuantParams, shape: Sequence[int]) -> Value:
    """A float32 scale or zero point constant shaped to broadcast against a tensor of `shape`."""
    return g.add_const(
        np.ascontiguousarray(values.astype(np.float32).reshape(_param_shape(p, len(shape), shape)))
    )


def dequantize(g: Graph, q: Value, p: QuantParams, name: str = "") -> Value:
    """(q - zp) * scale in float32; the sub left out when every zero point is 0."""
    shape = g.type_of(q).shape
    x = g.add_node("cast", [q], {"to": _F32, "saturate": 1})[0]
    if np.any(p.zero_point):
        x = g.add_node("sub", [x, _param(g, p.zero_point, p, shape)])[0]
    return g.add_node("mul", [x, _param(g, p.scale, p, shape)], name=name)[0]


def quantize(g: Graph, y: Value, p: QuantParams, dtype: str, name: str = "") -> Value:
    """saturate(round(y / scale) + zp) as `dtype` (int8 or uint8), per tensor."""
    shape = g.type_of(y).shape
    if g.type_of(y).dtype != _F32:
        y = g.add_node("cast", [y], {"to": _F32, "saturate": 1})[0]
    x = g.add_node("round", [g.add_node("div", [y, _param(g, p.scale, p, shape)])[0]])[0]
    if np.any(p.zero_point):
        x = g.add_node("add", [x, _param(g, p.zero_point, p, shape)])[0]
    info = np.iinfo(dtype)
    x = g.add_node("clip", [x], {"min": float(info.min), "max": float(info.max)})[0]
    return g.add_node("cast", [x], {"to": dtype, "saturate": 1}, name=name)[0]
