"""fuse_expand: a whole inverted-residual block (1x1 expand -> depthwise -> 1x1 project) as one
kernel where the expanded tensor is large; the merged 1x1 accumulating in full vectors when
its output block is narrower (conv_algorithms._dwpw). Graph text, the kernel's loop
structure, numerics against onnxruntime."""

from __future__ import annotations

import re

import numpy as np
import onnx.helper as oh
import onnxruntime as ort
import pytest

import tensorir as tir
from tensorir.errors import TirError
from tensorir.frontend import load_graph_any
from tensorir.graph.printer import print_graph
from tensorir.graph.verify import verify
from tensorir.passes.fuse_dwpw import MIN_EXPANDED_BYTES, fuse_dwpw, fuse_expand
from tensorir.pipeline import optimize

from .helpers import onnx_model

RNG = np.random.default_rng(5)


def _block(cin: int, hidden: int, cout: int, size: int, stride: int):
    """Conv 1x1 expand + Clip, depthwise 3x3 + Clip, Conv 1x1 project (+ the input when the
    shapes allow), NCHW as an exporter writes it."""
    w = {
        "we": (RNG.standard_normal((hidden, cin, 1, 1)) * 0.2).astype(np.float32),
        "be": (RNG.standard_normal(hidden) * 0.1).astype(np.float32),
        "wd": (RNG.standard_normal((hidden, 1, 3, 3)) * 0.3).astype(np.float32),
        "bd": (RNG.standard_normal(hidden) * 0.1).astype(np.float32),
        "wp": (RNG.standard_normal((cout, hidden, 1, 1)) * 0.1).astype(np.float32),
        "bp": (RNG.standard_normal(cout) * 0.1).astype(np.float32),
        "lo": np.array(0, np.float32),
        "hi": np.array(6, np.float32),
    }
    residual = stride == 1 and cin == cout
    nodes = [
        oh.make_node("Conv", ["x", "we", "be"], ["e"]),
        oh.make_node("Clip", ["e", "lo", "hi"], ["ea"]),
        oh.make_node("Conv", ["ea", "wd", "bd"], ["d"], group=hidden, pads=[1] * 4, strides=[stride] * 2),
        oh.make_node("Clip", ["d", "lo", "hi"], ["da"]),
        oh.make_node("Conv", ["da", "wp", "bp"], ["p" if residual else "y"]),
    ]
    if residual:
        nodes.append(oh.make_node("Add", ["p", "x"], ["y"]))
    out = size // stride
    return onnx_model(nodes, "block", [1, cin, size, size], [1, cout, out, out], w)


# (cin, hidden, cout, size, stride): MobileNetV2-224's second block (stride 2, 96 x 112 x 112
# expanded, 4.8 MB) at 96 x 96, and a residual block with 24 channels (blocks of 8: the 1x1
# runs in 16-lane vectors) whose 144 x 64 x 64 expanded tensor is 2.4 MB
BIG = [(16, 96, 24, 96, 2), (24, 144, 24, 64, 1)]


def _merged(mod) -> list[str]:
    return [k["workload"].split(" ")[0] for k in mod.manifest["kernels"] if "conv2d_nchwc" in k["workload"]]


@pytest.mark.parametrize("shape", BIG, ids=["stride2", "residual"])
def test_block_is_one_kernel_and_matches_onnxruntime(shape):
    model = _block(*shape)
    feeds = {"x": RNG.standard_normal((1, shape[0], shape[3], shape[3])).astype(np.float32)}
    mod = tir.compile(model)
    (kernel,) = _merged(mod)  # expand, depthwise and project in one kernel
    assert kernel.count("conv2d_nchwc") == 3, kernel
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    (got,) = mod.run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    pair = tir.compile(model, fuse_dwpw=True)  # depthwise + 1x1 only: the expand apart
    assert sorted(k.count("conv2d_nchwc") for k in _merged(pair)) == [1, 2]
    np.testing.assert_allclose(pair.run(feeds)[0], want, rtol=1e-4, atol=1e-4)


def test_graph_before_and_after():
    g = optimize(load_graph_any(_block(*BIG[1])), fuse_dwpw=True)
    bodies = [ln.split("body=")[1].split(" : ")[0] for ln in print_graph(g).splitlines() if "fused(" in ln]
    assert bodies == ["conv2d_nchwc+clip", "conv2d_nchwc+clip+conv2d_nchwc+add"]
    assert fuse_expand(g)
    (line,) = [ln for ln in print_graph(g).splitlines() if "fused(" in ln]
    assert line.split("body=")[1].split(" : ")[0].count("conv2d_nchwc") == 3, line
    assert not fuse_expand(g) and not fuse_dwpw(g)  # nothing left to merge


def test_small_blocks_and_the_switch_keep_the_expand_apart(monkeypatch):
    small = _block(24, 144, 24, 32, 1)  # 144 x 32 x 32 floats: 0.6 MB
    assert MIN_EXPANDED_BYTES > 144 * 32 * 32 * 4
    assert sorted(k.count("conv2d_nchwc") for k in _merged(tir.compile(small))) == [1, 2]
    monkeypatch.setenv("TIR_FUSE_EXPAND", "0")
    assert sorted(k.count("conv2d_nchwc") for k in _merged(tir.compile(_block(*BIG[1])))) == [1, 2]


def test_merged_kernel_computes_the_expand_per_group_of_channel_blocks():
    """In the kernel: per row chunk (the parallel loop), per group of ex_blocks channel blocks
    of the hidden tensor (144 channels: 9 blocks of 16, in groups of 3), the expand's sums
    over the chunk's rows plus the depthwise halo, then each block's padded rows; the 1x1
    project's sums run in 16-lane vectors (24 outputs: 2 vectors, the second half zero
    weights)."""
    from tensorir.loop.printer import to_text
    from tensorir.pipeline import compile_graph

    build = compile_graph(load_graph_any(_block(*BIG[1])), "x86_64-v4")  # 16-lane sums
    (kernel,) = [k for k in build.kernels if "conv_nchwc_pad" in to_text(k)]
    text = to_text(kernel)
    body = text[text.index("in parallel(") :]
    accs = re.findall(r"(f\d)_conv_nchwc_acc = allocate\(f32\[([\d,]+)\]", body)
    assert [a for a, _ in accs] == ["f0", "f2", "f4"], accs  # expand, depthwise, project
    (_, ex), (_, dw), (_, pw) = accs
    mid = re.search(r"f\d_clip = allocate\(f32\[1,(\d+),(\d+),64,16\]", body)  # every block, the chunk's rows
    chunk = int(mid.group(2))
    assert ex == f"1,3,{chunk + 2},64,16"  # three channel blocks, the halo rows included
    assert re.fullmatch(r"1,1,1,\d+,16", dw), dw  # the depthwise sums of one register tile
    assert pw.split(",")[1] == "2" and pw.endswith(",16")  # 24 channels in two 16-lane vectors
    assert "max(" in body.split("f0_conv_nchwc_acc")[1]  # the first chunk's rows start at 0


def test_whole_block_is_a_model_level_choice(tmp_path):
    """`tir tune` measures the model with the whole block merged ("block"), with the
    depthwise + 1x1 pair only (True) and unmerged (False); a record's choice is what compiles."""
    import onnx

    from autotune.graph_tune import layout_choices, model_configs
    from tensorir.compiler import model_key

    path = tmp_path / "block.onnx"
    onnx.save(_block(*BIG[0]), path)
    configs = model_configs(path, "host", None)
    assert [c["fuse_dwpw"] for c in configs[:3]] == ["block", True, False]
    assert len(configs) == 3 * len(layout_choices("host"))
    key, lanes = model_key(path.read_bytes()), tir.target.get_target("host").vector_lanes("float32")

    def convs(merge):
        mod = tir.compile(str(path), records={key: {"layout_block": lanes, "fuse_dwpw": merge}})
        return sorted(k.count("conv2d_nchwc") for k in _merged(mod))

    assert convs("block") == [3] and convs(True) == [1, 2] and convs(False) == [1, 1, 1]


def test_a_merge_plan_chooses_per_block():
    """A plan (one letter per depthwise conv, in weight order: N apart, T with the 1x1 after,
    B the whole block) merges what it says; where a level cannot apply (no expand in front of
    the first block, 7-row maps below the merge's MIN_ROWS) it merges less, and plan_of reads
    back what was done. The size rule for B does not apply: the plan was measured."""
    from autotune.task import load_graph
    from benchmarks.zoo import build
    from tensorir.passes import copy_graph
    from tensorir.passes.fuse_dwpw import apply_plan, depthwise_convs, plan_of

    model = build("mobilenet_v2_224")
    unmerged = load_graph(model, fuse_dwpw=False)
    assert len(depthwise_convs(unmerged)) == 17 and plan_of(unmerged) == "N" * 17
    assert plan_of(load_graph(model, fuse_dwpw="block")) == "TB" + "T" * 11 + "NNNN"  # the rules' plan
    for plan, done in [("B" * 17, "T" + "B" * 12 + "NNNN"), ("NTB" * 5 + "TT", "NTBNTBNTBNTBNNNNN")]:
        g = copy_graph(unmerged)
        assert apply_plan(g, plan)
        verify(g)
        assert plan_of(g) == done
    with pytest.raises(TirError, match="17 depthwise convs"):
        apply_plan(copy_graph(unmerged), "TB")


def test_a_plan_record_compiles_and_matches_onnxruntime():
    from benchmarks.zoo import build, sample_inputs
    from tensorir.compiler import model_key

    model = build("mobilenet_v2_96")
    feeds = sample_inputs(model)
    key, lanes = model_key(model.SerializeToString()), tir.target.get_target("host").vector_lanes("float32")
    plan = "NB" + "T" * 11 + "BNNN"  # 3 x 3 maps at the end: only N applies there
    mod = tir.compile(model, records={key: {"layout_block": lanes, "fuse_dwpw": plan}})
    bodies = [k["workload"].split(" ")[0] for k in mod.manifest["kernels"]]
    assert sorted(b.count("conv2d_nchwc") for b in bodies if "conv2d_nchwc" in b).count(3) == 1
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for got, ref in zip(mod.run(feeds), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("blocks", [1, 2, 3])
def test_expand_blocks_per_register_tile_match_onnxruntime(blocks):
    """Knob ex_blocks: 1, 2 or 3 channel blocks of the expand per register tile (18 blocks of
    8 on AVX2), each a correct kernel; the expand's buffer holds that many blocks."""
    from tensorir.schedule.space import pin

    model = _block(*BIG[1])
    feeds = {"x": RNG.standard_normal((1, 24, 64, 64)).astype(np.float32)}
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    from tensorir.loop.printer import to_text
    from tensorir.pipeline import compile_graph

    with pin("ex_blocks", blocks):
        build = compile_graph(load_graph_any(model), "x86_64-v3")
        mod = tir.compile(model, "x86_64-v3")
    (text,) = [to_text(k) for k in build.kernels if "conv_nchwc_pad" in to_text(k)]
    ex = re.search(r"f0_conv_nchwc_acc = allocate\(f32\[1,(\d+),", text)
    assert ex and int(ex.group(1)) == blocks, text[:2000]
    (kernel,) = _merged(mod)
    assert kernel.count("conv2d_nchwc") == 3, kernel
    np.testing.assert_allclose(mod.run(feeds)[0], want, rtol=1e-4, atol=1e-4)


def test_a_wide_stride2_block_sizes_its_row_chunk_to_the_stack():
    """A stride-2 block with wide rows and one 32-channel block (as PicoDet's first block at
    800 x 608): each output row needs two padded input rows of twice the width, and the
    expand's sums for them, so a chunk sized by the depthwise output alone (mid) needed 4.7 MB
    of stack, past codegen's 4 MB limit, and the build failed. The chunk now counts them all:
    the kernel's local buffers stay under STACK_BYTES, and it matches onnxruntime."""
    from tensorir.loop.printer import to_text
    from tensorir.ops.dwpw import STACK_BYTES
    from tensorir.pipeline import compile_graph

    model = _block(16, 32, 16, 400, 2)
    build = compile_graph(load_graph_any(model), "x86_64-v4", layout_block=32, fuse_dwpw="B")
    (kernel,) = [k for k in build.kernels if "conv_nchwc_pad" in to_text(k)]
    text = to_text(kernel)
    sizes = [
        np.prod([int(d) for d in dims.split(",")]) * 4
        for dims in re.findall(r"allocate\(f32\[([\d,]+)\]", text)
    ]
    assert sum(sizes) <= STACK_BYTES, sizes  # mid, the padded rows, the expand sums, the tiles
    mod = tir.compile(model, layout_block=32, fuse_dwpw="B")
    (merged,) = _merged(mod)
    assert merged.count("conv2d_nchwc") == 3, merged
    feeds = {"x": RNG.standard_normal((1, 16, 400, 400)).astype(np.float32)}
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(mod.run(feeds)[0], want, rtol=1e-4, atol=1e-4)
