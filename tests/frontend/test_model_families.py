"""Issue 13's model families (family_fixtures.py) in every format: imported, run on the reference
path and compiled for the host, matched against Keras (SavedModel, frozen .pb, .keras) or the
TFLite interpreter (.tflite float32 and fp16 weights); the compiled graph keeps no transpose
between two convolutions. Every family in every format also compiled for android-arm64 (one build
per distinct graph after the graph passes: the formats of one source mostly give the same), and
one for linux-arm64 (run under qemu). Each family is built and exported once per session, when a
test first needs it."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tensorir.frontend import load_graph_any
from tensorir.graph.graph import Graph
from tensorir.pipeline import compile_graph, load_folder
from tensorir.runtime.reference import run_reference
from tests.frontend import family_fixtures as ff
from tests.frontend.test_tflite_models import transposes_between_convs

pytestmark = pytest.mark.tf  # TensorFlow in the process: a session of its own (quickstart.sh)

RTOL, ATOL = 1e-3, 1e-4  # max |ours - oracle| <= ATOL + RTOL * max |oracle|
CASES = list(itertools.product(ff.FAMILIES, ff.FORMATS))


@pytest.fixture(scope="session")
def family(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Any]]:
    """name -> the family's files, input and oracle outputs (built on first use, once per
    session: under pytest-xdist the workers share the folder beside their own tmp folders)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "families"
    built: dict[str, dict[str, Any]] = {}

    def get(name: str) -> dict[str, Any]:
        if name not in built:
            built[name] = ff.ensure_family(name, root)
        return built[name]

    return get


def check_close(out: np.ndarray, expected: np.ndarray) -> float:
    """The max abs error relative to max |expected|, asserted within the tolerance."""
    assert out.shape == expected.shape, (out.shape, expected.shape)
    scale = float(np.abs(expected).max())
    err = float(np.abs(out - expected).max())
    assert err <= ATOL + RTOL * scale, f"max abs error {err:.3g} (rel {err / scale:.3g})"
    return err / scale


def _compiled(g: Graph, path: Path, target: str, out: Path) -> Any:
    build = compile_graph(g, target, raw=str(path).encode())
    return build, load_folder(build.write(out))


@pytest.mark.parametrize(("name", "fmt"), CASES)
def test_family_matches(family, tmp_path, name, fmt):
    """Reference path and host build match the oracle; no transpose between convolutions."""
    m = family(name)
    path, expected = m["paths"][fmt], m["expected"][fmt]
    g = load_graph_any(path)
    (inp,) = g.input_names()
    ref_err = check_close(run_reference(g, {inp: m["x"]})[0], expected)
    build, module = _compiled(g, path, "host", tmp_path / "host")
    host_err = check_close(module.run({inp: m["x"]})[0], expected)
    print(f"{name} {fmt}: max rel error reference {ref_err:.2e}, host {host_err:.2e}")
    assert transposes_between_convs(build.graph) == []


TF_GRAPH, TFLITE = ("saved_model", "pb", "keras"), ("tflite", "tflite_fp16")  # one trace, one converter


@pytest.mark.arm64
@pytest.mark.parametrize(("name", "formats"), itertools.product(ff.FAMILIES, (TF_GRAPH, TFLITE)))
def test_family_compiles_for_android(family, tmp_path, name, formats):
    """Every family in every format: an android-arm64 library that imports only libc (what an
    app links; run under qemu below for MobileNetV3Small). The formats of one source (the
    frozen TensorFlow graph: SavedModel, .pb, .keras; the TFLite converter: float32 and fp16
    weights) mostly optimize to the same graph, op by op (ops, shapes, attributes; the
    constants' values are each format's own, checked against its oracle in
    test_family_matches): such a format's build would be the same kernels, so only a format
    whose graph differs is built again. (Compiling all five took 11 minutes of the suite.)"""
    from tensorir.codegen.link import needed_libraries

    paths = family(name)["paths"]
    built: set[str] = set()
    for fmt in formats:
        g = load_graph_any(paths[fmt])
        shape = _optimized_text(g, "android-arm64")
        if shape in built:
            continue  # the same graph as a format built above
        built.add(shape)
        folder = compile_graph(g, "android-arm64", raw=str(paths[fmt]).encode()).write(tmp_path / fmt)
        lib = folder / "libmodel.so"
        header = lib.read_bytes()[:20]
        assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
        assert needed_libraries(lib) == ["libc.so"], fmt


def _optimized_text(g: Graph, target: str) -> str:
    """The graph after the graph passes for `target`, printed without the constants' values
    and with node names numbered in order (the formats name their tensors differently)."""
    from tensorir.graph.printer import print_graph
    from tensorir.pipeline import optimize
    from tensorir.target import get_target

    text = print_graph(optimize(g, target=get_target(target)), constants=False).split("\n", 1)[1]
    text = re.sub(r" as \S+", " as <output>", text)  # the outputs' names are the format's own
    order: dict[str, str] = {}
    return re.sub(r"%[^\s,()\[\]=.]+", lambda m: order.setdefault(m.group(0), f"%{len(order)}"), text)


@pytest.mark.arm64
@pytest.mark.parametrize("fmt", ["saved_model", "tflite"])
def test_arm64_builds(family, tmp_path, fmt):
    """MobileNetV3Small for linux-arm64 runs under qemu and matches; android-arm64 exports an
    AArch64 library."""
    m = family("mobilenet_v3_small")
    path, expected = m["paths"][fmt], m["expected"][fmt]
    g = load_graph_any(path)
    (inp,) = g.input_names()
    _, module = _compiled(g, path, "linux-arm64", tmp_path / "linux")
    check_close(module.run({inp: m["x"]})[0], expected)
    folder = compile_graph(g, "android-arm64", raw=str(path).encode()).write(tmp_path / "android")
    header = (folder / "libmodel.so").read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
