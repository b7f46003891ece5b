"""--precision fp16 (passes/precision.py): the graph text before/after, then whole models
against their float32 builds: output SQNR, weights halved, and float16 arithmetic in the
ARM64 code (fmla on .8h) where the core has it."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import tensorir
from benchmarks import zoo
from tensorir.cli import main
from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.passes.precision import native_fp16, to_fp16
from tensorir.pipeline import compile_model, load_folder
from tensorir.target import get_target
from tests.passes.helpers import assert_same_results, const


def _conv_softmax() -> Graph:
    g = Graph("g")
    x = g.add_input("x", TensorType((1, 3, 8, 8), "float32"))
    y = g.add_node(
        "conv", [x, const(g, (8, 3, 3, 3))], {"pads": (1, 1, 1, 1), "strides": (1, 1), "group": 1}
    )[0]
    z = g.add_node("softmax", [y], {"axis": 1})[0]
    g.set_outputs([("y", z), ("c", y)])
    return g


def test_fp16_casts_inputs_down_keeps_softmax_in_float32_and_outputs_float32():
    g = _conv_softmax()
    before = str(g)
    kept = to_fp16(g)
    assert kept == [(3, "softmax")]
    lines = [line.strip() for line in str(g).splitlines()]
    assert "graph g(%x: f32[1,3,8,8]) {" in lines[0], before
    assert "%4 = cast(%x) saturate=1 to=float16 : f16[1,3,8,8]" in lines
    assert any(re.fullmatch(r"%2 = conv\(%4, %c1\) .* : f16\[1,8,8,8\]", line) for line in lines), lines
    assert "%c1 = constant f16[8,3,3,3]" in lines
    assert "%5 = cast(%2) saturate=1 to=float32 : f32[1,8,8,8]" in lines  # up, into the softmax
    assert "%3 = softmax(%5) axis=1 : f32[1,8,8,8]" in lines
    assert "%6 = cast(%2) saturate=1 to=float32 : f32[1,8,8,8]" in lines  # the conv as an output
    assert lines[-2] == "return %3 as y, %6 as c"


def test_fp16_graph_computes_what_the_float32_one_does_within_float16_rounding():
    g = _conv_softmax()
    h = _conv_softmax()
    to_fp16(h)
    assert_same_results(g, h, rtol=2e-2, atol=2e-2)


def test_native_fp16_by_target():
    assert native_fp16(get_target("linux-arm64"))  # cortex-a76: ARMv8.2 fullfp16
    assert native_fp16(get_target("android-arm64:cortex-a55"))
    assert not native_fp16(dataclasses.replace(get_target("linux-arm64"), cpu="cortex-a53"))  # ARMv8.0
    assert not native_fp16(get_target("opencl:pocl"))


def _float32_reference(model, feeds: dict) -> list[np.ndarray]:
    """onnxruntime's float32 outputs: the fp16 builds' reference (tensorir's own float32 build
    agrees with them to rtol 1e-3 / atol 1e-4, tests/e2e/test_zoo_compile.py, far inside the
    float16 error these tests bound) without compiling the model a second time."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _sqnr(ref: np.ndarray, out: np.ndarray) -> float:
    return float(
        10 * np.log10((ref.astype(np.float64) ** 2).sum() / ((ref - out).astype(np.float64) ** 2).sum())
    )


def test_mobilenet_v2_fp16_on_the_host_halves_the_weights_and_keeps_the_outputs():
    model = zoo.build("mobilenet_v2_96")
    feeds = zoo.sample_inputs(model)
    f32, f16 = compile_model(model), tensorir.compile(model, precision="fp16")  # f32: its manifest
    (a,), (b,) = _float32_reference(model, feeds), f16.run(feeds)
    assert b.dtype == np.float32 and _sqnr(a, b) > 50.0  # 63.5 dB measured
    assert abs(f16.manifest["weights_bytes"] / f32.manifest["weights_bytes"] - 0.5) < 0.01
    p = f16.manifest["precision"]
    assert p["weights"] == "float16" and p["arithmetic"].startswith("float32 (float16 loads and stores")


def test_bert_fp16_keeps_softmax_and_layer_norm_in_float32_and_says_so():
    model = zoo.build("bert_encoder")
    feeds = zoo.sample_inputs(model)
    f16 = tensorir.compile(model, precision="fp16")
    kept = f16.manifest["precision"]["float32_ops"]
    assert sum(k.startswith("softmax (node ") for k in kept) == 2
    assert sum(k.startswith("layer_norm (node ") for k in kept) == 4
    (a,), (b,) = tensorir.compile(model).run(feeds), f16.run(feeds)
    assert _sqnr(a, b) > 45.0  # 57 dB measured


def test_cli_compile_fp16_says_what_stayed_float32(tmp_path, capsys):
    path = tmp_path / "tiny.onnx"
    zoo.save("tiny_cnn", path)
    argv = ["compile", str(path), "--records", "none", "--precision", "fp16", "-o", str(tmp_path / "out")]
    assert main(argv) == 0
    assert "fp16: weights float16, arithmetic float32 (float16 loads and stores" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main([*argv[:-4], "--precision", "int3", "-o", str(tmp_path / "bad")])
    assert e.value.code == 2


@pytest.mark.arm64
def test_mobilenet_v2_fp16_on_arm64_computes_in_float16_under_qemu(tmp_path):
    """Compiled once: run under qemu against onnxruntime's float32, and its library's conv
    kernels disassembled (each kernel's own symbol and its parallel body's)."""
    import onnxruntime as ort

    model = zoo.build("mobilenet_v2_96")
    feeds = zoo.sample_inputs(model)
    (a,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    build = compile_model(model, "linux-arm64", precision="fp16")
    mod = load_folder(build.write(tmp_path))
    (b,) = mod.run(feeds)
    assert _sqnr(a, b) > 40.0  # 51.6 dB measured: sums in float16
    assert build.manifest["precision"]["arithmetic"] == "float16 (sums in float16)"
    assert build.ops.count("layout_transform") == 1  # float16 convs are packed NCHW8c like float32 ones
    convs = [
        f.name for f, op in zip(build.kernels, build.ops, strict=True) if op in ("conv2d_nchwc", "fused")
    ]
    asm = _disassembly(
        mod.dir / mod.manifest["library"], [s for n in convs for s in (n, n + "_par_body_closure")]
    )
    assert len(re.findall(r"fmla\s+v\d+\.8h", asm)) > 100 and not re.search(r"fmla\s+v\d+\.4s", asm)


def _disassembly(lib, symbols: list[str]) -> str:
    """llvm-objdump of these symbols of an ARM64 library (float16 arithmetic decoded)."""
    import subprocess

    from tensorir.codegen.link import find_tool

    objdump = find_tool("llvm-objdump", "llvm-14")
    cmd = [objdump, "-d", "--mattr=+fullfp16", "--disassemble-symbols=" + ",".join(symbols), str(lib)]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def test_fp16_for_an_opencl_device_with_cl_khr_fp16_renders_half_sums():
    """adreno640's profile has fp16: the GPU kernels' OpenCL C declares and sums in half."""
    from tensorir.codegen.opencl import render_opencl

    build = compile_model(zoo.build("tiny_cnn"), "android-arm64+opencl:adreno640", precision="fp16")
    assert build.manifest["precision"]["arithmetic"] == "float16 (sums in float16)"
    profile = build.target.device_profile()
    func = next(
        f for f, c in zip(build.kernels, build.calls, strict=True) if c.device == "gpu" and "fused" in f.name
    )
    src = render_opencl(func, profile).source
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in src
    assert re.search(r"\bhalf \w+_acc\[", src) and "float " not in src


def test_fp16_leaves_the_int8_ops_scales_in_float32(tmp_path):
    """A QDQ model (quantize_static): its integer ops keep their float32 requantize scales, so
    the fp16 build stays within about one output step of the int8 build."""
    from benchmarks.int8_speed import _output_step, matmul_768, quantize

    q8 = quantize(matmul_768(), tmp_path)
    feeds = zoo.sample_inputs(q8, seed=100)
    (a,), (b,) = tensorir.compile(q8).run(feeds), tensorir.compile(q8, precision="fp16").run(feeds)
    assert np.abs(a - b).max() <= 1.5 * _output_step(q8)
