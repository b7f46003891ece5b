"""The model-level knobs (layout block, depthwise + 1x1 merge): measured end to end, recorded,
used by compile."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import tensorir as tir
from autotune.database import Database
from autotune.graph_tune import layout_choices, model_configs, tune_model_level
from autotune.records import Records
from tensorir.compiler import model_key

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "tiny_cnn.onnx"


def _feeds(path: Path) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(str(path))
    rng = np.random.default_rng(0)
    return {i.name: rng.uniform(-1, 1, i.shape).astype(np.float32) for i in sess.get_inputs()}


def test_layout_choices_from_target_lanes():
    lanes = tir.target.get_target("host").vector_lanes("float32")
    assert layout_choices("host") == sorted({lanes // 2, lanes, lanes * 2})
    assert layout_choices("linux-arm64") == [2, 4, 8]


@pytest.mark.parametrize("block", [4, 8, 32])
def test_compile_with_layout_block_matches_ort(block):
    feeds = _feeds(TINY)
    mod = tir.compile(str(TINY), layout_block=block)
    assert mod.manifest["layout_block"] == block
    want = ort.InferenceSession(str(TINY)).run(None, feeds)
    for got, ref in zip(mod.run(feeds), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_tune_model_level_records_each_config_once_and_compile_uses_the_best(tmp_path):
    db = Database(tmp_path / "t.db")
    best = tune_model_level(TINY, db, runs=5, log=lambda _: None)
    key = model_key(TINY.read_bytes())
    recs = db.workload_records(key, "host", "host")
    # tiny_cnn has no depthwise conv: only the layout block is a choice
    assert sorted(r["config"]["layout_block"] for r in recs) == layout_choices("host")
    assert all("fuse_dwpw" not in r["config"] for r in recs)
    assert best == min(recs, key=lambda r: r["mean_cost"])["config"]
    assert tune_model_level(TINY, db, runs=5, log=lambda _: None) == best  # nothing re-measured
    assert len(db.workload_records(key, "host", "host")) == 3
    records = Records.open(db=tmp_path / "t.db", logs=None)
    mod = tir.compile(str(TINY), records=records)
    assert mod.manifest["layout_block"] == best["layout_block"]


def _merged(mod) -> int:
    return sum(k["workload"].split(" ")[0].count("conv2d_nchwc") == 2 for k in mod.manifest["kernels"])


def test_depthwise_merge_is_a_model_level_choice(tmp_path):
    from benchmarks.zoo import save

    path = tmp_path / "mv2.onnx"
    save("mobilenet_v2_96", path)
    configs = model_configs(path, "host", None)
    lanes = tir.target.get_target("host").vector_lanes("float32")
    assert {"layout_block": lanes, "fuse_dwpw": True} in configs
    assert {"layout_block": lanes, "fuse_dwpw": False} in configs
    assert len(configs) == 2 * len(layout_choices("host"))
    key = model_key(path.read_bytes())
    merged_on = tir.compile(str(path), records={key: {"layout_block": lanes, "fuse_dwpw": True}})
    merged_off = tir.compile(str(path), records={key: {"layout_block": lanes, "fuse_dwpw": False}})
    legacy = tir.compile(str(path), records={key: {"layout_block": lanes}})  # measured unmerged
    assert _merged(merged_on) > 0 and _merged(merged_off) == 0 and _merged(legacy) == 0
    assert _merged(tir.compile(str(path))) > 0  # no record: the default (on)


def test_a_new_round_replaces_the_models_old_records(tmp_path):
    """A config without a record (new code offers a new choice) re-measures every config;
    the old round's records go (their timings came from other code), even a faster one."""
    db = Database(tmp_path / "t.db")
    key = model_key(TINY.read_bytes())
    stale = {"workload_key": key, "device": "host", "target": "host", "config": {"layout_block": 8}}
    db.add({**stale, "costs": [1e-9]})  # an old round: one config, impossibly fast
    best = tune_model_level(TINY, db, runs=3, log=lambda _: None)
    recs = db.workload_records(key, "host", "host")
    assert sorted(r["config"]["layout_block"] for r in recs) == layout_choices("host")
    assert all(r["mean_cost"] > 1e-9 for r in recs)  # the stale record is gone
    assert best == min(recs, key=lambda r: r["mean_cost"])["config"]
    other = {**stale, "workload_key": "another model"}
    db.add({**other, "costs": [1e-3]})
    assert db.forget(key, "host") == len(layout_choices("host"))
    assert db.workload_records(key, "host") == [] and db.workload_records("another model", "host")
