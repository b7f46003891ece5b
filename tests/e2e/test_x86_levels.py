"""Named x86-64 levels: code for machines other than this one. Each level's library uses
only its own registers (checked in the disassembly: no ymm below v3, no zmm below v4) and
computes what onnxruntime does (rtol 1e-4, atol 1e-5 of the output's scale)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import tensorir as tir
from tensorir.codegen.link import find_tool
from tensorir.target import TARGET_NAMES, get_target

TINY = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"


def test_levels_are_named_targets():
    for name, bits, avx512 in (
        ("x86_64-v2", 128, False),
        ("x86_64-v3", 256, False),
        ("x86_64-v4", 512, True),
    ):
        t = get_target(name)
        assert name in TARGET_NAMES and t.arch == "x86_64" and t.cpu == name.replace("_", "-")
        assert t.vector_bits == bits and t.has_feature("avx512f") == avx512
        assert t.has_feature("sse4.2") and t.has_feature("fma") == (bits > 128)


@pytest.mark.parametrize(
    ("name", "regs", "absent"), [("x86_64-v2", "xmm", "ymm"), ("x86_64-v3", "ymm", "zmm")]
)
def test_a_level_uses_only_its_registers_and_matches_onnxruntime(name, regs, absent):
    mod = tir.compile(str(TINY), name)
    lib = mod.dir / mod.manifest["library"]
    objdump = find_tool("llvm-objdump", "llvm-14")
    text = subprocess.run([objdump, "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert f"%{regs}" in text and f"%{absent}" not in text
    rng = np.random.default_rng(0)
    sess = ort.InferenceSession(str(TINY))
    feeds = {i.name: rng.uniform(-1, 1, i.shape).astype(np.float32) for i in sess.get_inputs()}
    for got, want in zip(mod.run(feeds), sess.run(None, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(want))))
