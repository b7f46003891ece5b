"""fuse_dwpw: a depthwise conv group merged into the 1x1 conv after it (graph text before /
after, the kernel's loop structure, numerics against the reference and onnxruntime)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import onnxruntime as ort
import pytest

import tensorir as tir
from benchmarks.zoo import build_for_tests, sample_inputs
from tensorir.graph.graph import Graph
from tensorir.graph.printer import print_graph
from tensorir.graph.types import TensorType
from tensorir.graph.verify import verify
from tensorir.loop.printer import to_text
from tensorir.passes.fuse_dwpw import fuse_dwpw
from tensorir.passes.fuse_ops import fuse_ops
from tensorir.pipeline import compile_graph, load_folder
from tensorir.runtime.reference import run_reference

from .helpers import onnx_model

RNG = np.random.default_rng(3)
PACKED = {"dilations": (1, 1), "group": 1, "pads": (0, 0, 0, 0), "strides": (1, 1)}


def _const(g: Graph, *shape: int):
    return g.add_const((RNG.standard_normal(shape) * 0.3).astype(np.float32))


def _block(stride: int = 1, residual: bool = True, pw_channels: int = 32) -> Graph:
    """Packed NCHW16c: depthwise 3x3 + bias + clip, then 1x1 + bias (+ the block's input)."""
    g = Graph("block")
    x = g.add_input("x", TensorType((1, 2, 16, 16, 16)))
    dw = {"dilations": (1, 1), "group": 32, "pads": (1, 1, 1, 1), "strides": (stride, stride)}
    (d,) = g.add_node("conv2d_nchwc", [x, _const(g, 2, 1, 3, 3, 1, 16), _const(g, 2, 16)], dw, name="dw")
    (a,) = g.add_node("clip", [d], {"min": 0.0, "max": 6.0}, name="dw_act")
    blocks = pw_channels // 16
    w, b = _const(g, blocks, 2, 1, 1, 16, 16), _const(g, blocks, 16)
    (p,) = g.add_node("conv2d_nchwc", [a, w, b], PACKED, name="project")
    if residual:
        (p,) = g.add_node("add", [p, x], name="residual")
    g.set_outputs([("y", p)])
    return g


def _body_lines(g: Graph) -> list[str]:
    return [ln for ln in print_graph(g).splitlines() if "constant" not in ln]


def test_depthwise_group_merges_into_the_pointwise_conv():
    g = _block()
    feeds = {"x": RNG.standard_normal((1, 2, 16, 16, 16), np.float32)}
    before = run_reference(g, feeds)
    fuse_ops(g)
    assert _body_lines(g)[1:-2] == [
        "  %9 = fused(%x, %c1, %c2) body=conv2d_nchwc+clip : f32[1,2,16,16,16]",
        "  %10 = fused(%9, %c5, %c6, %x) body=conv2d_nchwc+add : f32[1,2,16,16,16]",
    ]
    assert fuse_dwpw(g)
    verify(g)
    # one kernel; the block input x is read by the depthwise conv and the residual add alike
    assert _body_lines(g)[1:-2] == [
        "  %11 = fused(%x, %c1, %c2, %c5, %c6) body=conv2d_nchwc+clip+conv2d_nchwc+add : f32[1,2,16,16,16]",
    ]
    for p, q in zip(before, run_reference(g, feeds), strict=True):
        np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "case",
    [
        "depthwise read twice",
        "output of the graph",
        "1x1 weights too large",
        "3x3 after the depthwise",
        "few rows",
    ],
)
def test_groups_that_stay_apart(case):
    g = Graph("apart")
    rows = 6 if case == "few rows" else 8
    x = g.add_input("x", TensorType((1, 2, rows, 8, 16)))
    dw = {"dilations": (1, 1), "group": 32, "pads": (1, 1, 1, 1), "strides": (1, 1)}
    (d,) = g.add_node("conv2d_nchwc", [x, _const(g, 2, 1, 3, 3, 1, 16)], dw)
    if case == "3x3 after the depthwise":
        attrs = {**PACKED, "pads": (1, 1, 1, 1)}
        (p,) = g.add_node("conv2d_nchwc", [d, _const(g, 2, 2, 3, 3, 16, 16)], attrs)
    elif case == "1x1 weights too large":
        (p,) = g.add_node("conv2d_nchwc", [d, _const(g, 160, 2, 1, 1, 16, 16)], PACKED)  # 320 KB
    else:
        (p,) = g.add_node("conv2d_nchwc", [d, _const(g, 2, 2, 1, 1, 16, 16)], PACKED)
    outs = [("y", p)]
    if case == "depthwise read twice":
        (r,) = g.add_node("relu", [d])
        outs.append(("r", r))
    elif case == "output of the graph":
        outs.append(("d", d))
    g.set_outputs(outs)
    fuse_ops(g)
    assert not fuse_dwpw(g)


def _build(g: Graph, fuse: bool, monkeypatch):
    monkeypatch.setenv("TIR_FUSE_DWPW", "1" if fuse else "0")
    return compile_graph(g, "host")


@pytest.mark.parametrize("stride,residual", [(1, True), (2, False)])
def test_merged_kernel_keeps_the_depthwise_rows_on_the_stack(stride, residual, tmp_path, monkeypatch):
    g = _block(stride, residual)
    feeds = {"x": RNG.standard_normal((1, 2, 16, 16, 16), np.float32)}
    (want,) = run_reference(g, feeds)
    merged, apart = _build(g, True, monkeypatch), _build(g, False, monkeypatch)
    assert [c.symbol.split("_", 2)[-1] for c in merged.calls] == ["fused"]
    assert len(apart.calls) == 2
    (kernel,) = merged.kernels
    text = to_text(kernel)
    parallel = text.index("in parallel(")
    # the depthwise output of a row chunk, every channel block, lives in the chunk's loop
    oh = 16 // stride
    first = text[parallel:].splitlines()[1].strip()
    assert re.fullmatch(rf'f\d_\w+ = allocate\(f32\[1,2,\d+,{oh},16\], "local"\)', first), first
    assert len(re.findall(r"f\d_conv_nchwc_acc = allocate\(", text)) == 2  # depthwise, 1x1 sums
    for build, name in ((merged, "merged"), (apart, "apart")):
        (got,) = load_folder(build.write(tmp_path / name)).run(feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _mobilenet_block() -> onnx.ModelProto:
    """An inverted-residual block in NCHW as an exporter writes it (BN folded away)."""
    w = {
        "we": (RNG.standard_normal((96, 16, 1, 1)) * 0.2).astype(np.float32),
        "wd": (RNG.standard_normal((96, 1, 3, 3)) * 0.3).astype(np.float32),
        "bd": (RNG.standard_normal(96) * 0.1).astype(np.float32),
        "wp": (RNG.standard_normal((16, 96, 1, 1)) * 0.1).astype(np.float32),
        "lo": np.array(0, np.float32),
        "hi": np.array(6, np.float32),
    }
    nodes = [
        oh.make_node("Conv", ["x", "we"], ["e"]),
        oh.make_node("Clip", ["e", "lo", "hi"], ["ea"]),
        oh.make_node("Conv", ["ea", "wd", "bd"], ["d"], group=96, pads=[1, 1, 1, 1]),
        oh.make_node("Clip", ["d", "lo", "hi"], ["da"]),
        oh.make_node("Conv", ["da", "wp"], ["p"]),
        oh.make_node("Add", ["p", "x"], ["y"]),
    ]
    return onnx_model(nodes, "block", [1, 16, 20, 20], [1, 16, 20, 20], w)


def _merged_workloads(mod) -> list[str]:
    labels = [k["workload"].split(" ")[0] for k in mod.manifest["kernels"]]
    return [w for w in labels if w.count("conv2d_nchwc") >= 2]


@pytest.mark.parametrize("name", ["block", "mobilenet_v2_96", "mobilenet_v3_small"])
def test_models_with_merged_blocks_match_onnxruntime(name):
    model = _mobilenet_block() if name == "block" else build_for_tests(name)
    feeds = sample_inputs(model)
    mod = tir.compile(model)
    assert _merged_workloads(mod)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for ours, want in zip(mod.run(feeds), ref, strict=True):
        np.testing.assert_allclose(ours, want, rtol=1e-3, atol=1e-4)


def test_env_turns_it_off(monkeypatch):
    monkeypatch.setenv("TIR_FUSE_DWPW", "0")
    assert not _merged_workloads(tir.compile(_mobilenet_block()))
