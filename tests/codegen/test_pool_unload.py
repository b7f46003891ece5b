"""A model library can be unloaded: an app that dlopens it, runs it on 2 threads, dlcloses it
and goes on must not crash (the pool's workers are joined by the library's .fini_array
destructor before its code is unmapped; before, a worker still spinning in it faulted)."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from benchmarks import zoo
from tensorir.codegen.link import SYSROOT, _qemu, find_tool
from tensorir.codegen.llvm import build_ir
from tensorir.pipeline import compile_model

_APP = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
typedef void *(*create_fn)(const char *);
typedef int (*run_fn)(void *, void *const *, void *const *);
/* app LIB IN_BYTES OUT_BYTES ROUNDS: load, run on 2 threads, unload, keep going */
int main(int argc, char **argv) {
  long nin = atol(argv[2]), nout = atol(argv[3]), rounds = atol(argv[4]);
  for (long r = 0; r < rounds; r++) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    ((void (*)(int32_t))dlsym(h, "tir_set_num_threads"))(2);
    void *m = ((create_fn)dlsym(h, "tir_create"))(NULL);
    void *bufs[2] = {calloc(1, nin), calloc(1, nout)};
    if (((run_fn)dlsym(h, "tir_run"))(m, bufs, bufs + 1) != 0) return 1;
    ((void (*)(void *))dlsym(h, "tir_destroy"))(m);
    if (dlclose(h) != 0) return 1;
    usleep(2000); /* a worker left in the unmapped code would fault now */
    free(bufs[0]);
    free(bufs[1]);
  }
  puts("unloaded");
  return 0;
}
"""


def _app(tmp_path, cc: str) -> str:
    src, exe = tmp_path / "app.c", tmp_path / "app"
    src.write_text(_APP)
    subprocess.run([cc, "-O2", "-o", str(exe), str(src), "-ldl"], check=True)
    return str(exe)


def _sizes(build) -> list[str]:
    m = build.manifest
    return [
        str(int(np.prod(t["shape"])) * np.dtype(t["dtype"]).itemsize) for t in (*m["inputs"], *m["outputs"])
    ]


def test_a_library_unloaded_after_a_parallel_run_leaves_no_worker_behind(tmp_path):
    build = compile_model(zoo.build("tiny_cnn"), "host")
    assert "@tir_parallel_for(" in build_ir(build.kernels, build.target)[0]  # its kernels use the pool
    lib = build.write(tmp_path / "model") / "libmodel.so"
    out = subprocess.run(
        [_app(tmp_path, find_tool("clang", "clang-15")), str(lib), *_sizes(build), "20"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (out.returncode, out.stdout.strip()) == (0, "unloaded"), out.stderr


@pytest.mark.arm64
def test_the_same_on_linux_arm64_under_qemu(tmp_path):
    build = compile_model(zoo.build("tiny_cnn"), "linux-arm64")
    lib = build.write(tmp_path / "model") / "libmodel.so"
    app = _app(tmp_path, find_tool("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu libc6-dev-arm64-cross"))
    out = subprocess.run(
        [_qemu(), app, str(lib), *_sizes(build), "5"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, QEMU_LD_PREFIX=str(SYSROOT)),
    )
    assert (out.returncode, out.stdout.strip()) == (0, "unloaded"), out.stderr
