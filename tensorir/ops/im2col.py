"""im2col: the windows of a 2-D convolution laid out as the channels of an NCHW map, so that
a KxK (or strided) convolution is a pointwise one over them (passes/fold_qdq.py makes an
integer KxK conv `im2col` -> `qconv1x1`):

    y[b, (kh KW + kw) Cp + c, oh, ow] = x[b, c, oh sh + kh - top, ow sw + kw - left]

with `fill` where the window leaves the map (a quantized conv's input zero point) and for
the channels c >= C (`channels` Cp rounds C up, e.g. to the four bytes of one dot-product
word; their weights are 0). x: (N, C, H, W) of any dtype; y: (N, KH KW Cp, OH, OW).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.conv import out_spatial
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op


def _infer(ins: Types, attrs: Mapping[str, Any]) -> Types:
    (x,) = ins
    kernel, channels = tuple(attrs["kernel"]), attrs["channels"]
    if x.ndim != 4 or len(kernel) != 2 or channels < x.shape[1]:
        raise ShapeError(f"im2col wants x (N, C, H, W), channels >= C; got {x} kernel={kernel} {channels=}")
    out = out_spatial(x.shape[2:], kernel, attrs["strides"], attrs["pads"], (1, 1))
    if min(out) < 1:
        raise ShapeError(f"im2col: a {kernel} window does not fit {x}")
    return [TensorType((x.shape[0], kernel[0] * kernel[1] * channels, *out), x.dtype)]


@register_op("im2col", infer=_infer, pattern="injective", gpu="injective")
def im2col(
    x: np.ndarray,
    *,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    channels: int,
    fill: int,
) -> np.ndarray:
    n, c, h, w = x.shape
    (kh, kw), (sh, sw) = kernel, strides
    oh, ow = out_spatial((h, w), kernel, strides, pads, (1, 1))
    xp = np.full((n, channels, h + pads[0] + pads[2] + sh, w + pads[1] + pads[3] + sw), fill, x.dtype)
    xp[:, :c, pads[0] : pads[0] + h, pads[1] : pads[1] + w] = x
    taps = [xp[:, :, i : i + oh * sh : sh, j : j + ow * sw : sw] for i in range(kh) for j in range(kw)]
    return np.concatenate(taps, axis=1)
