"""TFLite frontend on whole Keras models (float32 and fp16 weights): the imported graph on the
reference path and compiled for the host match the TFLite interpreter, and the optimized graph
keeps no transpose between two convolutions; the mixed model on linux-arm64 (qemu) and android-arm64."""

from __future__ import annotations

import tempfile
from pathlib import Path

import networkx as nx
import pytest

from tensorir.frontend.tflite import from_tflite
from tensorir.graph.graph import Graph
from tensorir.ops.registry import kernel_op
from tensorir.pipeline import compile_graph, load_folder, optimize
from tensorir.runtime.reference import run_reference
from tests.frontend import tflite_cases as tc

pytestmark = pytest.mark.tf  # TensorFlow in the process: a session of its own (quickstart.sh)

MODELS = ["convnet", "convnet_fp16", "mobilenet_v2", "mobilenet_v2_fp16", "mixed"]
COMPILED = ["convnet", "convnet_fp16", "mobilenet_v2", "mixed"]
CONV_OPS = ("conv", "conv2d_nchwc", "conv_transpose")


@pytest.fixture(scope="session")
def tflite_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return tc.build_all(tmp_path_factory.getbasetemp() / "tflite")


def _outputs(g: Graph, outs: list) -> dict:
    return {name: o for (name, _), o in zip(g.outputs, outs, strict=True)}


@pytest.mark.parametrize("name", MODELS)
def test_reference_matches_interpreter(tflite_files, name):
    path = tflite_files[name]
    feeds = tc.seeded_inputs(path)
    g = from_tflite(path)
    tc.close(_outputs(g, run_reference(g, feeds)), tc.interpret(path, feeds))


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_for_host_matches_interpreter(tflite_files, name):
    path = tflite_files[name]
    feeds = tc.seeded_inputs(path)
    g = from_tflite(path)
    build = compile_graph(g, "host", raw=path.read_bytes())
    module = load_folder(build.write(tempfile.mkdtemp(prefix="tir-tflite-")))
    tc.close(_outputs(g, module.run(feeds)), tc.interpret(path, feeds))


def transposes_between_convs(g: Graph) -> list[int]:
    """Transpose nodes with a convolution both upstream and downstream."""
    conv = {n for n in g.op_nodes() if kernel_op(g.node(n).op, g.node(n).attr) in CONV_OPS}
    found = []
    for n in g.op_nodes():
        if g.node(n).op == "transpose" and nx.ancestors(g.nx, n) & conv and nx.descendants(g.nx, n) & conv:
            found.append(n)
    return found


@pytest.mark.parametrize("name", ["convnet", "mobilenet_v2", "mixed"])
def test_no_transpose_between_convolutions(tflite_files, name):
    g = optimize(from_tflite(tflite_files[name]))
    assert transposes_between_convs(g) == []
    ops = [g.node(n).op for n in g.op_nodes()]
    assert ops.count("transpose") <= 2, ops  # NHWC graph input -> NCHW, NCHW -> NHWC graph output


def test_arm64_builds(tflite_files, tmp_path):
    """linux-arm64 runs under qemu and matches; android-arm64 exports an AArch64 library."""
    path = tflite_files["mixed"]
    feeds = tc.seeded_inputs(path)
    g = from_tflite(path)
    module = load_folder(compile_graph(g, "linux-arm64", raw=path.read_bytes()).write(tmp_path / "linux"))
    tc.close(_outputs(g, module.run(feeds)), tc.interpret(path, feeds))
    folder = compile_graph(g, "android-arm64", raw=path.read_bytes()).write(tmp_path / "android")
    header = (folder / "libmodel.so").read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
