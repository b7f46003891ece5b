"""The OpenCL artifact: plan tables + static C runtime + CPU kernels in one library, run on PoCL.

The plan mixes GPU -> CPU -> GPU steps over inputs, weights, workspace and outputs, uses one
GPU kernel at two steps with different arguments, and ends with a Copy. OpenCL (PoCL) must be
installed: these tests fail, never skip, without it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorir.codegen.link import SYSROOT, _qemu, _run, dynamic_symbols, find_tool, needed_libraries
from tensorir.codegen.llvm import emit_object
from tensorir.codegen.opencl_package import OpenCLPlan, c_string, opencl_header, write_opencl_library
from tensorir.errors import TirError
from tensorir.loop.ir import Buffer, Const, For, ForKind, Load, LoopFunc, Store, Var
from tensorir.plan import Arg, Copy, GpuKernel, KernelCall
from tensorir.runtime.opencl_module import OpenCLModule
from tensorir.target import get_target

N = 1000  # elements per tensor; the 1-D kernel's global size is padded to 1024
NB = N * 4
T2 = 4032  # second workspace tensor (64-byte aligned offset)
BIAS = 4032  # bias offset in the weights

ADD = """
__kernel void tir_add(__global float *A_base, const ulong A_off, __global float *B_base,
                      const ulong B_off, __global float *C_base, const ulong C_off) {
  __global const float *A = (__global const float *)((__global const char *)A_base + A_off);
  __global const float *B = (__global const float *)((__global const char *)B_base + B_off);
  __global float *C = (__global float *)((__global char *)C_base + C_off);
  size_t i = get_global_id(0);
  if (i < 1000) C[i] = A[i] + B[i];  /* "quotes", back\\slash and ?? survive escaping */
}
"""
SCALE = """
__kernel void tir_scale(__global float *X_base, const ulong X_off, __global float *W_base,
                        const ulong W_off, __global float *Y_base, const ulong Y_off) {
  __global const float *X = (__global const float *)((__global const char *)X_base + X_off);
  __global const float *W = (__global const float *)((__global const char *)W_base + W_off);
  __global float *Y = (__global float *)((__global char *)Y_base + Y_off);
  size_t i = get_global_id(1) * 100 + get_global_id(0);  /* 2-D: 10 rows of 100 */
  Y[i] = X[i] * W[i];
}
"""
GPU_KERNELS = [
    GpuKernel("tir_add", ADD, (1024,), (64,), (("A", "float32"), ("B", "float32"), ("C", "float32"))),
    GpuKernel("tir_scale", SCALE, (100, 10), (20, 5), (("X", "float32"), ("W", "float32"), ("Y", "float32"))),
]


def cpu_add_object(target, path: Path) -> Path:
    """cpu_add(A, B, C): C = A + B with a parallel loop (links the thread pool and libc)."""
    A, B, C = (Buffer(x, (N,)) for x in "ABC")
    i = Var("i")
    body = Store(C, i, Load(A, i) + Load(B, i))
    f = LoopFunc("cpu_add", (A, B, C), For(i, Const(0), Const(N), ForKind.PARALLEL, body))
    path.write_bytes(emit_object(f, target))
    return path


def make_plan(with_cpu: bool = True) -> tuple[OpenCLPlan, np.ndarray]:
    """x, y -> t1 = x + y (GPU); t2 = t1 + bias (CPU, or GPU); out0 = t2 * w (GPU, 2-D);
    out1 = t2 + x (GPU, the add kernel again); out2 = y (Copy)."""
    rng = np.random.default_rng(0)
    w = rng.random(N, np.float32)
    bias = rng.random(N, np.float32)
    blob = bytearray(BIAS + NB)
    blob[:NB] = w.tobytes()
    blob[BIAS:] = bias.tobytes()
    ws = lambda off: Arg("workspace", off)  # noqa: E731
    middle = KernelCall("cpu_add", (ws(0), Arg("weight", BIAS), ws(T2)), "cpu", (NB, NB, NB))
    if not with_cpu:
        middle = KernelCall("tir_add", middle.args, "gpu", middle.arg_bytes)
    calls = [
        KernelCall("tir_add", (Arg("input", 0), Arg("input", 1), ws(0)), "gpu", (NB,) * 3),
        middle,
        KernelCall("tir_scale", (ws(T2), Arg("weight", 0), Arg("output", 0)), "gpu", (NB,) * 3),
        KernelCall("tir_add", (ws(T2), Arg("input", 0), Arg("output", 1)), "gpu", (NB,) * 3),
    ]
    plan = OpenCLPlan(
        kernels=GPU_KERNELS,
        calls=calls,
        copies=[Copy(Arg("output", 2), Arg("input", 1), NB)],
        input_bytes=[NB, NB],
        output_bytes=[NB, NB, NB],
        workspace=T2 + NB,
        weights=bytes(blob),
    )
    return plan, np.stack([w, bias])


def manifest(plan: OpenCLPlan, target, weights_file: str | None = None) -> dict:
    t = lambda name: {"name": name, "dtype": "float32", "shape": [N]}  # noqa: E731
    m = {
        "backend": "opencl",
        "target": target.name,
        "triple": target.triple,
        "model_sha256": f"test-opencl-package-{os.getpid()}",
        "inputs": [t("x"), t("y")],
        "outputs": [t("out0"), t("out1"), t("out2")],
        "workspace_bytes": plan.workspace,
        "kernels": [
            {"symbol": c.symbol, "op": "add", "device": c.device, "args": [a.to_json() for a in c.args]}
            for c in plan.calls
        ],
        "library": "libmodel.so",
        "weights": "embedded",
    }
    if weights_file:
        m.update(weights="external", weights_file=weights_file)
    return m


def build(directory: Path, target_name: str, with_cpu: bool = True, embedded: bool = True) -> Path:
    target = get_target(target_name)
    plan, _ = make_plan(with_cpu)
    directory.mkdir(parents=True, exist_ok=True)
    objs = [cpu_add_object(target, directory / "cpu.o")] if with_cpu else []
    write_opencl_library(plan, target, directory / "libmodel.so", objs, embedded=embedded)
    for o in objs:
        o.unlink()
    m = manifest(plan, target, None if embedded else "weights.bin")
    (directory / "manifest.json").write_text(json.dumps(m))
    (directory / "model.h").write_text(opencl_header(m))
    return directory


@pytest.fixture(scope="module")
def host_dir(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("ocl") / "host", "host")


def expected(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    _, (w, bias) = make_plan()
    t2 = x + y + bias
    return [t2 * w, t2 + x, y]


def feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"x": rng.random(N, np.float32), "y": rng.random(N, np.float32)}


def test_c_string_escapes():
    text = 'a "q" \\ ??= tab\t é\n12\x01'
    src = f"static const char s[] = {c_string(text)};"
    assert "\\342" not in src and "\\303\\251" in src and "\\?\\?=" in src
    assert c_string("") == '""'


def test_run_mixed_plan_on_pocl(host_dir, tmp_path):
    mod = OpenCLModule(host_dir, program_cache=tmp_path / "prog.bin")
    assert "Portable Computing Language" in mod.device_name
    f = feeds()
    outs = mod.run(f)
    for got, want in zip(outs, expected(f["x"], f["y"]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    again = mod.run({"x": f["y"], "y": f["x"]})  # the same model object, new inputs
    np.testing.assert_allclose(again[1], expected(f["y"], f["x"])[1], rtol=1e-6)
    call = mod.bind(f)
    np.testing.assert_allclose(call()[0], outs[0], rtol=1e-6)
    mod.set_num_threads(2)
    np.testing.assert_allclose(mod.run(f)[0], outs[0], rtol=1e-6)


def test_program_binary_cache(host_dir, tmp_path):
    cache = tmp_path / "prog.bin"
    first = OpenCLModule(host_dir, program_cache=cache)
    assert not first.program_from_cache and cache.exists() and cache.read_bytes()[:8] == b"TIRCLBN1"
    second = OpenCLModule(host_dir, program_cache=cache)
    assert second.program_from_cache
    f = feeds()
    np.testing.assert_allclose(second.run(f)[0], expected(f["x"], f["y"])[0], rtol=1e-6)
    cache.write_bytes(b"TIRCLBN1" + bytes(32))  # a header that does not match: rebuilt from source
    third = OpenCLModule(host_dir, program_cache=cache)
    assert not third.program_from_cache and cache.stat().st_size > 40
    no_cache = OpenCLModule(host_dir, program_cache=None)
    assert not no_cache.program_from_cache


def test_profile_times(host_dir, tmp_path):
    mod = OpenCLModule(host_dir, program_cache=tmp_path / "prog.bin")
    rows = mod.profile(feeds(), repeat=3)
    assert [r["symbol"] for r in rows] == ["tir_add", "cpu_add", "tir_scale", "tir_add"]
    assert all(r["seconds"] > 0 for r in rows), rows


def test_external_weights_gpu_only(tmp_path):
    d = build(tmp_path / "ext", "host", with_cpu=False, embedded=False)
    assert (d / "weights.bin").exists()
    mod = OpenCLModule(d, program_cache=None)
    f = feeds()
    for got, want in zip(mod.run(f), expected(f["x"], f["y"]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert mod.lib.tir_get_num_threads() == 1  # the stub thread API (no CPU kernels)
    (d / "weights.bin").write_bytes(b"short")
    with pytest.raises(TirError, match=r"weights file .*: read 5 of"):
        OpenCLModule(d, program_cache=None)


def test_platform_filter_error(host_dir, monkeypatch):
    monkeypatch.setenv("TIR_OPENCL_PLATFORM", "nonexistent")
    with pytest.raises(TirError) as e:
        OpenCLModule(host_dir, program_cache=None)
    msg = str(e.value)
    assert "\n" not in msg and "TIR_OPENCL_PLATFORM=nonexistent" in msg and "Portable Computing" in msg
    monkeypatch.setenv("TIR_OPENCL_PLATFORM", "portable COMPUTING")  # case-insensitive substring
    assert "Portable" in OpenCLModule(host_dir, program_cache=None).device_name


def _load_error(directory: Path, env: dict[str, str]) -> str:
    code = (
        "import sys\nfrom tensorir.runtime.opencl_module import OpenCLModule\n"
        "try:\n    OpenCLModule(sys.argv[1], program_cache=None)\nexcept Exception as e:\n"
        "    print(type(e).__name__, e)\nelse:\n    print('loaded')\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(directory)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_missing_driver_errors(host_dir, tmp_path):
    empty = tmp_path / "icd"
    empty.mkdir()
    out = _load_error(host_dir, {"OCL_ICD_VENDORS": str(empty)})
    assert out.startswith("TirError") and "no OpenCL platform" in out and "\n" not in out, out
    out = _load_error(host_dir, {"TIR_OPENCL_LIBRARY": "/nonexistent/libOpenCL.so"})
    assert out.startswith("TirError") and "TIR_OPENCL_LIBRARY=/nonexistent/libOpenCL.so" in out, out


def test_host_library_imports(host_dir):
    lib = host_dir / "libmodel.so"
    assert not any("OpenCL" in n for n in needed_libraries(lib))
    defined, undefined = dynamic_symbols(lib)
    assert {"tir_create", "tir_run", "tir_destroy", "tir_profile", "tir_last_error"} <= defined
    assert {"dlopen", "dlsym"} <= undefined and not any(re.match(r"cl[A-Z]", s) for s in undefined)
    assert "tir_the_plan" not in defined  # runtime internals stay hidden
    assert (
        "tir_create(const char *weights_path, const char *program_cache_path);"
        in (host_dir / "model.h").read_text()
    )


def _elf_machine(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[18:20], "little")


def test_android_arm64_library(tmp_path):
    lib = build(tmp_path / "android", "android-arm64") / "libmodel.so"
    assert _elf_machine(lib) == 183  # EM_AARCH64
    assert set(needed_libraries(lib)) <= {"libc.so", "libdl.so"}
    assert "libdl.so" in needed_libraries(lib)
    defined, undefined = dynamic_symbols(lib)
    assert {"tir_create", "tir_run", "tir_destroy", "tir_set_num_threads", "tir_get_num_threads"} <= defined
    assert not any(re.match(r"cl[A-Z]", s) for s in undefined)


_QEMU_DRIVER = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
  void *(*create)(const char *, const char *) = (void *(*)(const char *, const char *))dlsym(h, "tir_create");
  const char *(*err)(void) = (const char *(*)(void))dlsym(h, "tir_last_error");
  void *m = create(0, 0);
  printf("%s\n", m ? "created" : err());
  return 0;
}
"""


@pytest.mark.arm64
def test_linux_arm64_under_qemu_reports_no_opencl(tmp_path):
    d = build(tmp_path / "arm", "linux-arm64", with_cpu=False)
    lib = d / "libmodel.so"
    assert _elf_machine(lib) == 183 and needed_libraries(lib) == ["libc.so.6"]
    src = tmp_path / "drv.c"
    src.write_text(_QEMU_DRIVER)
    gcc = find_tool("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu")
    _run([gcc, "-O2", "-o", str(tmp_path / "drv"), str(src), "-ldl"], "aarch64-linux-gnu-gcc")
    env = dict(os.environ, QEMU_LD_PREFIX=str(SYSROOT))
    p = _run([_qemu(), str(tmp_path / "drv"), str(lib)], "qemu-aarch64", env=env, timeout=120)
    assert p.stdout.strip() == "libOpenCL.so not found (no OpenCL driver installed)"
