"""Resize: separable nearest / linear / cubic interpolation with ONNX's coordinate modes.

Attributes (all normalized by the frontend, one entry per axis of the input):
    sizes      the full static output shape
    scales     the per-axis scale used by the coordinate transformation (output /
               input when ONNX was given sizes; 1.0 on axes that are not resized)
    roi        () or 2 * rank floats (starts then ends), for tf_crop_and_resize
    mode       "nearest" | "linear" | "cubic"
    coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside,
    extrapolation_value, antialias   as in ONNX Resize-19.

nearest_mode also accepts "simple", the rule of Resize-10 and Upsample: floor when
an axis is upscaled, ceil when it is downscaled.

The reference resizes one axis at a time: map each output index to a source
coordinate, then gather the neighbouring input samples and weight them. Nearest
gathers in the input dtype; linear and cubic compute in float64 and round back
(saturating) to the input dtype.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op

MODES = ("nearest", "linear", "cubic")
COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


# ---- inference ------------------------------------------------------------------
def _check_choice(attrs: dict[str, Any], key: str, choices: tuple[str, ...], default: str) -> None:
    value = attrs.get(key, default)
    if value not in choices:
        raise ShapeError(f"{key} {value!r} is not one of {', '.join(choices)}")


def _infer_resize(ins: Types, attrs: dict[str, Any]) -> Types:
    x = ins[0]
    sizes = tuple(int(s) for s in attrs["sizes"])
    scales = tuple(attrs["scales"])
    roi = tuple(attrs.get("roi", ()))
    if len(sizes) != x.ndim or len(scales) != x.ndim:
        raise ShapeError(
            f"sizes {list(sizes)} and scales {list(scales)} need one entry per axis of "
            f"the rank-{x.ndim} input"
        )
    if len(roi) not in (0, 2 * x.ndim):
        raise ShapeError(f"roi has {len(roi)} values, expected {2 * x.ndim}")
    for i, (d, s) in enumerate(zip(x.shape, sizes, strict=True)):
        if s < 0 or (d == 0 and s > 0):
            raise ShapeError(f"cannot resize axis {i} of size {d} to {s}")
    _check_choice(attrs, "mode", MODES, "nearest")
    _check_choice(attrs, "coordinate_transformation_mode", COORD_MODES, "half_pixel")
    _check_choice(attrs, "nearest_mode", NEAREST_MODES, "round_prefer_floor")
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize" and not roi:
        raise ShapeError("coordinate_transformation_mode tf_crop_and_resize needs a roi")
    return [TensorType(sizes, x.dtype)]


# ---- coordinates and weights --------------------------------------------------------
def source_coords(
    ctm: str, n_out: int, n_in: int, scale: float, roi: tuple[float, float] | None
) -> np.ndarray:
    """The input coordinate each output index samples (ONNX coordinate_transformation_mode)."""
    y = np.arange(n_out, dtype=np.float64)
    out_w = scale * n_in  # the unrounded output length, as ONNX's formulas use it
    if ctm == "asymmetric":
        return y / scale
    if ctm == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if ctm == "pytorch_half_pixel":
        return np.full(n_out, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    if ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / out_w)
        return offset + (y + 0.5) / scale - 0.5
    if ctm == "align_corners":
        return np.zeros(n_out) if out_w == 1 else y * (n_in - 1) / (out_w - 1)
    if ctm == "tf_crop_and_resize":
        assert roi is not None
        start, end = roi
        if out_w == 1:
            x = np.full(n_out, (end - start) * (n_in - 1) / 2)
        else:
            x = y * (end - start) * (n_in - 1) / (out_w - 1)
        return x + start * (n_in - 1)
    raise ValueError(f"unknown coordinate_transformation_mode {ctm!r}")


def tap_window(x: np.ndarray, taps: int) -> tuple[np.ndarray, np.ndarray]:
    """(left, ratio): the sample just below each coordinate x and x's distance to it.

    left is floor(x), or x - 1 when x is an integer, so ratio = x - left lies in
    (0, 1]. Like ONNX's reference, left is found in coordinates shifted by half the
    kernel width, which decides the rare coordinate that lands within rounding of an
    integer the same way the reference does.
    """
    pad = -(-taps // 2)
    xp = x + pad
    p = np.floor(xp)
    left = (p - pad - (xp == p)).astype(np.int64)
    fl = np.floor(x)
    return left, np.where(x == fl, 1.0, x - fl)


def nearest_index(x: np.ndarray, nearest_mode: str, scale: float) -> np.ndarray:
    """The sample index ONNX's nearest_mode picks for each source coordinate."""
    left, ratio = tap_window(x, 2)
    if nearest_mode == "simple":
        nearest_mode = "ceil" if scale < 1 else "floor"
    up = {
        "round_prefer_floor": ratio > 0.5,
        "round_prefer_ceil": ratio >= 0.5,
        "floor": ratio == 1,
        "ceil": np.ones_like(ratio, dtype=bool),
    }[nearest_mode]
    return left + up


def _kernel(d: np.ndarray, mode: str, a: float) -> np.ndarray:
    d = np.abs(d)
    if mode == "linear":
        return np.clip(1 - d, 0, 1)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def interp_weights(
    x: np.ndarray, mode: str, scale: float, a: float, antialias: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), both [n_out, taps]: the samples around x and their weights.

    Taps sit at left + offs around the window of `tap_window`. Antialiasing
    stretches the kernel by 1 / scale when downscaling and normalizes the weights.
    """
    s = min(scale, 1.0) if antialias else 1.0
    support = 1 if mode == "linear" else 2
    start = int(np.floor(-support / s) + 1)
    offs = np.arange(start, 2 - start)
    left, ratio = tap_window(x, len(offs))
    w = _kernel((offs[None, :] - ratio[:, None]) * s, mode, a)
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    return left[:, None] + offs[None, :], w


# ---- reference --------------------------------------------------------------------
def _resize_axis(data: np.ndarray, axis: int, n_out: int, scale: float, roi: Any, at: dict) -> np.ndarray:
    n_in = data.shape[axis]
    if n_out == 0 or n_in == 0:
        shape = list(data.shape)
        shape[axis] = n_out
        return np.empty(shape, data.dtype)
    x = source_coords(at["coordinate_transformation_mode"], n_out, n_in, scale, roi)
    if at["mode"] == "nearest":
        idx = np.clip(nearest_index(x, at["nearest_mode"], scale), 0, n_in - 1)
        out = np.take(data, idx, axis=axis)
    else:
        idx, w = interp_weights(x, at["mode"], scale, at["cubic_coeff_a"], bool(at["antialias"]))
        if at["exclude_outside"]:
            w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
            total = w.sum(axis=1, keepdims=True)
            w = w / np.where(total == 0, 1.0, total)
        gathered = np.take(data, np.clip(idx, 0, n_in - 1), axis=axis)
        w_shape = (1,) * axis + w.shape + (1,) * (data.ndim - axis - 1)
        out = (gathered * w.reshape(w_shape)).sum(axis=axis + 1)
    if roi is not None:
        outside = ((x < 0) | (x > n_in - 1)).reshape((1,) * axis + (n_out,) + (1,) * (data.ndim - axis - 1))
        out = np.where(outside, np.asarray(at["extrapolation_value"]).astype(out.dtype), out)
    return out


def _is_identity(n_in: int, n_out: int, scale: float, roi: Any) -> bool:
    trivial_roi = roi is None or (math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0))
    return math.isclose(scale, 1.0) and n_in == n_out and trivial_roi


def _saturate(out: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.round(out), info.min, info.max).astype(dtype)
    if dtype == np.bool_:
        return out != 0
    return out.astype(dtype)


@register_op("resize", infer=_infer_resize, pattern="injective", gpu="injective")
def resize(
    x: np.ndarray,
    sizes: tuple[int, ...],
    scales: tuple[float, ...],
    roi: tuple[float, ...] = (),
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    antialias: int = 0,
) -> np.ndarray:
    at = dict(
        mode=mode,
        coordinate_transformation_mode=coordinate_transformation_mode,
        nearest_mode=nearest_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
        antialias=antialias,
    )
    r = x.ndim
    crop = coordinate_transformation_mode == "tf_crop_and_resize"
    out = x if mode == "nearest" else x.astype(np.float64)
    for axis in range(r):
        axis_roi = (float(roi[axis]), float(roi[axis + r])) if crop else None
        if _is_identity(x.shape[axis], sizes[axis], scales[axis], axis_roi):
            continue
        out = _resize_axis(out, axis, int(sizes[axis]), float(scales[axis]), axis_roi, at)
    return _saturate(out, x.dtype) if out.dtype != x.dtype else out
