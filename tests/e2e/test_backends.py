"""The backend seam: a backend per Target.kind, the loader chosen by the target, the
pipeline's stages logged in order."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorir as tir
from tensorir.backends import backend_for_manifest, get_backend
from tensorir.backends.llvm import LLVMBackend
from tensorir.errors import TirError
from tensorir.ops.kernel import run_op
from tensorir.runtime.artifact import Artifact
from tensorir.runtime.module import Module
from tensorir.target import get_target


def _model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.full((4, 3, 3, 3), 0.1, np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "seam",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_backend_is_chosen_by_target_kind():
    assert isinstance(get_backend("host"), LLVMBackend)
    assert isinstance(get_backend("android-arm64"), LLVMBackend)
    assert isinstance(backend_for_manifest({}), LLVMBackend)
    odd = dataclasses.replace(get_target("host"), kind="vulkan")
    with pytest.raises(TirError, match="no backend for target kind 'vulkan'"):
        get_backend(odd)
    with pytest.raises(TirError, match="backend 'vulkan'"):
        backend_for_manifest({"backend": "vulkan"})


def test_host_compile_loads_in_process():
    mod = tir.compile(_model(), target="host")
    assert isinstance(mod, Module)
    x = np.ones((1, 3, 6, 6), np.float32)
    y = mod.run({"x": x})[0]
    assert y[0, 0, 2, 2] == pytest.approx(2.7, rel=1e-5)  # 27 taps of 0.1 * 1.0


def test_android_compile_is_an_artifact_that_does_not_pretend_to_run(tmp_path):
    art = tir.compile(_model(), target="android-arm64")
    assert isinstance(art, Artifact)
    with pytest.raises(TirError, match=r"built for android-arm64 .*cannot run on this machine"):
        art.run({"x": np.zeros((1, 3, 6, 6), np.float32)})
    folder = art.export(tmp_path / "a")
    assert (folder / "libmodel.so").exists()
    assert isinstance(tir.load(folder), Artifact)


def test_load_of_a_folder_without_manifest_is_one_line(tmp_path):
    with pytest.raises(TirError, match="not a compiled model"):
        tir.load(tmp_path)


def test_run_op_goes_through_the_backend():
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    (y,) = run_op("relu", [x], {}, "host")
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_pipeline_logs_every_stage_in_order(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("TIR_DEBUG", "1")
    tir.compile(_model(), target="host")
    err = capsys.readouterr().err
    names = ["canonicalize", "layout", "fuse ops", "lowering", "loop passes", "memory plan", "bind"]
    names += ["codegen (llvm)", "package (llvm)"]  # a stage prints when it ends
    positions = [err.find(f"[tir] {n}") for n in names]
    assert all(p >= 0 for p in positions), dict(zip(names, positions, strict=True))
    assert positions == sorted(positions)


def test_dump_dir_has_loop_ir_before_and_after_loop_passes(monkeypatch, tmp_path):
    monkeypatch.setenv("TIR_DUMP_DIR", str(tmp_path))
    tir.compile(_model(), target="host")
    lowering = next(tmp_path.glob("*_lowering.txt")).read_text()
    passes = next(tmp_path.glob("*_loop_passes.txt")).read_text()
    assert "def tir_k" in lowering and "def tir_k" in passes
    assert "vectorized" in lowering  # annotated loops before the vectorize pass
    assert "ramp(" in passes  # vector accesses after it
