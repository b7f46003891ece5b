"""Running an onnxruntime session on arrays of the types numpy lacks (bfloat16, float8, int4:
ml_dtypes arrays, as ONNX's loader and tensorir make them). onnxruntime's Python binding
refuses them, so they go in and come out as raw bytes through OrtValues, as onnxruntime's
own backend test harness passes them; onnxruntime packs the 4-bit types two to a byte and
the 2-bit ones four (the first element in the low bits), ml_dtypes one to a byte."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

import numpy as np
from onnx import TensorProto, helper


def is_ml_dtype(a: Any) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.type.__module__.startswith("ml_dtypes")


def _ort_type_dtype(ort_type: str) -> np.dtype | None:
    """numpy dtype of an onnxruntime type string ('tensor(bfloat16)'), None when not a tensor
    of an ml_dtypes type."""
    name = ort_type.removeprefix("tensor(").removesuffix(")").upper()
    if not ort_type.startswith("tensor(") or name not in TensorProto.DataType.DESCRIPTOR.values_by_name:
        return None
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(TensorProto.DataType.Value(name)))
    return dtype if dtype.type.__module__.startswith("ml_dtypes") else None


_PACKED_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


def _pack(a: np.ndarray, bits: int) -> np.ndarray:
    codes = np.ascontiguousarray(a).view(np.uint8).ravel() & ((1 << bits) - 1)
    per = 8 // bits
    codes = np.concatenate([codes, np.zeros(-len(codes) % per, np.uint8)]).reshape(-1, per)
    return np.bitwise_or.reduce(codes << (bits * np.arange(per, dtype=np.uint8)), axis=1).astype(np.uint8)


def _unpack(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    per = 8 // bits
    codes = (packed[:, None] >> (bits * np.arange(per, dtype=np.uint8))) & ((1 << bits) - 1)
    return codes.ravel()[:n].astype(np.uint8)


def _to_ortvalue(a: np.ndarray) -> Any:
    import onnxruntime as ort

    if not is_ml_dtype(a):
        return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a))
    bits = _PACKED_BITS.get(a.dtype.name)
    raw = np.ascontiguousarray(a).view(np.uint8) if bits is None else _pack(a, bits)
    v = ort.OrtValue.ortvalue_from_shape_and_type(list(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype))
    ctypes.memmove(v.data_ptr(), raw.ctypes.data, raw.nbytes)
    return v


def _from_ortvalue(v: Any, dtype: np.dtype | None) -> Any:
    if dtype is None:
        return v.numpy()
    out = np.empty(v.shape(), dtype)
    bits = _PACKED_BITS.get(dtype.name)
    if bits is None:
        ctypes.memmove(out.ctypes.data, v.data_ptr(), out.nbytes)
        return out
    packed = np.empty(-(-out.size * bits // 8), np.uint8)
    ctypes.memmove(packed.ctypes.data, v.data_ptr(), packed.nbytes)
    out.view(np.uint8).ravel()[:] = _unpack(packed, bits, out.size)
    return out


def run_session(sess: Any, feeds: Mapping[str, Any]) -> list[Any]:
    """sess.run(None, feeds); through OrtValues when an input or output is an ml_dtypes type."""
    out_dtypes = [_ort_type_dtype(o.type) for o in sess.get_outputs()]
    if not any(is_ml_dtype(a) for a in feeds.values()) and all(d is None for d in out_dtypes):
        return sess.run(None, dict(feeds))
    outs = sess.run_with_ort_values(None, {k: _to_ortvalue(a) for k, a in feeds.items()})
    return [_from_ortvalue(v, d) for v, d in zip(outs, out_dtypes, strict=True)]
