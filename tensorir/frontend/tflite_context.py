"""The state of one TFLite import: the graph being built and, per TFLite tensor, its values.

Layout. TFLite graphs are NHWC with OHWI weights; the graph IR computes convolutions in NCHW
(the layout pass packs them into NCHW[x]c). The importer keeps, per 4-D tensor, its NHWC
value and/or its NCHW twin and makes the other on demand with one transpose, cached: a conv
reads the NCHW twin and writes one, and the ops between convolutions (elementwise, concat,
pad, pools, mean, resize, strided slice) run on the twin when their input has one. So a
transpose appears only where the NHWC order matters (reshape, fully-connected, a graph input
or output), never as a pair between convolutions. Graph inputs and outputs keep TFLite's
NHWC shapes and names.

Quantized tensors are read dequantized: a converter sees float values, and the context
quantizes each quantized output to its type and dequantizes it for its readers (tflite_quant.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorir.errors import ModelError, ShapeError
from tensorir.frontend import tflite_quant as tq
from tensorir.frontend.tflite_quant import QuantParams
from tensorir.frontend.tflite_reader import QUANT_DTYPES, TflModel, TflOp, TflTensor
from tensorir.graph.graph import Graph, Value
from tensorir.ops.registry import get_op

TO_NCHW = (0, 3, 1, 2)  # transpose(x_nhwc, TO_NCHW) is x in NCHW
TO_NHWC = (0, 2, 3, 1)  # transpose(x_nchw, TO_NHWC) is x in NHWC


def to_cf(rank: int) -> tuple[int, ...]:
    """The perm from channels-last to channels-first (NHWC -> NCHW for rank 4)."""
    return (0, rank - 1, *range(1, rank - 1))


def to_cl(rank: int) -> tuple[int, ...]:
    """The inverse of to_cf; also: channels-last axis a is channels-first axis to_cl(rank)[a]."""
    return (0, *range(2, rank), 1)


class TfliteContext:
    """One import: the graph being built, and per TFLite tensor its NHWC value and NCHW twin."""

    def __init__(self, graph: Graph, model: TflModel) -> None:
        self.graph, self.model = graph, model
        self.values: dict[int, Value] = {}  # tensor -> value in TFLite's (NHWC) order
        self.twins: dict[int, Value] = {}  # 4-D tensor -> the same tensor in NCHW
        self.qvalues: dict[int, tuple[Value, bool]] = {}  # quantized tensor -> (int value, in NCHW)
        self._folded: dict[Value, np.ndarray] = {}

    # ---- tensors -------------------------------------------------------------------------
    def tensor(self, i: int) -> TflTensor:
        return self.model.tensors[i]

    def quant(self, i: int) -> QuantParams | None:
        """Tensor i's quantization when it is a quantized integer tensor (check_quantization
        admits int8 / uint8 activations and int8 / uint8 / int32 constants), else None."""
        t = self.tensor(i)
        return t.qparams if t.dtype in QUANT_DTYPES else None

    def has(self, op: TflOp, k: int) -> bool:
        return k < len(op.inputs) and op.inputs[k] >= 0

    def nhwc(self, i: int) -> Value:
        """Tensor i in TFLite's order (a transpose of its NCHW twin the first time)."""
        if i not in self.values:
            if i in self.twins:
                rank = self.graph.type_of(self.twins[i]).ndim
                self.values[i] = self.transpose(self.twins[i], to_cl(rank))
            else:
                data = self.tensor(i).data
                if data is None:
                    raise ModelError(f"tensor #{i} '{self.tensor(i).name}' is read before any op writes it")
                self.values[i] = self.graph.add_const(data, self.tensor(i).name)
                if self.quant(i) is not None:  # an integer constant under its dequantize
                    self.values[i] = tq.dequantize(self.graph, self.values[i], self.quant(i))
        return self.values[i]

    def weight(self, i: int, perm: Sequence[int]) -> Value:
        """Tensor i transposed by perm; a quantized constant as its transposed integer constant
        under a dequantize (the form fold_qdq matches), never folded to float."""
        p, data = self.quant(i), self.tensor(i).data
        if p is None or data is None or i in self.values:
            return self.transpose(self.nhwc(i), perm)
        q = self.graph.add_const(np.ascontiguousarray(data.transpose(perm)), self.tensor(i).name)
        return tq.dequantize(self.graph, q, p.permuted(perm))

    def const_operand(self, i: int, shape: Sequence[int], perm: Sequence[int]) -> Value:
        """Constant tensor i reshaped to `shape`, then transposed by `perm` (a quantized one as
        its integer constant under a dequantize; per-tensor parameters only)."""
        data, p = self.tensor(i).data, self.quant(i)
        if p is None or data is None or p.per_channel:
            return self.const(np.ascontiguousarray(self.const_array(i).reshape(shape).transpose(perm)))
        q = self.graph.add_const(np.ascontiguousarray(data.reshape(shape).transpose(perm)))
        return tq.dequantize(self.graph, q, p)

    def nchw(self, i: int) -> Value:
        """Tensor i (rank >= 3) channels-first: NCHW for 4-D (a transpose of its NHWC value the
        first time)."""
        if i not in self.twins:
            rank = self.graph.type_of(self.nhwc(i)).ndim
            if rank < 3:
                raise ModelError(f"tensor '{self.tensor(i).name}' of rank {rank} has no channels-first form")
            self.twins[i] = self.transpose(self.nhwc(i), to_cf(rank))
        return self.twins[i]

    def has_twin(self, i: int) -> bool:
        return i in self.twins

    def input(self, op: TflOp, k: int) -> Value:
        if not self.has(op, k):
            raise ModelError(f"{op.label}: required input {k} is missing")
        return self.nhwc(op.inputs[k])

    def rank(self, i: int) -> int:
        return self.graph.type_of(self.twins[i] if i in self.twins else self.nhwc(i)).ndim

    def shape(self, i: int) -> tuple[int, ...]:
        """Tensor i's shape in TFLite's order (as imported, which --input-shape may change)."""
        if i in self.values or i not in self.twins:
            return self.graph.type_of(self.nhwc(i)).shape
        s = self.graph.type_of(self.twins[i]).shape
        return tuple(s[a] for a in to_cl(len(s)))

    def const_array(self, i: int) -> np.ndarray | None:
        """Tensor i's value if known at import: a buffer, or folded from constants."""
        data, p = self.tensor(i).data, self.quant(i)
        if data is not None and i not in self.values:
            return data if p is None else p.dequantize_array(data)
        return self.const_value(self.nhwc(i))

    def const_of(self, i: int) -> np.ndarray | None:
        """Tensor i's value if it is a constant (a buffer, or an op folded into a constant)."""
        if self.tensor(i).data is not None:
            return self.tensor(i).data
        v = self.values.get(i)
        node = self.graph.node(v.node) if v is not None else None
        return node.value if node is not None and node.op == "constant" else None

    def const_input(self, op: TflOp, k: int, what: str) -> np.ndarray:
        if not self.has(op, k):
            raise ModelError(f"{op.label}: input {k} ({what}) is missing")
        value = self.const_array(op.inputs[k])
        if value is None:
            raise ModelError(
                f"{op.label}: {what} ('{self.tensor(op.inputs[k]).name}') must be a constant: "
                "tensorir compiles static shapes"
            )
        return value

    def const_value(self, v: Value) -> np.ndarray | None:
        if v in self._folded:
            return self._folded[v]
        node = self.graph.node(v.node)
        if node.op == "constant":
            return node.value
        if node.op == "input":
            return None
        args = [self.const_value(u) for u in self.graph.inputs_of(v.node)]
        if any(a is None for a in args):
            return None
        for k, out in enumerate(get_op(node.op).run_reference(args, node.attr)):
            self._folded[Value(v.node, k)] = out
        return self._folded[v]

    # ---- building ------------------------------------------------------------------------
    def const(self, array: Any, dtype: Any = None) -> Value:
        return self.graph.add_const(np.asarray(array, dtype=dtype))

    def add(self, op_name: str, inputs: Sequence[Value], attrs: dict[str, Any] | None, op: TflOp) -> Value:
        name = self.tensor(op.outputs[0]).name if op.outputs else op.label
        try:
            return self.graph.add_node(op_name, inputs, attrs, name=name)[0]
        except ShapeError as e:
            raise ShapeError(f"{op.label} ('{name}'): {str(e).split(': ', 1)[-1]}") from None

    def transpose(self, v: Value, perm: Sequence[int]) -> Value:
        """v transposed: folded for a constant, a reshape when only unit axes move."""
        perm = tuple(int(p) for p in perm)
        shape = self.graph.type_of(v).shape
        if perm == tuple(range(len(perm))):
            return v
        node = self.graph.node(v.node)
        if node.op == "constant":
            return self.graph.add_const(np.ascontiguousarray(node.value.transpose(perm)))
        moved = [p for p in perm if shape[p] != 1]
        if moved == sorted(moved):
            return self.graph.add_node("reshape", [v], {"shape": tuple(shape[p] for p in perm)})[0]
        return self.graph.add_node("transpose", [v], {"perm": perm})[0]

    def set_nhwc(self, op: TflOp, k: int, v: Value) -> None:
        self.values[op.outputs[k]] = self._requantize(op.outputs[k], v, False)

    def set_nchw(self, op: TflOp, k: int, v: Value) -> None:
        """Output k of op, given as its channels-first twin (NCHW for 4-D)."""
        self.twins[op.outputs[k]] = self._requantize(op.outputs[k], v, True)

    def _requantize(self, i: int, v: Value, nchw: bool) -> Value:
        """A quantized tensor i's float value v quantized to its type, dequantized for its readers."""
        p = self.quant(i)
        if p is None:
            return v
        name = self.tensor(i).name
        q = tq.quantize(self.graph, v, p, self.tensor(i).dtype, name=f"{name}/q")
        self.qvalues[i] = (q, nchw)
        return tq.dequantize(self.graph, q, p, name=name)

    def output(self, i: int) -> Value:
        """Graph output tensor i in TFLite's order, as its integer value when quantized."""
        if i not in self.qvalues:
            return self.nhwc(i)
        q, nchw = self.qvalues[i]
        return self.transpose(q, to_cl(self.graph.type_of(q).ndim)) if nchw else q
