"""Facts about the element types kernels compute in, shared by every backend.

    dtype_bits("float16") == 16;  elem_bytes("bool") == 1;  is_float("float32")

Loop-IR dtypes are numpy names: bool, int8..int64, uint8..uint64, float16, float32,
float64. `bool` is one byte in memory (like numpy). This module sits below ops, schedules
and every code generator (LLVM types are in codegen/llvm_types.py, OpenCL C types in
codegen/opencl.py), so none of them imports another to learn a size.
"""

from __future__ import annotations

import numpy as np

from tensorir.errors import TirError

DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
_BITS = {"bool": 8, "float16": 16, "float32": 32, "float64": 64}


def check_dtype(dtype: str) -> None:
    """TirError unless code generation supports `dtype`."""
    if dtype not in DTYPES:
        raise TirError(f"code generation does not support dtype {dtype!r}; supported: {', '.join(DTYPES)}")


def dtype_bits(dtype: str) -> int:
    """Bits of one element in memory (bool is one byte)."""
    check_dtype(dtype)
    if dtype in _BITS:
        return _BITS[dtype]
    return int(dtype.removeprefix("u").removeprefix("int"))


def elem_bytes(dtype: str) -> int:
    return dtype_bits(dtype) // 8


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def is_signed(dtype: str) -> bool:
    return dtype.startswith("int")


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


def np_dtype(dtype: str) -> np.dtype:
    return np.dtype(np.bool_ if dtype == "bool" else dtype)
