"""The layout block per segment: candidates from per-segment kernel times, tried on real
builds, kept only where the whole model runs faster; recorded and compiled like the other
model-level choices."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tensorir as tir
from autotune.segment_caps import candidates, segment_of_names
from tensorir.frontend.onnx import from_onnx
from tensorir.pipeline import optimize

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "tiny_cnn.onnx"  # three segments: the input, conv 1's, conv 2's
LANES = tir.target.get_target("host").vector_lanes("float32")
V4 = "x86_64-v4"  # the fake tuner times caps 8, 16 and 32: the choices of a 16-lane target


def test_candidates_are_segments_that_gain_beyond_margin_and_floor():
    times = {
        8: np.array([1.0, 0.50, 0.300, 5.00]),
        16: np.array([1.0, 0.60, 0.305, 4.00]),
        32: np.array([1.0, 0.40, 0.310, 4.10]),
    }
    # segment 1: 32 saves 0.2 (33%); segment 2: 8 saves 1.6%, under the 5% margin;
    # segment 3: 16 is the base's own and fastest
    assert candidates(times, 16) == [(0.19999999999999996, 1, 32)]
    assert candidates(times, 16, floor=0.05) == []  # 0.2 is under 5% of the model's 5.905


def test_every_kernel_of_a_zoo_model_is_charged_to_a_segment(tmp_path):
    from benchmarks.zoo import save

    path = tmp_path / "mv2.onnx"
    save("mobilenet_v2_96", path)
    names = segment_of_names(optimize(from_onnx(str(path)), fuse=False, layout=False))
    kernels = tir.compile(str(path)).manifest["kernels"]
    missing = [k["symbol"] for k in kernels if k.get("node") not in names]
    # the input's NCHW -> NCHW[x]c view and the classifier after the last unpack
    assert len(missing) <= 3, missing


class _Built:
    def __init__(self, config: dict):
        self.config = config


def _fake_tuner(monkeypatch, model_cost):
    """graph_tune with builds that only carry their config, a profile charging each segment
    per cap (segment 1 is 30% faster with 32, segment 2 looks 10% faster with 8) and whole-model
    and kernel timings from `model_cost(caps)`."""
    import autotune.graph_tune as gt
    import autotune.segment_caps as sc

    per_cap = {8: [0.0, 1.0, 0.9], 16: [0.0, 1.0, 1.0], 32: [0.0, 0.7, 1.1]}

    def cost_of(blocks: int | list[int]) -> float:  # one cap for the model: the same in each segment
        return model_cost([blocks] * 3 if isinstance(blocks, int) else blocks)

    monkeypatch.setattr(gt, "_compile", lambda model, target, shapes, config, threads: _Built(config))
    monkeypatch.setattr(
        sc,
        "segment_times",
        lambda mods, names, n, rounds=5: [np.array(per_cap[m.config["layout_block"]]) for m in mods],
    )
    monkeypatch.setattr(
        sc,
        "kernel_times",
        lambda mods, rounds=5: [np.array([cost_of(m.config["layout_block"])]) for m in mods],
    )
    monkeypatch.setattr(
        gt,
        "time_interleaved",
        lambda mods, runs, rounds=5: [[cost_of(m.config["layout_block"])] * rounds for m in mods],
    )
    return gt


def test_a_candidate_that_holds_in_the_whole_model_is_kept(monkeypatch):
    def cost(caps):  # the model runs faster with segment 1 at 32, slower with segment 2 at 8
        return 2.0 - 0.3 * (caps[1] == 32) + 0.1 * (caps[2] == 8)

    gt = _fake_tuner(monkeypatch, cost)
    logs: list[str] = []
    caps = gt.refine_layout_caps(TINY, V4, None, {"layout_block": 16}, runs=4, log=logs.append)
    print("\n".join(logs))
    assert caps == [16, 32, 16]
    assert any("segment 1 -> 32" in line and "kept" in line for line in logs)
    assert any("segment 2 -> 8" in line and "no gain" in line for line in logs)


def test_caps_that_do_not_win_the_whole_model_leave_one_block(monkeypatch):
    """The kernels of segment 1 ran faster with 32, but the whole model does not (a conv
    reading across the border got slower): every segment keeps the base's block."""
    timed = {"n": 0}

    def cost(caps):
        timed["n"] += 1
        return 2.0 - 0.3 * (caps[1] == 32) * (timed["n"] <= 2)  # faster in the kernel profile only

    gt = _fake_tuner(monkeypatch, cost)
    logs: list[str] = []
    caps = gt.refine_layout_caps(TINY, V4, None, {"layout_block": 16}, runs=4, log=logs.append)
    assert caps == [16, 16, 16]
    assert "it stays" in logs[-1]


def test_recorded_caps_compile_per_segment(tmp_path):
    """A record whose layout block is a list of caps: `tir compile` packs each segment in its
    own block (tiny_cnn: conv 1's 16 channels at 8, conv 2's 32 at 32)."""
    from tensorir.compiler import model_key

    key = model_key(TINY.read_bytes())
    mod = tir.compile(str(TINY), records={key: {"layout_block": [LANES, 8, 32]}})
    assert mod.manifest["layout_block"] == [LANES, 8, 32]
    inputs = [k["workload"].split(" ")[1].split("]")[0] + "]" for k in mod.manifest["kernels"]]
    # conv 1 writes 2 blocks of 8, which the pool keeps; conv 2 reads them and writes 1 of 32
    assert inputs[:4] == ["f32[1,3,32,32,1]", "f32[1,2,32,32,8]", "f32[1,2,16,16,8]", "f32[1,1,16,16,32]"]
    feeds = {"input": np.random.default_rng(0).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)}
    np.testing.assert_allclose(mod.run(feeds)[0], tir.compile(str(TINY)).run(feeds)[0], rtol=1e-5, atol=1e-6)
