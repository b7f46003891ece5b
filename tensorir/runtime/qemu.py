"""Run a linux-arm64 model artifact on this x86-64 machine under qemu-aarch64.

A small C driver (cross-compiled once, cached) dlopens libmodel.so, calls tir_create,
reads the inputs from files, calls tir_run and writes the outputs. For correctness only:
emulated timings mean nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tensorir.codegen.link import SYSROOT, _qemu, _run, _work_dir, find_tool
from tensorir.errors import TirError
from tensorir.graph.types import np_dtype
from tensorir.runtime.lengths import model_outputs, trim
from tensorir.runtime.module import check_feeds, export_folder

_MODEL_DRIVER = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
/* model_driver LIB WEIGHTS|- NTHREADS NIN NOUT (BYTES:PATH){NIN+NOUT}
   inputs are read from PATH, outputs written to PATH */
typedef void *(*create_fn)(const char *);
typedef int (*run_fn)(void *, void *const *, void *const *);
int main(int argc, char **argv) {
  if (argc < 6) { fprintf(stderr, "usage: model_driver LIB WEIGHTS NTHREADS NIN NOUT BUF...\n"); return 2; }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
  create_fn create = (create_fn)dlsym(h, "tir_create");
  run_fn run = (run_fn)dlsym(h, "tir_run");
  void (*threads)(int32_t) = (void (*)(int32_t))dlsym(h, "tir_set_num_threads");
  if (!create || !run) { fprintf(stderr, "missing tir_create/tir_run\n"); return 1; }
  int nthreads = atoi(argv[3]), nin = atoi(argv[4]), nout = atoi(argv[5]);
  if (argc != 6 + nin + nout) { fprintf(stderr, "expected %d buffers\n", nin + nout); return 2; }
  if (threads && nthreads > 0) threads(nthreads);
  void *model = create(argv[2][0] == '-' ? NULL : argv[2]);
  if (!model) { fprintf(stderr, "tir_create failed\n"); return 1; }
  void *bufs[64]; long sizes[64]; char *paths[64];
  for (int k = 0; k < nin + nout; k++) {
    char *s = argv[6 + k]; sizes[k] = strtol(s, &paths[k], 10); paths[k]++;
    bufs[k] = aligned_alloc(64, (sizes[k] + 63) / 64 * 64 + 64);
    if (k < nin) {
      FILE *f = fopen(paths[k], "rb");
      if (!f || fread(bufs[k], 1, sizes[k], f) != (size_t)sizes[k]) {
        fprintf(stderr, "read %s\n", paths[k]);
        return 2;
      }
      fclose(f);
    }
  }
  int rc = run(model, bufs, bufs + nin);
  for (int k = nin; k < nin + nout; k++) {
    FILE *f = fopen(paths[k], "wb"); fwrite(bufs[k], 1, sizes[k], f); fclose(f);
  }
  void (*destroy)(void *) = (void (*)(void *))dlsym(h, "tir_destroy");
  if (destroy) destroy(model);
  for (int k = 0; k < nin + nout; k++) free(bufs[k]);
  dlclose(h);
  return rc;
}
"""


def model_driver(cross: bool = True) -> Path:
    """The driver built for linux-arm64 (run under qemu), or for this machine (`cross`
    False: e.g. to run an x86-64 library under valgrind)."""
    key = hashlib.sha1(_MODEL_DRIVER.encode()).hexdigest()[:12]
    d = _work_dir("qemu")
    exe = d / f"model-driver-{key}{'' if cross else '-host'}"
    if not exe.exists():
        src = d / f"model-driver-{key}.{os.getpid()}.c"  # per process: concurrent builds never share it
        src.write_text(_MODEL_DRIVER)
        if cross:
            cc = find_tool("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu libc6-dev-arm64-cross")
        else:
            cc = find_tool("clang", "clang-15")
        tmp = d / f"model-driver-{key}.{os.getpid()}"
        _run([cc, "-O2", "-g", "-o", str(tmp), str(src), "-ldl"], f"{Path(cc).name} (model driver)")
        tmp.replace(exe)
        src.unlink()
    return exe


class QemuModule:
    """An ARM64 artifact; linux-arm64 ones run through qemu-aarch64 (`run` as in Module)."""

    def __init__(self, directory: str | Path, num_threads: int = 0) -> None:
        self.dir = Path(directory)
        self.manifest = json.loads((self.dir / "manifest.json").read_text())
        self.inputs, self.buffers = self.manifest["inputs"], self.manifest["outputs"]
        self.outputs = model_outputs(self.buffers)
        self.num_threads = num_threads

    def set_num_threads(self, n: int) -> None:
        self.num_threads = int(n)

    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]) -> list[np.ndarray]:
        if "android" in self.manifest["triple"]:
            raise TirError(f"{self.dir}: android-arm64 libraries run on an Android device (bionic)")
        feeds = check_feeds(self.inputs, inputs)
        with tempfile.TemporaryDirectory(prefix="tir-qemu-model-") as tmp:
            spec = []
            for k, a in enumerate(feeds):
                path = Path(tmp) / f"in{k}.bin"
                a.tofile(path)
                spec.append(f"{a.nbytes}:{path}")
            outs = [np.empty(t["shape"], np_dtype(t["dtype"])) for t in self.buffers]
            for k, o in enumerate(outs):
                spec.append(f"{o.nbytes}:{Path(tmp) / f'out{k}.bin'}")
            weights = self.manifest.get("weights_file")
            wpath = str((self.dir / weights).resolve()) if weights else "-"
            lib = str((self.dir / self.manifest["library"]).resolve())
            cmd = [_qemu(), str(model_driver()), lib, wpath, str(self.num_threads)]
            cmd += [str(len(self.inputs)), str(len(outs)), *spec]
            env = dict(os.environ, QEMU_LD_PREFIX=str(SYSROOT))
            _run(cmd, "qemu-aarch64 model run", env=env, timeout=900)
            got = [
                np.fromfile(Path(tmp) / f"out{k}.bin", o.dtype).reshape(o.shape) for k, o in enumerate(outs)
            ]
            return trim(self.buffers, got)

    def export(self, out: str | Path) -> Path:
        return export_folder(self.dir, out)
