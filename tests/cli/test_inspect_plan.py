"""`tir inspect --plan` reports the workspace a compiled model really allocates.

The figure is checked against the library itself: a C driver that defines `malloc` (so the
dlopened libmodel.so's calls land in it) records every allocation tir_create makes, then runs
the model once. The model is two 3x3 convolutions whose default kernels need scratch memory, so
the allocation is larger than the activations alone (what `--plan` printed before).
"""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorir.cli import main
from tensorir.codegen.entry import ALIGN
from tensorir.codegen.link import find_tool

C, H = 64, 14  # the default 3x3 conv kernels of this size use scratch (checked below)

_DRIVER = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t);
static int counting, n;
static size_t sizes[64];

void *malloc(size_t size) { /* libmodel.so's malloc binds here (the executable comes first) */
  if (counting && n < 64) sizes[n++] = size;
  return __libc_malloc(size);
}

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
  void *(*create)(const char *) = (void *(*)(const char *))dlsym(h, "tir_create");
  typedef int (*run_fn)(void *, void *const *, void *const *);
  run_fn run = (run_fn)dlsym(h, "tir_run");
  void (*destroy)(void *) = (void (*)(void *))dlsym(h, "tir_destroy");
  counting = 1;
  void *m = create(NULL);
  counting = 0;
  if (!m) return 3;
  void *in = calloc(1, (size_t)atol(argv[2])), *out = calloc(1, (size_t)atol(argv[3]));
  void *ins[] = {in}, *outs[] = {out};
  int rc = run(m, ins, outs);
  destroy(m);
  for (int k = 0; k < n; k++) printf("tir_create malloc %zu\n", sizes[k]);
  printf("tir_run %d\n", rc);
  return 0;
}
"""


def _model(path) -> str:
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((C, C, 3, 3)).astype(np.float32) * 0.1, f"w{k}")
        for k in (1, 2)
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, H, H])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _figure(out: str, label: str) -> int:
    m = re.search(rf"^\s*{label}\s+([\d,]+) B", out, re.M)
    assert m, f"no '{label}' line in:\n{out}"
    return int(m.group(1).replace(",", ""))


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    d = tmp_path_factory.mktemp("driver")
    (d / "alloc.c").write_text(_DRIVER)
    cc = find_tool("clang", "clang-15")
    cmd = [cc, "-O1", "-fno-builtin", "-rdynamic", "-o", str(d / "alloc"), str(d / "alloc.c"), "-ldl"]
    subprocess.run(cmd, check=True, capture_output=True)
    return d / "alloc"


def test_plan_reports_what_tir_create_allocates(tmp_path, capsys, driver):
    model = _model(tmp_path / "m.onnx")
    assert main(["inspect", model, "--plan", "--records", "none"]) == 0
    out = capsys.readouterr().out
    allocated = _figure(out, "workspace allocated")
    activations, scratch = _figure(out, "activations alone"), _figure(out, "kernel scratch")
    assert scratch > 0 and allocated > activations, out  # this model's kernels need scratch
    assert _figure(out, "lower bound") <= allocated <= _figure(out, "no-reuse total")

    build = tmp_path / "build"
    assert main(["compile", model, "--records", "none", "-o", str(build)]) == 0
    manifest = json.loads((build / "manifest.json").read_text())
    assert manifest["workspace_bytes"] == allocated
    prepared = _figure(out, "prepared weights")  # the convs' Winograd U, computed by tir_create
    assert prepared == manifest["prepared_bytes"] > 0

    nbytes = str(C * H * H * 4)
    p = subprocess.run(
        [str(driver), str(build / "libmodel.so"), nbytes, nbytes], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    sizes = [int(s) for s in re.findall(r"^tir_create malloc (\d+)$", p.stdout, re.M)]
    assert "tir_run 0" in p.stdout.splitlines()
    # tir_create: the model object, the workspace and the prepared weights (ALIGN bytes more
    # each, to align them); nothing else
    assert sorted(sizes) == sorted([48, allocated + ALIGN, prepared + ALIGN]), p.stdout


def test_plan_follows_the_target(tmp_path, capsys):
    """--target: the plan of the model compiled for that target (android-arm64 here: NEON's
    NCHW4c layout and kernels); each figure is that build's manifest's."""
    model = _model(tmp_path / "m.onnx")
    assert main(["inspect", model, "--plan", "--records", "none", "--target", "android-arm64"]) == 0
    out = capsys.readouterr().out
    assert "compiled for android-arm64" in out
    assert (
        main(["compile", model, "--records", "none", "--target", "android-arm64", "-o", str(tmp_path / "a")])
        == 0
    )
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert _figure(out, "workspace allocated") == manifest["workspace_bytes"]
    assert _figure(out, "lower bound") == manifest["workspace_lower_bound"]
    assert _figure(out, "no-reuse total") == manifest["workspace_no_reuse"]
    assert manifest["workspace_order"] in ("size", "size, last read first", "in order")
    assert f"offsets: first fit, {manifest['workspace_order']})" in out
