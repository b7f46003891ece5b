"""Pad: constant / reflect / edge / wrap padding, with ONNX's negative pads (cropping).

`pads` holds the begin pads of every axis, then the end pads (2 * rank ints);
`value` is the fill of mode "constant" (a Python scalar of the input's kind).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _infer_pad(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    pads = tuple(int(p) for p in attrs["pads"])
    mode = attrs.get("mode", "constant")
    if mode not in PAD_MODES:
        raise ShapeError(f"pad mode {mode!r} is not one of {', '.join(PAD_MODES)}")
    if len(pads) != 2 * x.ndim:
        raise ShapeError(f"pads has {len(pads)} values, expected {2 * x.ndim} for rank {x.ndim}")
    shape = []
    for i, d in enumerate(x.shape):
        b, e = pads[i], pads[i + x.ndim]
        if d + b + e < 0 or d + min(b, 0) + min(e, 0) < 0:
            raise ShapeError(f"pads ({b}, {e}) crop more than axis {i} of size {d}")
        kept = d + min(b, 0) + min(e, 0)
        if mode != "constant" and kept == 0 and (b > 0 or e > 0):
            raise ShapeError(f"mode {mode!r} cannot pad axis {i}, which is empty")
        shape.append(d + b + e)
    return [TensorType(tuple(shape), x.dtype)]


@register_op("pad", infer=_infer_pad, pattern="injective", gpu="injective")
def pad(x: np.ndarray, pads: tuple[int, ...], mode: str = "constant", value: Any = 0) -> np.ndarray:
    r = x.ndim
    begins, ends = pads[:r], pads[r:]
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, b, e in zip(x.shape, begins, ends, strict=True))
    x = x[crop]
    width = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends, strict=True)]
    if mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=np.asarray(value).astype(x.dtype))
    return np.pad(x, width, mode=mode)
