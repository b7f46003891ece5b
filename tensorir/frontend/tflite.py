"""TFLite frontend: a `.tflite` flatbuffer -> the graph IR, without TensorFlow.

    graph = from_tflite("model.tflite", input_shapes={"input": (1, 224, 224, 3)})

The file is read with the `tflite` package (the flatbuffers schema, generated) into plain
records (`TflTensor`, `TflOp`), then every operator of the main subgraph goes through the
converter of its builtin code (`tflite_ops.py`).

Layout. TFLite graphs are NHWC with OHWI weights; the graph IR computes convolutions in NCHW
(the layout pass packs them into NCHW[x]c). The importer keeps, per 4-D tensor, its NHWC
value and/or its NCHW twin and makes the other on demand with one transpose, cached: a conv
reads the NCHW twin and writes one, and the ops between convolutions (elementwise, concat,
pad, pools, mean, resize, strided slice) run on the twin when their input has one. So a
transpose appears only where the NHWC order matters (reshape, fully-connected, a graph input
or output), never as a pair between convolutions. Graph inputs and outputs keep TFLite's
NHWC shapes and names.

Supported: float32 models, fp16-weight models (DEQUANTIZE of float16 constants) and fully
quantized int8 / uint8 models (TensorFlow's full-integer post-training quantization): each
quantized tensor becomes float arithmetic on its integer values (tflite_quant.py), every op runs
as its float op between a dequantize of its inputs and a quantize of its output. Other
quantized tensors (int16 activations of 16x8 models, int64 biases) are refused with one line
naming the first one.
"""

from __future__ import annotations

import collections
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from tensorir.debug import stage
from tensorir.errors import ModelError, ShapeError, TirError, UnsupportedOpError
from tensorir.frontend import tflite_quant as tq
from tensorir.frontend.tflite_quant import QuantParams
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType
from tensorir.ops.registry import get_op

TO_NCHW = (0, 3, 1, 2)  # transpose(x_nhwc, TO_NCHW) is x in NCHW
TO_NHWC = (0, 2, 3, 1)  # transpose(x_nchw, TO_NHWC) is x in NHWC


def to_cf(rank: int) -> tuple[int, ...]:
    """The perm from channels-last to channels-first (NHWC -> NCHW for rank 4)."""
    return (0, rank - 1, *range(1, rank - 1))


def to_cl(rank: int) -> tuple[int, ...]:
    """The inverse of to_cf; also: channels-last axis a is channels-first axis to_cl(rank)[a]."""
    return (0, *range(2, rank), 1)


_DTYPES = {
    0: "float32",
    1: "float16",
    2: "int32",
    3: "uint8",
    4: "int64",
    6: "bool",
    7: "int16",
    9: "int8",
    10: "float64",
    12: "uint64",
    15: "uint32",
    16: "uint16",
}
_QUANT_DTYPES = ("int8", "uint8", "int16", "int32", "int64")


# ---- reading the flatbuffer --------------------------------------------------------------
@dataclass
class TflTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None  # constant data (a buffer), else None
    quantization: str = ""  # "" or "per-tensor" / "per-channel (axis k)"
    variable: bool = False
    qparams: QuantParams | None = None  # scale / zero point of a quantized tensor


@dataclass
class TflOp:
    index: int
    code: str  # builtin op name (CONV_2D), or "CUSTOM"
    custom_code: str
    inputs: list[int]  # tensor indices; -1 marks an absent optional input
    outputs: list[int]
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"op #{self.index} {self.code}"


@dataclass
class TflModel:
    path: str
    tensors: list[TflTensor]
    ops: list[TflOp]
    inputs: list[int]
    outputs: list[int]


def _builtin_names() -> dict[int, str]:
    from tflite.BuiltinOperator import BuiltinOperator

    return {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}


def _option_classes() -> dict[int, str]:
    from tflite.BuiltinOptions import BuiltinOptions

    return {v: k for k, v in vars(BuiltinOptions).items() if not k.startswith("_")}


def _options(op: Any, classes: Mapping[int, str]) -> dict[str, Any]:
    """The op's builtin options as {FieldName: value} (vector fields as numpy arrays)."""
    kind = op.BuiltinOptionsType()
    table = op.BuiltinOptions()
    if kind == 0 or table is None or kind not in classes:
        return {}
    cls = getattr(importlib.import_module(f"tflite.{classes[kind]}"), classes[kind])
    obj = cls()
    obj.Init(table.Bytes, table.Pos)
    out: dict[str, Any] = {}
    for name in dir(cls):
        if (
            not name[0].isupper()
            or name.startswith(("GetRootAs", "Init"))
            or name.endswith(("Length", "IsNone"))
        ):
            continue
        if name.endswith("AsNumpy"):
            out[name[: -len("AsNumpy")]] = np.asarray(getattr(obj, name)())
        elif getattr(cls, name).__code__.co_argcount == 1 and name + "AsNumpy" not in dir(cls):
            out[name] = getattr(obj, name)()
    return out


def _quantization(t: Any) -> tuple[str, QuantParams | None]:
    q = t.Quantization()
    if q is None or q.ScaleLength() == 0:
        return "", None
    scale = np.asarray(q.ScaleAsNumpy(), np.float32).reshape(-1)
    zp = (
        np.asarray(q.ZeroPointAsNumpy(), np.int64).reshape(-1)
        if q.ZeroPointLength()
        else np.zeros(0, np.int64)
    )
    if zp.size != scale.size:
        zp = np.broadcast_to(zp if zp.size == 1 else np.zeros(1, np.int64), scale.shape).copy()
    params = QuantParams(scale, zp, int(q.QuantizedDimension()))
    kind = "per-tensor" if q.ScaleLength() == 1 else f"per-channel (axis {q.QuantizedDimension()})"
    return kind, params


def _buffer_data(model: Any, raw: bytes, t: Any, dtype: str, shape: tuple[int, ...]) -> np.ndarray | None:
    if t.Buffer() <= 0 or t.Buffer() >= model.BuffersLength():
        return None
    buf = model.Buffers(t.Buffer())
    if buf.Offset() > 1:  # large models keep buffers after the flatbuffer
        data = raw[buf.Offset() : buf.Offset() + buf.Size()]
    elif buf.DataLength() == 0:
        return None
    else:
        data = buf.DataAsNumpy().tobytes()
    want = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if len(data) != want:
        raise ModelError(
            f"tensor '{t.Name().decode()}': its buffer holds {len(data)} bytes, shape {list(shape)} "
            f"of {dtype} needs {want} (truncated file?)"
        )
    return np.frombuffer(data, np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)


def _read_tensor(model: Any, raw: bytes, t: Any, index: int) -> TflTensor:
    name = (t.Name() or b"").decode(errors="replace") or f"tensor_{index}"
    shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
    if t.Type() not in _DTYPES:
        raise ModelError(f"tensor #{index} '{name}': element type {t.Type()} is not supported")
    dtype = _DTYPES[t.Type()]
    data = _buffer_data(model, raw, t, dtype, shape)
    kind, params = _quantization(t)
    return TflTensor(index, name, shape, dtype, data, kind, bool(t.IsVariable()), params)


def _read_op(model: Any, op: Any, index: int, names: Mapping[int, str], classes: Mapping[int, str]) -> TflOp:
    if op.OpcodeIndex() >= model.OperatorCodesLength():
        raise ModelError(f"op #{index}: opcode index {op.OpcodeIndex()} is out of range")
    oc = model.OperatorCodes(op.OpcodeIndex())
    code = names.get(max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode()), f"BUILTIN_{oc.BuiltinCode()}")
    custom = (oc.CustomCode() or b"").decode(errors="replace")
    ins = [int(i) for i in op.InputsAsNumpy()] if op.InputsLength() else []
    outs = [int(i) for i in op.OutputsAsNumpy()] if op.OutputsLength() else []
    return TflOp(index, code, custom, ins, outs, _options(op, classes))


def _parse(raw: bytes, path: str) -> TflModel:
    from tflite.Model import Model

    model = Model.GetRootAs(raw, 0)
    if model.SubgraphsLength() < 1:
        raise ModelError(f"{path}: the model has no subgraph")
    sg = model.Subgraphs(0)
    tensors = [_read_tensor(model, raw, sg.Tensors(i), i) for i in range(sg.TensorsLength())]
    names, classes = _builtin_names(), _option_classes()
    ops = [_read_op(model, sg.Operators(i), i, names, classes) for i in range(sg.OperatorsLength())]
    ins = [int(i) for i in sg.InputsAsNumpy()] if sg.InputsLength() else []
    outs = [int(i) for i in sg.OutputsAsNumpy()] if sg.OutputsLength() else []
    return TflModel(path, tensors, ops, ins, outs)


def read_tflite(path: str | os.PathLike) -> TflModel:
    """Read a .tflite file into plain records; one ModelError line for a bad file."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"{p}: no such file")
    if p.is_dir():
        raise ModelError(f"{p}: is a directory, expected a .tflite file")
    raw = p.read_bytes()
    if len(raw) < 8 or raw[4:8] != b"TFL3":
        raise ModelError(f"{p}: not a TFLite model (no 'TFL3' flatbuffer identifier; truncated or foreign)")
    try:
        model = _parse(raw, str(p))
    except TirError as e:
        raise ModelError(f"{p}: {e}" if not str(e).startswith(str(p)) else str(e)) from None
    except Exception as e:  # flatbuffers reads past the end of a truncated file
        raise ModelError(
            f"{p}: not a valid TFLite model (truncated or corrupt): {type(e).__name__}: {e}"
        ) from None
    _check_references(model)
    return model


def _check_references(m: TflModel) -> None:
    n = len(m.tensors)
    for op in m.ops:
        for i in op.inputs + op.outputs:
            if not -1 <= i < n:
                raise ModelError(f"{m.path}: {op.label} refers to tensor #{i}; the model has {n}")
    for i in m.inputs + m.outputs:
        if not 0 <= i < n:
            raise ModelError(f"{m.path}: graph input/output tensor #{i} does not exist ({n} tensors)")


# ---- checks ----------------------------------------------------------------------------
def check_quantization(m: TflModel) -> None:
    """Refuse quantized tensors other than int8 / uint8 activations (per tensor) and int8 / uint8 /
    int32 constants (per tensor or per channel), with one line naming the first one."""
    for t in m.tensors:
        if not t.quantization or t.dtype not in _QUANT_DTYPES or t.qparams is None:
            continue
        what = (
            f"{m.path}: quantized model: tensor #{t.index} '{t.name}' is {t.dtype} "
            f"with {t.quantization} quantization"
        )
        p = t.qparams
        if not np.all(np.isfinite(p.scale)) or np.any(p.scale <= 0):
            raise ModelError(f"{what} and a scale that is not positive and finite")
        if t.data is not None:
            if t.dtype not in tq.CONSTANT_DTYPES:
                raise UnsupportedOpError(
                    f"{what}; tensorir imports int8 / uint8 weights and int32 biases "
                    "(16x8 quantization, int64 biases, is not supported)"
                )
            if p.per_channel and not (0 <= p.axis < len(t.shape) and t.shape[p.axis] == p.scale.size):
                raise ModelError(f"{what}: {p.scale.size} scales do not fit its shape {list(t.shape)}")
        elif t.dtype not in tq.ACTIVATION_DTYPES:
            raise UnsupportedOpError(
                f"{what}; tensorir imports int8 / uint8 activations only "
                "(16x8 quantization, int16 activations, is not supported)"
            )
        elif p.per_channel:
            raise UnsupportedOpError(f"{what}; activations must be quantized per tensor")


def check_supported(m: TflModel) -> None:
    """One error listing every unsupported op (builtin: name and index; custom: its code)."""
    from tensorir.frontend.tflite_ops import CONVERTERS

    missing: dict[str, list[int]] = collections.defaultdict(list)
    for op in m.ops:
        if op.code == "CUSTOM":
            missing[f"custom op '{op.custom_code}'"].append(op.index)
        elif op.code not in CONVERTERS:
            missing[op.code].append(op.index)
    if missing:
        parts = [
            f"{k} (op #{', #'.join(map(str, v[:3]))}{', ...' if len(v) > 3 else ''})"
            for k, v in missing.items()
        ]
        raise UnsupportedOpError(f"{m.path}: unsupported TFLite ops: {'; '.join(parts)}")


def _sorted_ops(m: TflModel) -> list[TflOp]:
    """Ops in dependency order (the file's order is one, but nothing guarantees it)."""
    producer = {o: op.index for op in m.ops for o in op.outputs}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(m.ops)))
    for op in m.ops:
        for i in op.inputs:
            if i in producer:
                dag.add_edge(producer[i], op.index)
            elif i >= 0 and m.tensors[i].data is None and i not in m.inputs:
                raise ModelError(
                    f"{m.path}: {op.label} reads tensor '{m.tensors[i].name}', which nothing defines"
                )
    try:
        order = list(nx.lexicographical_topological_sort(dag))
    except nx.NetworkXUnfeasible:
        raise ModelError(f"{m.path}: the graph has a cycle") from None
    return [m.ops[k] for k in order]


# ---- import context ---------------------------------------------------------------------
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
        return t.qparams if t.dtype in _QUANT_DTYPES else None

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


# ---- import ---------------------------------------------------------------------------------
def _input_type(t: TflTensor, input_shapes: Mapping[str, Sequence[int]]) -> TensorType:
    shape = tuple(int(d) for d in input_shapes.get(t.name, t.shape))
    if any(d < 0 for d in shape):
        raise ModelError(
            f"input '{t.name}' has an unknown dimension {list(shape)}; give it with input_shapes"
        )
    return TensorType(shape, t.dtype)


def _add_inputs(ctx: TfliteContext, m: TflModel, input_shapes: Mapping[str, Sequence[int]]) -> None:
    names = {m.tensors[i].name for i in m.inputs}
    unknown = sorted(set(input_shapes) - names)
    if unknown:
        raise ModelError(f"{m.path}: --input-shape names '{unknown[0]}', which is not a model input")
    for i in m.inputs:
        t = m.tensors[i]
        ctx.values[i] = ctx.graph.add_input(t.name, _input_type(t, input_shapes))
        if ctx.quant(i) is not None:
            ctx.qvalues[i] = (ctx.values[i], False)
            ctx.values[i] = tq.dequantize(ctx.graph, ctx.values[i], ctx.quant(i), name=f"{t.name}/dq")


def _convert(ctx: TfliteContext, op: TflOp, fn: Callable[[TfliteContext, TflOp], None]) -> None:
    try:
        fn(ctx, op)
    except TirError as e:
        raise type(e)(f"{ctx.model.path}: {e}") from None
    except Exception as e:  # a converter bug or a malformed op: name the op
        raise ModelError(f"{ctx.model.path}: {op.label}: cannot convert: {type(e).__name__}: {e}") from e


def from_tflite(path: str | os.PathLike, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import a .tflite model (float32, fp16 weights, or int8 / uint8 quantized) into a Graph.

    input_shapes: {input tensor name: shape} to replace an input's stored shape (NHWC, as
    TFLite declares it; e.g. another batch size or image size)."""
    with stage("import tflite") as st:
        st.result = _import(path, dict(input_shapes or {}))
    return st.result


def _import(path: str | os.PathLike, input_shapes: dict[str, Sequence[int]]) -> Graph:
    from tensorir.frontend.tflite_ops import CONVERTERS

    m = read_tflite(path)
    check_quantization(m)
    check_supported(m)
    ops = _sorted_ops(m)
    graph = Graph(Path(path).stem or "main")
    ctx = TfliteContext(graph, m)
    _add_inputs(ctx, m, input_shapes)
    for op in ops:
        _convert(ctx, op, CONVERTERS[op.code])
    for i in m.outputs:
        if i not in ctx.values and i not in ctx.twins and m.tensors[i].data is None:
            raise ModelError(f"{m.path}: graph output '{m.tensors[i].name}' is produced by no op")
    graph.set_outputs((m.tensors[i].name, ctx.output(i)) for i in m.outputs)
    _prune(graph)
    return graph


def _prune(graph: Graph) -> None:
    """Drop nodes no output depends on (unused twins, folded shape computations)."""
    live: set[int] = set()
    for _, v in graph.outputs:
        live |= {v.node} | nx.ancestors(graph.nx, v.node)
    for nid in list(graph.nx.nodes):
        if nid not in live and graph.node(nid).op != "input":
            graph.remove_node(nid)
