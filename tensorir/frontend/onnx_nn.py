"""Converters for ONNX's neural-network ops: convolutions, pooling, gemm/matmul/einsum,
normalizations, softmax and dropout (opset 7 onward).

Attributes are normalized here: every default is filled in, and `auto_pad` /
`output_shape` are resolved into explicit `pads` (+ `output_padding`), since shapes
are static.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import onnx.helper

from tensorir.errors import ModelError, UnsupportedOpError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.graph.graph import Value
from tensorir.ops.infer import normalize_axis


def _ints(v: Any) -> tuple[int, ...]:
    return tuple(int(i) for i in v)


# ---- windows: auto_pad and defaults ---------------------------------------------
def _same_pads(
    in_shape: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dil: tuple[int, ...],
    upper: bool,
) -> tuple[int, ...]:
    """SAME_*: output = ceil(in / stride); the odd pad goes at the end (UPPER) or begin (LOWER)."""
    begins, ends = [], []
    for n, k, s, d in zip(in_shape, kernel, strides, dil, strict=True):
        total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        begins.append(small if upper else big)
        ends.append(big if upper else small)
    return (*begins, *ends)


def _window_attrs(
    node: onnx.NodeProto, attrs: dict[str, Any], in_shape: tuple[int, ...], kernel: tuple[int, ...]
) -> dict[str, Any]:
    nsp = len(in_shape)
    strides = _ints(attrs.get("strides") or (1,) * nsp)
    dil = _ints(attrs.get("dilations") or (1,) * nsp)
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _same_pads(in_shape, kernel, strides, dil, auto_pad == "SAME_UPPER")
    elif auto_pad in ("VALID", "NOTSET", ""):
        pads = _ints(attrs.get("pads") or (0,) * (2 * nsp)) if auto_pad != "VALID" else (0,) * (2 * nsp)
    else:
        raise ModelError(f"{node_label(node)}: unknown auto_pad '{auto_pad}'")
    return {"strides": strides, "pads": pads, "dilations": dil}


# ---- convolutions ---------------------------------------------------------------
@converter("Conv")
def conv(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    x, w = ctx.input(node, 0), ctx.input(node, 1)
    xt, wt = ctx.type_of(x), ctx.type_of(w)
    kernel = _ints(attrs.get("kernel_shape") or wt.shape[2:])
    out = _window_attrs(node, attrs, xt.shape[2:], kernel)
    out["group"] = int(attrs.get("group", 1))
    ins = [x, w] + ([ctx.input(node, 2)] if ctx.has_input(node, 2) else [])
    return ctx.add("conv", ins, out, node=node)


def _convt_pads(
    attrs: dict[str, Any], in_shape: tuple[int, ...], kernel: tuple[int, ...], win: dict[str, Any]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """pads and output_padding of ConvTranspose, from output_shape / auto_pad if given."""
    nsp = len(in_shape)
    s, d = win["strides"], win["dilations"]
    op = list(_ints(attrs.get("output_padding") or (0,) * nsp))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    target = attrs.get("output_shape")
    if target is None and auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        pads = win["pads"] if auto_pad != "VALID" else (0,) * (2 * nsp)
        return pads, tuple(op)
    target = (
        _ints(target)[-nsp:]
        if target is not None
        else tuple(n * si for n, si in zip(in_shape, s, strict=True))
    )
    begins, ends = [], []
    for i in range(nsp):
        total = s[i] * (in_shape[i] - 1) + op[i] + (kernel[i] - 1) * d[i] + 1 - target[i]
        if total < 0:  # a larger output than the windows cover: zeros at the end
            op[i] -= total
            total = 0
        small, big = total // 2, total - total // 2
        upper = auto_pad == "SAME_UPPER"
        begins.append(small if upper else big)
        ends.append(big if upper else small)
    return (*begins, *ends), tuple(op)


@converter("ConvTranspose")
def conv_transpose(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    x, w = ctx.input(node, 0), ctx.input(node, 1)
    xt, wt = ctx.type_of(x), ctx.type_of(w)
    kernel = wt.shape[2:]
    win = _window_attrs(node, {k: v for k, v in attrs.items() if k != "auto_pad"}, xt.shape[2:], kernel)
    win["pads"], win["output_padding"] = _convt_pads(attrs, xt.shape[2:], kernel, win)
    win["group"] = int(attrs.get("group", 1))
    ins = [x, w] + ([ctx.input(node, 2)] if ctx.has_input(node, 2) else [])
    return ctx.add("conv_transpose", ins, win, node=node)


# ---- pooling --------------------------------------------------------------------
def pool_attrs(ctx: ImportContext, node: onnx.NodeProto) -> dict[str, Any]:
    attrs = ctx.attrs(node)
    if "kernel_shape" not in attrs:
        raise ModelError(f"{node_label(node)}: required attribute kernel_shape is missing")
    kernel = _ints(attrs["kernel_shape"])
    out = {"kernel_shape": kernel}
    out.update(_window_attrs(node, attrs, ctx.type_of(ctx.input(node, 0)).shape[2:], kernel))
    out["ceil_mode"] = int(attrs.get("ceil_mode", 0))
    return out


@converter("MaxPool")
def max_pool(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = pool_attrs(ctx, node)
    attrs["storage_order"] = int(ctx.attrs(node).get("storage_order", 0))
    # the optional Indices output costs a second pass over every window: only on request
    attrs["indices"] = int(len(node.output) > 1 and bool(node.output[1]))
    return ctx.add("max_pool", [ctx.input(node, 0)], attrs, node=node)


@converter("AveragePool")
def avg_pool(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = pool_attrs(ctx, node)
    attrs["count_include_pad"] = int(ctx.attrs(node).get("count_include_pad", 0))
    return ctx.add("avg_pool", [ctx.input(node, 0)], attrs, node=node)


@converter("GlobalAveragePool")
def global_avg_pool(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    return ctx.add("global_avg_pool", [ctx.input(node, 0)], node=node)


@converter("GlobalMaxPool")
def global_max_pool(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    return ctx.add("global_max_pool", [ctx.input(node, 0)], node=node)


# ---- gemm / matmul / einsum -------------------------------------------------------
@converter("Gemm")
def gemm(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    out = {
        "alpha": float(attrs.get("alpha", 1.0)),
        "beta": float(attrs.get("beta", 1.0)),
        "trans_a": int(attrs.get("transA", 0)),
        "trans_b": int(attrs.get("transB", 0)),
    }
    ins = [ctx.input(node, 0), ctx.input(node, 1)]
    if ctx.has_input(node, 2):
        ins.append(ctx.input(node, 2))
    return ctx.add("gemm", ins, out, node=node)


@converter("MatMul")
def matmul(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    return ctx.add("matmul", [ctx.input(node, 0), ctx.input(node, 1)], node=node)


@converter("Einsum")
def einsum(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    equation = str(ctx.attrs(node)["equation"]).replace(" ", "")
    return ctx.add("einsum", ctx.inputs(node), {"equation": equation}, node=node)


# ---- normalizations ---------------------------------------------------------------
def _n_outputs(node: onnx.NodeProto) -> int:
    return sum(1 for o in node.output if o)


@converter("BatchNormalization")
def batch_norm(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    ins = [ctx.input(node, i) for i in range(5)]
    eps = float(attrs.get("epsilon", 1e-5))
    # opset 14+ says so with training_mode; before, asking for the statistics outputs meant training
    training = attrs.get("training_mode", 0) if ctx.opset >= 14 else _n_outputs(node) > 1
    if not training:
        return ctx.add("batch_norm", ins, {"epsilon": eps}, node=node)
    if len(node.output) > 3 and any(node.output[3:]):
        raise UnsupportedOpError(f"{node_label(node)}: saved_mean/saved_var outputs are not supported")
    momentum = float(attrs.get("momentum", 0.9))
    return ctx.add("batch_norm_training", ins, {"epsilon": eps, "momentum": momentum}, node=node)


@converter("InstanceNormalization")
def instance_norm(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    eps = float(ctx.attrs(node).get("epsilon", 1e-5))
    ins = [ctx.input(node, i) for i in range(3)]
    return ctx.add("instance_norm", ins, {"epsilon": eps}, node=node)


@converter("LayerNormalization")
def layer_norm(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    x = ctx.input(node, 0)
    out = {
        "axis": normalize_axis(int(attrs.get("axis", -1)), ctx.type_of(x).ndim),
        "epsilon": float(attrs.get("epsilon", 1e-5)),
        "stash_type": onnx.helper.tensor_dtype_to_np_dtype(int(attrs.get("stash_type", 1))).name,
    }
    ins = [x, ctx.input(node, 1)] + ([ctx.input(node, 2)] if ctx.has_input(node, 2) else [])
    return ctx.add("layer_norm", ins, out, node=node)


# ---- softmax ----------------------------------------------------------------------
def _softmax(op: str, ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    shape = ctx.type_of(x).shape
    axis = normalize_axis(int(ctx.attrs(node).get("axis", -1 if ctx.opset >= 13 else 1)), len(shape))
    if ctx.opset >= 13 or math.prod(shape[axis + 1 :]) == 1:
        return ctx.add(op, [x], {"axis": axis}, node=node)
    # opset < 13: softmax over the input coerced to 2-D [prod(shape[:axis]), prod(shape[axis:])]
    (flat,) = ctx.add(
        "reshape", [x], {"shape": (math.prod(shape[:axis]), math.prod(shape[axis:]))}, node=node
    )
    (y,) = ctx.add(op, [flat], {"axis": 1}, node=node)
    return ctx.add("reshape", [y], {"shape": shape}, node=node)


@converter("Softmax")
def softmax(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    return _softmax("softmax", ctx, node)


@converter("LogSoftmax")
def log_softmax(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    return _softmax("log_softmax", ctx, node)


# ---- dropout ----------------------------------------------------------------------
def _dropout_mode(ctx: ImportContext, node: onnx.NodeProto) -> tuple[float, bool]:
    if ctx.opset < 12:
        return float(ctx.attrs(node).get("ratio", 0.5)), False
    training = ctx.const_input(node, 2, "training_mode")
    if training is None or not bool(np.asarray(training).item()):
        return 0.0, False  # inference: the ratio does not matter (and need not be constant)
    ratio = ctx.const_input(node, 1, "ratio")
    return 0.5 if ratio is None else float(np.asarray(ratio).item()), True


@converter("Dropout")
def dropout(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    x = ctx.input(node, 0)
    ratio, training = _dropout_mode(ctx, node)
    if training and ratio != 0:
        seed = int(ctx.attrs(node).get("seed", 0))
        return ctx.add("dropout", [x], {"ratio": ratio, "seed": seed}, node=node)
    outs = ctx.add("identity", [x], node=node)
    if (
        len(node.output) > 1 and node.output[1]
    ):  # inference mask: all kept (bool from opset 10, the input's type before)
        t = ctx.type_of(x)
        outs.append(ctx.const(np.ones(t.shape, dtype="bool" if ctx.opset >= 10 else t.dtype)))
    return outs
