"""OpenCL C spelling shared by the renderers (codegen/opencl_expr.py, codegen/opencl.py,
codegen/opencl_image.py): C types and sizes of loop-IR dtypes, literals, reserved words,
helper function bodies, and the launch geometry of a loop function's GPU loops (thread tag ->
extent -> sizes).
"""

from __future__ import annotations

import re
from dataclasses import fields, replace

import numpy as np

from tensorir.errors import TirError
from tensorir.loop import ir
from tensorir.loop.simplify import simplify
from tensorir.loop.visitor import walk

CTYPE = {"bool": "uchar", "int8": "char", "int16": "short", "int32": "int", "int64": "long"}
CTYPE |= {"uint8": "uchar", "uint16": "ushort", "uint32": "uint", "uint64": "ulong"}
CTYPE |= {"float16": "half", "float32": "float", "float64": "double"}
BYTES = {"char": 1, "uchar": 1, "short": 2, "ushort": 2, "half": 2, "int": 4, "uint": 4}
BYTES |= {"float": 4, "long": 8, "ulong": 8, "double": 8}
MASK = {1: "char", 2: "short", 4: "int", 8: "long"}  # vector comparison results by element size
VEC = (2, 3, 4, 8, 16)
MATH = {n: n for n in ("exp", "log", "sqrt", "tanh", "erf", "floor", "ceil", "fma", "pow", "sin", "cos")}
MATH["round"] = "rint"  # round half to even, as numpy and the LLVM backend
INT_LIT = {"int64": "L", "uint64": "UL", "uint32": "u", "int32": ""}
RESERVED = set("auto break case char const continue default do double else enum extern float for goto if "
                "inline int long register restrict return short signed sizeof static struct switch typedef "
                "union unsigned void volatile while half bool uchar ushort uint ulong kernel global local "
                "constant private select min max abs fabs exp log sqrt tanh erf floor ceil rint fma pow "
                "sin cos barrier round rsqrt trunc sign clamp mix step dot cross length normalize mad "
                "hypot fmod remainder exp2 exp10 log2 log10 log1p expm1 cbrt atan atan2 asin acos sinh "
                "cosh erfc lgamma tgamma copysign nan ldexp frexp modf fract rootn pown powr fdim fmin "
                "fmax rotate popcount clz any all isnan isinf isfinite signbit bitselect shuffle "
                "degrees radians smoothstep upsample mad24 mul24 hadd rhadd tan asinh acosh atanh "
                "sincos logb ilogb nextafter printf".split())  # fmt: skip
HELPERS = {
    "floordiv": "{{ {T} r = a % b; return (r != 0 && (r ^ b) < 0) ? a / b - 1 : a / b; }}",
    "floordiv_v": "{{ {T} r = a % b; return a / b + ((r != ({T})0) & ((r ^ b) < ({T})0)); }}",
    "floormod": "{{ {T} r = a % b; return (r != 0 && (r ^ b) < 0) ? r + b : r; }}",
    "floormod_v": "{{ {T} r = a % b; return select(r, r + b, (r != ({T})0) & ((r ^ b) < ({T})0)); }}",
    "ffloormod": "{{ return a - floor(a / b) * b; }}",
    "fmin": "{{ return a < b ? a : b; }}",
    "fmin_v": "{{ return select(b, a, a < b); }}",
    "fmax": "{{ return a > b ? a : b; }}",
    "fmax_v": "{{ return select(b, a, a > b); }}",
}


def symbol_name(name: str) -> str:
    """A C identifier for a kernel name (the rule of tensorir.codegen.llvm.symbol_name)."""
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else f"_{s}"


def vt(ctype: str, lanes: int) -> str:
    return ctype if lanes == 1 else f"{ctype}{lanes}"


def bare(text: str) -> str:
    """`text` without one pair of enclosing parentheses."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and i < len(text) - 1:
            return text
    return text[1:-1]


def lane_expr(e: ir.Expr, k: int) -> ir.Expr:
    """The scalar expression computing lane `k` of vector expression `e`."""
    if e.lanes == 1:
        return e
    if isinstance(e, ir.Ramp):
        return simplify(ir.BinOp("+", e.base, ir.BinOp("*", e.stride, ir.Const(k, e.stride.dtype))))
    if isinstance(e, ir.Broadcast):
        return e.value
    new = {}
    for f in fields(e):
        v = getattr(e, f.name)
        if isinstance(v, ir.Expr):
            new[f.name] = lane_expr(v, k)
        elif isinstance(v, tuple):
            new[f.name] = tuple(lane_expr(x, k) for x in v)
    return replace(e, **new)


def c_float_lit(value: float, dtype: str) -> str:
    if dtype == "float64":
        if np.isnan(value):
            return "((double)NAN)"
        if np.isinf(value):
            return f"({'-' if value < 0 else ''}(double)INFINITY)"
        text, suffix = repr(float(value)), ""
    else:
        f = np.float32(np.float16(value) if dtype == "float16" else value)
        if np.isnan(f):
            return "NAN"
        if np.isinf(f):
            return "(-INFINITY)" if f < 0 else "INFINITY"
        text, suffix = f"{float(f):.9g}", "f"
    if not any(c in text for c in ".en"):
        text += ".0"
    return f"({text}{suffix})" if text.startswith("-") else text + suffix


def c_int_lit(value: int, dtype: str) -> str:
    bits = {"8": 8, "16": 16, "32": 32, "64": 64}[re.sub(r"\D", "", dtype)]
    v = int(value) & ((1 << bits) - 1)
    if dtype.startswith("int") and v >= 1 << (bits - 1):
        v -= 1 << bits
    suffix = INT_LIT.get(dtype)
    if suffix is None:  # 8 and 16 bits: no literal suffix exists
        return f"(({CTYPE[dtype]}){v})"
    if v == -(1 << (bits - 1)):
        return f"(-{(1 << (bits - 1)) - 1}{suffix} - 1{suffix})"
    return f"({v}{suffix})" if v < 0 else f"{v}{suffix}"


def contiguous(idx: ir.Expr) -> bool:
    return isinstance(idx, ir.Ramp) and isinstance(idx.stride, ir.Const) and idx.stride.value == 1


def id_call(tag: str) -> str:
    kind, axis = tag.split(".")
    return f"get_{'group' if kind == 'group' else 'local'}_id({'xyz'.index(axis)})"


def launch_extents(func: ir.LoopFunc) -> dict[str, int]:
    """Launch extent per thread tag: the largest loop bound to it (smaller nests are guarded)."""
    out: dict[str, int] = {}
    for n in walk(func.body):
        if not (isinstance(n, ir.For) and n.kind in (ir.ForKind.GPU_BLOCK, ir.ForKind.GPU_THREAD)):
            continue
        if n.thread not in ir.THREAD_TAGS:
            raise TirError(f"GPU loop {n.var.name!r} has no valid thread tag ({n.thread!r})")
        if not isinstance(n.extent, ir.Const):
            raise TirError(f"GPU loop {n.var.name!r} ({n.thread}) needs a constant extent")
        out[n.thread] = max(out.get(n.thread, 0), int(n.extent.value))
    if any(isinstance(n, ir.Barrier) for n in walk(func.body)):
        for n in walk(func.body):  # a barrier must be reached by every work-item of a group
            if isinstance(n, ir.For) and n.kind is ir.ForKind.GPU_THREAD and n.extent.value != out[n.thread]:
                raise TirError(
                    f"{n.thread} is bound with extents {out[n.thread]} and {n.extent.value} around a barrier"
                )
    return dict(sorted(out.items()))


def geometry(launch: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    axes = [i for i, a in enumerate("xyz") if f"group.{a}" in launch or f"local.{a}" in launch]
    dims = max(axes, default=0) + 1
    local = tuple(launch.get(f"local.{a}", 1) for a in "xyz"[:dims])
    glob = tuple(launch.get(f"group.{a}", 1) * loc for a, loc in zip("xyz", local, strict=False))
    return local, glob


def narrow_indices(func: ir.LoopFunc) -> bool:
    """Index arithmetic fits 32 bits: every buffer has < 2**31 elements and none holds 64-bit
    integers (their values would then be computed as int too)."""
    bufs = [p for p in func.params if isinstance(p, ir.Buffer)]
    bufs += [n.buffer for n in walk(func.body) if isinstance(n, ir.Allocate)]
    return all(b.size < 2**31 and b.dtype not in ("int64", "uint64") for b in bufs)
