"""The 8-bit dot product intrinsics `dot4_u8s8` and `dot4_s8s8` -> LLVM IR.

    dot4_u8s8(a0, a1, a2, a3, w) : int32 = sum_i zext(a_i) * sext(byte i of w)
    dot4_u8s8(a, w)              : the same with a_i = byte i of the int32 a
    dot4_s8s8(...)               : the same with the activation bytes signed: sext(a_i)

`a0..a3` are four uint8 activations (usually one broadcast per vector), or `a` an int32 lane
holding them packed; `w` an int32 lane holding four int8 weights, little-endian. An
accumulation `acc + dot4_u8s8(...)` over int32 lanes is one instruction on x86 with AVX-512
VNNI: `vpdpbusd` (llvm.x86.avx512.vpdpbusd.512 for 16 lanes, .256 / .128 with AVX-512 VL for
8 / 4), u8 x s8 products in groups of four added into each int32 lane. Without VNNI (or on
another architecture) the same sum is spelled out with widening multiplies and adds, which
LLVM turns into what the target has (vpmaddwd on AVX-512 / AVX2).

`dot4_s8s8` is ARM's: on aarch64 with the dot product extension (+dotprod, implied by the
ARMv8.2 cores' -mcpu: Target.has_feature) `acc + dot4_s8s8` is one `sdot` per four int32
lanes (llvm.aarch64.neon.sdot.v4i32.v16i8, .v2i32.v8i8 for two). sdot multiplies signed by
signed bytes, so the integer ops feed it uint8 activations xor 0x80 (x - 128 as int8) and
add 128 * sum_k w back through their bias (ops/qdense.py `x_offset`). Without dotprod the
same widening multiply-adds as above, the activation bytes sign-extended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensorir.codegen.llvm_builder import Val
from tensorir.codegen.llvm_types import llvm_ty
from tensorir.errors import TirError
from tensorir.loop import ir

if TYPE_CHECKING:
    from tensorir.codegen.llvm_expr import ExprEmitter

DOT4 = "dot4_u8s8"
SDOT4 = "dot4_s8s8"
_SDOT_LANES = (2, 4, 8, 16, 32)  # one sdot per 4 lanes (2: the 64-bit form), halves concatenated
_VNNI_LANES = {16: ("avx512vnni", ""), 8: ("avx512vnni", "avx512vl"), 4: ("avx512vnni", "avx512vl")}


def is_dot4(e: ir.Expr) -> bool:
    return isinstance(e, ir.Call) and e.name in (DOT4, SDOT4)


def _quad(em: ExprEmitter, args: tuple[ir.Expr, ...]) -> Val:
    """The four uint8 activations as one int32 (byte i = a_i), computed once per broadcast."""
    if len(args) == 1:  # packed already
        return em.expr(args[0])
    lanes = max(a.lanes for a in args)
    scalar = all(isinstance(a, ir.Broadcast) or a.lanes == 1 for a in args)
    word: Val | None = None
    for i, a in enumerate(args):
        inner = a.value if isinstance(a, ir.Broadcast) and scalar else a
        v = em.cast(em.expr(inner), "int32")
        if i:
            v = em.binop("shl", v, Val(str(8 * i), "int32"))
        word = v if word is None else em.binop("or", word, v)
    assert word is not None
    return em.splat(word, lanes) if scalar else word


def emit_dot4(em: ExprEmitter, call: ir.Call, acc: Val | None) -> Val:
    """acc + dot4_u8s8(call.args) (acc None: zero), one vpdpbusd where the target has it;
    acc + dot4_s8s8(call.args), sdot on aarch64 with dotprod."""
    if len(call.args) not in (2, 5) or call.dtype != "int32":
        raise TirError(f"{call.name} takes four 8-bit values (or one int32) and one int32; got {call}")
    a = _quad(em, call.args[:-1])
    w = em.expr(call.args[-1])
    lanes = max(a.lanes, w.lanes, acc.lanes if acc else 1)
    a, w = em.splat(a, lanes), em.splat(w, lanes)
    acc = em.splat(acc if acc is not None else Val("0", "int32"), lanes)
    target = em.ctx.target
    signed = call.name == SDOT4
    if signed and lanes in _SDOT_LANES and target.arch == "aarch64" and target.has_feature("dotprod"):
        return _sdot(em, acc, a, w)
    feats = None if signed else _VNNI_LANES.get(lanes)
    if feats and target.arch == "x86_64" and all(not f or target.has_feature(f) for f in feats):
        ty = llvm_ty("int32", lanes)
        name = f"llvm.x86.avx512.vpdpbusd.{lanes * 32}"
        em.ctx.intrinsic(name, ty, [ty, ty, ty])
        ref = em.op(f"call {ty} @{name}({ty} {acc.ref}, {ty} {a.ref}, {ty} {w.ref})")
        return Val(ref, "int32", lanes)
    return em.binop("+", acc, _dot4_plain(em, a, w, signed))


def _sdot(em: ExprEmitter, acc: Val, a: Val, w: Val) -> Val:
    """acc + sum_i sext(byte i of a) * sext(byte i of w): one sdot per 4 (or 2) int32 lanes,
    a vector of more lanes (a power of two) cut into 4-lane parts and put back together."""
    step = 4 if acc.lanes % 4 == 0 else 2
    parts = []
    for start in range(0, acc.lanes, step):
        acc_p, a_p, w_p = (_lanes(em, v, start, step) for v in (acc, a, w))
        ity, bty = llvm_ty("int32", step), llvm_ty("int8", 4 * step)
        name = f"llvm.aarch64.neon.sdot.v{step}i32.v{4 * step}i8"
        em.ctx.intrinsic(name, ity, [ity, bty, bty])
        ab, wb = (em.op(f"bitcast {ity} {v.ref} to {bty}") for v in (a_p, w_p))
        ref = em.op(f"call {ity} @{name}({ity} {acc_p.ref}, {bty} {ab}, {bty} {wb})")
        parts.append(Val(ref, "int32", step))
    while len(parts) > 1:  # concatenate pairwise
        parts = [_concat(em, parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
    return parts[0]


def _lanes(em: ExprEmitter, v: Val, start: int, n: int) -> Val:
    """Lanes start .. start+n-1 of v."""
    if v.lanes == n:
        return v
    ty = llvm_ty(v.dtype, v.lanes)
    mask = ", ".join(f"i32 {start + i}" for i in range(n))
    return Val(em.op(f"shufflevector {ty} {v.ref}, {ty} poison, <{n} x i32> <{mask}>"), v.dtype, n)


def _concat(em: ExprEmitter, a: Val, b: Val) -> Val:
    ty = llvm_ty(a.dtype, a.lanes)
    mask = ", ".join(f"i32 {i}" for i in range(2 * a.lanes))
    ref = em.op(f"shufflevector {ty} {a.ref}, {ty} {b.ref}, <{2 * a.lanes} x i32> <{mask}>")
    return Val(ref, a.dtype, 2 * a.lanes)


def _dot4_plain(em: ExprEmitter, a: Val, w: Val, signed: bool = False) -> Val:
    """sum_i ext(byte i of a) * sext(byte i of w) (a's bytes zero-extended, sign-extended when
    `signed`): int32 widening multiplies and adds."""
    total: Val | None = None
    for i in range(4):
        ab = _byte(em, a, i, signed=signed)
        wb = _byte(em, w, i, signed=True)
        prod = em.binop("*", ab, wb)
        total = prod if total is None else em.binop("+", total, prod)
    assert total is not None
    return total


def _byte(em: ExprEmitter, v: Val, i: int, signed: bool) -> Val:
    """Byte i of each int32 lane of v, sign- or zero-extended to int32."""
    if signed:  # (v << (24 - 8i)) >> 24, arithmetic
        up = em.binop("shl", v, Val(str(24 - 8 * i), "int32")) if i < 3 else v
        ty = llvm_ty("int32", v.lanes)
        return Val(em.op(f"ashr {ty} {up.ref}, {_splat_const(24, v.lanes)}"), "int32", v.lanes)
    ty = llvm_ty("int32", v.lanes)
    down = Val(em.op(f"lshr {ty} {v.ref}, {_splat_const(8 * i, v.lanes)}"), "int32", v.lanes) if i else v
    return Val(em.op(f"and {ty} {down.ref}, {_splat_const(255, v.lanes)}"), "int32", v.lanes)


def _splat_const(value: int, lanes: int) -> str:
    return str(value) if lanes == 1 else f"splat (i32 {value})"
