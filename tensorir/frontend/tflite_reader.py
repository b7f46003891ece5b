"""Reading a `.tflite` flatbuffer into plain records, without TensorFlow.

    model = read_tflite("model.tflite")     # TflModel: tensors, ops, graph inputs / outputs

The file is read with the `tflite` package (the flatbuffers schema, generated) into plain
records: per tensor (`TflTensor`) its name, shape, element type, constant data (its buffer,
also one stored after the flatbuffer in a large model) and quantization parameters; per
operator (`TflOp`) its builtin code, custom code, tensor indices and builtin options. Only the
main subgraph is read. A bad file (missing, truncated, foreign, dangling tensor indices) is
one ModelError line.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tensorir.errors import ModelError, TirError
from tensorir.frontend.tflite_quant import QuantParams

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
QUANT_DTYPES = ("int8", "uint8", "int16", "int32", "int64")  # integer types read with their quantization


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
    custom_options: bytes = b""  # a custom op's own option bytes

    @property
    def label(self) -> str:
        return f"op #{self.index} {self.code}"

    @property
    def key(self) -> str:
        """The converter registry's key: the builtin name, or CUSTOM:<custom code>."""
        return f"CUSTOM:{self.custom_code}" if self.code == "CUSTOM" else self.code


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
    if t.Sparsity() is not None:  # pruned weights: the stored values and where they go
        from tensorir.frontend.tflite_sparse import densify

        values = np.frombuffer(data, np.dtype(dtype).newbyteorder("<")).astype(dtype)
        try:
            return densify(t.Sparsity(), values, shape)
        except ModelError as e:
            raise ModelError(f"tensor '{t.Name().decode()}': {e}") from None
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
    extra = op.CustomOptionsAsNumpy().tobytes() if custom and op.CustomOptionsLength() else b""
    return TflOp(index, code, custom, ins, outs, _options(op, classes), extra)


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
