"""Conversions between the narrow storage types and float32 / int8, as LLVM IR.

    bfloat16 -> float32   the 16 bits shifted into the high half (exact)
    float32 -> bfloat16   round to nearest even on the bits (NaN: the quiet NaN 0x7FC0 with
                          its sign); vectors `fptrunc` to `bfloat` (vcvtneps2bf16) where the
                          target has avx512bf16, unless a lane is a denormal or a NaN
    float8 / float4 -> float32   exact: a normal code rebiased on the integer bits, a
                          denormal one as mantissa * 2^(1 - bias - M), NaN / Inf codes selected
    float32 -> float8 / float4   ml_dtypes' conversion: round to nearest even (denormals by
                          adding a power of two whose ulp is the format's smallest denormal),
                          out of range to Inf (e5m2) or NaN (e4m3fn, the fnuz formats; 0x80
                          is their only NaN and they have no -0); float4_e2m1fn saturates.
                          ONNX's `saturate` (clamp to +-max first) is the cast compute's.
    float8_e8m0fnu <-> float32   2^(code - 127), 0xFF is NaN; to e8m0 with ONNX Cast's
                          round_mode (up / down / nearest) and saturate (e8m0_code)
    int4 / uint4 / int2 / uint2   int8 / uint8 registers holding the value; memory holds it in
                          the low bits of its byte (wrap_small_int, store_bits)

No fast-math flags here: the float adds must round as IEEE says.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorir.codegen.llvm_builder import FuncBuilder, Val
from tensorir.codegen.llvm_types import is_float, is_signed, vec


@dataclass(frozen=True)
class MiniFloat:
    """A float format of at most 8 bits with a sign bit above its exponent."""

    exp_bits: int
    man_bits: int
    bias: int
    max_mag: int  # the largest finite magnitude code
    nan: int | None  # NaN code (without the sign); None: no NaN
    inf: int | None  # Inf code (without the sign); None: no Inf
    fnuz: bool = False  # 0x80 is the one NaN, there is no -0

    @property
    def sign_bit(self) -> int:
        return 1 << (self.exp_bits + self.man_bits)


FORMATS = {
    "float8_e4m3fn": MiniFloat(4, 3, 7, 0x7E, nan=0x7F, inf=None),
    "float8_e4m3fnuz": MiniFloat(4, 3, 8, 0x7F, nan=0x80, inf=None, fnuz=True),
    "float8_e5m2": MiniFloat(5, 2, 15, 0x7B, nan=0x7E, inf=0x7C),
    "float8_e5m2fnuz": MiniFloat(5, 2, 16, 0x7F, nan=0x80, inf=None, fnuz=True),
    "float4_e2m1fn": MiniFloat(2, 1, 1, 0x7, nan=None, inf=None),
}
E8M0_MODES = ("up", "down", "nearest")
_SMALL_INT_BITS = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2}
_F32_NAN = 0x7FC00000


def _f32_bits_const(exponent: int) -> int:
    """The float32 bits of 2^exponent (normal range)."""
    return (exponent + 127) << 23


class NarrowEmitter(FuncBuilder):
    """Narrow-type conversions; ExprEmitter mixes this in."""

    # ---- small integer-vector helpers (i32 lanes unless said) ------------------------
    def _ty(self, scalar: str, n: int) -> str:
        return vec(scalar, n)

    def _k(self, value: int, n: int, scalar: str = "i32") -> str:
        return str(value) if n == 1 else f"splat ({scalar} {value})"

    def _i(self, op: str, a: str, b: str, n: int, scalar: str = "i32") -> str:
        return self.op(f"{op} {self._ty(scalar, n)} {a}, {b}")

    def _ik(self, op: str, a: str, k: int, n: int, scalar: str = "i32") -> str:
        return self._i(op, a, self._k(k, n, scalar), n, scalar)

    def _cmp(self, pred: str, a: str, k: int, n: int) -> str:
        return self.op(f"icmp {pred} {self._ty('i32', n)} {a}, {self._k(k, n)}")

    def _sel(self, c: str, a: str, b: str, n: int, scalar: str = "i32") -> str:
        ty = self._ty(scalar, n)
        return self.op(f"select {self._ty('i1', n)} {c}, {ty} {a}, {ty} {b}")

    def _conv(self, op: str, v: str, src: str, dst: str, n: int) -> str:
        return self.op(f"{op} {self._ty(src, n)} {v} to {self._ty(dst, n)}")

    # ---- dispatch --------------------------------------------------------------------
    def narrow_to_wide(self, v: Val) -> Val:
        """A narrow value as its compute type: float32, or int8 / uint8 for small ints."""
        n = v.lanes
        if not is_float(v.dtype):
            return Val(v.ref, "int8" if is_signed(v.dtype) else "uint8", n)
        if v.dtype == "bfloat16":
            x = self._ik("shl", self._conv("zext", v.ref, "i16", "i32", n), 16, n)
        elif v.dtype == "float8_e8m0fnu":
            x = self._e8m0_to_bits(self._conv("zext", v.ref, "i8", "i32", n), n)
        else:
            x = self._minifloat_to_bits(self._conv("zext", v.ref, "i8", "i32", n), FORMATS[v.dtype], n)
        return Val(self._conv("bitcast", x, "i32", "float", n), "float32", n)

    def wide_to_narrow(self, v: Val, dtype: str) -> Val:
        """A float32 (narrow floats) or integer (small ints) value converted to `dtype`."""
        n = v.lanes
        if not is_float(dtype):
            return self.wrap_small_int(v, dtype)
        if dtype == "bfloat16":
            return Val(self._f32_to_bf16(v.ref, n), dtype, n)
        if dtype == "float8_e8m0fnu":
            return self.to_e8m0(v, "up", saturate=True)
        bits = self._conv("bitcast", v.ref, "float", "i32", n)
        code = self._bits_to_minifloat(bits, FORMATS[dtype], n)
        return Val(self._conv("trunc", code, "i32", "i8", n), dtype, n)

    def to_e8m0(self, v: Val, mode: str, saturate: bool) -> Val:
        """A float32 value as float8_e8m0fnu, rounded and saturated as ONNX Cast says."""
        n = v.lanes
        code = self._e8m0_code(self._conv("bitcast", v.ref, "float", "i32", n), n, mode, saturate)
        return Val(self._conv("trunc", code, "i32", "i8", n), "float8_e8m0fnu", n)

    def wrap_small_int(self, v: Val, dtype: str) -> Val:
        """An int8 / uint8 value wrapped into int4 / uint4 / int2 / uint2 (two's complement)."""
        bits, n = _SMALL_INT_BITS[dtype], v.lanes
        if is_signed(dtype):
            up = self._ik("shl", v.ref, 8 - bits, n, "i8")
            return Val(self._ik("ashr", up, 8 - bits, n, "i8"), dtype, n)
        return Val(self._ik("and", v.ref, (1 << bits) - 1, n, "i8"), dtype, n)

    def store_bits(self, v: Val) -> str:
        """The byte a small-int register value is stored as (its low bits, the rest zero)."""
        if v.dtype not in _SMALL_INT_BITS or not is_signed(v.dtype):
            return v.ref
        return self._ik("and", v.ref, (1 << _SMALL_INT_BITS[v.dtype]) - 1, v.lanes, "i8")

    def f64_to_f32_odd(self, v: Val) -> Val:
        """A float64 rounded to float32 toward zero with the last bit set when inexact
        (round to odd): rounding that to float16 is float64 -> float16 rounded once, which
        LLVM would otherwise do through compiler-rt's __truncdfhf2 (not linked)."""
        n, d = v.lanes, self._ty("double", v.lanes)
        r = self._conv("fptrunc", v.ref, "double", "float", n)
        back = self._conv("fpext", r, "float", "double", n)
        name = f"llvm.fabs.{'f64' if n == 1 else f'v{n}f64'}"
        self.ctx.intrinsic(name, d, [d])
        mag_back, mag = (self.op(f"call {d} @{name}({d} {x})") for x in (back, v.ref))
        away = self.op(f"fcmp ogt {d} {mag_back}, {mag}")
        bits = self._conv("bitcast", r, "float", "i32", n)
        toward = self._sel(away, self._ik("sub", bits, 1, n), bits, n)
        inexact = self.op(f"fcmp one {d} {back}, {v.ref}")
        odd = self._sel(inexact, self._ik("or", toward, 1, n), bits, n)
        return Val(self._conv("bitcast", odd, "i32", "float", n), "float32", n)

    # ---- bfloat16 --------------------------------------------------------------------
    def _f32_to_bf16(self, f: str, n: int) -> str:
        bits = self._conv("bitcast", f, "float", "i32", n)
        if n == 1 or not self.ctx.target.has_feature("avx512bf16"):
            return self._f32_to_bf16_bits(bits, n)
        # vcvtneps2bf16 rounds to nearest even but flushes denormals and keeps NaN payloads:
        # a vector with such a lane takes the integer path instead (a branch, rarely taken;
        # 1.3x the integer path's speed in cache). Scalars stay branch-free for LLVM's
        # loop vectorizer.
        native = self._conv("bitcast", self._conv("fptrunc", f, "float", "bfloat", n), "bfloat", "i16", n)
        a = self._ik("and", bits, 0x7FFFFFFF, n)
        denormal = self._cmp("ult", self._ik("sub", a, 1, n), 0x7FFFFF, n)
        lanes = self._i("or", denormal, self._cmp("ugt", a, 0x7F800000, n), n, "i1")
        name = f"llvm.vector.reduce.or.v{n}i1"
        self.ctx.intrinsic(name, "i1", [self._ty("i1", n)])
        odd = self.op(f"call i1 @{name}({self._ty('i1', n)} {lanes})")
        pre, slow, join = self.block, self.label("bf16_exact"), self.label("bf16_done")
        self.cbr(odd, slow, join)
        self.start_block(slow)
        exact = self._f32_to_bf16_bits(bits, n)
        self.br(join)
        self.start_block(join)
        return self.op(f"phi {self._ty('i16', n)} [{native}, %{pre}], [{exact}, %{slow}]")

    def _f32_to_bf16_bits(self, bits: str, n: int) -> str:
        odd = self._ik("and", self._ik("lshr", bits, 16, n), 1, n)
        rounded = self._ik("lshr", self._i("add", self._ik("add", bits, 0x7FFF, n), odd, n), 16, n)
        nan = self._ik("or", self._ik("and", self._ik("lshr", bits, 16, n), 0x8000, n), 0x7FC0, n)
        is_nan = self._cmp("ugt", self._ik("and", bits, 0x7FFFFFFF, n), 0x7F800000, n)
        return self._conv("trunc", self._sel(is_nan, nan, rounded, n), "i32", "i16", n)

    # ---- float8 / float4 -------------------------------------------------------------
    def _minifloat_to_bits(self, x: str, fmt: MiniFloat, n: int) -> str:
        """float32 bits of the code `x` (i32 lanes, zero-extended)."""
        m, s = fmt.man_bits, fmt.sign_bit
        mag = self._ik("and", x, s - 1, n)
        sign = self._ik("shl", self._ik("and", x, s, n), 31 - fmt.exp_bits - m, n)
        normal = self._ik("add", self._ik("shl", mag, 23 - m, n), (127 - fmt.bias) << 23, n)
        tiny = self.op(f"uitofp {self._ty('i32', n)} {mag} to {self._ty('float', n)}")
        scale = self._k(_f32_bits_const(1 - fmt.bias - m), n)
        scale_f = self.op(f"bitcast {self._ty('i32', n)} {scale} to {self._ty('float', n)}")
        sub = self.op(f"fmul {self._ty('float', n)} {tiny}, {scale_f}")
        sub_bits = self._conv("bitcast", sub, "float", "i32", n)
        is_sub = self._cmp("ult", mag, 1 << m, n)
        bits = self._i("or", self._sel(is_sub, sub_bits, normal, n), sign, n)
        if fmt.inf is not None:
            inf = self._ik("or", sign, 0x7F800000, n)
            bits = self._sel(self._cmp("eq", mag, fmt.inf, n), inf, bits, n)
        if fmt.fnuz:
            return self._sel(self._cmp("eq", x, 0x80, n), self._k(_F32_NAN, n), bits, n)
        if fmt.nan is not None:
            nan = self._ik("or", sign, _F32_NAN, n)
            bits = self._sel(self._cmp("ugt", mag, fmt.inf or fmt.max_mag, n), nan, bits, n)
        return bits

    def _bits_to_minifloat(self, bits: str, fmt: MiniFloat, n: int) -> str:
        """The code (i32 lanes) nearest to the float32 of bits `bits`, no saturation."""
        m, sh = fmt.man_bits, 23 - fmt.man_bits
        a = self._ik("and", bits, 0x7FFFFFFF, n)
        sign = self._ik("and", self._ik("lshr", bits, 31 - fmt.exp_bits - m, n), fmt.sign_bit, n)
        odd = self._ik("and", self._ik("lshr", a, sh, n), 1, n)
        r = self._ik("lshr", self._i("add", self._ik("add", a, (1 << (sh - 1)) - 1, n), odd, n), sh, n)
        normal = self._ik("sub", r, (127 - fmt.bias) << m, n)
        magic = self._k(_f32_bits_const(24 - fmt.bias - m), n)
        fa = self._conv("bitcast", a, "i32", "float", n)
        magic_f = self.op(f"bitcast {self._ty('i32', n)} {magic} to {self._ty('float', n)}")
        t = self._conv("bitcast", self.op(f"fadd {self._ty('float', n)} {fa}, {magic_f}"), "float", "i32", n)
        sub = self._i("sub", t, magic, n)
        mag = self._sel(self._cmp("ult", a, _f32_bits_const(1 - fmt.bias), n), sub, normal, n)
        over = self._cmp("ugt", mag, fmt.max_mag, n)
        is_nan = self._cmp("ugt", a, 0x7F800000, n)
        if fmt.fnuz:  # no -0: a zero result drops the sign; NaN and overflow are 0x80
            signed = self._sel(self._cmp("eq", mag, 0, n), mag, self._i("or", mag, sign, n), n)
            return self._sel(self.op(f"or {self._ty('i1', n)} {over}, {is_nan}"), self._k(0x80, n), signed, n)
        if fmt.nan is None:  # float4_e2m1fn: saturates; NaN is a zero of the other sign (ml_dtypes)
            out = self._i("or", self._sel(over, self._k(fmt.max_mag, n), mag, n), sign, n)
            return self._sel(is_nan, self._ik("xor", sign, fmt.sign_bit, n), out, n)
        big = self._k(fmt.nan if fmt.inf is None else fmt.inf, n)
        out = self._i("or", self._sel(over, big, mag, n), sign, n)
        return self._sel(is_nan, self._ik("or", sign, fmt.nan, n), out, n)

    # ---- float8_e8m0fnu --------------------------------------------------------------
    def _e8m0_to_bits(self, x: str, n: int) -> str:
        bits = self._ik("shl", x, 23, n)
        bits = self._sel(self._cmp("eq", x, 0, n), self._k(1 << 22, n), bits, n)  # 2^-127
        return self._sel(self._cmp("eq", x, 0xFF, n), self._k(_F32_NAN, n), bits, n)

    def _e8m0_code(self, bits: str, n: int, mode: str, saturate: bool) -> str:
        """ONNX Cast to float8_e8m0fnu: 2^(floor(log2 |x|) + step), step 1 when rounding up
        (mode up: any mantissa bit; nearest: a mantissa of 1.5 or more); out of range to
        2^-127 / 2^127 (saturate) or NaN. The f32 exponent field is e8m0's code."""
        a = self._ik("and", bits, 0x7FFFFFFF, n)
        e = self._ik("lshr", a, 23, n)
        # a float32 denormal at or above 2^-127 is 2^-127 * (1 + its mantissa shifted up)
        man = self._ik("and", a, 0x7FFFFF, n)
        big_sub = self._i("and", self._cmp("eq", e, 0, n), self._cmp("uge", man, 1 << 22, n), n, "i1")
        man = self._sel(big_sub, self._ik("and", self._ik("shl", man, 1, n), 0x7FFFFF, n), man, n)
        if mode == "up":
            step = self._cmp("ne", man, 0, n)
        elif mode == "nearest":
            step = self._cmp("uge", man, 1 << 22, n)
        else:
            step = self._k(0, n, "i1")
        stepped = self._i("add", e, self._conv("zext", step, "i1", "i32", n), n)
        below = self._i("xor", big_sub, self._k(1, n, "i1"), n, "i1")  # under 2^-127: code 0
        code = self._sel(self._i("and", self._cmp("eq", e, 0, n), below, n, "i1"), self._k(0, n), stepped, n)
        zero = self._cmp("eq", a, 0, n)
        special = self._cmp("uge", a, 0x7F800000, n)  # Inf or NaN
        if not saturate:  # 0, Inf, NaN and 2^128 are NaN
            return self._sel(self._i("or", zero, special, n, "i1"), self._k(0xFF, n), code, n)
        code = self._sel(self._cmp("ugt", code, 0xFE, n), self._k(0xFE, n), code, n)
        code = self._sel(zero, self._k(0, n), self._sel(special, self._k(0xFE, n), code, n), n)
        return self._sel(self._cmp("ugt", a, 0x7F800000, n), self._k(0xFF, n), code, n)
