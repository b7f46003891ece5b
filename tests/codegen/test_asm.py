"""Host assembly checks: FMA on the native vector registers, no libm or memset calls."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tensorir.codegen import emit_assembly
from tensorir.target import get_target
from tests.codegen import kernels as K
from tests.codegen.test_arm64 import LIBM, zero_fill


def _fma_regs(asm: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"vfmadd\w+\s+.*%(zmm|ymm|xmm)\d+", asm)}


def test_host_fma_on_native_vectors():
    host = get_target("host")
    asm = emit_assembly(K.matmul(lanes=16).func, host)
    reg = {512: "zmm", 256: "ymm"}.get(host.vector_bits)
    if reg is None or not host.has_feature("fma"):
        pytest.skip(f"this host ({host.cpu}, {host.vector_bits}-bit) has no FMA vector unit to check")
    assert reg in _fma_regs(asm), asm[:2000]
    # the same explicit-fma matmul and a contract-fused add loop, scalar source code
    assert reg in _fma_regs(emit_assembly(K.add_vector(lanes=16).func, host))


def test_host_avx2_variant_uses_ymm():
    host = get_target("host")
    if not host.has_feature("avx2"):
        pytest.skip("host without AVX2")
    feats = ",".join(f for f in host.features.split(",") if not f.startswith("+avx512"))
    avx2 = dataclasses.replace(
        host, name="host-avx2", features=feats, vector_bits=256, num_vector_registers=16
    )
    asm = emit_assembly(K.matmul(lanes=8).func, avx2)
    assert _fma_regs(asm) == {"ymm"}


def test_host_math_kernel_has_no_calls():
    f, _ = K.math_all(lanes=16)
    asm = emit_assembly([f, zero_fill(), K.row_sum().func], "host")
    calls = re.findall(r"\b(?:call|jmp)q?\s+\*?([A-Za-z_][\w@]*)", asm)
    assert not [c for c in calls if c.split("@")[0] in LIBM or "mem" in c], calls
    assert not re.search(r"\bcall", asm)
