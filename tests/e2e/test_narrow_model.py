"""A model whose input and outputs are narrow dtypes (bfloat16, float8_e4m3fn, int4), compiled
by `tir compile` and called through the library's C API (tir_create / tir_run), its outputs
checked bit for bit against ONNX's reference evaluator."""

from __future__ import annotations

import ctypes
import json

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx.reference import ReferenceEvaluator

import tensorir as tir
from tensorir.cli import main
from tensorir.codegen.link import ALL_LIBC_SYMBOLS, dynamic_symbols
from tests.codegen.test_narrow_dtypes import assert_same

OUTPUTS = [("y", "bfloat16"), ("z", "float8_e4m3fn"), ("q", "int4")]


def narrow_model() -> onnx.ModelProto:
    """y = bf16(relu(x) * 3), z = float8(y) with saturation, q = int4(floor(relu(x) * 3))."""
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=T.FLOAT),
        helper.make_node("Relu", ["xf"], ["r"]),
        helper.make_node("Mul", ["r", "three"], ["m"]),
        helper.make_node("Cast", ["m"], ["y"], to=T.BFLOAT16),
        helper.make_node("Cast", ["y"], ["z"], to=T.FLOAT8E4M3FN),
        helper.make_node("Floor", ["m"], ["whole"]),  # onnxruntime rounds to int4, ONNX truncates
        helper.make_node("Cast", ["whole"], ["q"], to=T.INT4),
    ]
    outs = [("y", T.BFLOAT16), ("z", T.FLOAT8E4M3FN), ("q", T.INT4)]
    assert [(n, helper.tensor_dtype_to_np_dtype(t).name) for n, t in outs] == OUTPUTS
    graph = helper.make_graph(
        nodes,
        "narrow",
        [helper.make_tensor_value_info("x", T.BFLOAT16, [4, 33])],
        [helper.make_tensor_value_info(n, t, [4, 33]) for n, t in outs],
        [helper.make_tensor("three", T.FLOAT, [], [3.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


def reference(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    """ONNX's reference evaluator, its int4 output by ONNX's node-test rule (truncate, keep the
    low 4 bits): under ml_dtypes >= 0.7 the evaluator sends out-of-range floats to 0."""
    y, z, _ = ReferenceEvaluator(model).run(None, {"x": x})
    whole = np.floor(np.maximum(x.astype(np.float32), 0) * np.float32(3))
    with np.errstate(invalid="ignore"):
        q = whole.astype(np.int64).astype(ml_dtypes.int4)
    return [y, z, q]


def run_library(folder, x: np.ndarray, manifest: dict) -> list[np.ndarray]:
    lib = ctypes.CDLL(str(folder / "libmodel.so"))
    lib.tir_create.restype = ctypes.c_void_p
    lib.tir_create.argtypes = [ctypes.c_char_p]
    lib.tir_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.tir_destroy.argtypes = [ctypes.c_void_p]
    outs = [np.zeros(t["shape"], np.dtype(t["dtype"])) for t in manifest["outputs"]]
    ins = (ctypes.c_void_p * 1)(x.ctypes.data)
    ptrs = (ctypes.c_void_p * len(outs))(*(o.ctypes.data for o in outs))
    model = lib.tir_create(None)
    assert model
    try:
        assert lib.tir_run(model, ins, ptrs) == 0
    finally:
        lib.tir_destroy(model)
    return outs


def test_bf16_model_compiles_and_runs_through_the_c_api(tmp_path):
    model = narrow_model()
    path, out = tmp_path / "narrow.onnx", tmp_path / "build"
    onnx.save(model, path)
    assert main(["compile", str(path), "--target", "host", "--records", "none", "-o", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert [t["dtype"] for t in manifest["inputs"] + manifest["outputs"]] == [
        "bfloat16",
        "bfloat16",
        "float8_e4m3fn",
        "int4",
    ]
    assert "bfloat16 as the high 16 bits" in (out / "model.h").read_text()
    _, undefined = dynamic_symbols(out / "libmodel.so")
    assert undefined <= set(ALL_LIBC_SYMBOLS), undefined - set(ALL_LIBC_SYMBOLS)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 33)) * 80).astype(ml_dtypes.bfloat16)
    x[0, :4] = [np.nan, np.inf, -np.inf, 1e-40]
    expected = reference(model, x)
    got = run_library(out, x, manifest)
    defined = np.isfinite(x.astype(np.float32))  # ONNX leaves int4(NaN), int4(Inf) undefined
    for g, e in zip(got, expected, strict=True):
        keep = defined if g.dtype.name == "int4" else np.ones_like(defined)
        assert_same(g[keep], e[keep], x[keep])


def test_compare_ort_takes_narrow_inputs_and_outputs(tmp_path, capsys):
    """tir run --compare-ort feeds onnxruntime bfloat16 and reads its bf16 / float8 / packed
    int4 outputs back (tensorir/tools/ort_io.py): all three match the compiled model."""
    path = tmp_path / "narrow.onnx"
    onnx.save(narrow_model(), path)
    assert main(["run", str(path), "--compare-ort", "--records", "none"]) == 0
    report = capsys.readouterr().out
    assert all(f"{name}: {dtype}[4, 33]" in report for name, dtype in OUTPUTS), report


@pytest.mark.arm64
def test_narrow_model_on_linux_arm64_under_qemu(tmp_path):
    """The same conversions on AArch64 (no avx512bf16: bfloat16 by the integer path)."""
    model, path = narrow_model(), tmp_path / "narrow.onnx"
    onnx.save(model, path)
    x = (np.random.default_rng(4).standard_normal((4, 33)) * 80).astype(ml_dtypes.bfloat16)
    got = tir.compile(str(path), target="linux-arm64").run({"x": x})
    for g, e in zip(got, reference(model, x), strict=True):
        assert_same(g, e, x)
