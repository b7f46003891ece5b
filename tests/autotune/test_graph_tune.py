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
    # tiny_cnn has no depthwise conv: only the layout block is a choice, one for the model,
    # then one per layout segment (three: the input, conv 1's, conv 2's), measured with them
    blocks = [r["config"]["layout_block"] for r in recs]
    assert sorted(b for b in blocks if isinstance(b, int)) == layout_choices("host")
    assert [len(b) for b in blocks if isinstance(b, list)] == [3]
    assert all("fuse_dwpw" not in r["config"] for r in recs)
    assert best == min(recs, key=lambda r: r["mean_cost"])["config"]
    assert tune_model_level(TINY, db, runs=5, log=lambda _: None) == best  # nothing re-measured
    assert len(db.workload_records(key, "host", "host")) == 4
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
    rules = tir.compile(str(path))
    assert _merged(rules) > 0  # no record: the default (on)
    # a whole-model verdict with no layout config was timed with the rules' build: so is this
    verdict = tir.compile(str(path), records={key: {"kernel_records": True}})
    assert (
        _merged(verdict) == _merged(rules)
        and verdict.manifest["layout_block"] == rules.manifest["layout_block"]
    )
    off = tir.compile(
        str(path), records={key: {"kernel_records": True, "layout_block": lanes, "fuse_dwpw": False}}
    )
    assert _merged(off) == 0


def test_a_new_round_replaces_the_models_old_records(tmp_path):
    """A config without a record (new code offers a new choice) re-measures every config;
    the old round's records go (their timings came from other code), even a faster one."""
    db = Database(tmp_path / "t.db")
    key = model_key(TINY.read_bytes())
    stale = {"workload_key": key, "device": "host", "target": "host", "config": {"layout_block": 8}}
    db.add({**stale, "costs": [1e-9]})  # an old round: one config, impossibly fast
    best = tune_model_level(TINY, db, runs=3, log=lambda _: None, per_block=False)
    recs = db.workload_records(key, "host", "host")
    assert sorted(r["config"]["layout_block"] for r in recs) == layout_choices("host")
    assert all(r["mean_cost"] > 1e-9 for r in recs)  # the stale record is gone
    assert best == min(recs, key=lambda r: r["mean_cost"])["config"]
    other = {**stale, "workload_key": "another model"}
    db.add({**other, "costs": [1e-3]})
    assert db.forget(key, "host") == len(layout_choices("host"))
    assert db.workload_records(key, "host") == [] and db.workload_records("another model", "host")


class _Built:
    def __init__(self, config: dict):
        self.config = config


def test_merge_plan_is_refined_block_by_block(tmp_path, monkeypatch):
    """From the rules' plan, each depthwise conv tries its other levels with the whole model
    timed (here a fake clock: the model runs 5% faster with conv 2 apart, 1.5% faster with
    conv 4 as a whole block, below the 2% margin, and with conv 1 apart looks 5% faster the
    first time only); only the win that holds on fresh builds is kept, and the plan is then
    recorded, measured with the other configs, and compiled by `tir compile`."""
    import autotune.graph_tune as gt
    from benchmarks.zoo import save
    from tensorir.pipeline import is_plan

    path = tmp_path / "mv2.onnx"
    save("mobilenet_v2_96", path)

    timed: dict[str, int] = {}

    def cost(plan: str) -> float:
        luck = 0.05 * (plan[1] == "N" and timed.get(plan, 0) == 1)  # a lucky first timing
        return 1.0 - 0.05 * (plan[2] == "N") - 0.015 * (plan[4] == "B") - luck

    lanes = tir.target.get_target("host").vector_lanes("float32")
    base = {"layout_block": lanes, "fuse_dwpw": True}  # MobileNetV2-96 has no block big enough for "block"
    tried = []

    def fake_compile(model, target, shapes, config, threads):
        if is_plan(config.get("fuse_dwpw")):
            tried.append(config["fuse_dwpw"])
        return _Built(config)

    def fake_cost(config: dict) -> float:
        merge = config.get("fuse_dwpw")
        return cost(merge) if is_plan(merge) else 1.5 if config == base else 2.0

    def fake_time(mods, runs, rounds=5):
        for m in mods:
            merge = str(m.config.get("fuse_dwpw"))
            timed[merge] = timed.get(merge, 0) + 1
        return [[fake_cost(m.config)] * rounds for m in mods]

    monkeypatch.setattr(gt, "_compile", fake_compile)
    monkeypatch.setattr(gt, "time_interleaved", fake_time)
    found = gt.refine_merge_plan(path, "host", None, base, runs=4, log=lambda _: None)
    assert found.resume_at is None  # no deadline: every conv tried
    plan = found.plan
    assert plan == "TTNTTTNNNNNNNNNNN"  # conv 2 apart; conv 4's 1.5% gain is under the margin
    assert tried[0] == "TTTTTTNNNNNNNNNNN"  # the rules' plan first
    # each plan built once, but for the two confirmations (conv 1's and conv 2's): both rebuilt
    assert tried.count("TNTTTTNNNNNNNNNNN") == 2 and tried.count("TTNTTTNNNNNNNNNNN") == 5
    # and the final check: the plan against the rules' plan, three times on fresh builds
    assert tried[-6:] == ["TTTTTTNNNNNNNNNNN", "TTNTTTNNNNNNNNNNN"] * 3
    assert len(tried) == len(set(tried)) + 10 and tried.count("TTTTTTNNNNNNNNNNN") == 6
    # 7 x 7 and smaller maps cannot merge (MIN_ROWS): those convs' alternatives are all N
    assert all(p[6:] == "N" * 11 for p in tried)

    caps = [lanes] * 26  # the layout block per segment found nothing (tested in test_segment_caps.py)
    monkeypatch.setattr(gt, "refine_layout_caps", lambda *a, **k: caps)
    db = Database(tmp_path / "t.db")
    best = tune_model_level(path, db, runs=4, log=lambda _: None)
    assert best == {"layout_block": caps, "fuse_dwpw": plan}  # measured in the last round
    recs = db.workload_records(model_key(path.read_bytes()), "host", "host")
    assert len(recs) == len(model_configs(path, "host", None)) + 1
    calls = len(tried)
    assert tune_model_level(path, db, runs=4, log=lambda _: None) == best and len(tried) == calls
    monkeypatch.undo()
    mod = tir.compile(str(path), records=Records.open(db=tmp_path / "t.db", logs=None))
    kernels = [k["workload"].split(" ")[0] for k in mod.manifest["kernels"]]
    assert sum(k.count("conv2d_nchwc") == 2 for k in kernels) == 5  # conv 2 left apart


def test_a_plan_that_loses_its_lead_is_not_kept(tmp_path, monkeypatch):
    """A level whose gain holds for its two timings but not in the final three (noise that
    got through) leaves the rules' plan in place."""
    import autotune.graph_tune as gt
    from benchmarks.zoo import save

    path = tmp_path / "mv2.onnx"
    save("mobilenet_v2_96", path)
    timed: dict[str, int] = {}

    def fake_time(mods, runs, rounds=5):
        out = []
        for m in mods:
            plan = m.config["fuse_dwpw"]
            timed[plan] = timed.get(plan, 0) + 1
            lucky = plan[2] == "N" and timed[plan] <= 2  # its own two timings, then no more
            out.append([0.9 if lucky else 1.0] * rounds)
        return out

    monkeypatch.setattr(gt, "_compile", lambda model, target, shapes, config, threads: _Built(config))
    monkeypatch.setattr(gt, "time_interleaved", fake_time)
    lanes = tir.target.get_target("host").vector_lanes("float32")
    logs: list[str] = []
    base = {"layout_block": lanes, "fuse_dwpw": True}
    plan = gt.refine_merge_plan(path, "host", None, base, runs=4, log=logs.append).plan
    assert plan == "TTTTTTNNNNNNNNNNN"
    assert any("conv 2:" in line and "kept" in line for line in logs)
    assert "the rules' plan stays" in logs[-1]


def _fake_merge_search(tmp_path, monkeypatch, on_build=None):
    """MobileNetV2-96 with compiling and timing faked: the model runs 5% faster with conv 2
    apart, otherwise alike; the plans built, in order; the layout caps left as they are."""
    import autotune.graph_tune as gt
    from benchmarks.zoo import save
    from tensorir.pipeline import is_plan

    path = tmp_path / "mv2.onnx"
    save("mobilenet_v2_96", path)
    built: list[str] = []

    def fake_compile(model, target, shapes, config, threads):
        merge = config.get("fuse_dwpw")
        if is_plan(merge):
            built.append(merge)
            if on_build:
                on_build(merge)
        return _Built(config)

    def cost(config: dict) -> float:
        merge = config.get("fuse_dwpw")
        return 1.0 - 0.05 * (merge[2] == "N") if is_plan(merge) else 1.5 if merge else 2.0

    lanes = tir.target.get_target("host").vector_lanes("float32")
    monkeypatch.setattr(gt, "_compile", fake_compile)
    monkeypatch.setattr(
        gt, "time_interleaved", lambda mods, runs, rounds=5: [[cost(m.config)] * rounds for m in mods]
    )
    monkeypatch.setattr(gt, "refine_layout_caps", lambda *a, **k: [lanes] * 26)
    return path, built


def test_a_merge_search_cut_short_by_its_deadline_goes_on_in_the_next_run(tmp_path, monkeypatch):
    """Past the deadline (here: once conv 2's alternative was built) no further conv is tried;
    the plan found so far, checked three times, is recorded with where the search stopped,
    and the next run (no deadline) goes on from that conv, not from the start."""
    import autotune.graph_tune as gt

    past = []
    path, built = _fake_merge_search(tmp_path, monkeypatch, lambda plan: plan[2] == "N" and past.append(1))
    monkeypatch.setattr(gt, "_past", lambda deadline: deadline is not None and bool(past))
    db = Database(tmp_path / "t.db")
    logs: list[str] = []
    best = tune_model_level(path, db, runs=4, log=logs.append, deadline=1.0)
    assert best["fuse_dwpw"] == "TTNTTTNNNNNNNNNNN" and best["merge_from"] == 3
    assert any("stopped before conv 3 of 17" in line for line in logs)
    assert "go on at conv 3" in logs[-2 - len(model_configs(path, "host", None))]
    first_run = len(built)
    logs.clear()
    best = tune_model_level(path, db, runs=4, log=logs.append)
    assert best["fuse_dwpw"] == "TTNTTTNNNNNNNNNNN" and "merge_from" not in best
    assert any("from TTNTTTNNNNNNNNNNN at conv 3" in line for line in logs)
    assert all(p[:3] == "TTN" for p in built[first_run:])  # convs 0-2 not tried again
    recs = db.workload_records(model_key(path.read_bytes()), "host", "host")
    assert [r["config"] for r in recs if "merge_from" in r["config"]] == []  # the cut-short record replaced
    built.clear()
    assert tune_model_level(path, db, runs=4, log=logs.append) == best and built == []  # done: not again


def test_no_per_segment_search_once_the_deadline_has_passed(tmp_path, monkeypatch):
    """A deadline already past when the configs are measured: no per-segment search, nothing
    refined recorded (so the next run does it)."""
    path, built = _fake_merge_search(tmp_path, monkeypatch)
    db = Database(tmp_path / "t.db")
    logs: list[str] = []
    best = tune_model_level(path, db, runs=4, log=logs.append, deadline=0.0)
    assert best["fuse_dwpw"] is True and best["layout_block"] in layout_choices(
        "host"
    )  # a config as measured
    assert built == [] and "no time left" in logs[-1]
    recs = db.workload_records(model_key(path.read_bytes()), "host", "host")
    assert len(recs) == len(model_configs(path, "host", None))


def test_a_level_that_does_not_build_is_skipped(tmp_path, monkeypatch):
    """A level the compiler refuses for one conv (PicoDet at 800 x 608: a merged block once
    needed more stack than codegen allows) is logged and left out; the search goes on and
    still finds conv 2's win."""
    import autotune.graph_tune as gt
    from tensorir.errors import TirError

    def refuse(plan: str) -> None:
        if plan[0] == "N":
            raise TirError("local buffers need too much stack")

    path, built = _fake_merge_search(tmp_path, monkeypatch, refuse)
    logs: list[str] = []
    lanes = tir.target.get_target("host").vector_lanes("float32")
    found = gt.refine_merge_plan(
        path, "host", None, {"layout_block": lanes, "fuse_dwpw": True}, runs=4, log=logs.append
    )
    assert found == ("TTNTTTNNNNNNNNNNN", None)
    assert any(line.startswith("    conv 0: N does not build: local buffers") for line in logs)
    assert built.count("NTTTTTNNNNNNNNNNN") == 1  # tried once, never timed nor rebuilt


def test_a_config_that_does_not_build_is_recorded_as_failed(tmp_path, monkeypatch):
    """A model-level config the compiler refuses does not end the run: it is recorded as
    failed (so the next run does not measure the round again) and the best of the others wins."""
    import autotune.graph_tune as gt
    from tensorir.errors import TirError

    smallest = layout_choices("host")[0]
    compiled = []

    def fake_compile(model, target, shapes, config, threads):
        compiled.append(config)
        if config["layout_block"] == smallest:
            raise TirError("local buffers need too much stack")
        return _Built(config)

    monkeypatch.setattr(gt, "_compile", fake_compile)
    monkeypatch.setattr(
        gt, "time_interleaved", lambda mods, runs: [[1e-3 * m.config["layout_block"]] * runs for m in mods]
    )
    db = Database(tmp_path / "t.db")
    logs: list[str] = []
    best = tune_model_level(TINY, db, runs=3, log=logs.append, per_block=False)
    assert best == {"layout_block": layout_choices("host")[1]}
    assert f"  layout block {smallest}: does not build: local buffers need too much stack" in logs
    recs = db.workload_records(model_key(TINY.read_bytes()), "host", "host")
    assert sorted((r["config"]["layout_block"], r["error"] is None) for r in recs) == [
        (b, b != smallest) for b in layout_choices("host")
    ]
    compiled.clear()
    assert tune_model_level(TINY, db, runs=3, log=logs.append, per_block=False) == best and compiled == []


def test_a_round_a_core_was_busy_through_is_not_recorded(tmp_path, monkeypatch):
    """At two threads, with every probe finding a core busy (TIR_IDLE_PROBE=busy), the round
    of model-level configs is timed, but not recorded and not used: the rules' choices stand
    (None), and the next run, on idle cores, measures the round."""
    import autotune.graph_tune as gt
    import autotune.idle

    path, built = _fake_merge_search(tmp_path, monkeypatch)
    monkeypatch.setattr(autotune.idle, "BUSY_WAIT_S", 0.0)
    monkeypatch.setenv("TIR_IDLE_PROBE", "busy")
    db = Database(tmp_path / "t.db")
    logs: list[str] = []
    assert tune_model_level(path, db, runs=4, log=logs.append, threads=2) is None
    assert "a core was busy through every try" in logs[-1] and built == []
    key = model_key(path.read_bytes())
    assert db.workload_records(key, "host", "host") == []
    monkeypatch.setenv("TIR_IDLE_PROBE", "idle")
    best = gt.tune_model_level(path, db, runs=4, log=logs.append, threads=2)
    assert best["fuse_dwpw"] == "TTNTTTNNNNNNNNNNN"


def test_a_plan_timed_on_a_busy_core_is_never_a_win(tmp_path, monkeypatch):
    """The merge search finds conv 2's 5% win, but its three final timings against the rules'
    plan ran while a core stayed busy: the rules' plan stays."""
    import autotune.graph_tune as gt
    import autotune.idle

    path, built = _fake_merge_search(tmp_path, monkeypatch)
    monkeypatch.setattr(autotune.idle, "BUSY_WAIT_S", 0.0)
    monkeypatch.setenv("TIR_IDLE_PROBE", "busy")
    lanes = tir.target.get_target("host").vector_lanes("float32")
    logs: list[str] = []
    base = {"layout_block": lanes, "fuse_dwpw": True}
    found = gt.refine_merge_plan(path, "host", None, base, runs=4, log=logs.append, threads=2)
    assert any("conv 2:" in line and "kept" in line for line in logs)
    assert found.plan == "TTTTTTNNNNNNNNNNN" and "the rules' plan stays" in logs[-1]
    assert built[-2:] == ["TTTTTTNNNNNNNNNNN", "TTNTTTNNNNNNNNNNN"]  # one final timing: not a win
