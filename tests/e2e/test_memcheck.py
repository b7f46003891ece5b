"""The generated code is memory-safe by a tool, not by numerics alone: every zoo model
compiled for x86_64-v3 (valgrind cannot run AVX-512: it stops with SIGILL at the first EVEX
instruction) runs under valgrind memcheck from the C driver of the qemu runs
(tensorir/runtime/qemu.py: dlopen, tir_create, tir_run, tir_destroy), at 1 and 2 threads.
Each run must report zero errors and no definitely lost bytes, and really finish: its
outputs equal the same library's outputs run natively (bit for bit at one thread; at two,
within 1e-5 relative to the output's scale, since the thread split may reorder sums).
The large models (ONE_THREAD: the ResNets, MobileNetV1, MobileNetV2-224, YOLOv8n) run at one
thread only; the threaded paths (each thread's share of every parallel loop, its bounds and
tails) are the same code in every model and are checked at two threads on the small ones,
MobileNetV2-96 among them with the same kernel kinds as MobileNetV2-224. (ResNet-50's
two-thread run took six minutes of CI's thirty; ResNet-18, MobileNetV1, MobileNetV2-224 and
YOLOv8n took 54, 24, 60 and 55 s at both thread counts, `pytest --durations`, the two-thread
run most of each.) The ResNets run at 112x112 (REDUCED): the same kernel kinds as at 224 (13
Winograd convs, direct ones, the 1x1 convs with merged rows and a fused residual add), a
quarter of the work; at 224 they took 240 and 139 s of the suite's 30 minutes, valgrind alone
82 s per ResNet-18 run against 26 at 112."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tensorir as tir
from benchmarks.zoo import MODELS, build_for_tests, sample_inputs
from tensorir.graph.types import np_dtype
from tensorir.runtime.qemu import model_driver

VALGRIND = shutil.which("valgrind")
REDUCED = {"resnet18": 112, "resnet50": 112}  # input height and width under memcheck
ONE_THREAD = {"resnet18", "resnet50", "mobilenet_v1", "mobilenet_v2_224", "yolov8n_320"}


@pytest.fixture(scope="module")
def driver() -> Path:
    assert VALGRIND, "valgrind is missing: install it with apt-get install valgrind"
    return model_driver(cross=False)


def _memcheck(driver: Path, mod, feeds: dict, threads: int, tmp: Path) -> tuple[list[np.ndarray], str]:
    spec = []
    for k, t in enumerate(mod.inputs):
        path = tmp / f"in{k}.bin"
        np.ascontiguousarray(feeds[t["name"]], np_dtype(t["dtype"])).tofile(path)
        spec.append(f"{path.stat().st_size}:{path}")
    outs = [np.empty(t["shape"], np_dtype(t["dtype"])) for t in mod.outputs]
    spec += [f"{o.nbytes}:{tmp / f'out{k}.bin'}" for k, o in enumerate(outs)]
    lib = mod.dir / mod.manifest["library"]
    cmd = [VALGRIND, "--tool=memcheck", "--error-exitcode=99", "--leak-check=full"]
    cmd += ["--errors-for-leak-kinds=definite", str(driver), str(lib), "-", str(threads)]
    cmd += [str(len(mod.inputs)), str(len(outs)), *spec]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    got = [np.fromfile(tmp / f"out{k}.bin", o.dtype).reshape(o.shape) for k, o in enumerate(outs)]
    return got, p.stderr


def _random_feeds(mod) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {t["name"]: rng.standard_normal(t["shape"]).astype(np_dtype(t["dtype"])) for t in mod.inputs}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_zoo_model_runs_clean_under_memcheck(name, driver, tmp_path):
    model = build_for_tests(name)
    size = REDUCED.get(name)
    shapes = {model.graph.input[0].name: [1, 3, size, size]} if size else None
    mod = tir.compile(model, "x86_64-v3", input_shapes=shapes)
    feeds = sample_inputs(model) if size is None else _random_feeds(mod)
    for threads in (1,) if name in ONE_THREAD else (1, 2):
        mod.set_num_threads(threads)
        native = mod.run(feeds)
        got, log = _memcheck(driver, mod, feeds, threads, tmp_path)
        assert re.search(r"ERROR SUMMARY: 0 errors", log), log[-3000:]
        lost = re.search(r"definitely lost: ([\d,]+) bytes", log)
        assert lost is None or lost.group(1) == "0", log[-3000:]
        for g, n in zip(got, native, strict=True):
            if threads == 1:
                np.testing.assert_array_equal(g, n)
            else:
                scale = float(np.max(np.abs(n), initial=1.0))
                np.testing.assert_allclose(g, n, rtol=0, atol=1e-5 * scale)
