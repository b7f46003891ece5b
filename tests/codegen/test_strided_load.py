"""A vector load of a small constant stride (2-4: a strided slice, YOLO's Focus) is one masked
load of lanes x stride elements and a shufflevector, not a gather; the mask ends at the last
element read. Wider strides keep the gather. Numerics against numpy, the last vector of each
row ending at the buffer's last element."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tensorir.codegen import emit_assembly
from tensorir.codegen.llvm import build_ir
from tensorir.loop.ir import Buffer, Const, For, ForKind, Load, LoopFunc, Store, Var
from tensorir.runtime.jit import compile_host
from tests.codegen.kernels import vramp

LANES = 16


def every_nth(stride: int, offset: int, vectors: int = 4, dtype: str = "float32") -> LoopFunc:
    """Y[v*L + l] = X[(v*L + l) * stride + offset], X just long enough for the last element."""
    n = vectors * LANES
    x, y = Buffer("X", ((n - 1) * stride + offset + 1,), dtype), Buffer("Y", (n,), dtype)
    v = Var("v")
    load = Load(x, vramp(v * (LANES * stride) + offset, LANES, stride))
    body = Store(y, vramp(v * LANES, LANES), load)
    return LoopFunc(
        f"every_{stride}_{offset}", (x, y), For(v, Const(0), Const(vectors), ForKind.SERIAL, body)
    )


@pytest.mark.parametrize("stride", [2, 3, 4])
@pytest.mark.parametrize("offset", [0, 1])
def test_small_stride_is_a_masked_load_and_a_shuffle(stride, offset):
    func = every_nth(stride, offset)
    text, _ = build_ir(func, "x86_64-v4")  # AVX-512 (the IR and assembly need no such host)
    assert f"@llvm.masked.load.v{LANES * stride}f32" in text and "shufflevector" in text
    assert "masked.gather" not in text
    call = next(ln for ln in text.splitlines() if "call" in ln and "masked.load" in ln)
    trues = re.search(r"<(i1 [^>]*)>", call).group(1).count("true")
    assert trues == (LANES - 1) * stride + 1  # nothing past the ramp's last element
    assert not re.search(r"\bv(p)?gather", emit_assembly(func, "x86_64-v4"))
    x = (
        np.random.default_rng(stride)
        .standard_normal((4 * LANES - 1) * stride + offset + 1)
        .astype(np.float32)
    )
    y = np.zeros(4 * LANES, np.float32)
    compile_host(func)(x, y)
    np.testing.assert_array_equal(y, x[offset::stride])


@pytest.mark.parametrize("stride", [2, 3, 8])
def test_strided_numerics_anywhere(stride):
    x = np.random.default_rng(stride).standard_normal((4 * LANES - 1) * stride + 1).astype(np.float32)
    y = np.zeros(4 * LANES, np.float32)
    compile_host(every_nth(stride, 0))(x, y)
    np.testing.assert_array_equal(y, x[::stride])


@pytest.mark.parametrize("target", ["android-arm64", "x86_64-v3"])
def test_without_avx512_keeps_the_gather(target):
    """NEON has no masked loads (LLVM would scalarize one per element of the wide vector);
    AVX2 keeps its gather too (the masked-load form was measured on AVX-512 only)."""
    text, _ = build_ir(every_nth(2, 0), target)
    assert "masked.gather" in text and "masked.load" not in text


def test_wide_stride_keeps_the_gather():
    text, _ = build_ir(every_nth(8, 0), "x86_64-v4")
    assert "masked.gather" in text and "masked.load" not in text
