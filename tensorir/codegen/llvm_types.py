"""Loop-IR dtypes as LLVM types and constants (IR text); sizes and kinds of dtypes are
in tensorir/dtypes.py (re-exported here for the LLVM code generator)."""

from __future__ import annotations

import math
import struct

import numpy as np

from tensorir.dtypes import check_dtype as _check_dtype
from tensorir.dtypes import dtype_bits, elem_bytes, is_bool, is_float, is_signed, np_dtype
from tensorir.errors import TirError

__all__ = [
    "check_dtype",
    "const",
    "const_scalar",
    "dtype_bits",
    "elem_bytes",
    "is_bool",
    "is_float",
    "is_signed",
    "llvm_ty",
    "mem_ty",
    "np_dtype",
    "scalar_ty",
    "vec",
]

_SCALAR = {
    "bool": "i1",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "i8",
    "uint16": "i16",
    "uint32": "i32",
    "uint64": "i64",
    "float16": "half",
    "float32": "float",
    "float64": "double",
}


def check_dtype(dtype: str) -> None:
    if dtype not in _SCALAR:
        raise TirError(f"LLVM codegen does not support dtype {dtype!r}; supported: {', '.join(_SCALAR)}")
    _check_dtype(dtype)


def scalar_ty(dtype: str) -> str:
    """LLVM type of a value of `dtype` (bool is i1 in registers)."""
    check_dtype(dtype)
    return _SCALAR[dtype]


def mem_ty(dtype: str) -> str:
    """LLVM type of an element in memory (bool is one byte, like numpy)."""
    return "i8" if dtype == "bool" else scalar_ty(dtype)


def vec(ty: str, lanes: int) -> str:
    return ty if lanes == 1 else f"<{lanes} x {ty}>"


def llvm_ty(dtype: str, lanes: int = 1) -> str:
    return vec(scalar_ty(dtype), lanes)


def _float_hex(value: float, dtype: str) -> str:
    """LLVM float literal: doubles and floats as the 64-bit hex of the double value."""
    if dtype == "float16":
        bits = int(np.array(value, np.float16).view(np.uint16))
        return f"0xH{bits:04X}"
    if dtype == "float32":
        value = float(np.float32(value))  # round to float32 first: the literal must be exact
    if math.isnan(value) and dtype == "float32":
        return "0x7FF8000000000000"
    return "0x" + struct.pack(">d", value).hex().upper()


def const_scalar(value: int | float | bool, dtype: str) -> str:
    """The literal (no type prefix) for a scalar constant."""
    if is_bool(dtype):
        return "true" if value else "false"
    if is_float(dtype):
        return _float_hex(float(value), dtype)
    bits = dtype_bits(dtype)
    v = int(value) & ((1 << bits) - 1)  # wrap like numpy, print as signed
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return str(v)


def const(value: int | float | bool, dtype: str, lanes: int = 1) -> str:
    """A typed-free literal, splatted for vectors: `1.0` or `splat (float 1.0)`."""
    lit = const_scalar(value, dtype)
    if lanes == 1:
        return lit
    return f"splat ({scalar_ty(dtype)} {lit})"
