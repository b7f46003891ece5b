"""The 8-bit dot product intrinsic `dot4_u8s8` -> LLVM IR.

    dot4_u8s8(a0, a1, a2, a3, w) : int32 = sum_i zext(a_i) * sext(byte i of w)
    dot4_u8s8(a, w)              : the same with a_i = byte i of the int32 a

`a0..a3` are four uint8 activations (usually one broadcast per vector), or `a` an int32 lane
holding them packed; `w` an int32 lane holding four int8 weights, little-endian. An
accumulation `acc + dot4_u8s8(...)` over int32 lanes is one instruction on x86 with AVX-512
VNNI: `vpdpbusd` (llvm.x86.avx512.vpdpbusd.512 for 16 lanes, .256 / .128 with AVX-512 VL for
8 / 4), u8 x s8 products in groups of four added into each int32 lane. Without VNNI (or on
another architecture) the same sum is spelled out with widening multiplies and adds, which
LLVM turns into what the target has (vpmaddwd on AVX-512 / AVX2).
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
_VNNI_LANES = {16: ("avx512vnni", ""), 8: ("avx512vnni", "avx512vl"), 4: ("avx512vnni", "avx512vl")}


def is_dot4(e: ir.Expr) -> bool:
    return isinstance(e, ir.Call) and e.name == DOT4


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
    """acc + dot4_u8s8(call.args) (acc None: zero), one vpdpbusd where the target has it."""
    if len(call.args) not in (2, 5) or call.dtype != "int32":
        raise TirError(f"{DOT4} takes four uint8 values (or one int32) and one int32; got {call}")
    a = _quad(em, call.args[:-1])
    w = em.expr(call.args[-1])
    lanes = max(a.lanes, w.lanes, acc.lanes if acc else 1)
    a, w = em.splat(a, lanes), em.splat(w, lanes)
    acc = em.splat(acc if acc is not None else Val("0", "int32"), lanes)
    feats = _VNNI_LANES.get(lanes)
    target = em.ctx.target
    if feats and target.arch == "x86_64" and all(not f or target.has_feature(f) for f in feats):
        ty = llvm_ty("int32", lanes)
        name = f"llvm.x86.avx512.vpdpbusd.{lanes * 32}"
        em.ctx.intrinsic(name, ty, [ty, ty, ty])
        ref = em.op(f"call {ty} @{name}({ty} {acc.ref}, {ty} {a.ref}, {ty} {w.ref})")
        return Val(ref, "int32", lanes)
    return em.binop("+", acc, _dot4_plain(em, a, w))


def _dot4_plain(em: ExprEmitter, a: Val, w: Val) -> Val:
    """sum_i zext(byte i of a) * sext(byte i of w): int32 widening multiplies and adds."""
    total: Val | None = None
    for i in range(4):
        ab = _byte(em, a, i, signed=False)
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
