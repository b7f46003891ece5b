"""The LLVM IR text: attributes, loop metadata, parallel outlining."""

from __future__ import annotations

import re

from tensorir.codegen.llvm import build_ir
from tensorir.codegen.parallel import runtime_ir
from tensorir.target import get_target
from tests.codegen import kernels as K


def test_kernel_signature_and_attributes():
    text, names = build_ir(K.add_vector().func, "linux-arm64")
    assert names == ["add_vector16"]
    sig = re.search(r"define void @add_vector16\((.*)\) (.*) \{", text)
    params, attrs = sig.group(1), sig.group(2)
    assert params.count("ptr noalias") == 3 and "readonly" in params and "writeonly" in params
    assert "dereferenceable(4096)" in params
    assert '"no-builtins"' in attrs and '"target-cpu"="cortex-a76"' in attrs
    assert "fmul contract reassoc nsz <16 x float>" in text and "load <16 x float>" in text
    assert 'target triple = "aarch64-unknown-linux-gnu"' in text


def test_loop_kinds_become_metadata():
    text, _ = build_ir(K.control().func, "host")
    assert '!"llvm.loop.unroll.full"' in text
    assert '!"llvm.loop.vectorize.enable", i1 true' in text
    assert text.count("!llvm.loop !") == 2


def test_parallel_loop_is_outlined():
    text, _ = build_ir(K.parallel_nested().func, "android-arm64")
    assert "define internal void @par_nested_par_body(" in text
    assert "define internal void @par_nested_par_body_closure(ptr %cl, i64 %lo, i64 %hi)" in text
    assert "call void @tir_parallel_for(ptr @par_nested_par_body_closure" in text
    assert text.count("@tir_parallel_for(ptr @") == 1  # the nested parallel loop runs serially
    assert (
        "nocapture" not in text.split("define void @par_nested(")[1].split("{")[0]
    )  # escapes into the closure


def test_runtime_per_architecture():
    x86 = runtime_ir(get_target("host"))
    arm = runtime_ir(get_target("android-arm64"))
    assert "llvm.x86.sse2.pause" in x86 and "i64 202" in x86  # SYS_futex on x86-64
    assert "llvm.aarch64.hint(i32 1)" in arm and "i64 98" in arm  # yield; SYS_futex on aarch64
    assert "define weak void @tir_set_num_threads(i32 %n)" in arm
