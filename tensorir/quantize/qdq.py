"""Writing QDQ ONNX models: int8 weights behind DequantizeLinear, QuantizeLinear ->
DequantizeLinear pairs on activations.

    weights      per-output-channel symmetric int8: scale_c = max |w_c| / 127, zero point 0,
                 an int8 initializer + DequantizeLinear(axis = the output-channel axis:
                 Conv 0, ConvTranspose 1, Gemm 0 with transB else 1, MatMul the last)
    biases       int32 as onnxruntime writes them: scale_c = s_x * s_w_c, zero point 0
                 (kept float when a value would not fit int32, or Gemm has alpha/beta != 1)
    activations  per-tensor uint8 asymmetric (U8S8): scale = (hi - lo) / 255 over a range
                 widened to hold 0, zero point round(-lo / scale); one pair per tensor, read
                 by the quantized ops only (other consumers keep the float tensor)

The quantized ops are Conv, ConvTranspose (group 1), Gemm and MatMul whose weight (input 1)
is a constant float tensor of rank >= 2 and whose input 0 is computed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

QUANTIZED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
PROBE = "/tir_probe"  # suffix of the per-layer probe's tensors and nodes


@dataclass(frozen=True)
class ActParams:
    """uint8 asymmetric quantization of one activation tensor."""

    lo: float
    hi: float
    scale: float
    zero_point: int


def act_params(lo: float, hi: float) -> ActParams:
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = (hi - lo) / 255.0
    if not np.isfinite(scale) or scale <= 0:
        return ActParams(lo, hi, 1.0, 0)
    zp = int(np.clip(np.round(-lo / scale), 0, 255))
    return ActParams(lo, hi, float(np.float32(scale)), zp)


@dataclass
class Candidate:
    """An op whose weight and input can be quantized."""

    node: onnx.NodeProto
    key: str  # the node's name, else its first output
    act: str  # the activation input
    weight: np.ndarray
    axis: int  # the weight's output-channel axis
    bias: np.ndarray | None  # a 1-D constant bias that can be int32


def _attr(node: onnx.NodeProto, name: str, default: float | int) -> float | int:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def node_key(node: onnx.NodeProto) -> str:
    return node.name or node.output[0]


def constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Initializers and the values of Constant nodes, by tensor name."""
    out = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            out[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return out


def _weight_axis(node: onnx.NodeProto, w: np.ndarray) -> int | None:
    if node.op_type == "Conv":
        return 0 if w.ndim >= 3 else None
    if node.op_type == "ConvTranspose":
        return 1 if w.ndim >= 3 and _attr(node, "group", 1) == 1 else None
    if node.op_type == "Gemm":
        return (0 if _attr(node, "transB", 0) else 1) if w.ndim == 2 else None
    return w.ndim - 1 if w.ndim >= 2 else None  # MatMul


def _bias(node: onnx.NodeProto, consts: Mapping[str, np.ndarray], channels: int) -> np.ndarray | None:
    if len(node.input) < 3 or not node.input[2] or node.op_type == "MatMul":
        return None
    b = consts.get(node.input[2])
    if b is None or b.dtype != np.float32 or b.shape != (channels,):
        return None
    if node.op_type == "Gemm" and (_attr(node, "alpha", 1.0) != 1.0 or _attr(node, "beta", 1.0) != 1.0):
        return None
    return b


def find_candidates(model: onnx.ModelProto) -> list[Candidate]:
    """The ops of `model` that can be quantized, in graph order."""
    consts = constants(model)
    out = []
    for n in model.graph.node:
        if n.op_type not in QUANTIZED_OPS or n.domain not in ("", "ai.onnx") or len(n.input) < 2:
            continue
        w = consts.get(n.input[1])
        if w is None or w.dtype != np.float32 or n.input[0] in consts:
            continue
        axis = _weight_axis(n, w)
        if axis is None:
            continue
        out.append(Candidate(n, node_key(n), n.input[0], w, axis, _bias(n, consts, w.shape[axis])))
    return out


def quantize_weight(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(int8 values, float32 scale per channel of `axis`): symmetric, scale = max |w_c| / 127."""
    others = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.max(np.abs(w), axis=others).astype(np.float32)
    scale = np.where(amax > 0, amax / np.float32(127), np.float32(1)).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def quantize_bias(
    b: np.ndarray, act_scale: float, w_scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """(int32 values, float32 scale s_x * s_w per channel), None when a value would overflow."""
    scale = (np.float32(act_scale) * w_scale).astype(np.float32)
    q = np.round(b.astype(np.float64) / scale.astype(np.float64))
    if not np.all(np.abs(q) < 2**31 - 1):
        return None
    return q.astype(np.int32), scale


class _Writer:
    """Collects the new initializers and Q/DQ nodes of one rewrite."""

    def __init__(self) -> None:
        self.inits: list[onnx.TensorProto] = []
        self.front: list[onnx.NodeProto] = []  # weight and bias DequantizeLinear
        self.after: dict[str, list[onnx.NodeProto]] = {}  # tensor -> the Q/DQ pairs that read it
        self.made: set[str] = set()

    def _init(self, array: np.ndarray, name: str) -> str:
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def dq_const(self, q: np.ndarray, scale: np.ndarray, name: str, axis: int) -> str:
        s = self._init(scale, f"{name}_scale")
        z = self._init(np.zeros(scale.shape, q.dtype), f"{name}_zero_point")
        q_name = self._init(q, f"{name}_quantized")
        out = f"{name}_dequantized"
        self.front.append(
            helper.make_node(
                "DequantizeLinear", [q_name, s, z], [out], name=f"{name}_DequantizeLinear", axis=axis
            )
        )
        return out

    def qdq(self, tensor: str, p: ActParams, tag: str = "") -> str:
        base = f"{tensor}{tag}"
        if base not in self.made:
            self.made.add(base)
            s = self._init(np.array(p.scale, np.float32), f"{base}_scale")
            z = self._init(np.array(p.zero_point, np.uint8), f"{base}_zero_point")
            q, dq = f"{base}_quantized", f"{base}_dequantized"
            self.after.setdefault(tensor, []).extend(
                [
                    helper.make_node("QuantizeLinear", [tensor, s, z], [q], name=f"{base}_QuantizeLinear"),
                    helper.make_node("DequantizeLinear", [q, s, z], [dq], name=f"{base}_DequantizeLinear"),
                ]
            )
        return f"{base}_dequantized"

    def op_inputs(self, c: Candidate, p: ActParams, tag: str = "") -> list[str]:
        """The inputs of `c`'s node with its activation, weight and bias quantized."""
        q, w_scale = quantize_weight(c.weight, c.axis)
        inputs = list(c.node.input)
        inputs[0] = self.qdq(c.act, p, tag)
        inputs[1] = self.dq_const(q, w_scale, f"{c.key}{tag}_W", c.axis)
        qb = None if c.bias is None else quantize_bias(c.bias, p.scale, w_scale)
        if qb is not None:
            inputs[2] = self.dq_const(qb[0], qb[1], f"{c.key}{tag}_B", 0)
        return inputs

    def nodes(self, graph: onnx.GraphProto, body: Iterable[onnx.NodeProto]) -> list[onnx.NodeProto]:
        """`body` in order with each Q/DQ pair right after its tensor's producer."""
        out = list(self.front)
        for vi in graph.input:
            out += self.after.get(vi.name, [])
        for n in body:
            out.append(n)
            for t in n.output:
                out += self.after.get(t, [])
        return out


def _drop_unused_initializers(model: onnx.ModelProto) -> None:
    used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    dropped = {t.name for t in model.graph.initializer if t.name not in used}
    keep = [t for t in model.graph.initializer if t.name not in dropped]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    inputs = [vi for vi in model.graph.input if vi.name not in dropped]  # IR < 4 lists them as inputs
    del model.graph.input[:]
    model.graph.input.extend(inputs)


def _copy_with_nodes(model: onnx.ModelProto, w: _Writer, body: list[onnx.NodeProto]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = w.nodes(out.graph, body)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(w.inits)
    del out.graph.value_info[:]  # the rewired tensors' shapes are inferred again by readers
    return out


def quantized_model(
    model: onnx.ModelProto, chosen: Iterable[Candidate], params: Mapping[str, ActParams]
) -> onnx.ModelProto:
    """`model` with the `chosen` ops quantized (`params`: by activation tensor)."""
    w = _Writer()
    rewired: dict[int, list[str]] = {id(c.node): w.op_inputs(c, params[c.act]) for c in chosen}
    body = []
    for n in model.graph.node:
        if id(n) in rewired:
            n2 = onnx.NodeProto()
            n2.CopyFrom(n)
            del n2.input[:]
            n2.input.extend(rewired[id(n)])
            n = n2
        body.append(n)
    out = _copy_with_nodes(model, w, body)
    _drop_unused_initializers(out)
    return out


def probe_model(
    model: onnx.ModelProto, cands: Iterable[Candidate], params: Mapping[str, ActParams]
) -> tuple[onnx.ModelProto, dict[str, tuple[str, str]]]:
    """`model` plus, beside each candidate, a copy of its node with only that node's input and
    weights quantized; both outputs are graph outputs. Also {key: (float output, probe output)}."""
    w = _Writer()
    copies: dict[int, onnx.NodeProto] = {}
    pairs = {}
    for c in cands:
        n = c.node
        copies[id(n)] = helper.make_node(
            n.op_type, w.op_inputs(c, params[c.act], PROBE), [n.output[0] + PROBE], name=c.key + PROBE
        )
        copies[id(n)].attribute.extend(n.attribute)
        pairs[c.key] = (n.output[0], n.output[0] + PROBE)
    body = []
    for n in model.graph.node:
        body.append(n)
        if id(n) in copies:
            body.append(copies[id(n)])
    out = _copy_with_nodes(model, w, body)
    have = {o.name for o in out.graph.output}
    for f, p in pairs.values():
        for t in (f, p):
            if t not in have:
                out.graph.output.append(onnx.ValueInfoProto(name=t))
                have.add(t)
    return out, pairs
