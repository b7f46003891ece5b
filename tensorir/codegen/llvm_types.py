"""Loop-IR dtypes as LLVM types and constants (IR text); sizes and kinds of dtypes are
in tensorir/dtypes.py (re-exported here for the LLVM code generator).

Narrow storage types live in integer registers: bfloat16 as its 16 bits (i16), the
float8 / float4 formats as their byte (i8), int4 / int2 as an i8 holding the value
(sign-extended), uint4 / uint2 as an i8 holding it zero-extended. codegen/llvm_narrow.py
converts them; memory holds one value per byte in its low bits, as ml_dtypes does."""

from __future__ import annotations

import math
import struct

import numpy as np

from tensorir.dtypes import check_dtype as _check_dtype
from tensorir.dtypes import dtype_bits, elem_bytes, is_bool, is_float, is_narrow, is_signed, np_dtype
from tensorir.errors import TirError

__all__ = [
    "check_dtype",
    "const",
    "const_scalar",
    "dtype_bits",
    "elem_bytes",
    "is_bool",
    "is_float",
    "is_narrow",
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
    "bfloat16": "i16",
    **{name: "i8" for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")},
    **{name: "i8" for name in ("float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4", "int2", "uint2")},
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


def _e8m0_up_saturated(value: float) -> int:
    """ONNX Cast's default conversion to float8_e8m0fnu (round_mode up, saturate): the code
    of the smallest power of two >= |value| in [2^-127, 2^127]; 0xFF for NaN."""
    if math.isnan(value):
        return 0xFF
    if math.isinf(value):
        return 0xFE
    m, e = math.frexp(abs(float(np.float32(value))))  # |value| = m * 2^e, m in [0.5, 1)
    return 0 if m == 0 else min(max(e - 1 + (m != 0.5) + 127, 0), 0xFE)


def _narrow_literal(value: int | float | bool, dtype: str) -> str:
    """A narrow type's register value: ml_dtypes' conversion (round to nearest even, no
    saturation), the bits of a float format, an int4 / int2 value wrapped and sign-extended;
    float8_e8m0fnu as a Cast to it converts (codegen/llvm_narrow.py)."""
    if dtype == "float8_e8m0fnu":
        code = _e8m0_up_saturated(float(value))
        return str(code - 256 if code >= 128 else code)
    with np.errstate(all="ignore"):
        x = np.array(value if is_float(dtype) else int(value) & 0xFF).astype(np_dtype(dtype))
    if not is_float(dtype):
        return str(int(x.astype(np.int8)))
    bits = int(x.view(np.uint16 if dtype == "bfloat16" else np.uint8))
    return str(bits - (1 << dtype_bits(dtype)) if bits >> (dtype_bits(dtype) - 1) else bits)


def const_scalar(value: int | float | bool, dtype: str) -> str:
    """The literal (no type prefix) for a scalar constant."""
    if is_narrow(dtype):
        return _narrow_literal(value, dtype)
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
