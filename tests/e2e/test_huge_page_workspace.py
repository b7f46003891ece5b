"""A workspace of HUGE (2 MiB) bytes or more is huge-page aligned and advised MADV_HUGEPAGE by
tir_create (codegen/entry.py), as the prepared block already was: with transparent huge pages
on "madvise" (a common default) the activations then sit in 2 MiB pages, one TLB entry each
instead of 512. A smaller workspace stays 64-byte aligned and unadvised."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorir as tir
from tensorir.codegen.entry import HUGE, MADV_HUGEPAGE
from tensorir.compiler_link import entry_module_ir
from tensorir.passes.memory_plan import ALIGN
from tensorir.pipeline import compile_model

THP = Path("/sys/kernel/mm/transparent_hugepage")


def _model(hw: int):
    """conv 3x3 3 -> 32 at hw x hw, relu, conv 1x1 32 -> 8: the 32-channel map is the workspace
    (4 * 32 * hw^2 bytes: 8 MiB at 256, 128 KiB at 32)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.uniform(-0.3, 0.3, (32, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.uniform(-0.3, 0.3, (8, 32, 1, 1)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "huge",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, hw, hw])],
        [w1, w2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _create_ir(model) -> tuple[int, str]:
    build = compile_model(model)
    ir = entry_module_ir(build, embedded=True)
    return build.workspace, ir[ir.index("define ptr @tir_create") :].split("\n}\n")[0]


def test_a_large_workspace_is_huge_page_aligned_and_advised():
    ws, create = _create_ir(_model(256))
    assert ws >= HUGE
    assert f"%block = call ptr @malloc(i64 {ws + HUGE})" in create
    assert "%ws = call ptr @tir_align_huge(ptr %block)" in create
    assert f"call i32 @madvise(ptr %ws, i64 {ws}, i32 {MADV_HUGEPAGE})" in create


def test_a_small_workspace_stays_64_byte_aligned_and_unadvised():
    ws, create = _create_ir(_model(32))
    assert 0 < ws < HUGE
    assert f"%block = call ptr @malloc(i64 {ws + ALIGN})" in create
    assert "%ws = call ptr @tir_align(ptr %block)" in create
    assert "madvise" not in create


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of this process's mapping that holds `address` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(v, 16) for v in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux only")
def test_the_loaded_model_runs_in_an_advised_huge_page_workspace():
    model = _model(256)
    mod = tir.compile(model)
    ws = mod.lib.tir_workspace(mod.handle)
    assert ws % HUGE == 0
    if THP.exists():  # a kernel built with transparent huge pages marks the advised range "hg"
        assert "hg" in _vm_flags(ws)
    x = np.random.default_rng(1).standard_normal((1, 3, 256, 256)).astype(np.float32)
    (y,) = mod.run({"x": x})
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_tir_huge_workspace_0_keeps_the_workspace_unadvised(monkeypatch):
    monkeypatch.setenv("TIR_HUGE_WORKSPACE", "0")
    ws, create = _create_ir(_model(256))
    assert ws >= HUGE
    assert "%ws = call ptr @tir_align(ptr %block)" in create and "madvise" not in create
