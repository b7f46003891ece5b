"""Whole models on the OpenCL backend, run on PoCL (OpenCL on this CPU): CI of issue 11 item 6.

OpenCL (PoCL, the ICD loader, pyopencl) must be installed: these tests fail, never skip,
without it.

Tolerance rtol 1e-4, atol 1e-4 against onnxruntime (CPU provider), float32: the GPU kernels
sum in other orders than ORT (tiled and work-group reductions, float4 dot products) and PoCL
may contract a*b+c to fma, so results differ in the last bits over thousands of terms. The
zoo's outputs are O(1) (max |y| 1.7 to 4) and the observed max abs error is 2e-7 (tiny_cnn) to
5e-6 (bert_encoder): 1e-4 leaves a 20x margin, while a wrong index or a missed barrier gives
errors of order 1.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorir as tir
from benchmarks.zoo import build, sample_inputs
from tensorir.cli import main
from tensorir.codegen.link import dynamic_symbols, needed_libraries
from tensorir.errors import TirError
from tensorir.runtime.artifact import Artifact
from tensorir.runtime.opencl_module import OpenCLModule

ZOO = ["tiny_cnn", "mobilenet_v2_224", "resnet18", "bert_encoder"]
POCL = "Portable Computing Language"
RTOL = ATOL = 1e-4


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _close(outs, refs, what: str) -> None:
    assert len(outs) == len(refs), what
    for ours, theirs in zip(outs, refs, strict=True):
        err = float(np.max(np.abs(ours - theirs)))
        print(f"{what}: max abs err {err:.2e}")
        np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL, err_msg=what)


# ---- the zoo ---------------------------------------------------------------------------
@pytest.fixture(scope="module", params=ZOO)
def zoo(request):
    """(name, model, compiled OpenCLModule): one compile per model for this module."""
    model = build(request.param)
    return request.param, model, tir.compile(model, target="opencl:pocl")


def test_zoo_model_on_pocl_matches_onnxruntime(zoo):
    """One test per model (not one per check) so that xdist workers never compile a model
    twice: outputs vs ORT, the device and the manifest, a profile, new inputs, reused
    output buffers."""
    name, model, mod = zoo
    assert isinstance(mod, OpenCLModule)
    assert POCL in mod.device_name, mod.device_name
    m = mod.manifest
    assert m["backend"] == "opencl" and m["profile"] == "pocl" and m["gpu_kernels"] > 0, m
    assert sum(k["device"] == "gpu" for k in m["kernels"]) > 0

    feeds = sample_inputs(model)
    _close(mod.run(feeds), _ort(model, feeds), f"{name} seed 0")

    other = sample_inputs(model, seed=1)  # the same loaded model, other inputs (bert: another mask)
    assert any(not np.array_equal(feeds[k], other[k]) for k in feeds)
    want = _ort(model, other)
    call = mod.bind(other)
    outs = call()
    _close(outs, want, f"{name} seed 1")
    for o in outs:  # the bound output buffers pre-filled with garbage: every element rewritten
        o[...] = np.nan
    _close(call(), want, f"{name} seed 1, outputs pre-filled with NaN")

    rows = mod.profile(feeds, repeat=2)
    assert [r["symbol"] for r in rows] == [k["symbol"] for k in m["kernels"]]
    gpu = [r for r in rows if r["device"] == "gpu"]
    assert gpu and all(r["seconds"] > 0 for r in gpu), [r for r in gpu if r["seconds"] <= 0]


# ---- an op with no GPU schedule: on the CPU, with transfers ------------------------------
# cumsum has a compute definition and a CPU schedule but no "opencl" schedule
# (ops/gpu_schedules.py), so the compiler lowers it for the host CPU between two GPU kernels.
def _cumsum_model() -> onnx.ModelProto:
    """relu (GPU) -> cumsum over axis 1 (CPU) -> add a constant (GPU)."""
    b = numpy_helper.from_array(np.linspace(-1, 1, 4 * 64, dtype=np.float32).reshape(4, 64), "b")
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("CumSum", ["r", "axis"], ["c"], name="cumsum"),
        helper.make_node("Add", ["c", "b"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "cumsum_between_gpu_ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
        [b, axis],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def cumsum(tmp_path_factory) -> tuple[Path, Path]:
    """(model.onnx, its folder compiled by `tir compile --target opencl:pocl`)."""
    d = tmp_path_factory.mktemp("cumsum")
    path = d / "model.onnx"
    onnx.save(_cumsum_model(), str(path))
    out = d / "build"
    assert main(["compile", str(path), "--target", "opencl:pocl", "-o", str(out)]) == 0
    return path, out


def _feeds(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((4, 64)).astype(np.float32)}


def test_op_without_gpu_schedule_runs_on_the_cpu(cumsum):
    path, out = cumsum
    mod = tir.load(out)
    assert isinstance(mod, OpenCLModule) and POCL in mod.device_name
    m = mod.manifest
    assert m["backend"] == "opencl" and m["gpu_kernels"] >= 2 and m["cpu_kernels"] >= 1, m
    devices = {k["op"]: k["device"] for k in m["kernels"]}
    assert devices == {"relu": "gpu", "cumsum": "cpu", "add": "gpu"}, devices
    model = onnx.load(str(path))
    for seed in (0, 1):
        _close(mod.run(_feeds(seed)), _ort(model, _feeds(seed)), f"cumsum model seed {seed}")
    rows = mod.profile(_feeds(0), repeat=2)
    assert [r["device"] for r in rows] == ["gpu", "cpu", "gpu"]
    assert all(r["seconds"] > 0 for r in rows if r["device"] == "gpu"), rows


def test_inspect_lists_the_op_on_the_cpu(cumsum, capsys):
    path, _ = cumsum
    assert main(["inspect", str(path), "--target", "opencl:pocl"]) == 0
    text = capsys.readouterr().out
    assert "target opencl:pocl: 2 kernels on the GPU, 1 on the CPU" in text, text
    after = text.split("on the CPU (no GPU schedule", 1)[1]
    assert "cumsum" in after and "relu" not in after and "add" not in after, text


def test_cli_run_compare_ort_profile(cumsum, capsys):
    path, out = cumsum
    assert main(["run", str(out), "--compare-ort", "--onnx", str(path), "--profile"]) == 0
    text = capsys.readouterr().out
    err = float(text.split("max_abs_err=", 1)[1].split()[0])
    assert err <= ATOL, text
    assert "tir_k" in text and "cumsum" in text and "share" in text, text


def test_dump_dir_has_opencl_sources_and_loop_ir(cumsum, tmp_path, monkeypatch):
    path, _ = cumsum
    dump = tmp_path / "dump"
    monkeypatch.setenv("TIR_DUMP_DIR", str(dump))
    mod = tir.compile(str(path), target="opencl:pocl")
    gpu = {k["symbol"] for k in mod.manifest["kernels"] if k["device"] == "gpu"}
    cl = {p.stem: p.read_text() for p in (dump / "opencl").glob("*.cl")}
    assert set(cl) == gpu, (sorted(cl), sorted(gpu))
    for name, src in cl.items():  # `__kernel [__attribute__((reqd_work_group_size(..)))] void name(`
        assert re.search(rf"__kernel\b[^;{{]*\bvoid {name}\(", src), src
    assert "def tir_k" in next(dump.glob("*_lowering.txt")).read_text()
    assert "def tir_k" in next(dump.glob("*_loop_passes.txt")).read_text()


def _tir(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("TIR_OPENCL_PLATFORM", "TIR_DEBUG")}
    return subprocess.run(
        [sys.executable, "-m", "tensorir.cli", *args],
        capture_output=True,
        text=True,
        env={**base, **env},
        timeout=120,
    )


@pytest.mark.parametrize(
    ("env", "expect"),
    [
        ({"OCL_ICD_VENDORS": "EMPTY", "OCL_ICD_FILENAMES": ""}, "no OpenCL platform"),
        ({"TIR_OPENCL_LIBRARY": "/nonexistent/libOpenCL.so"}, "TIR_OPENCL_LIBRARY=/nonexistent/libOpenCL.so"),
    ],
    ids=["no-icd-vendors", "no-library"],
)
def test_missing_opencl_driver_is_exit_2_and_one_line(cumsum, tmp_path, env, expect):
    _, out = cumsum
    empty = tmp_path / "icd"
    empty.mkdir()
    env = {k: str(empty) if v == "EMPTY" else v for k, v in env.items()}
    p = _tir(["run", str(out)], env)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("tir run: error: ") and expect in lines[0], lines[0]


# ---- an Android build: export only ----------------------------------------------------
def test_android_opencl_library_is_export_only(cumsum, tmp_path):
    path, _ = cumsum
    out = tmp_path / "android"
    assert main(["compile", str(path), "--target", "android-arm64+opencl:adreno640", "-o", str(out)]) == 0
    lib = out / "libmodel.so"
    head = lib.read_bytes()[:20]
    assert head[:4] == b"\x7fELF" and head[4] == 2  # 64-bit ELF
    assert int.from_bytes(head[18:20], "little") == 183  # EM_AARCH64
    needed = needed_libraries(lib)
    assert set(needed) <= {"libc.so", "libdl.so"} and not any("OpenCL" in n for n in needed), needed
    defined, _ = dynamic_symbols(lib)
    assert {"tir_create", "tir_run", "tir_destroy"} <= defined
    m = json.loads((out / "manifest.json").read_text())
    assert m["backend"] == "opencl" and m["profile"] == "adreno640" and "android" in m["triple"]
    header = (out / "model.h").read_text()
    assert "tir_create(const char *weights_path, const char *program_cache_path);" in header
    art = tir.load(out)
    assert isinstance(art, Artifact)
    with pytest.raises(TirError, match="cannot run on this machine"):
        art.run(_feeds(0))


def test_unknown_profile_is_exit_2_and_one_line(cumsum, tmp_path, capsys):
    path, _ = cumsum
    rc = main(["compile", str(path), "--target", "opencl:nope", "-o", str(tmp_path / "x")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "unknown device profile 'nope'" in err and "valid:" in err, err
    assert all(p in err for p in ("pocl", "adreno640", "mali-g76")), err
    assert not (tmp_path / "x").exists()
