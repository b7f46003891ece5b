"""Converters for Resize (opsets 10-19), Upsample (7/9) and Pad (2-25).

Everything that fixes the output shape (scales, sizes, roi, axes, pads,
constant_value) is read at import and becomes a full-rank attribute of the graph
op: `resize` gets the output shape, the per-axis scales its coordinate mapping
uses, and the roi; `pad` gets begin/end pads for every axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.frontend.onnx_reduce import norm_axes
from tensorir.graph.graph import Value
from tensorir.graph.types import np_dtype

_MODE_ALIASES = {"bilinear": "linear", "trilinear": "linear", "bicubic": "cubic"}


def _vector(ctx: ImportContext, node: onnx.NodeProto, i: int, what: str) -> np.ndarray | None:
    """A constant 1-D input, or None when it is absent or empty."""
    value = ctx.const_input(node, i, what)
    if value is None or value.size == 0:
        return None
    return np.asarray(value).reshape(-1)


def _axes(node: onnx.NodeProto, axes: Any, rank: int) -> list[int]:
    """Non-negative axes in the given order (they pair with scales, sizes, pads)."""
    if axes is None:
        return list(range(rank))
    norm_axes(node, axes, rank)  # range and repeat checks
    return [int(a) % rank for a in axes]


def _check_len(node: onnx.NodeProto, what: str, values: np.ndarray, n: int) -> None:
    if len(values) != n:
        raise ModelError(f"{node_label(node)}: {what} has {len(values)} values, expected {n}")


def _shape_and_scales(
    node: onnx.NodeProto, shape: tuple[int, ...], axes: list[int], scales: Any, sizes: Any, policy: str
) -> tuple[list[int], list[float]]:
    """Full-rank output shape and per-axis scales from ONNX's scales or sizes."""
    out, full = list(shape), [1.0] * len(shape)
    if scales is not None:
        _check_len(node, "scales", scales, len(axes))
        for a, s in zip(axes, scales, strict=True):
            full[a] = float(s)
            out[a] = int(np.floor(float(s) * shape[a]))
        return out, full
    if sizes is None:
        raise ModelError(f"{node_label(node)}: needs one of scales or sizes")
    _check_len(node, "sizes", sizes, len(axes))
    for a, s in zip(axes, sizes, strict=True):
        out[a] = int(s)
        full[a] = int(s) / shape[a] if shape[a] else 1.0
    if policy != "stretch":
        pick = {"not_larger": min, "not_smaller": max}.get(policy)
        if pick is None:
            raise ModelError(f"{node_label(node)}: unknown keep_aspect_ratio_policy {policy!r}")
        scale = pick(full[a] for a in axes)
        for a in axes:
            full[a] = scale
            out[a] = int(scale * shape[a] + 0.5)
    return out, full


def _roi(ctx: ImportContext, node: onnx.NodeProto, rank: int, axes: list[int]) -> tuple[float, ...]:
    roi = _vector(ctx, node, 1, "roi")
    if roi is None:
        raise ModelError(f"{node_label(node)}: tf_crop_and_resize needs a roi input")
    _check_len(node, "roi", roi, 2 * len(axes))
    full = [0.0] * rank + [1.0] * rank
    for i, a in enumerate(axes):
        full[a], full[a + rank] = float(roi[i]), float(roi[i + len(axes)])
    return tuple(full)


def _mode(node: onnx.NodeProto, attrs: dict[str, Any]) -> str:
    mode = str(attrs.get("mode", "nearest")).lower()
    return _MODE_ALIASES.get(mode, mode)


def _legacy(ctx: ImportContext, node: onnx.NodeProto, scales: Any) -> list[Value]:
    """Resize-10 and Upsample: scales only, asymmetric coordinates, ORT's nearest rule."""
    x = ctx.input(node, 0)
    shape = ctx.type_of(x).shape
    if scales is None:
        raise ModelError(f"{node_label(node)}: needs scales")
    sizes, full = _shape_and_scales(node, shape, list(range(len(shape))), scales, None, "stretch")
    attrs = {
        "sizes": tuple(sizes),
        "scales": tuple(full),
        "mode": _mode(node, ctx.attrs(node)),
        "coordinate_transformation_mode": "asymmetric",
        "nearest_mode": "simple",
    }
    return ctx.add("resize", [x], _fill_defaults(attrs), node=node)


def _fill_defaults(attrs: dict[str, Any]) -> dict[str, Any]:
    defaults = {
        "roi": (),
        "cubic_coeff_a": -0.75,
        "exclude_outside": 0,
        "extrapolation_value": 0.0,
        "antialias": 0,
    }
    return {**defaults, **attrs}


@converter("Resize")
def resize(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    if ctx.opset < 11:
        return _legacy(ctx, node, _vector(ctx, node, 1, "scales"))
    x = ctx.input(node, 0)
    shape = ctx.type_of(x).shape
    attrs = ctx.attrs(node)
    axes = _axes(node, attrs.get("axes"), len(shape))
    scales, sizes = _vector(ctx, node, 2, "scales"), _vector(ctx, node, 3, "sizes")
    if scales is not None and sizes is not None:
        raise ModelError(f"{node_label(node)}: give only one of scales and sizes")
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    out, full = _shape_and_scales(node, shape, axes, scales, sizes, policy)
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    graph_attrs = {
        "sizes": tuple(out),
        "scales": tuple(full),
        "roi": _roi(ctx, node, len(shape), axes) if ctm == "tf_crop_and_resize" else (),
        "mode": _mode(node, attrs),
        "coordinate_transformation_mode": ctm,
        "nearest_mode": attrs.get("nearest_mode", "round_prefer_floor"),
        "cubic_coeff_a": float(attrs.get("cubic_coeff_a", -0.75)),
        "exclude_outside": int(attrs.get("exclude_outside", 0)),
        "extrapolation_value": float(attrs.get("extrapolation_value", 0.0)),
        "antialias": int(attrs.get("antialias", 0)),
    }
    return ctx.add("resize", [x], graph_attrs, node=node)


@converter("Upsample")
def upsample(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    if ctx.opset < 9:
        scales = ctx.attrs(node).get("scales")
        return _legacy(ctx, node, None if scales is None else np.asarray(scales, np.float32))
    return _legacy(ctx, node, _vector(ctx, node, 1, "scales"))


# ---- Pad --------------------------------------------------------------------------
def _scalar_of(value: Any, dtype: str) -> bool | int | float:
    kind = np_dtype(dtype).kind
    v = np.asarray(value).reshape(-1)[0] if np.size(value) else 0
    if kind == "b":
        return bool(v)
    if kind in "iu":
        return int(v)
    return float(v)


@converter("Pad")
def pad(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    t = ctx.type_of(x)
    attrs = ctx.attrs(node)
    mode = attrs.get("mode", "constant")
    if ctx.opset < 11:
        pads = attrs.get("pads", attrs.get("paddings"))
        if pads is None:
            raise ModelError(f"{node_label(node)}: missing the pads attribute")
        pads, value, axes = np.asarray(pads), attrs.get("value", 0.0), None
    else:
        ctx.input(node, 1)  # a clear error when pads is missing
        pads = np.asarray(ctx.const_input(node, 1, "pads")).reshape(-1)
        value = ctx.const_input(node, 2, "constant_value")
        axes = _vector(ctx, node, 3, "axes") if ctx.opset >= 18 else None
    rank = t.ndim
    ax = _axes(node, axes, rank)
    _check_len(node, "pads", pads, 2 * len(ax))
    full = [0] * (2 * rank)
    for i, a in enumerate(ax):
        full[a], full[a + rank] = int(pads[i]), int(pads[i + len(ax)])
    out = {"pads": tuple(full), "mode": mode, "value": _scalar_of(0 if value is None else value, t.dtype)}
    return ctx.add("pad", [x], out, node=node)
