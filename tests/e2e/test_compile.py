"""Whole-model compilation: artifacts for host, linux-arm64 (qemu) and android-arm64."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorir as tir
from tensorir.cli import main
from tensorir.codegen.link import ALL_LIBC_SYMBOLS, dynamic_symbols, find_tool, needed_libraries
from tensorir.errors import InputError
from tensorir.frontend.onnx import from_onnx
from tensorir.runtime.reference import run_reference

RNG = np.random.default_rng(0)


def _small_model() -> onnx.ModelProto:
    """conv + bias + relu (fused), a residual add, a reshape view, softmax; two outputs."""
    w = numpy_helper.from_array(RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    b = numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "b")
    skip = numpy_helper.from_array(RNG.standard_normal((1, 8, 8, 8)).astype(np.float32), "skip")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Add", ["c", "skip"], ["a"], name="residual"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["f"], name="flatten"),
        helper.make_node("Softmax", ["f"], ["y"], axis=-1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512]),
            helper.make_tensor_value_info("f", TensorProto.FLOAT, [1, 512]),
        ],
        [w, b, skip, shape],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def small():
    model = _small_model()
    feeds = {"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    return model, feeds, run_reference(from_onnx(model), feeds)


def _close(outs, refs):
    for o, r in zip(outs, refs, strict=True):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("weights", ["embedded", "external"])
def test_host_artifact_runs_loads_and_exports(small, tmp_path, weights):
    model, feeds, refs = small
    mod = tir.compile(model, target="host", weights=weights)
    _close(mod.run(feeds), refs)
    mod.set_num_threads(1)
    _close(mod.run(feeds), refs)
    out = mod.export(tmp_path / "build")
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(
        ["libmodel.so", "model.h", "manifest.json"] + (["weights.bin"] if weights == "external" else [])
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"] == [{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}]
    assert manifest["target"] == "host" and len(manifest["model_sha256"]) == 64
    _close(tir.load(out).run(feeds), refs)


def test_wrong_input_shape_is_a_clear_error(small):
    model, feeds, _ = small
    mod = tir.compile(model)
    with pytest.raises(InputError, match="input 'x' has shape \\[1, 3, 4, 4\\], the model expects"):
        mod.run({"x": np.zeros((1, 3, 4, 4), np.float32)})
    with pytest.raises(InputError, match="unknown input 'z'"):
        mod.run({"x": feeds["x"], "z": feeds["x"]})


@pytest.mark.arm64
def test_linux_arm64_artifact_matches_under_qemu(small):
    model, feeds, refs = small
    mod = tir.compile(model, target="linux-arm64")
    _close(mod.run(feeds), refs)


def test_android_library_imports_only_libc(small, tmp_path):
    model, _, _ = small
    folder = tir.compile(model, target="android-arm64").export(tmp_path / "android")
    lib = folder / "libmodel.so"
    header = lib.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and header[4] == 2  # 64-bit ELF
    assert int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
    defined, undefined = dynamic_symbols(lib)
    assert undefined <= set(ALL_LIBC_SYMBOLS), undefined - set(ALL_LIBC_SYMBOLS)
    assert {"tir_create", "tir_run", "tir_destroy", "tir_set_num_threads"} <= defined
    assert needed_libraries(lib) == ["libc.so"]
    readelf = subprocess.run(
        [find_tool("llvm-readelf", "llvm-14"), "-h", str(lib)], capture_output=True, text=True
    )
    assert "AArch64" in readelf.stdout


def test_cli_compile_run_profile(small, tmp_path, capsys):
    model, _, _ = small
    path = tmp_path / "small.onnx"
    onnx.save(model, str(path))
    out = tmp_path / "build"
    assert main(["compile", str(path), "-o", str(out), "--dump-dir", str(tmp_path / "dump")]) == 0
    assert main(["run", str(out), "--compare-ort", "--profile"]) == 0
    text = capsys.readouterr().out
    assert "vs onnxruntime: max_abs_err=" in text and "share" in text and "tir_k" in text
    assert any((tmp_path / "dump").iterdir())


def test_second_compile_reuses_the_cached_kernel_object(small, tmp_path, monkeypatch):
    model, feeds, refs = small
    monkeypatch.setenv("TIR_CACHE_DIR", str(tmp_path / "cache"))
    tir.compile(model)
    (obj,) = (tmp_path / "cache" / "objects").iterdir()
    stamp = obj.stat().st_mtime_ns
    _close(tir.compile(model).run(feeds), refs)
    assert [p.name for p in (tmp_path / "cache" / "objects").iterdir()] == [obj.name]
    assert obj.stat().st_mtime_ns == stamp  # read, not rebuilt
